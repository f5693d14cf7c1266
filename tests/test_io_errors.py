"""I/O errors and full disks on a simulated disk: EIO and ENOSPC on the N-th write, fsync, rename and folder fsync.

Owns: the fault sweep over a fixed workload (every N, once and persistent;
through one handle and through two taking turns; failing reads too), the
fsync-poisoning check, the sweep's teeth (a disk that retries a failed
fsync) and short writes. The workload and FaultRun, which makes each run
and its checks, are in tests/ioerrorsupport.py; a real full tmpfs and a
read-only filesystem are tests/test_io_real_filesystem.py; what a failed or
interrupted operation leaves in memory and to its peers is
tests/test_io_failed_operations.py. Imports: the standard library,
nobroker's public API, tests.ioerrorsupport, tests.simdisk and
tests.support.

Pass, for every injected fault:
  * the failing call raises StorageError or CompactionError, and its
    message names the failure ("Input/output error", "No space left ...");
  * after a failed fsync of the log the same Queue refuses every write
    (the kernel may have dropped the pages; a retried fsync would lie);
  * nothing was reported done that is not durable: after a power cut that
    keeps only durable bytes, the queue holds exactly the state after the
    last acknowledged operation (or, for a failed operation after it, the
    state with that operation applied: a failed call is "unknown", never
    "half done"; or, for leases no later fsync covered, the state before
    them: a lease becomes durable with the next fsync of the log);
  * after the fault clears, reopening (without a power cut) gives the same;
  * no torn record is ever left in the middle of the log.
"""

from __future__ import annotations

import errno
import random
import unittest

from nobroker import StorageError
from tests.ioerrorsupport import TOTALS, FaultRun, open_queue, snapshot
from tests.simdisk import FAULTABLE, Fault, SimDisk, fresh_queue_path
from tests.support import LONG, FakeClock

ERRNOS = (errno.EIO, errno.ENOSPC)


class RetryingDisk(SimDisk):
    """Stands in for a core that retries a failed fsync (the fsync-gate mistake): the retry "succeeds"."""

    def fsync(self, fd: int) -> None:
        try:
            super().fsync(fd)
        except OSError:
            super().fsync(fd)


