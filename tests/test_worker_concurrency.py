"""Tests for the Worker: outcomes, concurrency, heartbeats, signals, crashes.

Imports: nobroker and tests.support. Real threads and real processes; a real
file queue in a temp folder, plus small fake queue objects where a test needs
to inject a storage error or prove the Worker relies on nothing but the
public Queue API.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
import typing
import unittest
import unittest.mock
from collections import deque
from typing import Any

from nobroker import (
    BackoffPolicy,
    JobState,
    NotLeasedError,
    PermanentError,
    Queue,
    QueueClosedError,
    StorageError,
    Worker,
)
from nobroker.worker.signals import StopSignals
from nobroker.worker import JobReport
from tests.pgsupport import PostgresTestCase, fresh_name
from tests.semantics_control import sleep_until_cancelled
from tests.support import TempDirTestCase, ThreadedRun, wait_until

SRC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
#: Generous bound for anything that should happen "soon" on a busy shared machine.
PATIENCE = 60.0
#: A poll interval no test waits out: what happens sooner came from a wake-up.
LONG_POLL = 600.0
NO_BACKOFF = BackoffPolicy(base=0, jitter=0)


class QueueTestCase(TempDirTestCase):
    """A fresh file queue per test (fsync off: these tests are about the Worker)."""

    def open_queue(self, **options: Any) -> Queue:
        options.setdefault("fsync", False)
        queue = Queue(os.path.join(self.dir, "q"), **options)
        self.addCleanup(queue.close)
        return queue


def failing_handler(job: Any) -> None:
    parse(job.payload)


def parse(text: str) -> None:
    raise ValueError(f"cannot parse {text!r}")


def check_tracebacks(test: unittest.TestCase, queue: Queue) -> None:
    """A failing handler's traceback is kept with the job (and logged at WARNING with its id); last_error stays one line."""
    retried = queue.enqueue("retried")
    with test.assertLogs("nobroker.worker", "WARNING") as logs:
        Worker(queue, failing_handler, max_jobs=1, handle_signals=False).run()
    stored = queue.get(retried.id)
    test.assertEqual((stored.state, stored.last_error), (JobState.READY, "ValueError: cannot parse 'retried'"))
    assert stored.traceback is not None
    test.assertTrue(stored.traceback.startswith("Traceback (most recent call last):"), stored.traceback)
    test.assertIn("in failing_handler", stored.traceback)
    test.assertIn("in parse", stored.traceback)
    test.assertTrue(stored.traceback.endswith("ValueError: cannot parse 'retried'\n"), stored.traceback)
    [record] = [r for r in logs.records if retried.id in r.getMessage()]
    test.assertEqual(record.levelname, "WARNING")
    test.assertIsNotNone(record.exc_info, "the log line carries the traceback")
    test.assertIn("in parse", logs.output[logs.records.index(record)])


def check_unstorable_results(test: unittest.TestCase, queue: Queue, concurrency: int) -> None:
    """Handlers that did their work but return what cannot be stored: each runs once, its job ends dead."""
    unstorable = {"object": {"when": object()}, "collide": {1: "a", "1": "b"}, "nan": float("nan")}
    jobs = {name: queue.enqueue(name) for name in unstorable}
    ok = queue.enqueue("ok")
    runs: list[str] = []

    def handler(job: Any) -> Any:
        runs.append(job.payload)
        return unstorable.get(job.payload, "fine")

    stats = Worker(queue, handler, concurrency=concurrency, idle_timeout=0.5, poll_interval=0.05, handle_signals=False).run()
    test.assertEqual(sorted(runs), sorted([*unstorable, "ok"]), "a handler ran again")
    test.assertEqual((stats.succeeded, stats.failed, stats.dead), (1, 0, 3))
    for job in jobs.values():
        stored = queue.get(job.id)
        test.assertEqual((stored.state, stored.attempts), (JobState.DEAD, 1))
        test.assertTrue(stored.last_error.startswith("the handler's result cannot be stored"), stored.last_error)
        test.assertIn("JSON", stored.last_error)
    test.assertEqual(queue.get(ok.id).result, "fine")


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


