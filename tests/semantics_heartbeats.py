"""The storage-independent tests of batched heartbeats: extend_many, and the Worker renewing with it.

Owns: ``HeartbeatSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks and helpers it uses). Imports: the
standard library, the public ``nobroker`` API and tests.semantics_control
(its Worker bounds and wait).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nobroker import Job, JobNotFoundError, JobState, NotLeasedError, Queue, Worker
from nobroker.jobs import MAX_BATCH_JOBS
from tests.semantics_control import WAIT_SECONDS, wait_until

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics
else:
    _Base = object

#: Jobs a Worker runs at once in the heartbeat tests, and their lease: a renewal every half second, with a
#: second of slack before a lease would expire (a loaded machine may stall the heartbeat thread that long).
RUNNING, LEASE = 4, 1.5


class HeartbeatSemantics(_Base):
    """extend_many on every storage, and a Worker's heartbeat: one call per tick."""

    def leased(self, q: Queue, n: int) -> list[Job]:
        q.enqueue_many([f"job {i}" for i in range(n)])
        jobs = sorted(q.lease(n), key=lambda job: job.payload)
        self.assertEqual(len(jobs), n)
        return jobs

    def test_extend_many_renews_every_lease_from_now_in_the_order_given(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        a, b, c = self.leased(q, 3)
        self.advance(4)
        t = self.now()
        renewed = q.extend_many([c, a, b], 30)
        self.assertEqual([job.id for job in renewed], [c.id, a.id, b.id])
        for before, job in zip((c, a, b), renewed):
            self.assert_time(job.lease_deadline, t + 30)
            self.assertEqual((job.state, job.attempts, job.lease_token), (JobState.LEASED, 1, before.lease_token))
            self.assertEqual(q.get(job.id).to_dict(), job.to_dict())
        self.assert_time(q.extend_many([a, b, c], 30)[0].lease_deadline, t + 30, "a heartbeat never drifts")
        self.advance(25)
        self.assertEqual(q.lease(), [], "the old deadlines passed; the renewed ones hold")
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.extend_many([], 30), [])
        self.assertEqual([job.id for job in q.extend_many([a.id, b.id, b], 5)], [a.id, b.id, b.id])

    def test_extend_many_renews_the_held_leases_and_names_the_first_refusal(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        a, b, c, d = self.leased(q, 4)
        t = self.now()
        with self.assertRaises(NotLeasedError) as caught:
            q.extend_many([a, self.stale(b), c, self.stale(d)], 60)
        self.assertIn(b.id, str(caught.exception))
        self.assertNotIn(d.id, str(caught.exception))
        for job, deadline in ((a, t + 60), (b, t + 10), (c, t + 60), (d, t + 10)):
            self.assert_time(q.get(job.id).lease_deadline, deadline, job.payload)
        q.ack(c)
        with self.assertRaises(NotLeasedError):
            q.extend_many([a, c], 60)  # a job done meanwhile: the Worker acked it
        with self.assertRaises(JobNotFoundError):
            q.extend_many([a, "no-such-job"], 60)
        with self.assertRaises(NotLeasedError):
            q.extend_many([self.stale(a), a], 60)  # a stale copy beside the lease it copies
        self.assertIs(q.get(a.id).state, JobState.LEASED)
        self.assert_survives_reopen(q)

    def test_extend_many_of_an_expired_lease_is_refused_as_extend_is(self) -> None:
        q = self.make_queue(visibility_timeout=10, max_attempts=1)
        (job,) = self.leased(q, 1)
        self.advance(11)
        with self.assertRaises(NotLeasedError):
            q.extend_many([job], 60)
        self.assertIs(q.get(job.id).state, JobState.DEAD, "reclaimed as the lease's end left it")

    def test_extend_many_shows_a_cancel_asked_for(self) -> None:
        q = self.make_queue()
        a, b = self.leased(q, 2)
        q.cancel(b.id)
        renewed = q.extend_many([a, b], 60)
        self.assertEqual([job.cancel_requested for job in renewed], [False, True])

    def test_extend_many_refuses_bad_input_before_anything_is_written(self) -> None:
        q = self.make_queue()
        (job,) = self.leased(q, 1)
        for bad, error in (
            (lambda: q.extend_many([job], 0), ValueError),
            (lambda: q.extend_many([job], -1), ValueError),
            (lambda: q.extend_many([job], "60"), TypeError),
            (lambda: q.extend_many([job, 7], 60), TypeError),  # type: ignore[list-item]
            (lambda: q.extend_many([job] * (MAX_BATCH_JOBS + 1), 60), ValueError),
        ):
            self.assert_unchanged_by(q, bad, error)

    # ------------------------------------------------------------ the Worker's heartbeat
    def heartbeat_worker(self, q: Queue, release: threading.Event) -> tuple[Worker, list[Any]]:
        """A Worker running RUNNING jobs at once, each until ``release`` is set; its stats land in the list."""

        def handler(job: Job) -> str:
            self.assertTrue(release.wait(WAIT_SECONDS), "the test never released the handlers")
            return "done"

        worker = Worker(q, handler, concurrency=RUNNING, max_jobs=RUNNING, handle_signals=False, poll_interval=0.01)
        results: list[Any] = []
        thread = threading.Thread(target=lambda: results.append(worker.run()))
        thread.start()
        self.addCleanup(thread.join, WAIT_SECONDS)
        self.addCleanup(worker.stop)
        self.addCleanup(release.set)
        return worker, results

    def record_renewals(self, q: Queue) -> tuple[list[list[str]], list[str]]:
        """Every extend_many call (its job ids) and every single extend (its id) made on ``q`` from now on."""
        batches: list[list[str]] = []
        singles: list[str] = []
        many: Callable[..., Any] = q.extend_many
        one: Callable[..., Any] = q.extend

        def extend_many(jobs: Any, seconds: float) -> Any:
            jobs = list(jobs)
            batches.append([job.id for job in jobs])
            return many(jobs, seconds)

        def extend(job: Any, seconds: float) -> Any:
            singles.append(job.id)
            return one(job, seconds)

        q.extend_many = extend_many  # type: ignore[method-assign]
        q.extend = extend  # type: ignore[method-assign]
        return batches, singles

    def test_a_worker_renews_all_its_leases_with_one_call_per_tick(self) -> None:
        q = self.make_queue(visibility_timeout=LEASE)
        batches, singles = self.record_renewals(q)
        ids = {job.id for job in q.enqueue_many([f"slow {i}" for i in range(RUNNING)])}
        release = threading.Event()
        _worker, results = self.heartbeat_worker(q, release)
        # The leases fall into step within a tick or two; from then on, one call per tick renews them all.
        wait_until(lambda: any(set(batch) == ids for batch in batches), "a tick that renews every lease at once")
        in_step = next(i for i, batch in enumerate(batches) if set(batch) == ids)
        singles_then = len(singles)
        wait_until(lambda: len(batches) >= in_step + 4, "three more ticks")
        release.set()
        wait_until(lambda: bool(results), "the Worker to finish")
        ticks = batches[in_step : in_step + 4]
        self.assertEqual([sorted(batch) for batch in ticks], [sorted(ids)] * 4)
        self.assertEqual(len(singles), singles_then, "no lease was renewed on its own once they were in step")
        (stats,) = results
        self.assertEqual((stats.succeeded, stats.lost_leases), (RUNNING, 0))

    def test_a_lease_lost_in_a_batch_is_found_and_only_that_job_is_lost(self) -> None:
        q = self.make_queue(visibility_timeout=LEASE)
        batches, singles = self.record_renewals(q)
        jobs = q.enqueue_many([f"slow {i}" for i in range(RUNNING)])
        ids = {job.id for job in jobs}
        release = threading.Event()
        _worker, results = self.heartbeat_worker(q, release)
        wait_until(lambda: any(set(batch) == ids for batch in batches), "a tick that renews every lease at once")
        taken = jobs[1]
        q.nack(taken.id, delay=3600, error="taken away by an operator")  # its lease ends under the Worker
        wait_until(lambda: taken.id in singles, "the heartbeat to renew each job on its own")
        release.set()
        wait_until(lambda: bool(results), "the Worker to finish")
        (stats,) = results
        self.assertEqual((stats.succeeded, stats.lost_leases), (RUNNING - 1, 1))
        self.assertEqual([j.state for j in map(q.get, sorted(ids - {taken.id}))], [JobState.DONE] * (RUNNING - 1))
        self.assertIs(q.get(taken.id).state, JobState.READY, "the lost job was neither acked nor nacked again")
