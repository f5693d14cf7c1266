"""The storage-independent tests of time limits (issue 15): a job's timeout, the Worker's, and what ends an attempt.

Owns: ``TimeoutSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks it uses: ``make_queue``, ``reopen``,
``advance``). Real handlers run past real limits on threads, on the event
loop and in a process pool; every test waits for the handler to have started
(an Event, or a marker file from a forked process) before it expects
anything, and every wait is generous. Imports: the standard library and the
public ``nobroker`` API only.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nobroker import Job, JobNotFoundError, JobState, NotLeasedError, Queue, Worker
from tests.semantics_control import sleep_until_cancelled, wait_until

if TYPE_CHECKING:
    import unittest

    _Base = unittest.TestCase
else:
    _Base = object

#: Generous bound for a Worker to reach a point the test waits for (never a timing claim).
WAIT_SECONDS = 30.0
#: The limit the Worker tests give a handler that would otherwise run for WAIT_SECONDS.
LIMIT = 0.5
#: What an attempt past LIMIT fails with.
TIMED_OUT = "timed out after 0.5 s"


class TimeoutSemantics(_Base):
    """Time limits: what each storage stores, and what a Worker does at a limit, through the public Queue only."""

    # The storage's class has these hooks (see QueueSemantics).
    make_queue: Callable[..., Queue]
    reopen: Callable[[Queue], Queue]
    advance: Callable[[float], None]

    def _run_in_thread(self, worker: Worker) -> list[Any]:
        results: list[Any] = []
        thread = threading.Thread(target=lambda: results.append(worker.run()))
        thread.start()
        self.addCleanup(thread.join, WAIT_SECONDS)
        self.addCleanup(worker.stop)
        return results

    # ------------------------------------------------------------ stored with the job
    def test_a_jobs_timeout_is_stored_and_kept(self) -> None:
        q = self.make_queue()
        own = q.enqueue("limited", timeout=2.5)
        plain = q.enqueue("plain")
        batch = q.enqueue_many(["b1", "b2"], timeout=7)
        self.assertEqual((own.timeout, plain.timeout, [j.timeout for j in batch]), (2.5, None, [7.0, 7.0]))
        self.assertEqual(own.to_dict()["timeout"], 2.5)
        self.assertNotIn("timeout", plain.to_dict(), "a job without a limit keeps the older dict shape")
        q = self.reopen(q)
        self.assertEqual(q.get(own.id).timeout, 2.5)
        self.assertIsNone(q.get(plain.id).timeout)
        leased = {job.id: job for job in q.lease(10)}
        self.assertEqual(leased[batch[1].id].timeout, 7.0, "a lease hands the limit to the worker")
        q.compact()
        q = self.reopen(q)
        self.assertEqual([q.get(j.id).timeout for j in (own, plain, *batch)], [2.5, None, 7.0, 7.0])

    def test_a_bad_timeout_is_refused_before_anything_is_written(self) -> None:
        q = self.make_queue()
        for bad in (0, -1, float("nan"), float("inf"), 10**400):
            with self.assertRaises(ValueError, msg=repr(bad)):
                q.enqueue("x", timeout=bad)
            with self.assertRaises(ValueError, msg=repr(bad)):
                q.enqueue_many(["x", "y"], timeout=bad)
        for wrong in ("1", True, [1]):
            with self.assertRaises(TypeError, msg=repr(wrong)):
                q.enqueue("x", timeout=wrong)  # type: ignore[arg-type]
        self.assertEqual(len(q), 0)
        for bad in (0, -1, float("nan"), "1"):
            with self.assertRaises(ValueError, msg=repr(bad)):
                Worker(q, lambda job: None, timeout=bad)  # type: ignore[arg-type]

    # ------------------------------------------------------------ the Worker at a limit
    def test_a_thread_past_its_limit_is_abandoned_and_its_late_ack_refused(self) -> None:
        q = self.make_queue(visibility_timeout=60)
        stuck = q.enqueue("stuck", timeout=LIMIT, max_attempts=1)
        after = q.enqueue("after")
        started, release = threading.Event(), threading.Event()
        late: list[BaseException] = []
        self.addCleanup(release.set)

        def handler(job: Job) -> str:
            if job.payload != "stuck":
                return "ran"
            started.set()
            release.wait(WAIT_SECONDS)  # a thread nobody can stop
            try:
                q.ack(job)
            except Exception as exc:
                late.append(exc)
            return "too late"

        worker = Worker(q, handler, concurrency=1, max_jobs=2, handle_signals=False, poll_interval=0.01)
        results = self._run_in_thread(worker)
        self.assertTrue(started.wait(WAIT_SECONDS))
        wait_until(lambda: q.get(stuck.id).state is JobState.DEAD, "the timed-out attempt to end")
        self.assertEqual(q.get(stuck.id).last_error, TIMED_OUT)
        wait_until(lambda: q.get(after.id).state is JobState.DONE, "the next job, on a new thread")
        self.assertFalse(release.is_set(), "the stuck handler was still running meanwhile")
        wait_until(lambda: bool(results), "run() to return with the stuck thread abandoned")
        (stats,) = results
        self.assertEqual((stats.dead, stats.succeeded, stats.timed_out, stats.abandoned), (1, 1, 1, 1))
        self.assertEqual(stats.to_dict()["abandoned"], 1)
        release.set()
        wait_until(lambda: bool(late), "the abandoned handler's own ack")
        self.assertIsInstance(late[0], NotLeasedError, "the job was nacked under its token")
        self.assertIs(q.get(stuck.id).state, JobState.DEAD)
        self.assertIsNone(q.get(stuck.id).result, "nothing the abandoned thread returned was stored")

    def test_a_timed_out_attempt_backs_off_and_is_retried(self) -> None:
        q = self.make_queue(visibility_timeout=60)
        job = q.enqueue("slow once", timeout=LIMIT, max_attempts=3)
        started, release = threading.Event(), threading.Event()
        self.addCleanup(release.set)

        def handler(job: Job) -> str:
            if job.attempts == 1:
                started.set()
                release.wait(WAIT_SECONDS)
            return f"attempt {job.attempts}"

        worker = Worker(q, handler, max_jobs=1, handle_signals=False, poll_interval=0.01)
        results = self._run_in_thread(worker)
        self.assertTrue(started.wait(WAIT_SECONDS))
        wait_until(lambda: bool(results), "the attempt to time out")
        back = q.get(job.id)
        self.assertEqual((back.state, back.attempts, back.last_error), (JobState.READY, 1, TIMED_OUT))
        self.assertEqual(results[0].failed, 1)
        self.advance(600)  # past any backoff
        stats = Worker(q, handler, max_jobs=1, handle_signals=False, poll_interval=0.01).run()
        self.assertEqual(stats.succeeded, 1)
        self.assertEqual(q.get(job.id).result, "attempt 2")

    def test_an_async_handler_past_the_workers_limit_is_cancelled_and_a_jobs_own_limit_wins(self) -> None:
        q = self.make_queue(visibility_timeout=60)
        endless = q.enqueue("endless", max_attempts=1)
        patient = q.enqueue("patient", timeout=WAIT_SECONDS)
        started, cancelled = threading.Event(), threading.Event()

        async def handler(job: Job) -> str:
            if job.payload == "patient":
                await asyncio.sleep(LIMIT * 3)  # past the Worker's limit, well within its own
                return "patient done"
            await sleep_until_cancelled(started, cancelled)
            return "never"

        worker = Worker(q, handler, concurrency=2, max_jobs=2, timeout=LIMIT, handle_signals=False, poll_interval=0.01)
        self.assertEqual(worker.timeout, LIMIT)
        results = self._run_in_thread(worker)
        self.assertTrue(started.wait(WAIT_SECONDS))
        self.assertTrue(cancelled.wait(WAIT_SECONDS), "the task was cancelled at the limit")
        wait_until(lambda: bool(results), "run() to return")
        self.assertEqual((q.get(endless.id).state, q.get(endless.id).last_error), (JobState.DEAD, TIMED_OUT))
        self.assertEqual(q.get(patient.id).result, "patient done")
        (stats,) = results
        self.assertEqual((stats.dead, stats.succeeded, stats.timed_out, stats.abandoned), (1, 1, 1, 0))

    def test_a_handler_within_its_limit_is_untouched(self) -> None:
        q = self.make_queue()
        jobs = q.enqueue_many(list(range(5)), timeout=WAIT_SECONDS)
        stats = Worker(q, lambda job: job.payload * 2, concurrency=2, max_jobs=5, handle_signals=False).run()
        self.assertEqual((stats.succeeded, stats.timed_out), (5, 0))
        self.assertNotIn("timed_out", stats.to_dict())
        self.assertEqual([q.get(j.id).result for j in jobs], [0, 2, 4, 6, 8])

    def test_a_pool_process_past_its_limit_is_replaced(self) -> None:
        if not hasattr(os, "fork"):
            self.skipTest("processes= needs os.fork")
        marks = tempfile.mkdtemp(prefix="nobroker-marks-")
        self.addCleanup(shutil.rmtree, marks, True)
        q = self.make_queue(visibility_timeout=60)
        # The test looks through a handle of its own: the pool forks while it looks, and a
        # child must not inherit the Worker's queue object with a lock held by this thread.
        watch = self.make_queue(visibility_timeout=60)
        stuck = watch.enqueue("stuck", max_attempts=1)
        quick = watch.enqueue_many(["quick"] * 3)

        def handler(job: Job) -> int:  # runs in a forked child: it tells the test through files
            with open(os.path.join(marks, f"{job.payload}-{job.id}-{os.getpid()}"), "w"):
                pass
            if job.payload == "stuck":
                time.sleep(WAIT_SECONDS * 2)
            return os.getpid()

        worker = Worker(q, handler, processes=1, timeout=LIMIT, handle_signals=False, poll_interval=0.05)
        self._run_in_thread(worker)
        wait_until(lambda: any(n.startswith("stuck-") for n in os.listdir(marks)), "the stuck handler to start")
        (mark,) = [n for n in os.listdir(marks) if n.startswith("stuck-")]
        stuck_pid = int(mark.rsplit("-", 1)[1])
        wait_until(lambda: watch.get(stuck.id).state is JobState.DEAD, "the timed-out attempt to end")
        self.assertEqual(watch.get(stuck.id).last_error, TIMED_OUT)
        wait_until(lambda: all(watch.get(j.id).state is JobState.DONE for j in quick), "the quick jobs")
        wait_until(lambda: worker.processes_replaced == 1, "the pool to replace the process")

        def gone() -> bool:
            try:
                os.kill(stuck_pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_until(gone, "the process with the stuck thread to end")
        self.assertNotIn(stuck_pid, {watch.get(j.id).result for j in quick}, "a new process ran the rest")
        wait_until(lambda: worker.stats.timed_out == 1 and worker.stats.abandoned == 1, "its counts to reach the pool")

    # ------------------------------------------------------------ attempt history
    def test_each_attempt_is_recorded_with_its_worker_times_and_outcome(self) -> None:
        q = self.make_queue(visibility_timeout=60, max_attempts=5)
        job = q.enqueue("tried")
        self.assertNotIn("attempt_history", job.to_dict(), "a job never leased keeps the older dict shape")
        first = q.lease_one()
        assert first is not None
        (running,) = first.attempt_history
        self.assertEqual((running["attempt"], running["outcome"], running["finished"]), (1, "running", None))
        self.assertTrue(running["by"].endswith(f":{os.getpid()}"), running)
        self.advance(2)
        q.nack(first, error="boom", delay=0)
        second = q.lease_one()
        assert second is not None
        q.ack(second)
        done = q.get(job.id).attempt_history
        self.assertEqual([(a["attempt"], a["outcome"]) for a in done], [(1, "failed"), (2, "done")])
        self.assertGreaterEqual(done[0]["finished"], done[0]["started"] + 2 - getattr(self, "time_slack", 0))
        self.assertAlmostEqual(done[0]["seconds"], done[0]["finished"] - done[0]["started"], places=5)
        self.assertLessEqual(done[0]["finished"], done[1]["started"])
        self.assertEqual(q.get(job.id).to_dict()["attempt_history"], [dict(a) for a in done])
        q = self.reopen(q)
        self.assertEqual(q.get(job.id).attempt_history, done)

    def test_dead_expired_and_cancelled_attempts(self) -> None:
        q = self.make_queue(visibility_timeout=5, max_attempts=2)
        dies, expires, cancelled = q.enqueue("dies", max_attempts=1), q.enqueue("expires"), q.enqueue("cancelled")
        leased = {job.payload: job for job in q.lease(3)}
        q.nack(leased["dies"], error="fatal")
        q.cancel(leased["cancelled"], stopped=True)
        deadline = leased["expires"].lease_deadline
        self.advance(10)
        shown = q.get(expires.id).attempt_history  # before any write: as the reclaim will record it
        self.assertEqual([(a["outcome"], a["finished"]) for a in shown], [("expired", deadline)])
        q.lease(0)
        q.stats()
        self.assertEqual(q.enqueue("a write").state, JobState.READY)  # every write reclaims first
        self.assertEqual(q.get(expires.id).attempt_history, shown, "the reclaim recorded what the read showed")
        self.assertEqual([a["outcome"] for a in q.get(dies.id).attempt_history], ["dead"])
        self.assertEqual([a["outcome"] for a in q.get(cancelled.id).attempt_history], ["cancelled"])

    def test_the_history_keeps_the_last_attempts_only_and_survives_compaction(self) -> None:
        from nobroker.jobs import MAX_ATTEMPT_HISTORY

        q = self.make_queue(visibility_timeout=60)
        job = q.enqueue("again and again", max_attempts=MAX_ATTEMPT_HISTORY + 10)
        for _ in range(MAX_ATTEMPT_HISTORY + 5):
            leased = q.lease_one()
            assert leased is not None and leased.id == job.id
            q.nack(leased, error="again", delay=0)
        history = q.get(job.id).attempt_history
        self.assertEqual(len(history), MAX_ATTEMPT_HISTORY)
        self.assertEqual([a["attempt"] for a in history], list(range(6, MAX_ATTEMPT_HISTORY + 6)))
        running = q.lease_one()
        assert running is not None
        self.assertEqual(len(running.attempt_history), MAX_ATTEMPT_HISTORY)
        self.assertEqual(running.attempt_history[-1]["outcome"], "running")
        q.compact()
        q = self.reopen(q)
        again = q.get(job.id).attempt_history
        self.assertEqual(again, running.attempt_history, "compaction keeps the history and the running attempt")
        q.ack(running)
        self.assertEqual(q.get(job.id).attempt_history[-1]["outcome"], "done")

    # ------------------------------------------------------------ explain
    def test_explain_gives_the_chain_of_reasons(self) -> None:
        q = self.make_queue(visibility_timeout=30, max_attempts=2)
        first = q.enqueue("first", kind="mail")
        later = q.enqueue("later", kind="mail")
        urgent = q.enqueue("urgent", kind="mail", priority=5)
        other = q.enqueue("other kind", kind="report")
        delayed = q.enqueue("delayed", delay=600)

        def codes(job: Any) -> list[str]:
            return [reason.code for reason in q.explain(job)]

        self.assertEqual(codes(urgent), ["first_in_line"])
        self.assertEqual(codes(other), ["first_in_line"], "only jobs of its own kind are ahead")
        (ahead,) = q.explain(later)
        self.assertEqual((ahead.code, ahead.facts["ahead"]), ("work_ahead", 2))
        self.assertIn("2 ready job(s) of kind 'mail'", ahead)
        self.assertEqual(codes(first), ["work_ahead"])
        self.assertEqual(codes(delayed), ["delayed"])
        self.assertTrue(q.explain(delayed)[0].startswith("delayed until "))

        leased = q.lease_one(kinds=["mail"])
        assert leased is not None and leased.id == urgent.id
        reasons = q.explain(leased)
        self.assertEqual(reasons[0].code, "leased")
        self.assertIn(f"with token {leased.lease_token}", reasons[0])
        self.assertIn(f":{os.getpid()} (attempt 1 of 2)", reasons[0])
        self.assertEqual(codes(later), ["work_ahead"], "the leased job is no longer ahead")
        q.cancel(leased.id)
        self.assertIn("cancel_requested", codes(leased))
        q.cancel(leased, stopped=True)
        self.assertEqual(codes(leased), ["cancelled"])

        failing = q.lease_one(kinds=["mail"])
        assert failing is not None
        q.nack(failing, error="smtp down\ntraceback follows", delay=120)
        (backing_off,) = q.explain(failing.id)
        self.assertEqual(backing_off.code, "backing_off")
        self.assertIn("after attempt 1 of 2 (last error: smtp down)", backing_off)
        self.advance(300)
        again = q.lease_one(kinds=["mail"])
        assert again is not None and again.id == failing.id
        q.nack(again, error="still down")
        self.assertEqual(codes(again), ["dead"])
        self.assertIn("dead after 2 attempt(s) of 2 (last error: still down)", q.explain(again)[0])

        expiring = q.lease_one(kinds=["mail"])
        assert expiring is not None
        self.advance(60)  # past its deadline: a read shows it as the reclaim will record it
        reasons = q.explain(expiring)
        self.assertEqual([r.code for r in reasons], ["last_attempt_expired", "first_in_line"])
        self.assertIn("expired at", reasons[0])
        done = q.lease_one(kinds=["mail"])
        assert done is not None
        q.ack(done)
        self.assertEqual(codes(done), ["done"])
        with self.assertRaises(JobNotFoundError):
            q.explain("no-such-job")

    def test_explain_names_the_limit_that_holds_a_ready_job_back(self) -> None:
        q = self.make_queue(visibility_timeout=60)
        q.set_limit("mail", concurrency=1)
        running, waiting = q.enqueue("running", kind="mail"), q.enqueue("waiting", kind="mail")
        other = q.enqueue("other kind", kind="sms")
        self.assertEqual([r.code for r in q.explain(waiting)], ["work_ahead"], "a free slot holds nothing back")
        leased = q.lease_one(kinds=["mail"])
        assert leased is not None and leased.id == running.id
        (held,) = q.explain(waiting)
        self.assertEqual((held.code, held.facts["kind"]), ("limit", "mail"))
        self.assertIn("held back by the concurrency limit of kind 'mail': 1 of 1 allowed are leased", held)
        self.assertEqual([r.code for r in q.explain(other)], ["first_in_line"], "a limit holds only its own kind")
        q.ack(leased)
        self.assertEqual([r.code for r in q.explain(waiting)], ["first_in_line"], "the slot freed")

        q.set_limit("api", rate=1, per=3600.0, burst=1)
        first, second = q.enqueue("first", kind="api"), q.enqueue("second", kind="api")
        took = q.lease_one(kinds=["api"])
        assert took is not None and took.id == first.id
        q.ack(took)
        (rated,) = q.explain(second)
        self.assertEqual(rated.code, "limit")
        self.assertIn("held back by the rate limit of kind 'api': 1 per 3600 s is spent", rated)
        q.clear_limit("api")
        self.assertEqual([r.code for r in q.explain(second)], ["first_in_line"], "no limit, nothing held back")

    def test_a_worker_that_abandoned_too_many_threads_stops(self) -> None:
        from unittest import mock

        q = self.make_queue(visibility_timeout=60)
        q.enqueue_many(["stuck"] * 3, timeout=LIMIT)
        release = threading.Event()
        self.addCleanup(release.set)
        with mock.patch("nobroker.worker.timeouts.MAX_ABANDONED_THREADS", 2):
            worker = Worker(q, lambda job: release.wait(WAIT_SECONDS), concurrency=1, handle_signals=False)
            with self.assertRaisesRegex(RuntimeError, "2 handler threads were abandoned"):
                worker.run()
        self.assertEqual((worker.stats.timed_out, worker.stats.abandoned), (2, 2))
        self.assertEqual(len(q.list_jobs("ready")), 3, "two timed out (back for a retry), one never leased")
