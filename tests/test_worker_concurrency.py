"""Concurrent handlers, and how a Worker stops: slots, acks shared, max_jobs, idle_timeout, stop(), wake-ups.

Owns: ``ConcurrencyAndStoppingTests`` and ``GatedAckMany`` (it holds the
first ack_many call until the jobs that finish meanwhile wait to be settled
together). Imports: the standard library, the public ``nobroker`` API,
tests.support and tests.workersupport. Real threads; a second Queue object
on the same folder where a test needs a wake-up from elsewhere.
"""

from __future__ import annotations

import threading
import time
import unittest
from typing import Any

from nobroker import JobState, NotLeasedError, Queue, Worker
from tests.support import ThreadedRun, wait_until
from tests.workersupport import LONG_POLL, PATIENCE, QueueTestCase


class GatedAckMany:
    """``queue.ack_many``, recorded; its first call (the "gate" job's, alone) waits until ``waiting``
    more finished jobs wait to be settled, so that they all go in the next call together."""

    def __init__(self, queue: Queue, waiting: int) -> None:
        self.inner = queue.ack_many
        self.waiting = waiting
        self.calls: list[list[Any]] = []
        self.gate_acking = threading.Event()
        self.worker: Worker | None = None
        queue.ack_many = self  # type: ignore[method-assign]

    def __call__(self, jobs: Any, **kwargs: Any) -> None:
        jobs = list(jobs)
        self.calls.append([job.payload for job in jobs])
        if len(self.calls) == 1:
            self.gate_acking.set()
            assert self.worker is not None
            pending = self.worker._runner._settling._done  # type: ignore[attr-defined]
            wait_until(lambda: pending.qsize() >= self.waiting, PATIENCE)
        self.inner(jobs, **kwargs)


