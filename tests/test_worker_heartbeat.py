"""The Worker's heartbeat: a long handler keeps its lease; a lease lost to expiry or to an operator is counted.

Owns: ``HeartbeatTests``. Imports: the standard library, the public
``nobroker`` API, tests.support and tests.workersupport. Real deadlines
pass (a visibility timeout of one second) while real threads run.
"""

from __future__ import annotations

import threading
import time
import unittest
from typing import Any

from nobroker import JobState, Worker
from tests.support import ThreadedRun, wait_until
from tests.workersupport import PATIENCE, QueueTestCase


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


if __name__ == "__main__":
    unittest.main()
