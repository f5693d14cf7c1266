"""The storage-independent tests of control of jobs (issue 15): cancel, ...

Owns: ``ControlSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks it uses: ``make_queue``, ``reopen``,
``advance``, ``now``). Imports: the standard library and the public
``nobroker`` API only.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

from nobroker import (
    Job,
    JobCancelledError,
    JobFinishedError,
    JobNotFoundError,
    JobState,
    NotLeasedError,
    Queue,
    Worker,
)

if TYPE_CHECKING:
    import unittest

    _Base = unittest.TestCase
else:
    _Base = object

#: Generous bound for a Worker to reach a point the test waits for (never a timing claim).
WAIT_SECONDS = 30.0
#: Lease length of the Worker tests: short, so a heartbeat (a third of it) comes soon.
SHORT_LEASE = 0.6


def wait_until(predicate: Any, what: str, timeout: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


async def sleep_until_cancelled(
    started: threading.Event, cancelled: threading.Event, seconds: float = WAIT_SECONDS
) -> None:
    """An async handler's body: say it started, then sleep until its task is cancelled, and say that too."""
    started.set()
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        cancelled.set()
        raise


class ControlSemantics(_Base):
    """Cancel: what each storage must do, through the public Queue only."""

    def make_queue(self, **options: Any) -> Queue:  # pragma: no cover - the storage's class has it
        raise NotImplementedError

    def reopen(self, q: Queue) -> Queue:  # pragma: no cover
        raise NotImplementedError

    def advance(self, seconds: float) -> None:  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------ cancel: ready and delayed jobs
    def test_cancel_a_ready_or_delayed_job_is_final(self) -> None:
        q = self.make_queue()
        ready, delayed, other = q.enqueue("a"), q.enqueue("b", delay=60), q.enqueue("c")
        self.assertIs(q.cancel(ready).state, JobState.CANCELLED)
        self.assertIs(q.cancel(delayed.id).state, JobState.CANCELLED)
        self.assertIs(q.get(ready.id).state, JobState.CANCELLED)
        stats = q.stats()
        self.assertEqual((stats.ready, stats.delayed, stats.cancelled, stats.total), (1, 0, 2, 3))
        self.assertEqual(stats.to_dict()["cancelled"], 2)
        self.assertEqual([j.id for j in q.list_jobs("cancelled")], [ready.id, delayed.id])
        self.assertEqual([j.id for j in q.list_jobs(JobState.CANCELLED)], [ready.id, delayed.id])
        self.advance(120)
        self.assertEqual([j.id for j in q.lease(10)], [other.id], "a cancelled job never runs")
        self.assertEqual(q.requeue_dead(), 0, "requeue_dead leaves cancelled jobs alone")
        q = self.reopen(q)
        self.assertIs(q.get(delayed.id).state, JobState.CANCELLED)
        self.assertEqual(q.stats().cancelled, 2)

    def test_a_queue_without_cancels_keeps_the_old_dict_shapes(self) -> None:
        q = self.make_queue()
        job = q.enqueue("a")
        self.assertNotIn("cancelled", q.stats().to_dict())
        self.assertNotIn("cancel_requested", q.get(job.id).to_dict())

    def test_cancelling_a_finished_job_says_its_state(self) -> None:
        q = self.make_queue(max_attempts=1)
        done, dead, cancelled = q.enqueue("done"), q.enqueue("dead"), q.enqueue("cancelled")
        q.ack(q.lease_one())
        q.nack(q.lease_one(), error="boom")
        q.cancel(cancelled)
        for job, state in ((done, "done"), (dead, "dead"), (cancelled, "cancelled")):
            with self.assertRaises(JobFinishedError) as caught:
                q.cancel(job.id)
            self.assertEqual(caught.exception.state, state)
            self.assertIn(f"already {state}", str(caught.exception))
        with self.assertRaises(JobNotFoundError):
            q.cancel("no-such-job")

    def test_a_cancelled_job_frees_its_dedupe_key_and_keeps_its_id(self) -> None:
        q = self.make_queue()
        first = q.enqueue("a", dedupe_key="k", job_id="one")
        q.cancel(first)
        second = q.enqueue("b", dedupe_key="k")
        self.assertNotEqual(second.id, first.id, "the key is free again, as after done")
        again = q.enqueue("c", job_id="one")
        self.assertEqual((again.id, again.state), ("one", JobState.CANCELLED), "idempotent enqueue returns it")

    def test_compaction_drops_cancelled_jobs_as_it_drops_done_ones(self) -> None:
        q = self.make_queue()
        gone, kept = q.enqueue("a"), q.enqueue("b")
        q.cancel(gone)
        result = q.compact()
        self.assertEqual(result.jobs_dropped, 1)
        with self.assertRaises(JobNotFoundError):
            q.get(gone.id)
        self.assertIs(q.get(kept.id).state, JobState.READY)
        self.assertEqual(q.stats().cancelled, 0)

    # ------------------------------------------------------------ cancel: leased jobs
    def test_cancel_of_a_leased_job_marks_it_and_refuses_its_ack_and_nack(self) -> None:
        q = self.make_queue()
        q.enqueue("a")
        job = q.lease_one()
        assert job is not None
        marked = q.cancel(job.id)
        self.assertIs(marked.state, JobState.LEASED)
        self.assertTrue(marked.cancel_requested)
        self.assertEqual(q.cancel(job.id).cancel_requested, True, "asking twice changes nothing")
        for act in (lambda: q.ack(job), lambda: q.nack(job, error="x"), lambda: q.ack(job.id)):
            with self.assertRaises(JobCancelledError) as caught:
                act()
            self.assertIsInstance(caught.exception, NotLeasedError)
            self.assertIn("cancelled", str(caught.exception))
        renewed = q.extend(job, 30)
        self.assertTrue(renewed.cancel_requested, "the heartbeat learns of the cancel")
        self.assertTrue(renewed.cancelled, "and a Job made from it shows the flag set")
        self.assertTrue(q.get(job.id).cancel_requested)
        self.assertEqual(q.stats().leased, 1)
        ended = q.cancel(job, stopped=True)
        self.assertIs(ended.state, JobState.CANCELLED)
        self.assertIs(q.get(job.id).state, JobState.CANCELLED)
        self.assertIsNone(q.get(job.id).lease_token)
        with self.assertRaises(JobCancelledError):
            q.ack(job)

    def test_a_stale_lease_cannot_end_a_cancelled_attempt(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        q.enqueue("a")
        old = q.lease_one()
        assert old is not None
        self.advance(11)
        new = q.lease_one()
        assert new is not None and new.lease_token != old.lease_token
        q.cancel(new.id)
        with self.assertRaises(NotLeasedError):
            q.cancel(old, stopped=True)
        self.assertIs(q.cancel(new, stopped=True).state, JobState.CANCELLED)

    def test_a_marked_lease_that_expires_ends_cancelled_not_retried(self) -> None:
        q = self.make_queue(visibility_timeout=10, max_attempts=5)
        q.enqueue("a")
        job = q.lease_one()
        assert job is not None
        q.cancel(job.id)
        self.advance(11)
        shown = q.get(job.id)  # a read shows what the reclaim will record
        self.assertIs(shown.state, JobState.CANCELLED)
        self.assertFalse(shown.cancel_requested)
        self.assertEqual(q.stats().cancelled, 1)
        self.assertEqual([j.id for j in q.list_jobs("cancelled")], [job.id])
        self.assertEqual(q.lease(5), [], "the reclaim ends it cancelled, never ready")
        self.assertIs(q.get(job.id).state, JobState.CANCELLED)
        q = self.reopen(q)
        self.assertIs(q.get(job.id).state, JobState.CANCELLED)

    def test_the_mark_survives_reopening_and_compaction(self) -> None:
        q = self.make_queue()
        q.enqueue("a")
        job = q.lease_one()
        assert job is not None
        q.cancel(job.id)
        q.compact()
        q = self.reopen(q)
        self.assertTrue(q.get(job.id).cancel_requested)
        with self.assertRaises(JobCancelledError):
            q.ack(job)
        self.assertIs(q.cancel(job, stopped=True).state, JobState.CANCELLED)

    # ------------------------------------------------------------ cancel: the Worker
    def test_a_thread_handler_sees_job_cancelled_and_the_attempt_ends_cancelled(self) -> None:
        q = self.make_queue(visibility_timeout=SHORT_LEASE)
        target = q.enqueue("stop me")
        started, saw = threading.Event(), threading.Event()

        def handler(job: Job) -> str:
            started.set()
            if job.cancelled.wait(WAIT_SECONDS):
                saw.set()
            return "finished anyway"

        worker = Worker(q, handler, max_jobs=1, handle_signals=False, poll_interval=0.01)
        results: list[Any] = []
        thread = threading.Thread(target=lambda: results.append(worker.run()))
        thread.start()
        self.addCleanup(thread.join, WAIT_SECONDS)
        self.addCleanup(worker.stop)
        self.assertTrue(started.wait(WAIT_SECONDS))
        q.cancel(target.id)
        self.assertTrue(saw.wait(WAIT_SECONDS), "the heartbeat told the handler")
        thread.join(WAIT_SECONDS)
        self.assertFalse(thread.is_alive())
        self.assertIs(q.get(target.id).state, JobState.CANCELLED)
        self.assertIsNone(q.get(target.id).result, "the refused ack stored nothing")
        (stats,) = results
        self.assertEqual((stats.cancelled, stats.succeeded, stats.lost_leases), (1, 0, 0))

    def test_an_async_handler_is_cancelled(self) -> None:
        q = self.make_queue(visibility_timeout=SHORT_LEASE)
        target = q.enqueue("stop me")
        started, cancelled = threading.Event(), threading.Event()

        async def handler(job: Job) -> None:
            await sleep_until_cancelled(started, cancelled)

        worker = Worker(q, handler, max_jobs=1, handle_signals=False, poll_interval=0.01)
        results: list[Any] = []
        thread = threading.Thread(target=lambda: results.append(worker.run()))
        thread.start()
        self.addCleanup(thread.join, WAIT_SECONDS)
        self.addCleanup(worker.stop)
        self.assertTrue(started.wait(WAIT_SECONDS))
        q.cancel(target.id)
        self.assertTrue(cancelled.wait(WAIT_SECONDS), "the task was cancelled")
        thread.join(WAIT_SECONDS)
        self.assertFalse(thread.is_alive())
        self.assertIs(q.get(target.id).state, JobState.CANCELLED)
        self.assertEqual(q.get(target.id).attempts, 1)

    def test_a_cancel_between_heartbeats_still_ends_cancelled(self) -> None:
        # The handler returns before any heartbeat: its ack is refused, and the Worker ends the attempt.
        q = self.make_queue(visibility_timeout=60)
        target = q.enqueue("quick")

        def handler(job: Job) -> str:
            q.cancel(job.id)
            return "done"

        worker = Worker(q, handler, max_jobs=1, handle_signals=False, poll_interval=0.01)
        stats = worker.run()
        self.assertIs(q.get(target.id).state, JobState.CANCELLED)
        self.assertEqual((stats.cancelled, stats.succeeded, stats.lost_leases), (1, 0, 0))