class ConcurrencyAndStoppingTests(QueueTestCase):
    def test_concurrency_runs_handlers_in_parallel(self) -> None:
        queue = self.open_queue()
        queue.enqueue_many(list(range(4)))
        barrier = threading.Barrier(4, timeout=PATIENCE)
        threads: set[str] = set()

        def handler(job: Any) -> None:
            threads.add(threading.current_thread().name)
            barrier.wait()  # only passes when all four run at once

        stats = Worker(queue, handler, concurrency=4, max_jobs=4, handle_signals=False).run()
        self.assertEqual((stats.succeeded, stats.failed), (4, 0))
        self.assertEqual(len(threads), 4)

    def test_with_one_slot_the_next_job_runs_while_the_last_ack_is_written(self) -> None:
        queue = self.open_queue()
        queue.enqueue_many(["first", "second"])
        real_many, real_one = queue.ack_many, queue.ack
        first_ack_written = threading.Event()
        ran: list[tuple[str, bool]] = []

        def held_back(payloads: list[Any]) -> None:
            if payloads == ["first"]:  # the first ack is slow to be written: the second job runs meanwhile
                self.assertTrue(wait_until(lambda: len(ran) == 2, PATIENCE), "the second job waited for the first's ack")

        def slow_ack_many(jobs: Any, **kwargs: Any) -> None:
            jobs = list(jobs)
            held_back([job.payload for job in jobs])
            real_many(jobs, **kwargs)
            first_ack_written.set()

        def slow_ack(job: Any, **kwargs: Any) -> None:
            held_back([job.payload])
            real_one(job, **kwargs)
            first_ack_written.set()

        queue.ack_many = slow_ack_many  # type: ignore[method-assign]
        queue.ack = slow_ack  # type: ignore[method-assign]

        def handler(job: Any) -> None:
            ran.append((job.payload, first_ack_written.is_set()))

        stats = Worker(queue, handler, concurrency=1, max_jobs=2, handle_signals=False).run()
        self.assertEqual(ran, [("first", False), ("second", False)])
        self.assertEqual(stats.succeeded, 2)
        self.assertEqual(queue.stats().done, 2, "run() returned before every ack was written")

    def test_jobs_that_finish_together_are_acked_in_one_call(self) -> None:
        queue = self.open_queue()
        queue.enqueue("gate")
        queue.enqueue_many(list(range(4)))
        acks = GatedAckMany(queue, waiting=4)

        def handler(job: Any) -> None:
            if job.payload != "gate":
                acks.gate_acking.wait(PATIENCE)  # finish while the gate's ack is being written

        worker = Worker(queue, handler, concurrency=5, max_jobs=5, handle_signals=False)
        acks.worker = worker
        stats = worker.run()
        self.assertEqual(stats.succeeded, 5)
        self.assertEqual(queue.stats().done, 5)
        self.assertEqual([sorted(map(str, call)) for call in acks.calls], [["gate"], ["0", "1", "2", "3"]],
                         "the four that finished during one write went in the next, together")

    def test_a_refused_ack_in_a_shared_batch_is_counted_for_that_job_only(self) -> None:
        queue = self.open_queue()
        queue.enqueue("gate")
        queue.enqueue_many(["keep", "lose", "keep", "keep"])
        real_ack = queue.ack

        def ack(job: Any, **kwargs: Any) -> None:
            if getattr(job, "payload", None) == "lose":
                raise NotLeasedError("taken over")  # as if another worker had it now
            real_ack(job, **kwargs)

        queue.ack = ack  # type: ignore[method-assign]
        real_ack_many = queue.ack_many

        def ack_many(jobs: Any, **kwargs: Any) -> None:
            jobs = list(jobs)
            real_ack_many([j for j in jobs if j.payload != "lose"])
            if any(j.payload == "lose" for j in jobs):
                raise NotLeasedError("taken over")

        queue.ack_many = ack_many  # type: ignore[method-assign]
        acks = GatedAckMany(queue, waiting=4)

        def handler(job: Any) -> str:
            if job.payload != "gate":
                acks.gate_acking.wait(PATIENCE)
            return job.payload

        worker = Worker(queue, handler, concurrency=5, max_jobs=5, handle_signals=False)
        acks.worker = worker
        stats = worker.run()
        self.assertEqual((stats.succeeded, stats.lost_leases), (4, 1))
        self.assertEqual(queue.stats().done, 4)
        self.assertEqual([len(call) for call in acks.calls], [1, 4],
                         "the four acks were meant to share one call, then fall back one by one")

    def test_max_jobs_stops_after_that_many(self) -> None:
        queue = self.open_queue()
        queue.enqueue_many(list(range(5)))
        stats = Worker(queue, lambda job: None, concurrency=2, max_jobs=3, handle_signals=False).run()
        self.assertEqual((stats.leased, stats.succeeded), (3, 3))
        counts = queue.stats()
        self.assertEqual((counts.done, counts.ready, counts.leased), (3, 2, 0))

    def test_idle_timeout_returns_once_the_queue_stays_empty(self) -> None:
        queue = self.open_queue()
        queue.enqueue_many(["a", "b"])
        started = time.monotonic()
        stats = Worker(queue, lambda job: None, idle_timeout=0.3, poll_interval=0.05, handle_signals=False).run()
        elapsed = time.monotonic() - started
        self.assertEqual(stats.succeeded, 2)
        self.assertGreaterEqual(elapsed, 0.3)
        self.assertLess(elapsed, PATIENCE)

    def test_idle_timeout_does_not_cut_a_running_job_short(self) -> None:
        queue = self.open_queue()
        job = queue.enqueue("slow")

        def handler(job: Any) -> str:
            time.sleep(0.5)  # runs longer than idle_timeout on purpose
            return "finished"

        stats = Worker(queue, handler, idle_timeout=0.1, poll_interval=0.02, handle_signals=False).run()
        self.assertEqual(stats.succeeded, 1)
        self.assertEqual(queue.get(job.id).result, "finished")

    def test_stop_from_another_thread_finishes_the_running_job(self) -> None:
        queue = self.open_queue()
        first, *rest = queue.enqueue_many(["a", "b", "c"])
        started, release = threading.Event(), threading.Event()

        def handler(job: Any) -> str:
            started.set()
            release.wait(PATIENCE)
            return "ok"

        run = ThreadedRun(Worker(queue, handler, concurrency=1))
        self.assertTrue(started.wait(PATIENCE))
        run.worker.stop()
        release.set()
        run.join(self)
        self.assertIsNone(run.error)
        assert run.stats is not None
        self.assertEqual((run.stats.leased, run.stats.succeeded), (1, 1))
        self.assertEqual(queue.get(first.id).state, JobState.DONE)
        self.assertEqual([queue.get(j.id).state for j in rest], [JobState.READY, JobState.READY])

    def test_stop_interrupts_an_idle_worker(self) -> None:
        queue = self.open_queue()
        run = ThreadedRun(Worker(queue, lambda job: None, poll_interval=0.05))
        time.sleep(0.2)  # let it go idle; stop() must work from any state
        run.worker.stop()
        run.join(self)
        self.assertIsNone(run.error)
        assert run.stats is not None
        self.assertEqual(run.stats.leased, 0)

    def test_stop_ends_a_long_idle_wait(self) -> None:
        queue = self.open_queue()
        run = ThreadedRun(Worker(queue, lambda job: None, poll_interval=LONG_POLL))
        time.sleep(0.3)  # idle, blocked in wait_for_jobs
        run.worker.stop()
        run.join(self)
        self.assertIsNone(run.error)

    def test_one_batch_wakes_every_idle_worker_it_needs(self) -> None:
        # Two idle workers, each with its own Queue (its own end of the pipe):
        # a batch of two jobs must reach both, though it is one wake-up.
        both_running = threading.Barrier(2, timeout=PATIENCE)
        runs = [
            ThreadedRun(Worker(self.open_queue(), lambda job: both_running.wait() and None,
                               poll_interval=LONG_POLL, max_jobs=1, handle_signals=False))
            for _ in range(2)
        ]  # fmt: skip
        time.sleep(0.3)  # both idle
        self.open_queue().enqueue_many(["a", "b"])
        for run in runs:
            run.join(self)
            self.assertIsNone(run.error)
            assert run.stats is not None
            self.assertEqual(run.stats.succeeded, 1)

    def test_an_idle_worker_runs_a_delayed_job_when_it_comes_due(self) -> None:
        ran = threading.Event()
        run = ThreadedRun(Worker(self.open_queue(), lambda job: ran.set(), poll_interval=LONG_POLL,
                                 max_jobs=1, handle_signals=False))  # fmt: skip
        time.sleep(0.3)  # idle
        self.open_queue().enqueue("later", delay=0.5)
        self.assertTrue(ran.wait(PATIENCE))
        run.join(self)

    def test_a_worker_limited_to_kinds_leaves_the_wake_up_to_one_that_takes_every_kind(self) -> None:
        ran = threading.Event()
        emails = ThreadedRun(Worker(self.open_queue(), lambda job: None, kinds=["email"],
                                    poll_interval=LONG_POLL, handle_signals=False))  # fmt: skip
        anything = ThreadedRun(Worker(self.open_queue(), lambda job: ran.set(), poll_interval=LONG_POLL,
                                      max_jobs=1, handle_signals=False))  # fmt: skip
        time.sleep(0.3)  # both idle
        self.open_queue().enqueue("not an email")
        self.assertTrue(ran.wait(PATIENCE))
        anything.join(self)
        emails.worker.stop()
        emails.join(self)
        assert emails.stats is not None
        self.assertEqual(emails.stats.leased, 0)

    def test_an_idle_worker_limited_to_kinds_is_woken_for_its_kind(self) -> None:
        ran = threading.Event()
        run = ThreadedRun(Worker(self.open_queue(), lambda job: ran.set(), kinds=["email"],
                                 poll_interval=LONG_POLL, max_jobs=1, handle_signals=False))  # fmt: skip
        time.sleep(0.3)  # idle
        self.open_queue().enqueue("hello", kind="email")
        self.assertTrue(ran.wait(PATIENCE))
        run.join(self)

    def test_stop_before_run_returns_at_once(self) -> None:
        queue = self.open_queue()
        queue.enqueue("untouched")
        worker = Worker(queue, lambda job: None, handle_signals=False)
        worker.stop()
        self.assertEqual(worker.run().leased, 0)
        self.assertEqual(queue.stats().ready, 1)

    def test_stats_snapshot_while_running(self) -> None:
        queue = self.open_queue()
        queue.enqueue_many(["a", "b"])
        release = threading.Event()
        worker = Worker(queue, lambda job: release.wait(PATIENCE) and None, concurrency=2, max_jobs=2)
        run = ThreadedRun(worker)
        self.assertTrue(wait_until(lambda: worker.stats.leased == 2, PATIENCE))
        self.assertEqual(worker.stats.succeeded, 0)
        release.set()
        run.join(self)
        self.assertEqual(worker.stats.succeeded, 2)

    def test_a_worker_runs_once(self) -> None:
        queue = self.open_queue()
        worker = Worker(queue, lambda job: None, idle_timeout=0, handle_signals=False)
        worker.run()
        with self.assertRaises(RuntimeError):
            worker.run()

    def test_bad_arguments_are_refused(self) -> None:
        queue = self.open_queue()
        for bad in ({"concurrency": 0}, {"concurrency": 1.5}, {"poll_interval": 0}, {"max_jobs": 0},
                    {"idle_timeout": -1}, {"poll_interval": float("nan")}):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                Worker(queue, lambda job: None, **bad)
        with self.assertRaises(TypeError):
            Worker(queue, "not callable")  # type: ignore[arg-type]
        with self.assertRaises(ValueError) as caught:
            Worker(queue, lambda job: None, poll_interval=1e12)
        self.assertIn("at most", str(caught.exception), "the message names every bound it checks")


if __name__ == "__main__":
    unittest.main()
