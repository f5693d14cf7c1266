"""The shared semantic suite on the file storage, plus what only a folder can show.

Owns: the wiring of ``tests.semantics.QueueSemantics`` to the file storage
(a temp folder per test, a FakeClock passed as ``clock=``) and file-only
semantic extras (named queues side by side, ``fsync=False``, two handles on
one queue). Imports: the standard library, the public ``nobroker`` API and
tests.support / tests.semantics and its semantics_* mixins.
"""

from __future__ import annotations

import os
import threading
import time
import unittest
from typing import Any

from nobroker import JobState, NotLeasedError, Queue
from tests.semantics_ack_nack import AckNackSemantics
from tests.semantics_admin import AdminSemantics
from tests.semantics_bad_input import BadInputSemantics
from tests.semantics_dedupe import DedupeSemantics
from tests.semantics_enqueue import EnqueueSemantics
from tests.semantics_expiry import ExpirySemantics
from tests.semantics_lease import LeaseSemantics
from tests.semantics_lifecycle import LifecycleSemantics
from tests.semantics_reads import ReadSemantics
from tests.semantics_schedules import ScheduleSemantics
from tests.semantics_control import ControlSemantics
from tests.semantics_counters import CounterSemantics
from tests.semantics_control2 import Control2Semantics
from tests.semantics_timeouts import TimeoutSemantics
from tests.semantics_heartbeats import HeartbeatSemantics
from tests.semantics_limits import LimitSemantics
from tests.semantics_roster import RosterSemantics
from nobroker.filestore.reading import JOB_READ_GUESS
from tests.semantics import EXACT, QueueSemantics
from tests.support import FakeClock, TempDirTestCase, file_bytes, records_end


