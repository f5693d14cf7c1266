"""One job at a time: the handler thread leases its next job itself, on both storages.

Owns: ``ChainChecks`` (a Worker with one slot, over a queue whose ``lease``
records the thread that called it) and its two runs: ``FileChainTests`` and
``PostgresChainTests`` (skipped without a server, failed in CI). Imports:
the standard library, the public ``nobroker`` API, tests.pgsupport,
tests.support and tests.workersupport.
"""

from __future__ import annotations

import threading
import unittest
from typing import Any

from nobroker import JobState, PermanentError, Queue, StorageError, Worker
from tests.pgsupport import PostgresTestCase, fresh_name
from tests.support import ThreadedRun
from tests.workersupport import QueueTestCase


class ChainChecks:
    """What a one-slot Worker must do when the thread that ran a job leases the next one."""

    assertEqual: Any
    assertIsInstance: Any
    assertLogs: Any
    assertRaises: Any

    def make_queue(self) -> Queue:
        raise NotImplementedError

    def recording(self, queue: Queue) -> list[tuple[str, int]]:
        """Make ``queue.lease`` note (calling thread's name, jobs it returned) for every call."""
        calls: list[tuple[str, int]] = []
        real = queue.lease

        def lease(*args: Any, **kwargs: Any) -> Any:
            jobs = real(*args, **kwargs)
            calls.append((threading.current_thread().name, len(jobs)))
            return jobs

        queue.lease = lease  # type: ignore[method-assign]
        return calls

    def test_the_handler_thread_leases_the_next_job_itself(self) -> None:
        queue = self.make_queue()
        queue.enqueue_many(list(range(5)))
        calls = self.recording(queue)
        ran: list[str] = []
        stats = Worker(queue, lambda job: ran.append(threading.current_thread().name), concurrency=1, max_jobs=5,
                       handle_signals=False, name="w").run()  # fmt: skip
        self.assertEqual(stats.succeeded, 5)
        self.assertEqual(queue.stats().done, 5)
        self.assertEqual(set(ran), {"w-handler-0"})
        self.assertEqual(calls[0], (threading.current_thread().name, 1), "the leasing loop leases the first job")
        self.assertEqual(calls[1:], [("w-handler-0", 1)] * 4, "each next job is leased by the thread that ran the last")

    def test_max_jobs_counts_the_leases_of_the_handler_thread(self) -> None:
        queue = self.make_queue()
        jobs = queue.enqueue_many(list(range(6)))
        calls = self.recording(queue)
        stats = Worker(queue, lambda job: None, concurrency=1, max_jobs=3, handle_signals=False).run()
        self.assertEqual((stats.leased, stats.succeeded), (3, 3))
        self.assertEqual(sum(count for _, count in calls), 3, "no job leased past max_jobs")
        self.assertEqual([queue.get(job.id).state for job in jobs], [JobState.DONE] * 3 + [JobState.READY] * 3)

    def test_a_stop_from_the_handler_leases_nothing_more(self) -> None:
        queue = self.make_queue()
        jobs = queue.enqueue_many(list(range(5)))
        worker: Worker

        def handler(job: Any) -> None:
            if job.payload == 1:
                worker.stop()

        worker = Worker(queue, handler, concurrency=1, handle_signals=False)
        stats = worker.run()
        self.assertEqual((stats.leased, stats.succeeded), (2, 2))
        self.assertEqual([queue.get(job.id).state for job in jobs], [JobState.DONE] * 2 + [JobState.READY] * 3)

    def test_after_a_failed_job_the_leasing_loop_takes_the_slot_back(self) -> None:
        queue = self.make_queue()
        jobs = queue.enqueue_many(["ok", "bad", "ok", "ok"])
        calls = self.recording(queue)

        def handler(job: Any) -> None:
            if job.payload == "bad":
                raise PermanentError("no")

        stats = Worker(queue, handler, concurrency=1, max_jobs=4, handle_signals=False, name="w").run()
        self.assertEqual(stats.to_dict(), {"leased": 4, "succeeded": 3, "failed": 0, "dead": 1, "lost_leases": 0})
        self.assertEqual([queue.get(job.id).state for job in jobs],
                         [JobState.DONE, JobState.DEAD, JobState.DONE, JobState.DONE])  # fmt: skip
        main = threading.current_thread().name
        # The job after the failed one is leased by the leasing loop; the one after it, by the handler thread again.
        self.assertEqual([name for name, _ in calls], [main, "w-handler-0", main, "w-handler-0"])

    def test_a_storage_error_in_the_handler_threads_lease_is_raised_from_run(self) -> None:
        queue = self.make_queue()
        first, *rest = queue.enqueue_many(list(range(3)))
        real = queue.lease
        threads: list[str] = []

        def lease(*args: Any, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            if len(threads) == 2:
                raise StorageError("No space left on device", errno=28, path="/q/default.000000.log")
            return real(*args, **kwargs)

        queue.lease = lease  # type: ignore[method-assign]
        worker = Worker(queue, lambda job: "done", concurrency=1, handle_signals=False, name="w")
        with self.assertLogs("nobroker.worker", "ERROR"), self.assertRaises(StorageError):
            worker.run()
        self.assertEqual(threads, [threading.current_thread().name, "w-handler-0"], "nothing leased after the error")
        self.assertEqual((worker.stats.leased, worker.stats.succeeded), (1, 1))
        self.assertEqual(queue.get(first.id).result, "done", "the job that ran was acked before run() raised")
        self.assertEqual([queue.get(job.id).state for job in rest], [JobState.READY] * 2)

    def test_a_bug_after_the_handler_threads_lease_frees_its_slot_and_stops_the_worker(self) -> None:
        queue = self.make_queue()
        queue.enqueue_many(list(range(3)))
        worker = Worker(queue, lambda job: None, concurrency=1, handle_signals=False)
        leases = worker._leases  # type: ignore[attr-defined]
        real = leases.entries
        calls: list[int] = []

        def entries(*args: Any) -> Any:
            calls.append(1)
            if len(calls) == 2:  # the handler thread's own lease: a bug after the job was leased
                raise RuntimeError("a bug")
            return real(*args)

        leases.entries = entries
        with self.assertLogs("nobroker.worker", "ERROR"):
            run = ThreadedRun(worker)
            run.join(self)  # a slot kept for a job that never came would hold the drain for ever
        self.assertIsInstance(run.error, RuntimeError)
        self.assertEqual(worker.stats.succeeded, 1)


class FileChainTests(ChainChecks, QueueTestCase):
    def make_queue(self) -> Queue:
        return self.open_queue()


class PostgresChainTests(ChainChecks, PostgresTestCase):
    def make_queue(self) -> Queue:
        queue = Queue(self.dsn, fresh_name("chain"), schema=self.schema)
        self.addCleanup(queue.close)
        return queue


del ChainChecks  # only its two runs are tests

if __name__ == "__main__":
    unittest.main()
