"""The storage-independent tests of ending an attempt: ack and nack, results, backoff and tracebacks.

Owns: ``AckNackSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks and helpers it uses): ack and ack_many
(results, stale tokens, bare ids) and nack (delays, the backoff, the DLQ at
max_attempts, permanent failures, tracebacks). Imports: the standard library,
the public ``nobroker`` API and tests.semantics (its backoff policies and
limits).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nobroker import BackoffPolicy, Job, JobState, NotLeasedError, SerializationError
from tests.semantics import EXACT, JITTERED, RESULT_LIMIT_BYTES, TRACEBACK_LIMIT_CHARS

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics
else:
    _Base = object


class AckNackSemantics(_Base):
    """Ending an attempt: what each storage must do, through the public Queue only."""

    # ------------------------------------------------------------ ack
    def test_ack_marks_the_job_done(self) -> None:
        q = self.make_queue()
        job = q.enqueue("work")
        leased = self.only_lease(q)
        self.assertIsNone(q.ack(leased))
        done = q.get(job.id)
        self.assertIs(done.state, JobState.DONE)
        self.assertEqual(done.attempts, 1)
        self.assertEqual(done.payload, "work")
        self.assertEqual(q.stats().done, 1)
        self.assertEqual(q.lease(), [])
        q = self.assert_survives_reopen(q)
        self.assertIs(q.get(job.id).state, JobState.DONE)
        self.assertEqual(q.lease(), [])

    def test_acking_a_done_job_again_is_harmless(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        q.ack(job)
        before = self.snapshot(q)
        q.ack(job)
        q.ack(job.id)
        self.assertEqual(self.snapshot(q), before)
        q = self.reopen(q)
        q.ack(job)
        self.assertEqual(self.snapshot(q), before)

    def test_a_done_job_shows_no_lease(self) -> None:
        q = self.make_queue()
        q.enqueue_many(["one", "many-a", "many-b"])
        one, a, b = sorted(q.lease(3), key=lambda job: job.payload != "one")
        q.ack(one)
        q.ack_many([a, b], results=["ra", None])
        for _ in range(2):  # as written, then as replayed
            for job in (one, a, b):
                done = q.get(job.id)
                self.assertIs(done.state, JobState.DONE)
                self.assertEqual((done.lease_token, done.lease_deadline), (None, None))
            self.assertEqual([j.lease_token for j in q.list_jobs(JobState.DONE)], [None] * 3)
            q.ack(one)  # acking again under the lease that finished it stays harmless
            q.ack_many([a, b])
            with self.assertRaises(NotLeasedError):
                q.ack(self.stale(one))
            q = self.reopen(q)

    def test_ack_with_a_stale_token_is_refused_and_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.assert_unchanged_by(q, lambda: q.ack(self.stale(job)), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.ack(self.stale(job), result={"r": 1}), NotLeasedError)
        self.assertIs(q.get(job.id).state, JobState.LEASED)
        q.ack(job)
        self.assertIs(q.get(job.id).state, JobState.DONE)

    def test_a_bare_id_skips_the_token_check(self) -> None:
        q = self.make_queue(backoff=EXACT)
        a, b, c, d = q.enqueue_many(["a", "b", "c", "d"])
        self.lease_ids(q, 4)
        t = self.now()
        self.assertEqual(q.set_stage(c.id, "step").stage, "step")
        self.assertEqual(q.get(c.id).stage, "step")
        self.assert_time(q.extend(c.id, 100).lease_deadline, t + 100)
        q.ack(a.id)
        self.assertIs(q.get(a.id).state, JobState.DONE)
        nacked = q.nack(b.id, error="operator", delay=0)
        self.assertIs(nacked.state, JobState.READY)
        self.assertEqual(q.get(b.id).last_error, "operator")
        q.ack(c.id, result="ok")
        self.assertEqual(q.get(c.id).result, "ok")
        self.assertIs(q.nack(d.id, permanent=True).state, JobState.DEAD)
        self.assert_survives_reopen(q)

    def test_ack_many_acks_every_held_lease_and_names_the_first_refusal(self) -> None:
        q = self.make_queue()
        q.enqueue_many(["a", "b", "c", "d"])
        a, b, c, d = sorted(q.lease(4), key=lambda job: job.payload)
        q.ack_many([a, b], results=[{"n": 1}, None])
        self.assertEqual([q.get(a.id).state, q.get(b.id).state], [JobState.DONE, JobState.DONE])
        self.assertEqual(q.get(a.id).result, {"n": 1})
        q.ack_many([a])  # already done under the same lease: harmless
        e = q.enqueue("e")
        e = q.lease_one()
        with self.assertRaises(NotLeasedError):
            q.ack_many([c, self.stale(d), e])
        self.assertIs(q.get(c.id).state, JobState.DONE, "the jobs before the refusal were acked")
        self.assertIs(q.get(e.id).state, JobState.DONE, "the jobs after the refusal were acked")
        self.assertIs(q.get(d.id).state, JobState.LEASED, "the refused one is untouched")
        q.ack_many([d.id])
        q.ack_many([])
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.stats().done, 5)

    def test_ack_many_refuses_a_stale_copy_beside_the_lease_it_copies(self) -> None:
        q = self.make_queue()
        q.enqueue_many(["a", "b", "c"])
        a, b, c = sorted(q.lease(3), key=lambda job: job.payload)
        for batch in ([a, self.stale(a)], [self.stale(b), b]):
            with self.subTest(order=[job.lease_token == "not-a-token-we-issued" for job in batch]):
                with self.assertRaises(NotLeasedError) as caught:
                    q.ack_many(batch)
                self.assertIn(batch[0].id, str(caught.exception))
                self.assertIs(q.get(batch[0].id).state, JobState.DONE, "the real lease was acked")
        q.ack_many([c, c, c.id])  # the same lease twice, and by id: nothing stale there
        self.assertIs(q.get(c.id).state, JobState.DONE)

    def test_ack_result_is_kept_and_returned_by_get(self) -> None:
        q = self.make_queue()
        results = {"plain": 7, "dict": {"url": "s3://x", "sizes": [1, 2]}, "none": None, "text": "ok"}
        ids = {}
        for name, result in results.items():
            q.enqueue(name)
            job = self.only_lease(q)
            q.ack(job, result=result)
            ids[name] = job.id
        for name, result in results.items():
            self.assertEqual(q.get(ids[name]).result, result)
        q = self.assert_survives_reopen(q)
        for name, result in results.items():
            self.assertEqual(q.get(ids[name]).result, result)
        self.assertEqual({job.id: job.result for job in q.list_jobs(JobState.DONE)}, {ids[n]: r for n, r in results.items()})

    def test_ack_result_must_be_json_and_within_the_limit(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.assert_unchanged_by(q, lambda: q.ack(job, result=b"bytes"), SerializationError)
        self.assert_unchanged_by(q, lambda: q.ack(job, result=object()), SerializationError)
        self.assert_unchanged_by(q, lambda: q.ack(job, result=float("inf")), SerializationError)
        self.assert_unchanged_by(q, lambda: q.ack(job, result="r" * (RESULT_LIMIT_BYTES + 1)), SerializationError)
        self.assertIs(q.get(job.id).state, JobState.LEASED)
        q.ack(job, result="small")
        self.assertEqual(q.get(job.id).result, "small")

    # ------------------------------------------------------------ nack
    def test_nack_with_a_delay_makes_the_job_ready_after_it(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.advance(2)
        t = self.now()
        back = q.nack(job, error="boom", delay=7)
        self.assertIsInstance(back, Job)
        self.assertIs(back.state, JobState.READY)
        self.assertEqual(back.attempts, 1)
        self.assertEqual(back.last_error, "boom")
        self.assert_time(back.available_at, t + 7)
        self.assertIsNone(back.lease_token)
        self.assertEqual(q.get(job.id).to_dict(), back.to_dict())
        self.assertEqual(q.stats().delayed, 1)
        self.assertEqual(q.lease(), [])
        q = self.assert_survives_reopen(q)
        self.advance(6)
        self.assertEqual(q.lease(), [])
        self.advance(2)
        again = self.only_lease(q)
        self.assertEqual((again.id, again.attempts), (job.id, 2))

    def test_nack_with_zero_delay_is_ready_at_once(self) -> None:
        q = self.make_queue(backoff=EXACT)
        q.enqueue("work")
        job = self.only_lease(q)
        q.nack(job, delay=0)
        self.assertEqual(self.lease_ids(q), [job.id])

    def test_nack_without_delay_uses_the_jittered_backoff_window(self) -> None:
        q = self.make_queue(backoff=JITTERED)
        q.enqueue("work")
        job = self.only_lease(q)
        t = self.now()
        back = q.nack(job, error="first")
        self.assertIs(back.state, JobState.READY)
        self.assert_between(back.available_at, t + 5, t + 10, "first retry must land in [base*(1-jitter), base]")
        self.assertEqual(q.lease(), [])
        q = self.assert_survives_reopen(q)
        self.advance(10.5)
        job = self.only_lease(q)
        t = self.now()
        back = q.nack(job, error="second")
        self.assert_between(back.available_at, t + 10, t + 20, "second retry must land in [10, 20]")
        self.assertEqual(back.last_error, "second")

    def test_nack_backoff_grows_by_the_factor(self) -> None:
        q = self.make_queue(backoff=EXACT, max_attempts=10)
        q.enqueue("work")
        for expected in (10, 20, 40, 80):
            job = self.only_lease(q)
            t = self.now()
            back = q.nack(job)
            self.assert_time(back.available_at, t + expected)
            self.advance(expected - 1)
            self.assertEqual(q.lease(), [])
            self.advance(2)

    def test_nack_sends_the_job_to_the_dlq_once_attempts_reach_max(self) -> None:
        q = self.make_queue(max_attempts=2, backoff=EXACT)
        job = q.enqueue("doomed")
        first = self.only_lease(q)
        self.assertIs(q.nack(first, error="e1", delay=0).state, JobState.READY)
        second = self.only_lease(q)
        self.assertEqual(second.attempts, 2)
        dead = q.nack(second, error="e2", delay=0)
        self.assertIs(dead.state, JobState.DEAD)
        self.assertEqual(dead.attempts, 2)
        self.assertEqual(dead.last_error, "e2")
        self.assertIsNone(dead.lease_token)
        self.assertEqual(q.get(job.id).to_dict(), dead.to_dict())
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        self.assertEqual(q.lease(), [])
        self.assertEqual(q.stats().dead, 1)
        q = self.assert_survives_reopen(q)
        self.advance(1000)
        self.assertEqual(q.lease(), [])

    def test_a_job_max_attempts_overrides_the_queue(self) -> None:
        q = self.make_queue(max_attempts=5)
        one = q.enqueue("once", max_attempts=1)
        many = q.enqueue("many", max_attempts=3)
        q.lease(2)
        self.assertIs(q.nack(one.id, delay=0).state, JobState.DEAD)
        for _ in range(2):
            self.assertIs(q.nack(many.id, delay=0).state, JobState.READY)
            self.assertEqual(self.lease_ids(q), [many.id])
        self.assertIs(q.nack(many.id, delay=0).state, JobState.DEAD)
        self.assertEqual(q.get(many.id).attempts, 3)
        self.assert_survives_reopen(q)

    def test_nack_permanent_goes_dead_at_once(self) -> None:
        q = self.make_queue(max_attempts=5)
        job = q.enqueue("bad input")
        leased = self.only_lease(q)
        dead = q.nack(leased, error="cannot parse", permanent=True)
        self.assertIs(dead.state, JobState.DEAD)
        self.assertEqual(dead.attempts, 1)
        self.assertEqual(dead.last_error, "cannot parse")
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        self.assert_survives_reopen(q)

    def test_a_traceback_is_kept_beside_last_error_until_the_next_failure(self) -> None:
        q = self.make_queue(max_attempts=3, visibility_timeout=10, backoff=BackoffPolicy(base=0))
        job = q.enqueue("work")
        trace = "Traceback (most recent call last):\n  File \"h.py\", line 3, in handle\nValueError: nope\n"
        nacked = q.nack(self.only_lease(q), error="ValueError: nope", traceback=trace)
        self.assertEqual((nacked.last_error, nacked.traceback), ("ValueError: nope", trace))
        self.assertEqual(q.get(job.id).to_dict()["traceback"], trace)
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.get(job.id).traceback, trace)
        q.nack(self.only_lease(q), error="no traceback this time")
        self.assertEqual((q.get(job.id).last_error, q.get(job.id).traceback), ("no traceback this time", None))
        long = "x" * (TRACEBACK_LIMIT_CHARS + 100) + "\nKeyError: the end"
        dead = q.nack(self.only_lease(q), error="KeyError: the end", traceback=long, permanent=True)
        self.assertIs(dead.state, JobState.DEAD)
        self.assertEqual(dead.traceback, long[-TRACEBACK_LIMIT_CHARS:], "the end of a long traceback is kept")
        q = self.assert_survives_reopen(q)
        q.requeue_dead()
        self.assertEqual(q.get(job.id).traceback, dead.traceback, "a requeue keeps the last failure")
        self.only_lease(q, visibility_timeout=10)
        self.advance(11)  # the lease expires: ready again, the last failure (error, traceback) kept
        shown = q.get(job.id)
        self.assertEqual((shown.state, shown.last_error, shown.traceback), (JobState.READY, "KeyError: the end", dead.traceback))

    def test_a_lease_that_expires_on_its_last_attempt_drops_the_old_traceback(self) -> None:
        q = self.make_queue(max_attempts=2, visibility_timeout=10, backoff=BackoffPolicy(base=0))
        job = q.enqueue("work")
        q.nack(self.only_lease(q), error="ValueError: first", traceback="Traceback ...\nValueError: first\n")
        self.only_lease(q)
        self.advance(11)
        for _ in range(2):  # as a read shows it, then as the reclaim wrote it
            shown = q.get(job.id)
            self.assertEqual((shown.state, shown.last_error, shown.traceback), (JobState.DEAD, "lease expired on attempt 2 of 2", None))
            q.lease()

    def test_nack_with_a_stale_token_is_refused_and_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.assert_unchanged_by(q, lambda: q.nack(self.stale(job), error="late"), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.nack(self.stale(job), permanent=True), NotLeasedError)
        self.assertIs(q.nack(job, delay=0).state, JobState.READY)