# ---------------------------------------------------------------- outcomes
class OutcomeTests(QueueTestCase):
    def test_success_acks_and_stores_the_result(self) -> None:
        queue = self.open_queue()
        jobs = [queue.enqueue({"n": n}) for n in range(3)]
        seen: list[Any] = []

        def handler(job: Any) -> Any:
            seen.append(job.payload["n"])
            return {"double": job.payload["n"] * 2}

        stats = Worker(queue, handler, max_jobs=3, handle_signals=False).run()
        self.assertEqual(stats.to_dict(), {"leased": 3, "succeeded": 3, "failed": 0, "dead": 0, "lost_leases": 0})
        self.assertEqual(sorted(seen), [0, 1, 2])
        for n, job in enumerate(jobs):
            stored = queue.get(job.id)
            self.assertEqual(stored.state, JobState.DONE)
            self.assertEqual(stored.result, {"double": n * 2})

    def test_on_job_hears_every_outcome_once_with_its_duration(self) -> None:
        for concurrency in (1, 3):  # the handler thread settles; or the settling thread does
            with self.subTest(concurrency=concurrency):
                queue = Queue(os.path.join(self.dir, f"q{concurrency}"), fsync=False, max_attempts=2, backoff=NO_BACKOFF)
                self.addCleanup(queue.close)
                ok, flaky = queue.enqueue("ok", kind="mail"), queue.enqueue("flaky")
                doomed = queue.enqueue("doomed")
                reports: list[JobReport] = []

                def handler(job: Any) -> str:
                    if job.payload == "doomed" or (job.payload == "flaky" and job.attempts == 1):
                        time.sleep(0.01)
                        raise ValueError(job.payload)
                    return "fine"

                Worker(queue, handler, concurrency=concurrency, max_jobs=5, on_job=reports.append,
                       handle_signals=False).run()  # fmt: skip
                seen = sorted((r.id, r.attempts, r.outcome) for r in reports)
                self.assertEqual(seen, sorted([
                    (ok.id, 1, "succeeded"), (flaky.id, 1, "failed"), (flaky.id, 2, "succeeded"),
                    (doomed.id, 1, "failed"), (doomed.id, 2, "dead"),
                ]))  # fmt: skip
                self.assertEqual({r.kind for r in reports if r.id == ok.id}, {"mail"})
                failed = [r for r in reports if r.outcome in ("failed", "dead")]
                self.assertTrue(all(r.error == f"ValueError: {queue.get(r.id).payload}" for r in failed), failed)
                self.assertTrue(all(r.duration >= 0.01 for r in failed), [r.duration for r in failed])
                self.assertTrue(all(abs(r.at - time.time()) < 60 for r in reports))

    def test_a_failing_on_job_listener_is_logged_once_and_never_stops_the_worker(self) -> None:
        queue = self.open_queue()
        for n in range(3):
            queue.enqueue(n)

        def listener(report: JobReport) -> None:
            raise RuntimeError("listener broke")

        with self.assertLogs("nobroker.worker", "ERROR") as logs:
            stats = Worker(queue, lambda job: None, max_jobs=3, on_job=listener, handle_signals=False).run()
        self.assertEqual(stats.succeeded, 3)
        self.assertEqual(sum("on_job listener failed" in line for line in logs.output), 1)

    def test_none_result_acks_without_a_result(self) -> None:
        queue = self.open_queue()
        job = queue.enqueue("x")
        stats = Worker(queue, lambda job: None, max_jobs=1, handle_signals=False).run()
        self.assertEqual(stats.succeeded, 1)
        self.assertEqual(queue.get(job.id).state, JobState.DONE)
        self.assertIsNone(queue.get(job.id).result)

    def test_failure_retries_with_the_error_text_then_dead_letters(self) -> None:
        queue = self.open_queue(max_attempts=3, backoff=NO_BACKOFF)
        job = queue.enqueue("boom")
        attempts: list[int] = []

        def handler(job: Any) -> None:
            attempts.append(job.attempts)
            raise ValueError(f"bad input on attempt {job.attempts}")

        stats = Worker(queue, handler, max_jobs=3, poll_interval=0.02, handle_signals=False).run()
        self.assertEqual(attempts, [1, 2, 3])
        self.assertEqual((stats.leased, stats.succeeded, stats.failed, stats.dead), (3, 0, 2, 1))
        stored = queue.get(job.id)
        self.assertEqual(stored.state, JobState.DEAD)
        self.assertEqual(stored.attempts, 3)
        self.assertEqual(stored.last_error, "ValueError: bad input on attempt 3")
        self.assertEqual([j.id for j in queue.dlq()], [job.id])

    def test_a_failing_handlers_traceback_is_kept_and_logged(self) -> None:
        check_tracebacks(self, self.open_queue(backoff=BackoffPolicy(base=60)))

    def test_failure_waits_for_the_backoff_before_the_retry(self) -> None:
        queue = self.open_queue(backoff=BackoffPolicy(base=60, jitter=0))
        job = queue.enqueue("later")

        def handler(job: Any) -> None:
            raise RuntimeError("try again")

        stats = Worker(queue, handler, idle_timeout=0.3, poll_interval=0.05, handle_signals=False).run()
        self.assertEqual((stats.leased, stats.failed), (1, 1))
        stored = queue.get(job.id)
        self.assertEqual(stored.state, JobState.READY)
        self.assertGreater(stored.available_at, time.time() + 30)
        self.assertEqual(stored.last_error, "RuntimeError: try again")

    def test_permanent_error_dead_letters_after_one_attempt(self) -> None:
        queue = self.open_queue(max_attempts=5)
        job = queue.enqueue({"video": None})

        def handler(job: Any) -> None:
            raise PermanentError("missing video id")

        stats = Worker(queue, handler, max_jobs=1, handle_signals=False).run()
        self.assertEqual((stats.leased, stats.failed, stats.dead), (1, 0, 1))
        stored = queue.get(job.id)
        self.assertEqual(stored.state, JobState.DEAD)
        self.assertEqual(stored.attempts, 1)
        self.assertEqual(stored.last_error, "PermanentError: missing video id")

    def test_a_result_that_cannot_be_stored_ends_the_job_dead_without_a_retry(self) -> None:
        for concurrency in (1, 4):  # one ack at a time, and acks shared through ack_many
            with self.subTest(concurrency=concurrency):
                check_unstorable_results(self, self.open_queue(max_attempts=5, backoff=NO_BACKOFF), concurrency)

    def test_kinds_limits_what_the_worker_leases(self) -> None:
        queue = self.open_queue()
        email = queue.enqueue("e", kind="email")
        video = queue.enqueue("v", kind="video")
        kinds_seen: list[str] = []
        stats = Worker(
            queue, lambda job: kinds_seen.append(job.kind), kinds=["email"], idle_timeout=0.2, handle_signals=False
        ).run()
        self.assertEqual((stats.leased, kinds_seen), (1, ["email"]))
        self.assertEqual(queue.get(email.id).state, JobState.DONE)
        self.assertEqual(queue.get(video.id).state, JobState.READY)


