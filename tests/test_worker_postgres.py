"""The same Worker on the PostgreSQL storage: outcomes under concurrent handlers, tracebacks, the heartbeat.

Owns: ``PostgresWorkerTests`` (skipped without a server, failed in CI).
Imports: the standard library, the public ``nobroker`` API, tests.pgsupport,
tests.support and tests.workersupport (the checks shared with the file
storage's tests/test_worker_outcomes.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
import unittest
from typing import Any

from nobroker import BackoffPolicy, JobState, PermanentError, Queue, Worker
from tests.pgsupport import PostgresTestCase, fresh_name
from tests.support import ThreadedRun
from tests.workersupport import NO_BACKOFF, PATIENCE, check_tracebacks, check_unstorable_results


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


if __name__ == "__main__":
    unittest.main()
