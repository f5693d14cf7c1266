"""The storage-independent tests of control of jobs, part two (issue 15): snooze, pause, run_now, delete, wait.

Owns: ``Control2Semantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks it uses: ``make_queue``, ``reopen``,
``advance``, ``now``). Imports: the standard library and the public
``nobroker`` API only.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from nobroker import (
    Job,
    JobCancelledError,
    JobFinishedError,
    JobNotFoundError,
    JobState,
    JobStateError,
    NotLeasedError,
    Queue,
    Snooze,
    Worker,
)

if TYPE_CHECKING:
    import unittest

    _Base = unittest.TestCase
else:
    _Base = object

#: Generous bound for something the test waits for (never a timing claim).
WAIT_SECONDS = 30.0
#: Snoozed for so long that the job cannot come back within a test.
LONG = 3600.0


class Control2Semantics(_Base):
    """Snooze, pause and resume, run_now, delete and wait: what each storage must do, through the public Queue only."""

    def make_queue(self, **options: Any) -> Queue:  # pragma: no cover - the storage's class has it
        raise NotImplementedError

    def reopen(self, q: Queue) -> Queue:  # pragma: no cover
        raise NotImplementedError

    def advance(self, seconds: float) -> None:  # pragma: no cover
        raise NotImplementedError

    def now(self) -> float:  # pragma: no cover
        raise NotImplementedError

    def run_bounded(self, worker: Worker) -> Any:
        """``worker.run()``, stopped and failed (never hung) if it has not finished within a generous bound."""
        results: list[Any] = []
        thread = threading.Thread(target=lambda: results.append(worker.run()))
        thread.start()
        thread.join(2 * WAIT_SECONDS)
        if thread.is_alive():
            worker.stop()
            thread.join(WAIT_SECONDS)
            self.fail("the Worker did not finish its max_jobs")
        self.assertEqual(len(results), 1, "run() returned its stats")
        return results[0]

    def lease_the_one(self, q: Queue) -> Job:
        job = q.lease_one()
        assert job is not None, "a job to lease"
        return job

    # ------------------------------------------------------------ snooze
    def test_snooze_gives_the_attempt_back_and_keeps_the_last_error(self) -> None:
        q = self.make_queue(max_attempts=2)
        q.enqueue("a")
        first = self.lease_the_one(q)
        q.nack(first, error="boom", delay=0)
        second = self.lease_the_one(q)
        self.assertEqual(second.attempts, 2)
        before = self.now()
        snoozed = q.snooze(second, 30)
        self.assertIs(snoozed.state, JobState.READY)
        self.assertEqual(snoozed.attempts, 1, "attempts as before this lease")
        self.assertEqual(snoozed.last_error, "boom")
        self.assertIsNone(snoozed.lease_token)
        self.assertGreaterEqual(snoozed.available_at, before + 30 - 1)
        stats = q.stats()
        self.assertEqual((stats.ready, stats.delayed, stats.leased, stats.dead), (0, 1, 0, 0))
        self.assertEqual(q.lease(5), [], "not before its time")
        q = self.reopen(q)
        self.assertEqual(q.get(snoozed.id).attempts, 1)
        self.advance(31)
        again = self.lease_the_one(q)
        self.assertEqual(again.attempts, 2, "the last attempt is still there to spend")
        q.nack(again, error="boom again")
        self.assertIs(q.get(again.id).state, JobState.DEAD, "and then it is used up as usual")

    def test_a_snooze_ends_its_attempt_in_the_history(self) -> None:
        q = self.make_queue()
        job = q.enqueue("a")
        leased = self.lease_the_one(q)
        q.snooze(leased, 0)
        (snoozed,) = q.get(job.id).attempt_history
        self.assertEqual((snoozed["attempt"], snoozed["outcome"]), (1, "snoozed"), "the attempt that ran, ended snoozed")
        self.assertIsNotNone(snoozed["finished"])
        self.assertIn(":", snoozed["by"])
        q = self.reopen(q)
        self.assertEqual(q.get(job.id).attempt_history, (snoozed,), "durable")
        again = self.lease_the_one(q)
        self.assertEqual(again.attempts, 1, "the snooze spent no attempt")
        q.ack(again)
        q = self.reopen(q)
        self.assertEqual([(a["attempt"], a["outcome"]) for a in q.get(job.id).attempt_history], [(1, "snoozed"), (1, "done")])

    def test_explain_names_a_paused_kind_or_queue(self) -> None:
        q = self.make_queue()
        mail, other = q.enqueue("m", kind="mail"), q.enqueue("o")
        self.assertEqual([r.code for r in q.explain(mail)], ["first_in_line"])
        q.pause("mail")
        (reason,) = q.explain(mail)
        self.assertEqual((reason.code, reason.facts["kind"]), ("paused", "mail"))
        self.assertIn("its kind 'mail' is paused", reason)
        self.assertEqual([r.code for r in q.explain(other)], ["first_in_line"], "another kind is not held back")
        q.pause()
        (reason,) = q.explain(other)
        self.assertEqual(reason.code, "paused")
        self.assertIn("the whole queue is paused", reason)
        self.assertEqual([r.code for r in q.explain(mail)], ["paused"], "one reason for both pauses")
        q.resume()
        q.resume("mail")
        self.assertEqual([r.code for r in q.explain(mail)], ["first_in_line"])

    def test_snooze_for_zero_seconds_is_runnable_at_once(self) -> None:
        q = self.make_queue()
        q.enqueue("a")
        job = self.lease_the_one(q)
        self.assertEqual(q.snooze(job.id, 0).attempts, 0)
        self.assertEqual(q.stats().ready, 1)
        self.assertEqual(self.lease_the_one(q).attempts, 1)

    def test_snooze_is_refused_without_the_lease(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        ready = q.enqueue("r")
        with self.assertRaises(NotLeasedError):
            q.snooze(ready.id, 5)
        with self.assertRaises(JobNotFoundError):
            q.snooze("no-such-job", 5)
        old = self.lease_the_one(q)
        self.advance(11)
        new = self.lease_the_one(q)
        with self.assertRaises(NotLeasedError):
            q.snooze(old, 5)
        for bad in (-1, float("nan"), 10**400):
            with self.assertRaises(ValueError):
                q.snooze(new, bad)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            q.snooze(new, "5")  # type: ignore[arg-type]
        self.assertIs(q.get(new.id).state, JobState.LEASED, "a refused snooze changes nothing")
        q.cancel(new.id)
        with self.assertRaises(JobCancelledError):
            q.snooze(new, 5)
        self.assertEqual(q.get(new.id).attempts, 2)

    def test_a_handler_that_raises_snooze_is_snoozed_not_failed(self) -> None:
        for label, handler in (("threads", _snoozing), ("async", _snoozing_async)):
            with self.subTest(label):
                q = self.make_queue(name=f"snooze-{label}", max_attempts=1)
                target = q.enqueue({"snooze": LONG})
                stats = self.run_bounded(Worker(q, handler, max_jobs=1, handle_signals=False, poll_interval=0.01))
                self.assertEqual((stats.snoozed, stats.failed, stats.dead, stats.succeeded), (1, 0, 0, 0))
                self.assertEqual(stats.to_dict()["snoozed"], 1)
                job = q.get(target.id)
                self.assertEqual((job.state, job.attempts, job.last_error), (JobState.READY, 0, None))
                self.assertEqual(q.stats().delayed, 1)

    def test_a_process_pool_snoozes_too(self) -> None:
        q = self.make_queue(name="snooze-pool", max_attempts=1)
        targets = [q.enqueue({"snooze": LONG}) for _ in range(2)]
        stats = self.run_bounded(Worker(q, _snoozing, processes=2, max_jobs=2, handle_signals=False, poll_interval=0.01))
        self.assertEqual((stats.snoozed, stats.failed, stats.dead), (2, 0, 0))
        for target in targets:
            self.assertEqual(q.get(target.id).attempts, 0)

    def test_a_worker_without_snoozes_keeps_the_old_stats_shape(self) -> None:
        q = self.make_queue()
        q.enqueue("a")
        stats = self.run_bounded(Worker(q, lambda job: None, max_jobs=1, handle_signals=False, poll_interval=0.01))
        self.assertNotIn("snoozed", stats.to_dict())

    # ------------------------------------------------------------ pause and resume
    def test_pause_a_kind_stops_its_leases_and_resume_starts_them(self) -> None:
        q = self.make_queue()
        self.assertEqual(q.paused(), [])
        q.pause("mail")
        q.pause("mail")  # twice changes nothing
        self.assertEqual(q.paused(), ["mail"])
        mail = q.enqueue("m", kind="mail", priority=9)
        other = q.enqueue("o")
        self.assertEqual([j.id for j in q.lease(5)], [other.id], "the paused kind is skipped, enqueue still works")
        self.assertEqual(q.lease(5, kinds=["mail"]), [], "also for a worker of that kind")
        q = self.reopen(q)
        self.assertEqual(q.paused(), ["mail"], "stored in the queue")
        q.resume("mail")
        self.assertEqual(q.paused(), [])
        self.assertEqual([j.id for j in q.lease(5)], [mail.id])

    def test_pause_the_whole_queue_and_running_jobs_still_finish(self) -> None:
        q = self.make_queue()
        running = q.enqueue("r")
        job = self.lease_the_one(q)
        waiting = q.enqueue("w", kind="other")
        q.pause()
        self.assertEqual(q.paused(), [None])
        self.assertEqual(q.lease(5), [])
        self.assertEqual(q.lease(5, kinds=["other"]), [])
        self.assertIs(q.extend(job, 30).state, JobState.LEASED)
        q.ack(job)
        self.assertIs(q.get(running.id).state, JobState.DONE, "a running job is acked as usual")
        q.enqueue("more")
        q.pause("other")
        self.assertEqual(q.paused(), [None, "other"])
        q.resume()
        self.assertEqual(q.paused(), ["other"], "each pause is lifted by its own resume")
        self.assertEqual([j.payload for j in q.lease(5)], ["more"])
        q.resume("other")
        self.assertEqual([j.id for j in q.lease(5)], [waiting.id])

    def test_pause_holds_in_a_queue_with_limits(self) -> None:
        """A queue with limits leases under them (its own claim on PostgreSQL): paused kinds are skipped there too."""
        q = self.make_queue()
        q.set_limit("api", concurrency=5)
        q.set_limit("mail", rate=100, per=1.0)
        api = q.enqueue("a", kind="api", priority=9)
        mail = q.enqueue("m", kind="mail", priority=8)
        free = q.enqueue("f")
        q.pause("api")
        q.pause("mail")
        self.assertEqual([j.id for j in q.lease(5)], [free.id], "limited and paused: skipped")
        self.assertEqual(q.lease(5, kinds=["api", "mail"]), [])
        q.resume("mail")
        q.pause()
        self.assertEqual(q.lease(5), [], "the whole queue paused")
        q.resume()
        self.assertEqual([j.id for j in q.lease(5)], [mail.id])
        q.resume("api")
        self.assertEqual([j.id for j in q.lease(5)], [api.id])

    def test_pause_survives_compaction_and_purge(self) -> None:
        q = self.make_queue()
        q.pause("k")
        q.pause()
        q.enqueue("x")
        q.compact()
        q = self.reopen(q)
        self.assertEqual(q.paused(), [None, "k"])
        q.purge()
        self.assertEqual(q.paused(), [None, "k"], "a purge empties the jobs, not the settings")
        for bad in ("", 5):
            with self.assertRaises((TypeError, ValueError)):
                q.pause(bad)  # type: ignore[arg-type]
        self.assertEqual(q.paused(), [None, "k"])

    def test_an_idle_worker_does_not_spin_while_paused(self) -> None:
        q = self.make_queue()
        q.enqueue("held")
        q.pause()
        calls: list[float] = []
        lease = q.lease

        def counted(*args: Any, **kwargs: Any) -> list[Job]:
            calls.append(time.monotonic())
            return lease(*args, **kwargs)

        q.lease = counted  # type: ignore[method-assign]
        worker = Worker(q, lambda job: None, handle_signals=False, idle_timeout=1.0)
        stats = self.run_bounded(worker)
        self.assertEqual(stats.leased, 0)
        # A spinning worker leases thousands of times a second; an idle one waits between leases.
        self.assertLess(len(calls), 25, f"{len(calls)} leases in an idle second: the wait returned at once")
        q.lease = lease  # type: ignore[method-assign]
        q.resume()
        self.assertEqual([j.payload for j in q.lease(1)], ["held"])

    def test_resume_wakes_an_idle_worker(self) -> None:
        q = self.make_queue()
        q.pause()
        target = q.enqueue("x")
        done = threading.Event()
        worker = Worker(q, lambda job: done.set(), max_jobs=1, handle_signals=False)
        thread = threading.Thread(target=worker.run)
        thread.start()
        self.addCleanup(thread.join, WAIT_SECONDS)
        self.addCleanup(worker.stop)
        time.sleep(0.2)  # give it the chance to lease (nothing, paused) and idle; correctness does not hang on it
        self.assertFalse(done.is_set(), "nothing runs while paused")
        q.resume()
        self.assertTrue(done.wait(WAIT_SECONDS))
        thread.join(WAIT_SECONDS)
        self.assertIs(q.get(target.id).state, JobState.DONE)

    # ------------------------------------------------------------ run_now
    def test_run_now_makes_a_delayed_or_backing_off_job_runnable(self) -> None:
        q = self.make_queue()
        delayed = q.enqueue("d", delay=600)
        self.assertEqual(q.lease(5), [])
        self.assertLessEqual(q.run_now(delayed.id).available_at, self.now() + 1)
        self.assertEqual(q.stats().delayed, 0)
        self.assertEqual([j.id for j in q.lease(5)], [delayed.id])
        q.nack(delayed, error="x", delay=600)
        self.assertEqual(q.stats().delayed, 1)
        back = q.run_now(delayed)
        self.assertEqual((back.attempts, back.last_error), (1, "x"), "only its time changes")
        self.assertEqual(q.stats().ready, 1)
        q = self.reopen(q)
        self.assertEqual([j.id for j in q.lease(5)], [delayed.id])

    def test_run_now_of_other_states_says_the_state(self) -> None:
        q = self.make_queue()
        runnable = q.enqueue("r")
        self.assertEqual(q.run_now(runnable.id).id, runnable.id, "runnable already: unchanged")
        leased = self.lease_the_one(q)
        with self.assertRaises(JobStateError) as caught:
            q.run_now(leased.id)
        self.assertEqual(caught.exception.state, "leased")
        self.assertIn("leased", str(caught.exception))
        q.ack(leased)
        with self.assertRaises(JobFinishedError) as done:
            q.run_now(leased.id)
        self.assertEqual(done.exception.state, "done")
        with self.assertRaises(JobNotFoundError):
            q.run_now("no-such-job")

    # ------------------------------------------------------------ delete
    def test_delete_removes_one_job_in_any_state_but_leased(self) -> None:
        q = self.make_queue(max_attempts=1)
        dead, done, keep = q.enqueue("x"), q.enqueue("y"), q.enqueue("keep")
        ready, delayed = q.enqueue("r", dedupe_key="k"), q.enqueue("d", delay=600)
        q.nack(self.lease_the_one(q), error="boom")
        q.ack(self.lease_the_one(q))
        leased = self.lease_the_one(q)
        self.assertEqual([q.get(j.id).state for j in (dead, done, leased)], [JobState.DEAD, JobState.DONE, JobState.LEASED])
        with self.assertRaises(JobStateError) as caught:
            q.delete(leased.id)
        self.assertEqual(caught.exception.state, "leased")
        self.assertIs(q.get(keep.id).state, JobState.LEASED, "a refused delete changes nothing")
        for job in (ready, delayed, dead, done):
            self.assertEqual(q.delete(job.id).id, job.id)
            with self.assertRaises(JobNotFoundError):
                q.get(job.id)
        with self.assertRaises(JobNotFoundError):
            q.delete(ready.id)
        stats = q.stats()
        self.assertEqual((stats.total, stats.leased, stats.ready, stats.delayed, stats.dead, stats.done), (1, 1, 0, 0, 0, 0))
        q = self.reopen(q)
        self.assertEqual((q.stats().total, len(q)), (1, 1))
        q.ack(leased)

    def test_a_deleted_job_frees_its_id_and_dedupe_key(self) -> None:
        q = self.make_queue()
        first = q.enqueue("a", job_id="one", dedupe_key="k")
        q.delete(first.id)
        second = q.enqueue("b", dedupe_key="k")
        self.assertNotEqual(second.id, "one")
        again = q.enqueue("c", job_id="one")
        self.assertEqual((again.id, again.payload), ("one", "c"), "a new job under the old id")
        q.compact()
        q = self.reopen(q)
        self.assertEqual(q.get("one").payload, "c")

    def test_delete_of_a_lease_that_expired_deletes(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        q.enqueue("a")
        job = self.lease_the_one(q)
        self.advance(11)
        self.assertEqual(q.delete(job.id).id, job.id)
        self.assertEqual(q.stats().total, 0)

    # ------------------------------------------------------------ wait
    def test_wait_returns_once_the_job_is_done(self) -> None:
        q = self.make_queue()
        target = q.enqueue("a")
        job = self.lease_the_one(q)
        timer = threading.Timer(0.2, lambda: q.ack(job, result={"ok": 1}))
        timer.start()
        self.addCleanup(timer.cancel)
        finished = q.wait(target.id, WAIT_SECONDS)
        self.assertEqual((finished.state, finished.result), (JobState.DONE, {"ok": 1}))
        self.assertIs(q.wait(target, 0).state, JobState.DONE, "a finished job returns at once")

    def test_wait_wakes_for_dead_and_cancelled_from_another_queue_object(self) -> None:
        q = self.make_queue(max_attempts=1)
        other = self.reopen(self.make_queue(max_attempts=1))  # a second object on the same queue
        dies, cancelled = q.enqueue("d"), q.enqueue("c", delay=600)
        job = self.lease_the_one(q)
        self.assertEqual(job.id, dies.id)
        for target, finish, state in (
            (dies, lambda: other.nack(job.id, error="boom"), JobState.DEAD),
            (cancelled, lambda: other.cancel(cancelled.id), JobState.CANCELLED),
        ):
            timer = threading.Timer(0.2, finish)
            timer.start()
            self.addCleanup(timer.cancel)
            self.assertIs(q.wait(target.id, WAIT_SECONDS).state, state)

    def test_wait_times_out_and_says_so(self) -> None:
        q = self.make_queue()
        target = q.enqueue("a")
        started = time.monotonic()
        with self.assertRaises(TimeoutError) as caught:
            q.wait(target.id, 0.3)
        self.assertGreaterEqual(time.monotonic() - started, 0.3)
        self.assertIn(target.id, str(caught.exception))
        with self.assertRaises(JobNotFoundError):
            q.wait("no-such-job", 1)
        with self.assertRaises(ValueError):
            q.wait(target.id, -1)

    def test_wait_for_a_job_deleted_meanwhile_says_not_found(self) -> None:
        q = self.make_queue()
        target = q.enqueue("a")
        timer = threading.Timer(0.2, lambda: q.delete(target.id))
        timer.start()
        self.addCleanup(timer.cancel)
        with self.assertRaises(JobNotFoundError):
            q.wait(target.id, WAIT_SECONDS)

    def test_a_worker_finishing_the_job_wakes_the_wait(self) -> None:
        q = self.make_queue()
        target = q.enqueue(2)
        worker = Worker(q, lambda job: job.payload * 21, max_jobs=1, handle_signals=False)
        thread = threading.Thread(target=worker.run)
        thread.start()
        self.addCleanup(thread.join, WAIT_SECONDS)
        self.addCleanup(worker.stop)
        self.assertEqual(q.wait(target.id, WAIT_SECONDS).result, 42)


def _snoozing(job: Job) -> None:
    raise Snooze(job.payload["snooze"])


async def _snoozing_async(job: Job) -> None:
    raise Snooze(job.payload["snooze"])