class StorageErrorTests(QueueTestCase):
    def test_queue_closed_under_a_running_worker_is_raised_from_run(self) -> None:
        queue = self.open_queue()
        queue.enqueue_many(["a", "b"])

        def handler(job: Any) -> None:
            queue.close()

        with self.assertLogs("nobroker.worker", "ERROR"), self.assertRaises(QueueClosedError):
            Worker(queue, handler, concurrency=2, handle_signals=False).run()


# ---------------------------------------------------------------- async handlers
class AsyncHandlerTests(QueueTestCase):
    def test_async_handler_result_is_stored(self) -> None:
        queue = self.open_queue()
        job = queue.enqueue({"n": 20})

        async def handler(job: Any) -> Any:
            await asyncio.sleep(0)
            return job.payload["n"] + 1

        stats = Worker(queue, handler, max_jobs=1, handle_signals=False).run()
        self.assertEqual(stats.succeeded, 1)
        self.assertEqual(queue.get(job.id).result, 21)

    def test_async_handlers_share_one_loop_at_most_concurrency_at_a_time(self) -> None:
        queue = self.open_queue()
        queue.enqueue_many(list(range(6)))
        barrier = asyncio.Barrier(2)
        running = 0
        most_running = 0
        loops: set[int] = set()

        async def handler(job: Any) -> None:
            nonlocal running, most_running
            loops.add(id(asyncio.get_running_loop()))
            running += 1
            most_running = max(most_running, running)
            try:
                # Two coroutines must be inside the handler together to pass.
                await asyncio.wait_for(barrier.wait(), PATIENCE)
            finally:
                running -= 1

        stats = Worker(queue, handler, concurrency=2, max_jobs=6, handle_signals=False).run()
        self.assertEqual((stats.succeeded, stats.failed), (6, 0))
        self.assertEqual(most_running, 2)
        self.assertEqual(len(loops), 1)

    def test_fifty_async_handlers_run_at_once_as_tasks_without_a_thread_each(self) -> None:
        queue = self.open_queue()
        jobs = queue.enqueue_many(list(range(50)))
        barrier = asyncio.Barrier(50)
        threads_while_running: list[int] = []
        storage_threads: set[str] = set()
        ack_calls: list[int] = []
        real_ack_many, real_lease = queue.ack_many, queue.lease

        def ack_many(jobs: Any, **kwargs: Any) -> None:
            jobs = list(jobs)
            storage_threads.add(threading.current_thread().name)
            ack_calls.append(len(jobs))
            real_ack_many(jobs, **kwargs)

        def lease(*args: Any, **kwargs: Any) -> Any:
            storage_threads.add(threading.current_thread().name)
            return real_lease(*args, **kwargs)

        queue.ack_many, queue.lease = ack_many, lease  # type: ignore[method-assign]

        async def handler(job: Any) -> int:
            threads_while_running.append(threading.active_count())
            # All fifty must be inside the handler together to pass.
            await asyncio.wait_for(barrier.wait(), PATIENCE)
            await asyncio.sleep(0.01)
            return job.payload * 2

        threads_before = threading.active_count()
        stats = Worker(queue, handler, concurrency=50, max_jobs=50, handle_signals=False, name="w").run()
        self.assertEqual((stats.succeeded, stats.failed, stats.dead), (50, 0, 0))
        for job in jobs:
            stored = queue.get(job.id)
            self.assertEqual((stored.state, stored.result, stored.attempts), (JobState.DONE, job.payload * 2, 1))
        # The loop, the settling thread, the heartbeat and the announcement's: no thread per job.
        self.assertLessEqual(max(threads_while_running), threads_before + 4, threads_while_running)
        self.assertEqual(threading.active_count(), threads_before, "every thread of the worker is gone")
        self.assertEqual(sum(ack_calls), 50)
        self.assertLess(len(ack_calls), 50, "jobs that finished together share an ack_many")
        self.assertNotIn("w-asyncio", storage_threads, "storage calls never run on the event loop")

    def test_a_hard_stop_cancels_the_running_async_handlers(self) -> None:
        queue = self.open_queue()
        job = queue.enqueue("stuck")
        started, cancelled = threading.Event(), threading.Event()
        real_lease = queue.lease

        def lease(*args: Any, **kwargs: Any) -> Any:
            if started.is_set():  # the second look for work: as if a second Ctrl-C landed here
                raise KeyboardInterrupt
            return real_lease(*args, **kwargs)

        queue.lease = lease  # type: ignore[method-assign]

        async def handler(job: Any) -> None:
            await sleep_until_cancelled(started, cancelled, PATIENCE)

        worker = Worker(queue, handler, concurrency=2, poll_interval=0.01, handle_signals=False)
        with self.assertLogs("nobroker.worker", "WARNING"), self.assertRaises(KeyboardInterrupt):
            worker.run()
        self.assertTrue(cancelled.wait(PATIENCE), "the running handler was cancelled")
        stored = queue.get(job.id)
        self.assertEqual((stored.state, stored.attempts), (JobState.LEASED, 1), "nothing was sent for it")

    def test_async_failure_and_permanent_error(self) -> None:
        queue = self.open_queue(max_attempts=5, backoff=BackoffPolicy(base=60, jitter=0))
        retry = queue.enqueue("retry")
        perm = queue.enqueue("perm")

        async def handler(job: Any) -> None:
            await asyncio.sleep(0)
            if job.payload == "perm":
                raise PermanentError("no")
            raise KeyError("k")

        stats = Worker(queue, handler, max_jobs=2, handle_signals=False).run()
        self.assertEqual((stats.failed, stats.dead), (1, 1))
        self.assertEqual(queue.get(retry.id).last_error, "KeyError: 'k'")
        self.assertEqual(queue.get(perm.id).state, JobState.DEAD)

    def test_handler_returning_an_awaitable_is_awaited(self) -> None:
        queue = self.open_queue()
        job = queue.enqueue("a")

        class Handler:
            async def __call__(self, job: Any) -> str:
                await asyncio.sleep(0)
                return f"handled {job.payload}"

        stats = Worker(queue, Handler(), max_jobs=1, handle_signals=False).run()
        self.assertEqual(stats.succeeded, 1)
        self.assertEqual(queue.get(job.id).result, "handled a")


