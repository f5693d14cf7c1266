"""The Worker relies on nothing but the queue API: a minimal fake queue, the protocol, storage errors.

Owns: ``FakeQueueTests`` (``MinimalQueue``, a fake with only lease, ack, nack
and extend, into which storage errors and refused acks are injected),
``TypingTests`` (the queue parameter is the WorkQueue protocol, which Queue
satisfies) and ``StorageErrorTests`` (a queue closed under a running
worker). Imports: the standard library, the public ``nobroker`` API,
nobroker.worker's WorkQueue, tests.support and tests.workersupport.
"""

from __future__ import annotations

import inspect
import threading
import time
import types
import typing
import unittest
from collections import deque
from typing import Any

from nobroker import NotLeasedError, PermanentError, Queue, QueueClosedError, StorageError, Worker
from tests.support import ThreadedRun, wait_until
from tests.workersupport import PATIENCE, QueueTestCase


class StorageErrorTests(QueueTestCase):
    def test_queue_closed_under_a_running_worker_is_raised_from_run(self) -> None:
        queue = self.open_queue()
        queue.enqueue_many(["a", "b"])

        def handler(job: Any) -> None:
            queue.close()

        with self.assertLogs("nobroker.worker", "ERROR"), self.assertRaises(QueueClosedError):
            Worker(queue, handler, concurrency=2, handle_signals=False).run()


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


if __name__ == "__main__":
    unittest.main()
