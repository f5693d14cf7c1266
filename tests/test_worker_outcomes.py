"""The Worker's outcomes: a result stored, a failure retried then dead-lettered, a permanent error, on_job.

Owns: ``OutcomeTests``: what each outcome of a handler does to its job (the
ack and its result, a retry with the error text after the backoff, the
traceback kept, a PermanentError, a result that cannot be stored), the
``on_job`` reports, and ``kinds``. Imports: the standard library, the public
``nobroker`` API (and nobroker.worker's JobReport) and tests.workersupport.
A real file queue in a temp folder; real threads.
"""

from __future__ import annotations

import os
import time
import unittest
from typing import Any

from nobroker import BackoffPolicy, JobState, PermanentError, Queue, Worker
from nobroker.worker import JobReport
from tests.workersupport import NO_BACKOFF, QueueTestCase, check_tracebacks, check_unstorable_results


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


if __name__ == "__main__":
    unittest.main()