# ---------------------------------------------------------------- concurrency and stopping
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


# ---------------------------------------------------------------- heartbeat and lost leases
class HeartbeatTests(QueueTestCase):
    def test_heartbeat_keeps_a_long_handler_from_losing_its_lease(self) -> None:
        queue = self.open_queue(visibility_timeout=1.0)
        job = queue.enqueue("long")
        started, release = threading.Event(), threading.Event()

        def handler(job: Any) -> str:
            started.set()
            release.wait(PATIENCE)
            return "survived"

        run = ThreadedRun(Worker(queue, handler, max_jobs=1))
        self.assertTrue(started.wait(PATIENCE))
        time.sleep(2.5)  # a real deadline must pass: 2.5 visibility timeouts
        other = self.open_queue(visibility_timeout=30.0)
        self.assertEqual(other.lease(), [], "the job was delivered a second time")
        self.assertEqual(other.get(job.id).state, JobState.LEASED)
        self.assertGreater(other.get(job.id).lease_deadline, time.time())
        release.set()
        run.join(self)
        assert run.stats is not None
        self.assertEqual((run.stats.succeeded, run.stats.lost_leases), (1, 0))
        stored = queue.get(job.id)
        self.assertEqual((stored.state, stored.attempts, stored.result), (JobState.DONE, 1, "survived"))

    def test_lease_lost_by_expiry_is_counted_not_raised(self) -> None:
        queue = self.open_queue(visibility_timeout=1.0)
        job = queue.enqueue("slow")
        started, release = threading.Event(), threading.Event()

        def handler(job: Any) -> str:
            started.set()
            release.wait(PATIENCE)
            return "late"

        with self.assertLogs("nobroker.worker", "WARNING") as logs:
            run = ThreadedRun(Worker(queue, handler, max_jobs=1, _heartbeat=False))
            self.assertTrue(started.wait(PATIENCE))
            other = self.open_queue(visibility_timeout=30.0)
            second: list[Any] = []
            self.assertTrue(wait_until(lambda: second.extend(other.lease()) or bool(second), PATIENCE, 0.05))
            release.set()
            run.join(self)
        self.assertIsNone(run.error)
        assert run.stats is not None
        self.assertEqual((run.stats.succeeded, run.stats.lost_leases), (0, 1))
        self.assertTrue(any("lease lost" in line for line in logs.output), logs.output)
        # The second delivery is the one that counts.
        self.assertEqual(second[0].attempts, 2)
        other.ack(second[0], result="second delivery")
        self.assertEqual(queue.get(job.id).result, "second delivery")

    def test_lease_lost_to_an_operator_ack_is_counted(self) -> None:
        queue = self.open_queue(visibility_timeout=1.0)
        job = queue.enqueue("x")
        started, release = threading.Event(), threading.Event()

        def handler(job: Any) -> str:
            started.set()
            release.wait(PATIENCE)
            return "mine"

        with self.assertLogs("nobroker.worker", "WARNING") as logs:
            run = ThreadedRun(Worker(queue, handler, max_jobs=1))
            self.assertTrue(started.wait(PATIENCE))
            operator = self.open_queue()
            operator.ack(job.id, result="operator")  # a bare id skips the token check
            # The next renewal (a third of the timeout) finds the lease gone.
            self.assertTrue(wait_until(lambda: any("lease lost while" in line for line in logs.output), PATIENCE))
            release.set()
            run.join(self)
        assert run.stats is not None
        self.assertEqual((run.stats.succeeded, run.stats.lost_leases), (0, 1))
        self.assertEqual(queue.get(job.id).result, "operator")


