"""The storage-independent tests of reading a queue: get, list_jobs, stats and len.

Owns: ``ReadSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks and helpers it uses): get, list_jobs
(order, filters, paging), stats and len, and acting on an unknown id. Imports:
the standard library and the public ``nobroker`` API only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nobroker import JobNotFoundError, JobState, NotLeasedError, QueueStats

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics
else:
    _Base = object


class ReadSemantics(_Base):
    """Reading a queue: what each storage must do, through the public Queue only."""

    # ------------------------------------------------------------ get, list_jobs, stats, len
    def test_get_of_an_unknown_id_raises_job_not_found(self) -> None:
        q = self.make_queue()
        with self.assertRaises(JobNotFoundError):
            q.get("no-such-job")
        q.enqueue("x")
        with self.assertRaises(JobNotFoundError):
            q.get("still-no-such-job")

    def test_acting_on_an_unknown_id_is_refused_and_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        self.only_lease(q)
        refused = (JobNotFoundError, NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.ack("no-such-job"), refused)
        self.assert_unchanged_by(q, lambda: q.nack("no-such-job"), refused)
        self.assert_unchanged_by(q, lambda: q.extend("no-such-job", 10), refused)
        self.assert_unchanged_by(q, lambda: q.set_stage("no-such-job", "x"), refused)

    def test_list_jobs_is_oldest_first_with_state_filter_limit_and_offset(self) -> None:
        q = self.make_queue(max_attempts=1)
        jobs = [q.enqueue(i, priority=i % 3) for i in range(6)]
        ids = [job.id for job in jobs]
        self.assertEqual([j.id for j in q.list_jobs()], ids)
        leased = q.lease(2)  # priority 2 first: jobs 2 and 5
        self.assertEqual([j.id for j in leased], [ids[2], ids[5]])
        q.ack(leased[0])
        q.nack(leased[1])  # max_attempts=1: dead
        self.assertEqual([j.id for j in q.list_jobs()], ids)
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY)], [ids[0], ids[1], ids[3], ids[4]])
        self.assertEqual([j.id for j in q.list_jobs(JobState.DONE)], [ids[2]])
        self.assertEqual([j.id for j in q.list_jobs(JobState.DEAD)], [ids[5]])
        self.assertEqual(q.list_jobs(JobState.LEASED), [])
        self.assertEqual([j.id for j in q.list_jobs(limit=2)], ids[:2])
        self.assertEqual([j.id for j in q.list_jobs(limit=2, offset=2)], ids[2:4])
        self.assertEqual([j.id for j in q.list_jobs(offset=4)], ids[4:])
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY, limit=2, offset=1)], [ids[1], ids[3]])
        self.assertEqual(q.list_jobs(offset=10), [])
        for job in q.list_jobs():
            self.assertEqual(job.to_dict(), q.get(job.id).to_dict())

    def test_list_jobs_ready_includes_delayed_jobs(self) -> None:
        q = self.make_queue()
        now = q.enqueue("now")
        later = q.enqueue("later", delay=60)
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY)], [now.id, later.id])

    def test_stats_count_every_state_and_tell_delayed_from_ready(self) -> None:
        q = self.make_queue(max_attempts=1)
        self.assertEqual(q.stats().to_dict(), {"ready": 0, "delayed": 0, "leased": 0, "done": 0, "dead": 0, "total": 0})
        q.enqueue_many(["d", "x", "a"])
        q.ack(self.only_lease(q))
        q.nack(self.only_lease(q))
        q.enqueue("leased", priority=1)
        self.only_lease(q)
        q.enqueue_many(["r1", "r2"])
        q.enqueue("later", delay=60)
        q.enqueue("later too", delay=120)
        stats = q.stats()
        self.assertIsInstance(stats, QueueStats)
        expected = {"ready": 3, "delayed": 2, "leased": 1, "done": 1, "dead": 1, "total": 8}
        self.assertEqual(stats.to_dict(), expected)
        self.assertEqual((stats.ready, stats.delayed, stats.leased, stats.done, stats.dead, stats.total), tuple(expected.values()))
        self.assertEqual(len(q), 8)
        q = self.assert_survives_reopen(q)
        self.advance(61)
        self.assertEqual((q.stats().ready, q.stats().delayed), (4, 1))
        self.advance(60)
        self.assertEqual((q.stats().ready, q.stats().delayed), (5, 0))

    def test_len_counts_every_job_held(self) -> None:
        q = self.make_queue(max_attempts=1)
        self.assertEqual(len(q), 0)
        q.enqueue_many(list(range(4)))
        q.enqueue("delayed", delay=10)
        self.assertEqual(len(q), 5)
        q.ack(self.only_lease(q))
        q.nack(self.only_lease(q))
        self.only_lease(q)
        self.assertEqual(len(q), 5)
        q.compact()
        self.assertEqual(len(q), 4)
