"""What opening a file queue leaves behind: no open files after a refused open, no pile of stale items after a replay.

Owns: ``ARefusedOpenKeepsNothingOpen`` (an open refused for a damaged log
or a lock held elsewhere closes every file it opened, counted in
/proc/self/fd) and ``AReplayLeavesNoPileOfStaleItems`` (opening drops the
heap items a long replay left stale). Imports: the standard library,
nobroker and tests.support.
"""

from __future__ import annotations

import os
import unittest

from nobroker import CorruptLogError, LockTimeoutError, Queue
from nobroker.filestore.framing import FRAME_SIZE, HEADER_SIZE
from nobroker.filestore.layout import log_path
from nobroker.filestore.ready import STALE_SLACK
from tests.support import TempDirTestCase


class ARefusedOpenKeepsNothingOpen(TempDirTestCase):
    """An open that raises closes every file it opened: a caller that retries never runs out of descriptors."""

    def open_descriptors(self) -> int:
        try:
            return len(os.listdir("/proc/self/fd"))
        except OSError:
            self.skipTest("no /proc/self/fd to count open files with")

    def test_a_damaged_log(self) -> None:
        with Queue(self.dir) as q:
            for i in range(5):
                q.enqueue({"i": i, "pad": "x" * 40})
            q.ack(q.lease_one())
        path = log_path(self.dir, "default", 0)
        with open(path, "r+b") as f:
            f.seek(HEADER_SIZE + FRAME_SIZE + 3)  # inside the first record's body: not a torn tail
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 4]))
        before = self.open_descriptors()
        for _ in range(20):
            with self.assertRaises(CorruptLogError):
                Queue(self.dir)
        self.assertEqual(self.open_descriptors(), before)

    def test_a_lock_held_elsewhere(self) -> None:
        try:
            import fcntl
        except ImportError:
            self.skipTest("no flock here to hold the lock with")

        with Queue(self.dir) as q:
            q.enqueue("one")
        holder = os.open(os.path.join(self.dir, "default.lock"), os.O_RDWR)
        self.addCleanup(os.close, holder)
        fcntl.flock(holder, fcntl.LOCK_EX)  # another open file: its lock excludes ours, as another process's would
        before = self.open_descriptors()
        for _ in range(5):
            with self.assertRaises(LockTimeoutError):
                Queue(self.dir, lock_timeout=0.05)
        self.assertEqual(self.open_descriptors(), before)
        fcntl.flock(holder, fcntl.LOCK_UN)
        with Queue(self.dir) as q:
            self.assertEqual(len(q), 1, "the queue opens once the lock is free")


class AReplayLeavesNoPileOfStaleItems(TempDirTestCase):
    """Opening drops the heap items a long replay left stale, without the lock: the first lease never pops them all."""

    def test_after_many_jobs_were_acked_or_deleted(self) -> None:
        n = 1000 * (3 * STALE_SLACK // 1000 + 1)  # three times the slack, in whole thousands
        with Queue(self.dir, fsync=False, auto_compact=None) as q:
            for start in range(0, n, 1000):
                q.enqueue_many(list(range(1000)), dedupe_keys=[f"k{start + i}" for i in range(1000)])  # hot jobs
            while leased := q.lease(1000):
                q.ack_many(leased)  # each lease item stale once its job is acked
            doomed = q.enqueue_many(list(range(n)), dedupe_keys=[f"d{i}" for i in range(n)])
            for job in doomed:
                q.delete(job.id)  # each ready item stale once its job is gone
            q.enqueue("the one left", dedupe_key="left")
            held = q.lease_one()
            q.enqueue("and one ready", dedupe_key="ready")
        for name in os.listdir(self.dir):
            if name.endswith(".snap"):
                os.unlink(os.path.join(self.dir, name))  # as after a crash: the whole log is replayed
        with Queue(self.dir, auto_compact=None) as q:
            state = q.storage._state  # type: ignore[attr-defined]
            self.assertFalse(q.storage._snap_loaded)  # type: ignore[attr-defined]
            self.assertLessEqual(len(state.leases), 1, "the stale lease items are gone")
            self.assertLessEqual(sum(map(len, state.ready.values())), 1, "the stale ready items are gone")
            self.assertEqual(q.stats().to_dict(), {**q.stats().to_dict(), "ready": 1, "leased": 1, "done": n})
            job = q.lease_one()
            assert job is not None and held is not None
            self.assertEqual(job.payload, "and one ready")
            q.ack(job)
            self.assertEqual(q.get(held.id).state.value, "leased")


if __name__ == "__main__":
    unittest.main()