class TypingTests(unittest.TestCase):
    def test_the_queue_parameter_is_a_protocol_a_queue_satisfies(self) -> None:
        from nobroker.worker import WorkQueue

        hint = typing.get_type_hints(Worker.__init__)["queue"]
        self.assertIs(hint, WorkQueue)
        self.assertTrue(getattr(WorkQueue, "_is_protocol", False))
        kinds = inspect.Parameter
        for name in ("lease", "ack", "nack", "extend"):
            with self.subTest(method=name):
                wanted = list(inspect.signature(getattr(WorkQueue, name)).parameters.values())[1:]
                offered = inspect.signature(getattr(Queue, name)).parameters
                for param in wanted:
                    self.assertIn(param.name, offered)
                    self.assertEqual(offered[param.name].kind == kinds.KEYWORD_ONLY, param.kind == kinds.KEYWORD_ONLY)


# ---------------------------------------------------------------- fake queues
class FakeJob(types.SimpleNamespace):
    pass


class MinimalQueue:
    """Only lease/ack/nack/extend: no wait_for_jobs, no kinds, no visibility_timeout."""

    def __init__(self, payloads: list[Any]) -> None:
        self._lock = threading.Lock()
        self.ready = deque(FakeJob(id=f"j{n}", payload=p) for n, p in enumerate(payloads))
        self.lease_counts: list[int] = []
        self.acked: dict[str, Any] = {}
        self.nacked: list[tuple[str, str | None, bool]] = []
        self.extended: list[tuple[str, float]] = []

    def lease(self, count: int = 1) -> list[FakeJob]:
        with self._lock:
            self.lease_counts.append(count)
            out = []
            while self.ready and len(out) < count:
                out.append(self.ready.popleft())
            return out

    def ack(self, job: FakeJob, result: Any = None) -> None:
        with self._lock:
            self.acked[job.id] = result

    def nack(self, job: FakeJob, error: str | None = None, permanent: bool = False) -> None:
        with self._lock:
            self.nacked.append((job.id, error, permanent))

    def extend(self, job: FakeJob, seconds: float) -> FakeJob:
        with self._lock:
            self.extended.append((job.id, seconds))
        return job