class IOErrors(unittest.TestCase):
    def counts(self) -> dict[str, int]:
        run = FaultRun(self, None)
        run.run()
        self.assertEqual(run.errors, [])
        return dict(run.disk.fault_counts)

    def test_every_nth_call_failing_once_and_persistently(self) -> None:
        counts = self.counts()
        for op in FAULTABLE:
            self.assertGreater(counts[op], 0, f"the workload never calls {op}")
        runs = 0
        for op in FAULTABLE:
            for err in ERRNOS:
                for persistent in (False, True):
                    for nth in range(1, counts[op] + 1):
                        with self.subTest(op=op, errno=errno.errorcode[err], persistent=persistent, nth=nth):
                            FaultRun(self, Fault(op, nth, err, persistent)).run()
                            runs += 1
        TOTALS["fault runs"] += runs
        print(f"\nI/O errors: {runs} runs, {TOTALS['faults injected']} faults injected ({counts})")

    def test_two_handles_take_turns_under_faults(self) -> None:
        """Two Queue objects (think: two processes) alternate; a fault seen by one must not fool the other."""
        counts = self.counts()
        for op in FAULTABLE:
            for persistent in (False, True):
                for nth in range(1, counts[op] + 1):
                    with self.subTest(op=op, persistent=persistent, nth=nth):
                        FaultRun(self, Fault(op, nth, errno.EIO, persistent), handles=2).run()
                        TOTALS["fault runs"] += 1

    def test_a_failed_switch_to_a_new_generation_is_retried(self) -> None:
        """Found by the two-handle sweep: a handle that failed to follow a flip must not append to the old file."""
        disk = SimDisk()
        path = fresh_queue_path(disk, random.Random(7))
        qa, qb = open_queue(disk, path, FakeClock()), open_queue(disk, path, FakeClock())
        qa.enqueue("x", job_id="x")
        qa.compact()  # qb still holds generation 0
        disk.faults.append(Fault("fsync_dir", disk.fault_counts["fsync_dir"] + 1, errno.EIO))
        with self.assertRaises(StorageError):
            qb.enqueue("y", job_id="y")  # following the flip, the folder fsync fails
        disk.faults.clear()
        qb.enqueue("z", job_id="z")
        self.assertIn("z", [j.id for j in qa.list_jobs()], "the peer does not see an acknowledged enqueue")
        qa.close()
        qb.close()
        with open_queue(disk.power_cut("drop"), path, FakeClock()) as reopened:
            self.assertIn("z", [j.id for j in reopened.list_jobs()], "an acknowledged enqueue was lost")

    def test_the_fault_sweep_has_teeth(self) -> None:
        """A queue that retries a failed fsync and carries on must be caught by the sweep."""
        caught = 0
        for nth in range(1, self.counts()["fsync"] + 1):
            try:
                FaultRun(self, Fault("fsync", nth, errno.EIO), disk=RetryingDisk()).run()
            except Exception:  # noqa: BLE001 - a failed check or a queue that no longer opens: caught
                caught += 1
        self.assertGreater(caught, 0, "retrying failed fsyncs went unnoticed")

    def test_every_nth_read_failing(self) -> None:
        """EIO on a read (opening, catching up, reading a payload back) is a StorageError too, never a bare OSError."""
        reads = self.counts()["read"]
        self.assertGreater(reads, 20)
        for nth in range(1, reads + 1):
            with self.subTest(op="read", nth=nth):
                FaultRun(self, Fault("read", nth, errno.EIO)).run()
                TOTALS["fault runs"] += 1

    def test_read_errors_while_opening_an_existing_queue(self) -> None:
        run = FaultRun(self, None)
        run.run()
        disk = run.disk
        with open_queue(disk, run.path, run.clock) as q:
            expected = snapshot(q)
        before = dict(disk.fault_counts)
        open_queue(disk, run.path, run.clock).close()
        reads = disk.fault_counts["read"] - before["read"]
        self.assertGreater(reads, 0)
        for nth in range(1, reads + 1):
            with self.subTest(nth=nth):
                disk.reset_counts()
                disk.faults = [Fault("read", nth, errno.EIO)]
                try:
                    open_queue(disk, run.path, run.clock).close()
                except Exception as exc:  # noqa: BLE001
                    self.assertIsInstance(exc, StorageError, f"read #{nth} failing while opening raised {exc!r}")
                    self.assertIn("Input/output error", str(exc))
                disk.faults = []
                with open_queue(disk, run.path, run.clock) as q:
                    self.assertEqual(snapshot(q), expected)

    def test_short_writes_are_completed(self) -> None:
        expected = None
        for seed in range(20 if not LONG else 200):
            run = FaultRun(self, None, short_writes=seed)
            run.run()
            self.assertEqual(run.errors, [])
            # Same acknowledged history as a disk that never writes short.
            self.assertEqual(run.acknowledged, expected or run.acknowledged)
            expected = run.acknowledged

    def test_a_short_write_then_a_full_disk_is_rolled_back(self) -> None:
        for seed in range(10):
            for nth in range(2, 12):
                run = FaultRun(self, Fault("write", nth, errno.ENOSPC), short_writes=seed)
                run.run()

    def test_failed_fsync_is_never_retried_into_success(self) -> None:
        """The disk dropped the pages: the op fails, the queue refuses, a reopen shows the truth."""
        disk = SimDisk()
        path = fresh_queue_path(disk, random.Random(2))
        q = open_queue(disk, path, FakeClock())
        q.enqueue("kept", job_id="kept")
        disk.faults.append(Fault("fsync", disk.fault_counts["fsync"] + 1, errno.EIO))
        with self.assertRaises(StorageError) as caught:
            q.enqueue("lost", job_id="lost")
        self.assertIn("Input/output error", str(caught.exception))
        with self.assertRaises(StorageError) as refused:
            q.enqueue("refused", job_id="refused")
        self.assertIn("open the queue again", str(refused.exception))
        with self.assertRaises(StorageError):
            q.lease_one()
        cut = disk.power_cut("drop")
        with open_queue(cut, path, FakeClock()) as reopened:
            self.assertEqual(sorted(snapshot(reopened)), ["kept"])
        q.close()


def tearDownModule() -> None:
    print(f"\nI/O errors, whole module: {TOTALS['fault runs']} runs, {TOTALS['faults injected']} faults injected")


if __name__ == "__main__":
    unittest.main()
