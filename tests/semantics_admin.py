"""The storage-independent tests of the dead-letter queue and clearing out: dlq, requeue_dead, purge, compact.

Owns: ``AdminSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks and helpers it uses): dlq and
requeue_dead, purge and compact. Imports: the standard library, the public
``nobroker`` API and tests.semantics (DOOMED_KIND).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nobroker import CompactionResult, Job, JobNotFoundError, JobState, Queue, QueueStats
from tests.semantics import DOOMED_KIND

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics
else:
    _Base = object


class AdminSemantics(_Base):
    """The dead-letter queue and clearing out: what each storage must do, through the public Queue only."""

    # ------------------------------------------------------------ DLQ and requeue
    def kill(self, q: Queue, count: int) -> list[Job]:
        """Enqueue ``count`` jobs and send them all to the DLQ with one failure each."""
        jobs = q.enqueue_many([f"dead{i}" for i in range(count)], max_attempts=1, kind=DOOMED_KIND)
        leased = q.lease(count, kinds=[DOOMED_KIND])
        self.assertEqual(len(leased), count)
        for job in leased:
            self.assertIs(q.nack(job, error="boom").state, JobState.DEAD)
        return jobs

    def test_requeue_dead_one_resets_its_attempts(self) -> None:
        q = self.make_queue()
        a, b, c = self.kill(q, 3)
        self.advance(5)
        t = self.now()
        self.assertEqual(q.requeue_dead(b.id), 1)
        revived = q.get(b.id)
        self.assertIs(revived.state, JobState.READY)
        self.assertEqual(revived.attempts, 0)
        self.assertLessEqual(revived.available_at, t + self.time_slack + 1e-6)
        self.assertEqual(revived.payload, b.payload)
        self.assertEqual(sorted(j.id for j in q.dlq()), sorted([a.id, c.id]))
        q = self.assert_survives_reopen(q)
        job = self.only_lease(q)
        self.assertEqual((job.id, job.attempts), (b.id, 1))
        self.assertEqual(q.requeue_dead(b.id), 0, "a job that is not dead is not requeued")

    def test_requeue_dead_none_revives_the_whole_dlq(self) -> None:
        q = self.make_queue()
        jobs = self.kill(q, 3)
        q.enqueue("alive")
        self.assertEqual(q.requeue_dead(), 3)
        self.assertEqual(q.dlq(), [])
        for job in jobs:
            got = q.get(job.id)
            self.assertIs(got.state, JobState.READY)
            self.assertEqual(got.attempts, 0)
        self.assertEqual(q.stats().ready, 4)
        self.assertEqual(q.requeue_dead(), 0)
        q = self.assert_survives_reopen(q)
        self.assertEqual(len(q.lease(10)), 4)

    def test_a_requeued_job_gets_all_its_attempts_again(self) -> None:
        q = self.make_queue(max_attempts=2)
        job = q.enqueue("flaky")
        for _ in range(2):
            q.nack(self.only_lease(q), delay=0)
        self.assertIs(q.get(job.id).state, JobState.DEAD)
        q.requeue_dead(job.id)
        self.assertIs(q.nack(self.only_lease(q), delay=0).state, JobState.READY)
        self.assertIs(q.nack(self.only_lease(q), delay=0).state, JobState.DEAD)

    def test_dlq_lists_dead_jobs_only(self) -> None:
        q = self.make_queue()
        q.enqueue("alive")
        dead = self.kill(q, 4)
        listed = q.dlq()
        self.assertEqual([j.id for j in listed], [j.id for j in q.list_jobs(JobState.DEAD)])
        self.assertEqual(sorted(j.id for j in listed), sorted(j.id for j in dead))
        for job in listed:
            self.assertIs(job.state, JobState.DEAD)
            self.assertEqual(job.last_error, "boom")
        self.assertEqual(len(q.dlq(limit=2)), 2)
        self.assertEqual([j.id for j in q.dlq(limit=2)], [j.id for j in listed[:2]])

    # ------------------------------------------------------------ purge and compact
    def test_purge_removes_every_job_and_returns_the_count(self) -> None:
        q = self.make_queue()
        self.kill(q, 2)
        q.enqueue_many(["r1", "r2"])
        q.enqueue("later", delay=100)
        q.enqueue("leased")
        q.lease(2)
        q.ack(self.only_lease(q))  # one done
        total = len(q)
        self.assertEqual(total, 6)
        self.assertEqual(q.purge(), 6)
        self.assertEqual(len(q), 0)
        self.assertEqual(q.stats().to_dict(), QueueStats().to_dict())
        self.assertEqual(q.list_jobs(), [])
        self.assertEqual(q.dlq(), [])
        self.assertEqual(q.lease(), [])
        self.assertEqual(q.purge(), 0)
        q = self.assert_survives_reopen(q)
        self.assertEqual(len(q), 0)
        self.advance(1000)
        self.assertEqual(q.lease(), [])

    def test_compact_drops_done_jobs_and_keeps_the_rest_unchanged(self) -> None:
        q = self.make_queue(visibility_timeout=60)
        done = q.enqueue_many(["d1", "d2", "d3"], priority=9)
        for job in q.lease(3):
            q.ack(job, result={"r": job.payload})
        dead = self.kill(q, 1)[0]
        ready = q.enqueue("ready", job_id="keep-me")
        delayed = q.enqueue("delayed", delay=500, kind="other")
        leased_job = q.enqueue("leased", priority=2, dedupe_key="k1")
        leased = self.only_lease(q)
        self.assertEqual(leased.id, leased_job.id)  # highest priority first
        q.set_stage(leased, "busy")
        keep = {job_id: d for job_id, d in self.snapshot(q).items() if d["state"] != "done"}
        self.assertEqual(set(keep), {dead.id, ready.id, delayed.id, leased_job.id})
        result = q.compact()
        self.assertIsInstance(result, CompactionResult)
        self.assertEqual(result.jobs_dropped, 3)
        self.assertEqual(result.jobs_kept, 4)
        self.assertEqual(result.bytes_reclaimed, result.bytes_before - result.bytes_after)
        self.assertTrue(result.describe().endswith("kept 4 jobs, dropped 3 completed"), result.describe())
        self.assertEqual(self.snapshot(q), keep)
        for job in done:
            with self.assertRaises(JobNotFoundError):
                q.get(job.id)
        self.assertEqual(q.stats().done, 0)
        self.assertEqual(len(q), 4)
        q = self.assert_survives_reopen(q)
        self.assertEqual(self.snapshot(q), keep)
        # The dedupe key of the active job still holds after compaction.
        self.assertEqual(q.enqueue("dup", dedupe_key="k1").id, leased_job.id)
        self.assertEqual(q.enqueue("dup", job_id="keep-me").payload, "ready")
        # The kept lease is still the same lease: its holder can finish it.
        q.ack(leased)
        self.assertIs(q.get(leased.id).state, JobState.DONE)
        self.assertEqual(q.compact().jobs_dropped, 1)

    def test_compact_of_a_queue_without_done_jobs_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue_many(["a", "b"])
        self.only_lease(q)
        before = self.snapshot(q)
        result = q.compact()
        self.assertEqual(result.jobs_dropped, 0)
        self.assertEqual(self.snapshot(q), before)