class FakeQueueTests(unittest.TestCase):
    def test_worker_runs_on_any_object_with_the_queue_api(self) -> None:
        fake = MinimalQueue(["ok", "fail", "perm"])

        def handler(job: Any) -> Any:
            if job.payload == "fail":
                raise OSError("flaky")
            if job.payload == "perm":
                raise PermanentError("never")
            return {"echo": job.payload}

        stats = Worker(fake, handler, idle_timeout=0.2, poll_interval=0.02, handle_signals=False).run()
        self.assertEqual(stats.to_dict(), {"leased": 3, "succeeded": 1, "failed": 1, "dead": 1, "lost_leases": 0})
        self.assertEqual(fake.acked, {"j0": {"echo": "ok"}})
        self.assertEqual(sorted(fake.nacked), [("j1", "OSError: flaky", False), ("j2", "PermanentError: never", True)])

    def test_one_lease_call_takes_every_free_slot_and_acks_run_concurrently(self) -> None:
        fake = MinimalQueue(list(range(16)))
        acks_together = threading.Barrier(8, timeout=PATIENCE)
        real_ack = fake.ack

        def ack(job: FakeJob, result: Any = None) -> None:
            if int(job.id[1:]) < 8:
                acks_together.wait()  # the first eight acks must be in flight at once
            real_ack(job, result)

        fake.ack = ack  # type: ignore[method-assign]
        stats = Worker(fake, lambda job: None, concurrency=8, max_jobs=16, handle_signals=False).run()
        self.assertEqual(stats.succeeded, 16)
        self.assertEqual(fake.lease_counts[0], 8)
        self.assertLessEqual(len(fake.lease_counts), 16)

    def test_heartbeat_renews_with_the_visibility_timeout_on_a_fixed_cadence(self) -> None:
        fake = MinimalQueue(["long"])
        fake.visibility_timeout = 0.3  # type: ignore[attr-defined]
        release = threading.Event()

        def handler(job: Any) -> None:
            # Released once the heartbeat renewed three times (every 0.1 s).
            wait_until(lambda: len(fake.extended) >= 3, PATIENCE)
            release.set()

        stats = Worker(fake, handler, max_jobs=1, handle_signals=False).run()
        self.assertTrue(release.is_set())
        self.assertEqual(stats.succeeded, 1)
        self.assertTrue(all(entry == ("j0", 0.3) for entry in fake.extended), fake.extended)

    def test_heartbeat_derives_the_timeout_from_the_job(self) -> None:
        fake = MinimalQueue([])
        fake.ready.append(FakeJob(id="d", payload=None, lease_deadline=time.time() + 0.6))
        stats = Worker(
            fake, lambda job: wait_until(lambda: bool(fake.extended), PATIENCE) and None,
            max_jobs=1, handle_signals=False,
        ).run()
        self.assertEqual(stats.succeeded, 1)
        seconds = fake.extended[0][1]
        self.assertTrue(0.4 < seconds <= 0.6, seconds)

    def test_storage_error_in_lease_stops_cleanly_after_running_handlers(self) -> None:
        fake = MinimalQueue(["first"])
        failed = threading.Event()
        real_lease = fake.lease

        def lease(count: int = 1) -> list[FakeJob]:
            if fake.lease_counts:
                failed.set()
                raise StorageError("No space left on device", errno=28, path="/q/default.000000.log")
            return real_lease(count)

        fake.lease = lease  # type: ignore[method-assign]
        release = threading.Event()
        with self.assertLogs("nobroker.worker", "ERROR"):
            run = ThreadedRun(Worker(fake, lambda job: release.wait(PATIENCE) and "done", concurrency=2))
            self.assertTrue(failed.wait(PATIENCE))
            self.assertFalse(run.worker.stats.succeeded)
            self.assertTrue(run.thread.is_alive(), "run() returned before its running handler finished")
            release.set()
            run.join(self)
        self.assertIsInstance(run.error, StorageError)
        self.assertEqual(fake.acked, {"j0": "done"})
        self.assertEqual(run.worker.stats.succeeded, 1)

    def test_storage_error_in_ack_is_raised_from_run(self) -> None:
        fake = MinimalQueue(["a", "b", "c"])

        def ack(job: FakeJob, result: Any = None) -> None:
            raise OSError(5, "Input/output error")

        fake.ack = ack  # type: ignore[method-assign]
        with self.assertLogs("nobroker.worker", "ERROR") as logs:
            with self.assertRaises(OSError) as caught:
                Worker(fake, lambda job: None, poll_interval=0.02, handle_signals=False).run()
        self.assertEqual(caught.exception.errno, 5)
        self.assertTrue(any("ack" in line for line in logs.output), logs.output)
        self.assertGreaterEqual(len(fake.ready), 1, "the worker kept leasing after a storage error")

    def test_storage_error_in_extend_is_raised_from_run(self) -> None:
        fake = MinimalQueue(["long"])
        fake.visibility_timeout = 0.15  # type: ignore[attr-defined]
        broke = threading.Event()

        def extend(job: FakeJob, seconds: float) -> FakeJob:
            broke.set()
            raise StorageError("fsync failed", errno=5)

        fake.extend = extend  # type: ignore[method-assign]
        with self.assertLogs("nobroker.worker", "ERROR"):
            with self.assertRaises(StorageError):
                Worker(fake, lambda job: broke.wait(PATIENCE) and None, handle_signals=False).run()
        self.assertEqual(fake.acked, {"j0": None})

    def test_not_leased_on_ack_counts_a_lost_lease(self) -> None:
        fake = MinimalQueue(["a"])

        def ack(job: FakeJob, result: Any = None) -> None:
            raise NotLeasedError(f"job {job.id} is leased under another token")

        fake.ack = ack  # type: ignore[method-assign]
        with self.assertLogs("nobroker.worker", "WARNING"):
            stats = Worker(fake, lambda job: None, max_jobs=1, handle_signals=False).run()
        self.assertEqual((stats.succeeded, stats.lost_leases), (0, 1))

    def test_handler_system_exit_nacks_then_is_raised(self) -> None:
        fake = MinimalQueue(["a", "b"])

        def handler(job: Any) -> None:
            raise SystemExit(3)

        with self.assertLogs("nobroker.worker", "ERROR"), self.assertRaises(SystemExit):
            Worker(fake, handler, handle_signals=False).run()
        self.assertEqual(fake.nacked, [("j0", "SystemExit: 3", False)])


