"""Async handlers: one event loop, at most ``concurrency`` coroutines at once, no thread per job.

Owns: ``AsyncHandlerTests``: results and failures of ``async def`` handlers
and of handlers that return an awaitable, fifty running together as tasks
(their acks shared through ack_many, no storage call on the loop's thread),
and a hard stop that cancels them. Imports: the standard library, the public
``nobroker`` API, tests.semantics_control (sleep_until_cancelled) and
tests.workersupport.
"""

from __future__ import annotations

import asyncio
import threading
import unittest
from typing import Any

from nobroker import BackoffPolicy, JobState, PermanentError, Worker
from tests.semantics_control import sleep_until_cancelled
from tests.workersupport import PATIENCE, QueueTestCase


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


if __name__ == "__main__":
    unittest.main()