class FileQueueSemantics(
    ControlSemantics, Control2Semantics, CounterSemantics, RosterSemantics, HeartbeatSemantics, TimeoutSemantics,
    LimitSemantics, QueueSemantics, ScheduleSemantics,
    EnqueueSemantics, LeaseSemantics, AckNackSemantics, ExpirySemantics, AdminSemantics, DedupeSemantics,
    ReadSemantics, LifecycleSemantics, BadInputSemantics, TempDirTestCase,
):
    """Every shared semantic test, on a queue in a fresh temp folder with a fake clock."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = FakeClock()
        self._options: dict[int, dict[str, Any]] = {}

    # ------------------------------------------------------------ hooks
    def open_queue(self, **options: Any) -> Queue:
        q = Queue(self.dir, clock=self.clock, **options)
        self._options[id(q)] = options
        self.addCleanup(q.close)
        return q

    def make_queue(self, **options: Any) -> Queue:
        return self.open_queue(**options)

    def reopen(self, q: Queue) -> Queue:
        options = dict(self._options[id(q)])
        options["name"] = q.name
        q.close()
        return self.open_queue(**options)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def now(self) -> float:
        return self.clock()

    # ------------------------------------------------------------ file-only extras
    def test_default_name_and_path(self) -> None:
        q = self.make_queue()
        self.assertEqual(q.name, "default")
        self.assertTrue(os.path.samefile(q.path, self.dir))
        self.assertIs(q.durable, True)

    def test_the_clock_option_drives_every_time(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        self.clock.advance(1234.5)
        job = q.enqueue("x", delay=3)
        self.assertEqual(job.enqueued_at, self.clock())
        self.assertEqual(job.available_at, self.clock() + 3)
        self.clock.advance(3)
        leased = q.lease_one()
        assert leased is not None
        self.assertEqual(leased.lease_deadline, self.clock() + 10)

    def test_named_queues_in_one_folder_are_independent(self) -> None:
        emails = self.make_queue(name="emails")
        reports = self.make_queue(name="reports")
        self.assertEqual((emails.name, reports.name), ("emails", "reports"))
        mail = emails.enqueue("mail", job_id="same-id", dedupe_key="same-key")
        report = reports.enqueue("report", job_id="same-id", dedupe_key="same-key")
        self.assertEqual(emails.get("same-id").payload, "mail")
        self.assertEqual(reports.get("same-id").payload, "report")
        self.assertEqual((len(emails), len(reports)), (1, 1))
        leased = emails.lease_one()
        assert leased is not None
        self.assertEqual(leased.payload, "mail")
        self.assertIs(reports.get(report.id).state, JobState.READY)
        self.assertEqual(reports.purge(), 1)
        self.assertEqual(len(reports), 0)
        self.assertIs(emails.get(mail.id).state, JobState.LEASED)
        emails = self.assert_survives_reopen(emails)
        reports = self.reopen(reports)
        self.assertEqual((len(emails), len(reports)), (1, 0))

    def test_fsync_false_works_and_says_it_is_not_durable(self) -> None:
        q = self.make_queue(fsync=False)
        self.assertIs(q.durable, False)
        job = q.enqueue({"fast": True})
        q.ack(q.lease_one())  # type: ignore[arg-type]
        q.enqueue("second")
        q = self.assert_survives_reopen(q)
        self.assertIs(q.get(job.id).state, JobState.DONE)
        self.assertEqual(q.stats().ready, 1)

    def test_conn_is_refused_on_the_file_storage(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        self.assert_unchanged_by(q, lambda: q.enqueue("x", conn=object()), ValueError)
        self.assert_unchanged_by(q, lambda: q.enqueue_many(["x"], conn=object()), ValueError)

    def test_the_named_pipe_lets_waiters_wait_long(self) -> None:
        q = self.make_queue()
        self.assertIs(q.wakes_waiters(), hasattr(os, "mkfifo"))
        q.close()
        self.assertIs(q.wakes_waiters(), False)

    @unittest.skipUnless(hasattr(os, "mkfifo"), "no named pipes here")
    def test_a_full_lease_that_leaves_work_behind_wakes_the_next_waiter(self) -> None:
        producer = self.make_queue()
        producer.enqueue_many(["a", "b"])
        waiter = self.make_queue()
        self.assertTrue(waiter.wakes_waiters())
        time.sleep(0.3)  # past the moment writers might still skip the new pipe
        woke: list[bool] = []
        thread = threading.Thread(target=lambda: woke.append(waiter.wait_for_jobs(600.0)), daemon=True)
        thread.start()
        time.sleep(0.3)  # blocked on the pipe now, not looking at the log
        self.assertEqual(len(producer.lease(1)), 1)  # one wake-up came for two jobs: pass it on
        thread.join(60.0)
        self.assertEqual(woke, [True])
        self.assertEqual(len(waiter.lease(1)), 1)

    def test_payloads_around_the_single_read_size_lease_whole(self) -> None:
        # A job's record is read back in one read of JOB_READ_GUESS bytes, or two when longer;
        # the records after it in that read must not leak into it.
        q = self.make_queue()
        sizes = [0, 1, JOB_READ_GUESS - 300, JOB_READ_GUESS - 200, JOB_READ_GUESS, JOB_READ_GUESS + 1, 3 * JOB_READ_GUESS]
        sent = {q.enqueue({"blob": "z" * size}).id: size for size in sizes}
        for _ in sizes:
            job = q.lease_one()
            assert job is not None
            self.assertEqual(job.payload, {"blob": "z" * sent[job.id]})
            q.ack(job)
        self.assertIsNone(q.lease_one())

    def test_two_handles_on_one_queue_see_each_other(self) -> None:
        a = self.make_queue(visibility_timeout=10)
        b = self.make_queue(visibility_timeout=10)
        job = a.enqueue("shared", job_id="s")
        self.assertEqual(b.get("s").payload, "shared")
        self.assertEqual(b.enqueue("dup", job_id="s").payload, "shared")
        leased = b.lease_one()
        assert leased is not None
        self.assertEqual(leased.id, job.id)
        self.assertEqual(a.lease(), [], "a job leased through one handle is not delivered by another")
        self.assertIs(a.get(job.id).state, JobState.LEASED)
        with self.assertRaises(NotLeasedError):
            a.ack(self.stale(leased))
        a.ack(leased)  # the token, not the handle, proves the lease
        self.assertIs(b.get(job.id).state, JobState.DONE)
        self.assertEqual(self.snapshot(a), self.snapshot(b))

    def test_reads_of_an_expired_lease_write_nothing(self) -> None:
        q = self.make_queue(max_attempts=2, visibility_timeout=10, backoff=EXACT)
        q.enqueue_many(["dies", "retries"])
        dies = self.only_lease(q)
        self.assertEqual(q.nack(dies, delay=0).attempts, 1)
        self.assertEqual(len(q.lease(2)), 2)  # dies: attempt 2 of 2; retries: 1 of 2
        log = os.path.join(self.dir, "default.000000.log")
        before = file_bytes(log)
        self.advance(11)
        other = self.make_queue(max_attempts=2, visibility_timeout=10, backoff=EXACT)  # another handle, as another process
        for handle in (q, other):
            self.assertEqual((handle.stats().dead, handle.stats().delayed, handle.stats().leased), (1, 1, 0))
            self.assertEqual([j.payload for j in handle.dlq()], ["dies"])
            self.assertEqual([j.payload for j in handle.list_jobs(JobState.READY)], ["retries"])
            self.assertIs(handle.get(dies.id).state, JobState.DEAD)
        self.assertEqual(file_bytes(log), before, "a read wrote to the log")
        q.lease()
        self.assertGreater(records_end(log), len(before.rstrip(b"\0")), "the next write records the reclaims")
        self.assertEqual(self.snapshot(other), self.snapshot(q))

    def test_bad_control_arguments_are_refused_before_anything_is_written(self) -> None:
        q = self.make_queue()
        q.enqueue("a")
        job = self.only_lease(q)
        log = os.path.join(self.dir, "default.000000.log")
        before = file_bytes(log)
        refused: list[Any] = [
            lambda: q.snooze(job, -1), lambda: q.snooze(job, float("inf")), lambda: q.snooze(job, "5"),
            lambda: q.pause(""), lambda: q.pause(5), lambda: q.resume("x" * 10_000), lambda: q.run_now(5),
            lambda: q.delete(""), lambda: q.wait(job.id, -1), lambda: q.wait(job.id, 10**400),
        ]  # fmt: skip
        for call in refused:
            with self.assertRaises((TypeError, ValueError)):
                call()
        self.assertEqual(file_bytes(log), before, "a refused call wrote to the log")
        self.assertIs(q.get(job.id).state, JobState.LEASED)
        self.assertEqual(q.paused(), [])

    def test_json_only_a_file_can_hold_round_trips(self) -> None:
        q = self.make_queue()
        payloads = ["nul \u0000 inside", "lone surrogate \ud800", 10**30, 1e300, -0.0, {"\u0000key": [1e-300]}]
        ids = [q.enqueue(p).id for p in payloads]
        q = self.assert_survives_reopen(q)
        for job_id, payload in zip(ids, payloads):
            got = q.get(job_id).payload
            self.assertEqual(got, payload)
            self.assertIs(type(got), type(payload))


if __name__ == "__main__":
    import unittest

    unittest.main()