# ---------------------------------------------------------------- signals, in this process
class SignalHandlerTests(QueueTestCase):
    def test_signal_handlers_installed_while_running_and_restored_after(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.skipTest("signal handlers can only be installed from the main thread")
        queue = self.open_queue()
        queue.enqueue("x")

        def sentinel(signum: int, frame: Any) -> None:
            pass

        previous = signal.signal(signal.SIGTERM, sentinel)
        self.addCleanup(signal.signal, signal.SIGTERM, previous)
        during: list[Any] = []
        worker = Worker(queue, lambda job: during.append(signal.getsignal(signal.SIGTERM)), max_jobs=1)
        worker.run()
        self.assertEqual(during, [worker._on_signal])
        self.assertIs(signal.getsignal(signal.SIGTERM), sentinel)

    def test_handle_signals_false_leaves_handlers_alone(self) -> None:
        queue = self.open_queue()
        queue.enqueue("x")
        before = signal.getsignal(signal.SIGINT)
        during: list[Any] = []
        Worker(queue, lambda job: during.append(signal.getsignal(signal.SIGINT)), max_jobs=1,
               handle_signals=False).run()
        self.assertEqual(during, [before])


class StopSignalsTests(unittest.TestCase):
    """The two-stage stop the Worker and the CLI share (signal.raise_signal runs the handler before it returns)."""

    def setUp(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.skipTest("signal handlers can only be installed from the main thread")

    def test_the_first_signal_asks_once_a_second_sigterm_changes_nothing_a_second_ctrl_c_insists(self) -> None:
        before = signal.getsignal(signal.SIGTERM)
        asked: list[int] = []
        called = threading.Event()

        def on_stop(signum: int) -> None:
            asked.append(signum)
            called.set()

        with StopSignals(on_stop) as signals:
            signal.raise_signal(signal.SIGTERM)
            self.assertTrue(called.wait(PATIENCE), "on_stop was never called")
            signal.raise_signal(signal.SIGTERM)
            with self.assertRaises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
        self.assertEqual((signals.first, signals.first_name, asked), (signal.SIGTERM, "SIGTERM", [signal.SIGTERM]))
        self.assertIs(signal.getsignal(signal.SIGTERM), before)

    def test_not_graceful_raises_at_the_first_ctrl_c_and_remembers_it(self) -> None:
        sigterm = signal.getsignal(signal.SIGTERM)
        with StopSignals(signals=(signal.SIGINT,), graceful=False) as signals:
            self.assertIs(signal.getsignal(signal.SIGTERM), sigterm, "only the signals named are handled")
            with self.assertRaises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
        self.assertEqual(signals.first, signal.SIGINT)


# ---------------------------------------------------------------- the same Worker on PostgreSQL
class PostgresWorkerTests(PostgresTestCase):
    """The Worker unchanged on the PostgreSQL storage (skipped without a server)."""

    def open_queue(self, name: str, **options: Any) -> Queue:
        queue = Queue(self.dsn, name, schema=self.schema, **options)
        self.addCleanup(queue.close)
        return queue

    def test_outcomes_with_concurrent_handlers(self) -> None:
        name = fresh_name("worker")
        queue = self.open_queue(name, max_attempts=2, backoff=NO_BACKOFF)
        jobs = queue.enqueue_many([{"n": n} for n in range(12)])
        flaky = queue.enqueue("flaky")
        perm = queue.enqueue("perm")

        async def handler(job: Any) -> Any:
            await asyncio.sleep(0)
            if job.payload == "flaky":
                raise ValueError("always")
            if job.payload == "perm":
                raise PermanentError("never")
            return job.payload["n"] * 10

        stats = Worker(queue, handler, concurrency=4, idle_timeout=0.5, poll_interval=0.05,
                       handle_signals=False).run()
        self.assertEqual(stats.to_dict(), {"leased": 15, "succeeded": 12, "failed": 1, "dead": 2, "lost_leases": 0})
        self.assertEqual([queue.get(j.id).result for j in jobs], [n * 10 for n in range(12)])
        self.assertEqual(queue.get(flaky.id).last_error, "ValueError: always")
        self.assertEqual((queue.get(perm.id).state, queue.get(perm.id).attempts), (JobState.DEAD, 1))

    def test_a_result_that_cannot_be_stored_ends_the_job_dead_without_a_retry(self) -> None:
        for concurrency in (1, 4):
            with self.subTest(concurrency=concurrency):
                queue = self.open_queue(fresh_name("worker"), max_attempts=5, backoff=NO_BACKOFF)
                check_unstorable_results(self, queue, concurrency)

    def test_a_failing_handlers_traceback_is_kept_and_logged(self) -> None:
        check_tracebacks(self, self.open_queue(fresh_name("worker"), backoff=BackoffPolicy(base=60)))

    def test_heartbeat_keeps_the_lease(self) -> None:
        name = fresh_name("worker")
        queue = self.open_queue(name, visibility_timeout=1.0)
        job = queue.enqueue("long")
        started, release = threading.Event(), threading.Event()

        def handler(job: Any) -> str:
            started.set()
            release.wait(PATIENCE)
            return "kept"

        run = ThreadedRun(Worker(queue, handler, max_jobs=1))
        self.assertTrue(started.wait(PATIENCE))
        time.sleep(2.5)  # a real deadline must pass: 2.5 visibility timeouts
        other = self.open_queue(name)
        self.assertEqual(other.lease(), [], "the job was delivered a second time")
        release.set()
        run.join(self)
        assert run.stats is not None
        self.assertEqual((run.stats.succeeded, run.stats.lost_leases), (1, 0))
        self.assertEqual((queue.get(job.id).attempts, queue.get(job.id).result), (1, "kept"))


# ---------------------------------------------------------------- real processes
WORKER_SCRIPT = r"""
import json, logging, os, sys, time
from nobroker import Queue, Worker

queue_dir, marks, mode, visibility = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
poll_interval = float(sys.argv[5]) if len(sys.argv) > 5 else 0.05
logging.basicConfig(filename=os.path.join(marks, "worker.log"), level=logging.INFO,
                    format="%(levelname)s %(name)s %(message)s")

def handler(job):
    open(os.path.join(marks, "started-" + job.id), "w").close()
    if mode == "block":
        time.sleep(120)
    while not os.path.exists(os.path.join(marks, "go")):
        time.sleep(0.01)
    return {"finished": job.payload}

queue = Queue(queue_dir, visibility_timeout=visibility)
try:
    stats = Worker(queue, handler, poll_interval=poll_interval).run()
except KeyboardInterrupt:
    sys.exit(130)
finally:
    queue.close()
print(json.dumps(stats.to_dict()))
"""


class ProcessTests(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.queue_dir = os.path.join(self.dir, "q")
        self.marks = os.path.join(self.dir, "marks")
        os.mkdir(self.marks)
        self.script = os.path.join(self.dir, "worker_script.py")
        with open(self.script, "w", encoding="utf-8") as fh:
            fh.write(WORKER_SCRIPT)
        self.queue = Queue(self.queue_dir)
        self.addCleanup(self.queue.close)

    def start_worker(self, mode: str, visibility: float, poll_interval: float = 0.05) -> subprocess.Popen[str]:
        env = dict(os.environ, PYTHONPATH=SRC_DIR)
        child = subprocess.Popen(
            [sys.executable, self.script, self.queue_dir, self.marks, mode, str(visibility), str(poll_interval)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

        def reap() -> None:
            if child.poll() is None:
                child.kill()
            child.communicate()

        self.addCleanup(reap)
        return child

    def mark(self, name: str) -> str:
        return os.path.join(self.marks, name)

    def wait_for_log(self, text: str) -> bool:
        def found() -> bool:
            try:
                with open(self.mark("worker.log"), encoding="utf-8") as fh:
                    return text in fh.read()
            except FileNotFoundError:
                return False

        return wait_until(found, PATIENCE, 0.02)

    def test_sigterm_lets_the_running_job_finish_and_ack(self) -> None:
        first = self.queue.enqueue("first", job_id="first")
        second = self.queue.enqueue("second", job_id="second")
        child = self.start_worker("wait-go", visibility=30.0)
        self.assertTrue(wait_until(lambda: os.path.exists(self.mark("started-first")), PATIENCE))
        child.send_signal(signal.SIGTERM)
        self.assertTrue(self.wait_for_log("signal received"))
        open(self.mark("go"), "w").close()
        out, err = child.communicate(timeout=PATIENCE)
        self.assertEqual(child.returncode, 0, err)
        self.assertEqual(json.loads(out)["succeeded"], 1)
        self.assertEqual(self.queue.get(first.id).state, JobState.DONE)
        self.assertEqual(self.queue.get(first.id).result, {"finished": "first"})
        self.assertEqual((self.queue.get(second.id).state, self.queue.get(second.id).attempts), (JobState.READY, 0))

    def test_second_sigint_exits_at_once_and_leaves_the_lease_to_expire(self) -> None:
        job = self.queue.enqueue("stuck", job_id="stuck")
        child = self.start_worker("block", visibility=30.0)
        self.assertTrue(wait_until(lambda: os.path.exists(self.mark("started-stuck")), PATIENCE))
        child.send_signal(signal.SIGINT)
        self.assertTrue(self.wait_for_log("signal received"))
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=PATIENCE)
        self.assertEqual(child.returncode, 130, err)
        stored = self.queue.get(job.id)
        self.assertEqual((stored.state, stored.attempts), (JobState.LEASED, 1))

    def test_an_idle_worker_is_woken_by_a_job_from_another_process(self) -> None:
        # A poll interval far longer than the test may take: only the wake-up can start the job.
        child = self.start_worker("wait-go", visibility=30.0, poll_interval=LONG_POLL)
        self.assertTrue(self.wait_for_log("started"))
        time.sleep(0.3)  # idle now, blocked in its wait
        job = self.queue.enqueue("wake up", job_id="woken")
        self.assertTrue(wait_until(lambda: os.path.exists(self.mark("started-woken")), PATIENCE))
        open(self.mark("go"), "w").close()
        self.assertTrue(wait_until(lambda: self.queue.get(job.id).state is JobState.DONE, PATIENCE))
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=PATIENCE)
        self.assertEqual(child.returncode, 0, err)
        self.assertEqual(json.loads(out)["succeeded"], 1)

    def test_sigterm_stops_an_idle_worker_at_once(self) -> None:
        child = self.start_worker("wait-go", visibility=30.0, poll_interval=LONG_POLL)
        self.assertTrue(self.wait_for_log("started"))
        time.sleep(0.3)  # idle now, blocked in its wait
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=PATIENCE)
        self.assertEqual(child.returncode, 0, err)
        self.assertEqual(json.loads(out)["leased"], 0)
        self.assertIn("signal received", open(self.mark("worker.log"), encoding="utf-8").read())

    def test_sigkilled_worker_job_comes_back_after_one_visibility_timeout(self) -> None:
        job = self.queue.enqueue("resume me", job_id="resume")
        child = self.start_worker("block", visibility=1.0)
        self.assertTrue(wait_until(lambda: os.path.exists(self.mark("started-resume")), PATIENCE))
        child.kill()
        child.wait(PATIENCE)
        killed_at = time.monotonic()
        payloads: list[Any] = []
        stats = Worker(
            self.queue, lambda job: payloads.append(job.payload) or "resumed",
            max_jobs=1, idle_timeout=PATIENCE, poll_interval=0.05, handle_signals=False,
        ).run()
        self.assertLess(time.monotonic() - killed_at, PATIENCE)
        self.assertEqual((stats.succeeded, payloads), (1, ["resume me"]))
        stored = self.queue.get(job.id)
        self.assertEqual((stored.state, stored.attempts, stored.result), (JobState.DONE, 2, "resumed"))


if __name__ == "__main__":
    unittest.main()
