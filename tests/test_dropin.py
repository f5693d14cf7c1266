"""Code written against nobroker 0.1.2 runs here: its public names exist, with the same meaning.

The names are written out below from 0.1.2's documented API (its README and
its classes' public attributes), not imported from a copy of it, so a name
that goes missing here fails this test whatever is installed.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import tempfile
import unittest

import nobroker
from nobroker import (
    BackoffPolicy,
    CompactionResult,
    Job,
    JobState,
    NobrokerError,
    Queue,
    QueueStats,
    RecoveryReport,
    WorkerStats,
)
from nobroker.filestore.framing import HEADER_SIZE
from tests.support import FakeClock, TempDirTestCase
from tests.test_compat import job, record

#: Every public attribute and method of 0.1.2's result and data types.
V012_PUBLIC_NAMES: dict[type, set[str]] = {
    CompactionResult: {"bytes_before", "bytes_after", "jobs_kept", "jobs_dropped", "bytes_reclaimed", "describe"},
    RecoveryReport: {
        "records_applied", "bytes_scanned", "bytes_discarded", "damage", "orphan_records", "repaired", "describe",
    },  # fmt: skip
    QueueStats: {"ready", "delayed", "leased", "done", "dead", "total", "to_dict"},
    WorkerStats: {"leased", "succeeded", "failed", "dead", "lost_leases", "to_dict"},
    # 0.1.2's Job also had ``version``, a counter its in-memory heaps used to skip
    # stale entries; it never meant anything outside that index, so it is not here.
    Job: {
        "id", "payload", "priority", "state", "attempts", "max_attempts", "available_at", "enqueued_at",
        "lease_deadline", "lease_token", "last_error", "seq", "snapshot", "is_eligible", "to_dict", "from_dict",
    },  # fmt: skip
    BackoffPolicy: {"base", "factor", "max_delay", "jitter", "delay_for"},
}
V012_ERRORS = [
    "NobrokerError", "QueueClosedError", "LockTimeoutError", "CorruptLogError", "JobNotFoundError",
    "NotLeasedError", "CompactionError", "SerializationError",
]  # fmt: skip
V012_EXPORTS = [
    "BackoffPolicy", "CompactionResult", "Job", "JobState", "Queue", "QueueStats", "RecoveryReport", "Worker",
    "WorkerStats", "__version__", *V012_ERRORS,
]  # fmt: skip
#: 0.1.2's Damage values (nobroker.codec.Damage there), which RecoveryReport.damage holds.
V012_DAMAGE = {
    "none", "truncated record header", "truncated record body", "checksum mismatch",
    "record length exceeds maximum", "unknown record type",
}  # fmt: skip


class PublicNames(unittest.TestCase):
    def test_every_0_1_2_export_exists(self) -> None:
        missing = [name for name in V012_EXPORTS if not hasattr(nobroker, name)]
        self.assertEqual(missing, [])
        for name in V012_ERRORS:
            self.assertTrue(issubclass(getattr(nobroker, name), NobrokerError), name)

    def test_every_public_name_of_the_result_types_exists(self) -> None:
        for cls, names in V012_PUBLIC_NAMES.items():
            with self.subTest(cls=cls.__name__):
                instance = self.instance(cls)
                missing = sorted(name for name in names if not hasattr(instance, name))
                self.assertEqual(missing, [])

    @staticmethod
    def instance(cls: type) -> object:
        if cls is Job:
            return Job("x", None)
        return cls()

    def test_the_queue_and_the_worker_keep_0_1_2s_attributes(self) -> None:
        # Not here: Queue.path (0.1.2: the log file; here the folder, or the DSN) and Queue.dir.
        queue_names = {
            "name", "fsync", "visibility_timeout", "max_attempts", "backoff", "recovery", "enqueue", "enqueue_many",
            "lease", "lease_one", "ack", "nack", "extend", "requeue_dead", "purge", "get", "stats", "list_jobs", "dlq",
            "compact", "close", "__enter__", "__exit__", "__len__",
        }  # fmt: skip
        worker_names = {
            "queue", "handler", "concurrency", "poll_interval", "max_jobs", "idle_timeout", "handle_signals", "stats",
            "stop", "run",
        }  # fmt: skip
        with tempfile.TemporaryDirectory() as folder, Queue(folder, fsync=False, visibility_timeout=7) as q:
            self.assertEqual(sorted(n for n in queue_names if not hasattr(q, n)), [])
            self.assertEqual((q.fsync, q.visibility_timeout), (False, 7))

            def handle(job: Job) -> None:
                pass

            worker = nobroker.Worker(q, handle, concurrency=2, poll_interval=0.5, max_jobs=3, idle_timeout=1, handle_signals=False)
            self.assertEqual(sorted(n for n in worker_names if not hasattr(worker, n)), [])
            self.assertEqual(
                (worker.queue, worker.handler, worker.concurrency, worker.poll_interval, worker.max_jobs,
                 worker.idle_timeout, worker.handle_signals),
                (q, handle, 2, 0.5, 3, 1.0, False),
            )  # fmt: skip

    def test_job_states_are_the_four_of_0_1_2_and_cancelled(self) -> None:
        self.assertEqual({s.value for s in JobState}, {"ready", "leased", "done", "dead", "cancelled"})
        self.assertEqual(JobState.READY, "ready")

    def test_recovery_damage_holds_0_1_2_values(self) -> None:
        damage = type(RecoveryReport().damage)
        self.assertEqual({d.value for d in damage}, V012_DAMAGE)
        self.assertEqual(RecoveryReport().damage, "none")


class Backoff(unittest.TestCase):
    def test_refuses_what_0_1_2_refused(self) -> None:
        for bad in ({"factor": 0.5}, {"factor": 0}, {"factor": 0.999}, {"base": -1}, {"jitter": 1.5}, {"jitter": -0.1}):
            with self.subTest(**bad), self.assertRaises(ValueError):
                BackoffPolicy(**bad)  # type: ignore[arg-type]
        self.assertEqual(BackoffPolicy(factor=1, jitter=0).delay_for(7), 1.0)

    def test_a_job_that_has_not_failed_waits_nothing(self) -> None:
        policy = BackoffPolicy()  # jitter 0.5
        for attempts in (0, -1, -100):
            self.assertEqual(policy.delay_for(attempts), 0.0, attempts)
            self.assertEqual(policy.nominal_delay(attempts), 0.0, attempts)
        first = policy.delay_for(1)
        self.assertTrue(0.5 <= first <= 1.0, first)
        self.assertEqual([policy.nominal_delay(n) for n in (1, 2, 3, 10, 100_000)], [1.0, 2.0, 4.0, 300.0, 300.0])


class SameMeaning(TempDirTestCase):
    def test_compaction_result_reports_the_bytes_it_reclaimed(self) -> None:
        with Queue(self.dir) as q:
            q.enqueue_many(list(range(50)))
            for leased in q.lease(40):
                q.ack(leased)
            result = q.compact()
        self.assertGreater(result.bytes_reclaimed, 0)
        self.assertEqual(result.bytes_reclaimed, result.bytes_before - result.bytes_after)
        share = 100.0 * result.bytes_reclaimed / result.bytes_before
        self.assertEqual(
            result.describe(),
            f"compacted {result.bytes_before} -> {result.bytes_after} bytes ({share:.1f}% reclaimed), "
            f"kept 10 jobs, dropped 40 completed",
        )
        self.assertEqual(CompactionResult().describe(), "compacted 0 -> 0 bytes (0.0% reclaimed), kept 0 jobs, dropped 0 completed")

    def write_log(self, data: bytes) -> str:
        path = os.path.join(self.dir, "default.000000.log")
        with open(path, "wb") as f:
            f.write(b"NOBROKER" + struct.pack("<HIH", 1, 0, 0) + data)
        return path

    def test_a_clean_open_reports_what_0_1_2_reported(self) -> None:
        records = [record(1, job("a", 1, 1)), record(1, job("b", 2, 2)), record(3, {"id": "nobody", "at": 1.0})]
        self.write_log(b"".join(records))
        with Queue(self.dir, clock=FakeClock()) as q:
            report = q.recovery
        scanned = sum(len(r) for r in records)
        self.assertFalse(report.repaired)
        self.assertEqual((report.records_applied, report.bytes_scanned, report.bytes_discarded), (3, scanned, 0))
        self.assertEqual(report.bytes_scanned, report.bytes_read - HEADER_SIZE)
        self.assertEqual(report.damage, "none")
        self.assertEqual(report.orphan_records, 1, "the ACK of a job the log never enqueued")
        self.assertEqual(report.describe(), f"clean: 3 records, {scanned} bytes")

    def test_a_torn_tail_is_reported_as_repaired_with_its_damage(self) -> None:
        whole, last = record(1, job("a", 1, 1)), record(1, job("b", 2, 2))
        cases = {
            "truncated record body": last[:-3],
            "truncated record header": last[:5],
            "checksum mismatch": last[:20] + bytes([last[20] ^ 1]) + last[21:],  # one bit of the body
        }
        for damage, tail in cases.items():
            with self.subTest(damage=damage):
                self.write_log(whole + tail)
                with Queue(self.dir, clock=FakeClock()) as q:
                    report = q.recovery
                self.assertTrue(report.repaired)
                self.assertEqual(report.bytes_discarded, len(tail))
                self.assertEqual(report.damage.value, damage)
                self.assertEqual(report.records_applied, 1)
                self.assertEqual(
                    report.describe(), f"repaired: 1 records applied, {len(tail)} bytes discarded from the tail ({damage})"
                )

    def test_job_snapshot_eligibility_and_from_dict(self) -> None:
        with Queue(self.dir, clock=FakeClock(1000.0)) as q:
            ready = q.enqueue({"a": [1]})
            later = q.enqueue("later", delay=10)
            leased = q.lease_one()
        assert leased is not None
        self.assertTrue(ready.is_eligible(1000.0))
        self.assertFalse(later.is_eligible(1009.0))
        self.assertTrue(later.is_eligible(1010.0))
        self.assertFalse(leased.is_eligible(2000.0), "a leased job is not eligible")
        copy = ready.snapshot()
        self.assertEqual(copy, ready)
        self.assertIsNot(copy, ready)
        self.assertEqual(Job.from_dict(leased.to_dict()), leased)
        self.assertIs(Job.from_dict(leased.to_dict()).state, JobState.LEASED)
        old_style = {k: v for k, v in ready.to_dict().items() if k in {f.name for f in dataclasses.fields(Job)[:12]}}
        old_style["unknown_key"] = 1
        self.assertEqual(Job.from_dict(old_style), ready)

    def test_queue_stats_total_counts_every_state(self) -> None:
        stats = QueueStats(ready=1, delayed=2, leased=3, done=4, dead=5)
        self.assertEqual(stats.total, 15)
        self.assertEqual(stats.to_dict(), {"ready": 1, "delayed": 2, "leased": 3, "done": 4, "dead": 5, "total": 15})


if __name__ == "__main__":
    unittest.main()
