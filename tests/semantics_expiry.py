"""The storage-independent tests of lease expiry: a lease past its deadline, as reads and writes see it.

Owns: ``ExpirySemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks and helpers it uses): a lease past its
deadline is delivered again after the backoff, counts towards the DLQ, shows
in reads before any write, and its holder is refused. Imports: the standard
library, the public ``nobroker`` API and tests.semantics (its backoff
policies).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nobroker import BackoffPolicy, JobState, NotLeasedError
from tests.semantics import EXACT, JITTERED

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics
else:
    _Base = object


class ExpirySemantics(_Base):
    """Lease expiry: what each storage must do, through the public Queue only."""

    # ------------------------------------------------------------ lease expiry
    def test_an_expired_lease_comes_back_after_the_backoff(self) -> None:
        q = self.make_queue(backoff=JITTERED)
        job = q.enqueue("work")
        first = self.only_lease(q, visibility_timeout=10)
        deadline = first.lease_deadline
        assert deadline is not None
        self.advance(11)
        reclaim_time = self.now()
        self.assertEqual(q.lease(), [], "an expired lease backs off like a nack")
        back = q.get(job.id)
        self.assertIs(back.state, JobState.READY)
        self.assertEqual(back.attempts, 1)
        self.assertIsNone(back.lease_token)
        self.assert_between(back.available_at, deadline + 5, reclaim_time + 10)
        q = self.assert_survives_reopen(q)
        self.advance(11)
        second = self.only_lease(q)
        self.assertEqual(second.id, job.id)
        self.assertEqual(second.attempts, 2)
        self.assertNotEqual(second.lease_token, first.lease_token)

    def test_an_expired_lease_counts_towards_the_dlq(self) -> None:
        q = self.make_queue(max_attempts=1, visibility_timeout=10)
        job = q.enqueue("work")
        self.only_lease(q)
        self.advance(11)
        self.assertEqual(q.lease(), [])
        dead = q.get(job.id)
        self.assertIs(dead.state, JobState.DEAD)
        self.assertEqual(dead.attempts, 1)
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        self.assert_survives_reopen(q)

    def test_ready_lists_both_halves_runnable_and_delayed_as_stats_counts_them(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        now = q.enqueue("now")
        later = q.enqueue("later", delay=100, kind="k")
        expired = q.enqueue("expired", priority=5, kind="k")
        self.assertEqual(self.only_lease(q).id, expired.id)
        self.advance(11)  # its lease expired 1 s ago: a read shows it delayed by the backoff (10 s)
        stats = q.stats()
        listed = {name: [j.id for j in q.list_jobs(name)] for name in ("ready", "runnable", "delayed")}
        self.assertEqual(listed, {"ready": [now.id, later.id, expired.id], "runnable": [now.id], "delayed": [later.id, expired.id]})
        self.assertEqual((len(listed["runnable"]), len(listed["delayed"])), (stats.ready, stats.delayed))
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY)], listed["ready"], "what 0.1.2 code gets")
        self.assertEqual([j.id for j in q.list_jobs("delayed", limit=1, offset=1)], [expired.id])
        self.assertEqual([j.id for j in q.list_jobs("delayed", kind="k")], [later.id, expired.id])
        self.assertEqual(q.list_jobs("runnable", kind="k"), [])
        self.advance(10)  # the backoff after its deadline is over, though no write recorded the reclaim
        self.assertEqual([j.id for j in q.list_jobs("runnable")], [now.id, expired.id])
        self.assertEqual([j.id for j in q.list_jobs("delayed")], [later.id])
        self.assertEqual((q.stats().ready, q.stats().delayed), (2, 1))
        with self.assertRaises(ValueError) as caught:
            q.list_jobs("sleeping")
        self.assertIn("runnable, delayed", str(caught.exception))

    def test_the_backoff_of_an_expired_lease_runs_from_its_deadline(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        job = q.enqueue("work")
        first = self.only_lease(q)
        self.advance(100)  # long after the deadline and the 10 s backoff after it
        again = self.only_lease(q)  # reclaimed and leased again by one call
        self.assertEqual((again.id, again.attempts), (job.id, 2))
        self.assertNotEqual(again.lease_token, first.lease_token)

    def test_reads_show_an_expired_lease_as_dead_before_any_write(self) -> None:
        q = self.make_queue(max_attempts=1, visibility_timeout=10)
        job = q.enqueue("work")
        self.only_lease(q)
        self.advance(11)
        expected = {"ready": 0, "delayed": 0, "leased": 0, "done": 0, "dead": 1, "total": 1}
        self.assertEqual(q.stats().to_dict(), expected)
        shown = q.get(job.id)
        self.assertIs(shown.state, JobState.DEAD)
        self.assertEqual((shown.lease_deadline, shown.lease_token), (None, None))
        self.assertEqual(shown.last_error, "lease expired on attempt 1 of 1")
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        self.assertEqual([j.id for j in q.list_jobs(JobState.DEAD)], [job.id])
        self.assertEqual(q.list_jobs(JobState.LEASED), [])
        self.assertEqual([j.to_dict() for j in q.list_jobs()], [shown.to_dict()])
        self.assertEqual(q.lease(), [])  # a write records the reclaim: what the reads showed
        self.assertEqual(q.get(job.id).to_dict(), shown.to_dict())
        self.assertEqual(q.stats().to_dict(), expected)

    def test_reads_show_an_expired_lease_ready_again_after_the_backoff(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        first, second = q.enqueue_many(["first", "second"])
        leased = self.only_lease(q)
        self.assertEqual(leased.id, first.id)
        assert leased.lease_deadline is not None
        self.advance(11)
        self.assertEqual(q.stats().to_dict(), {"ready": 1, "delayed": 1, "leased": 0, "done": 0, "dead": 0, "total": 2})
        shown = q.get(first.id)
        self.assertIs(shown.state, JobState.READY)
        self.assertEqual((shown.attempts, shown.lease_deadline, shown.lease_token), (1, None, None))
        # The attempt failed at the deadline: the backoff (10 s after one failure) runs from there.
        self.assert_time(shown.available_at, leased.lease_deadline + 10)
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY)], [first.id, second.id])
        self.assertEqual(q.list_jobs(JobState.LEASED), [])
        self.assertEqual(q.dlq(), [])
        self.assertEqual(self.only_lease(q).id, second.id)  # the reclaim is written: first waits
        self.assert_time(q.get(first.id).available_at, leased.lease_deadline + 10)
        self.assertEqual(q.stats().to_dict(), {"ready": 0, "delayed": 1, "leased": 1, "done": 0, "dead": 0, "total": 2})

    def test_reads_show_an_expired_lease_runnable_when_the_backoff_is_zero(self) -> None:
        q = self.make_queue(backoff=BackoffPolicy(base=0), visibility_timeout=10)
        job = q.enqueue("work")
        self.only_lease(q)
        self.advance(11)
        self.assertEqual(q.stats().to_dict(), {"ready": 1, "delayed": 0, "leased": 0, "done": 0, "dead": 0, "total": 1})
        self.assertIs(q.get(job.id).state, JobState.READY)
        self.assertEqual(self.only_lease(q).id, job.id)

    def test_the_expired_holder_is_refused_once_the_job_is_redelivered(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        q.enqueue("work")
        old = self.only_lease(q)
        self.advance(11)
        self.assertEqual(q.lease(), [])
        self.advance(11)
        new = self.only_lease(q)
        self.assertEqual(new.id, old.id)
        self.assert_unchanged_by(q, lambda: q.ack(old), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.ack(old, result="late"), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.nack(old, error="late"), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.extend(old, 60), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.set_stage(old, "late"), NotLeasedError)
        self.assertEqual(q.get(new.id).lease_token, new.lease_token)
        q.ack(new, result="fresh")
        self.assertEqual(q.get(new.id).result, "fresh")

    def test_a_refusal_says_what_really_happened(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        q.enqueue("work")
        job = self.only_lease(q)
        q.ack(job)
        for action in (lambda: q.nack(job, error="x"), lambda: q.extend(job, 5), lambda: q.set_stage(job, "x")):
            with self.assertRaises(NotLeasedError) as caught:
                action()
            self.assertIn("already done (acked under this lease); nothing changed", str(caught.exception))
            self.assertNotIn("expired", str(caught.exception))
        q.enqueue("again")
        nacked = self.only_lease(q)
        q.nack(nacked, delay=100)
        with self.assertRaises(NotLeasedError) as caught:
            q.extend(nacked, 5)
        self.assertIn("it is ready, not leased (your lease ended: it expired, or the job was nacked)", str(caught.exception))
        q.enqueue("third")
        old = self.only_lease(q)
        self.advance(11)
        self.assertEqual(q.lease(), [])
        self.advance(11)
        q.ack(self.only_lease(q))
        with self.assertRaises(NotLeasedError) as caught:
            q.nack(old)
        self.assertIn("it is done, finished under a later lease after yours ended", str(caught.exception))
        with self.assertRaises(NotLeasedError) as caught:
            q.extend(old.id, 5)
        self.assertIn("it is done, not leased", str(caught.exception))

    def test_a_lease_whose_holder_vanished_is_delivered_again(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        job = q.enqueue("work")
        first = self.only_lease(q)
        q = self.assert_survives_reopen(q)  # the holder is gone; its lease is still on record
        self.assertEqual(q.lease(), [])
        self.advance(11)
        self.assertEqual(q.lease(), [])
        self.advance(11)
        again = self.only_lease(q)
        self.assertEqual((again.id, again.attempts), (job.id, 2))
        self.assertNotEqual(again.lease_token, first.lease_token)

    def test_ack_after_the_deadline_is_refused(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        job = q.enqueue("work")
        leased = self.only_lease(q)
        self.advance(11)
        with self.assertRaises(NotLeasedError):
            q.ack(leased)
        self.assertIsNot(q.get(job.id).state, JobState.DONE)
        with self.assertRaises(NotLeasedError):
            q.extend(leased, 30)
        self.assertIsNot(q.get(job.id).state, JobState.LEASED)
