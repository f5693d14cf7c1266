"""Writing state snapshots, and their files: a kill while one is written, a fork meanwhile, modes, symlinks, leftovers.

Owns: a process SIGKILLed while writing a snapshot leaves only a temp file
(the next opener removes it); a child forked while a thread of its parent
writes one writes its own without waiting; a snapshot is 0600 whatever the
umask and never followed through a symlink; repair removes snapshots,
inspect and verify ignore them, and a compaction leaves no stale snapshot
in use. Imports: the standard library, nobroker, tests.snapshotsupport and
tests.support.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import unittest

from nobroker import Queue
from nobroker.filestore import snapshot
from nobroker.filestore.admin import repair, verify
from tests.snapshotsupport import NAME, SNAP, small_threshold
from tests.support import TempDirTestCase

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + ROOT)


class CrashWhileWriting(TempDirTestCase):
    def test_sigkill_while_writing_the_snapshot(self) -> None:
        script = textwrap.dedent(
            """
            import os, signal, sys
            from nobroker import Queue
            from nobroker.filestore import snapshot
            from nobroker.filestore.fs import RealFileSystem

            class Dying(RealFileSystem):
                def pwrite(self, fd, data, offset):
                    if self.snapping:
                        super().pwrite(fd, bytes(data[: len(data) // 2]), offset)
                        os.kill(os.getpid(), signal.SIGKILL)
                    return super().pwrite(fd, data, offset)

                def open(self, path, flags, mode=0o600):
                    if ".snap." in path:
                        self.snapping = True
                    return super().open(path, flags, mode)

            snapshot.SNAPSHOT_MIN_RECORDS = 1
            fs = Dying()
            fs.snapping = False
            q = Queue(sys.argv[1], "q", filesystem=fs)
            q.enqueue_many(list(range(500)))
            print("enqueued", flush=True)
            q.close()
            """
        )
        child = subprocess.run(
            [sys.executable, "-c", script, self.dir], env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        self.assertEqual(child.returncode, -signal.SIGKILL, child.stderr)
        self.assertIn("enqueued", child.stdout)
        names = sorted(os.listdir(self.dir))
        self.assertNotIn(SNAP, names)
        temps = [n for n in names if n.endswith(".tmp")]
        self.assertEqual(len(temps), 1, names)
        with small_threshold():
            q = Queue(self.dir, NAME)
            self.assertEqual(len(q), 500)
            self.assertNotIn(temps[0], os.listdir(self.dir))  # the dead writer's temp file is gone
            q.close()
        self.assertIn(SNAP, os.listdir(self.dir))
        q = Queue(self.dir, NAME)
        self.assertEqual(len(q), 500)
        q.close()


@unittest.skipUnless(sys.platform != "win32", "POSIX permissions and symlinks")
class AForkWhileOneIsWritten(TempDirTestCase):
    @unittest.skipUnless(hasattr(os, "fork"), "needs os.fork")
    def test_a_child_forked_meanwhile_writes_its_own(self) -> None:
        """A thread of the parent writing a snapshot when the process forks: the child's own snapshots never wait for it."""
        with snapshot._WRITING:  # as a checkpoint's thread holds it while it writes
            pid = os.fork()
            if pid == 0:  # the child: the thread that held the lock is not here
                code = 1
                try:
                    with Queue(self.dir, fsync=False) as q:
                        q.enqueue("x")
                        state = q.storage._state  # type: ignore[attr-defined]
                        snapshot.save(q.storage.fs, self.dir, "default", 0, state, 0, 0)  # type: ignore[attr-defined]
                    code = 0
                finally:
                    os._exit(code)
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self.assertEqual(os.waitstatus_to_exitcode(status), 0)
                return
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        self.fail("the child waited for a lock its parent's thread held")


class FilesAndLeftovers(TempDirTestCase):
    def make(self, n: int = 50) -> None:
        with small_threshold():
            q = Queue(self.dir, NAME)
            q.enqueue_many(list(range(n)))
            q.close()

    def test_snapshot_is_0600_whatever_the_umask(self) -> None:
        old = os.umask(0)
        try:
            self.make()
        finally:
            os.umask(old)
        self.assertEqual(os.stat(os.path.join(self.dir, SNAP)).st_mode & 0o777, 0o600)

    def test_a_symlinked_snapshot_is_not_followed(self) -> None:
        self.make()
        snap = os.path.join(self.dir, SNAP)
        elsewhere = os.path.join(self.dir, "elsewhere.bin")
        os.rename(snap, elsewhere)
        os.symlink(elsewhere, snap)
        with open(elsewhere, "rb") as f:
            original = f.read()
        with self.assertLogs("nobroker", "INFO") as logs:
            q = Queue(self.dir, NAME)
        self.assertTrue(any("symlink" in line for line in logs.output), logs.output)
        self.assertEqual(len(q), 50)
        with small_threshold():
            q.enqueue("one more")
            q.close()  # replaces the link itself, never writes through it
        self.assertFalse(os.path.islink(snap))
        with open(elsewhere, "rb") as f:
            self.assertEqual(f.read(), original)

    def test_repair_removes_snapshots(self) -> None:
        self.make()
        self.assertIn(SNAP, os.listdir(self.dir))
        repair(self.dir, NAME)
        self.assertNotIn(SNAP, os.listdir(self.dir))
        self.assertTrue(verify(self.dir, NAME).ok)

    def test_inspect_and_verify_ignore_snapshots(self) -> None:
        self.make()
        with_snapshot = verify(self.dir, NAME).to_dict()
        os.unlink(os.path.join(self.dir, SNAP))
        self.assertEqual(verify(self.dir, NAME).to_dict(), with_snapshot)

    def test_compaction_leaves_no_stale_snapshot_in_use(self) -> None:
        self.make(300)
        with small_threshold():
            q = Queue(self.dir, NAME)
            for job in q.lease(100):
                q.ack(job)
            q.compact()
            # The compactor left a checkpoint of generation 1 and removed generation 0's snapshot.
            self.assertEqual(sorted(n for n in os.listdir(self.dir) if n.endswith(".snap")), [f"{NAME}.000001.snap"])
            q.enqueue("after compaction")
            q.close()
        with small_threshold():
            q = Queue(self.dir, NAME)
            self.assertNotIn(SNAP, os.listdir(self.dir))
            self.assertEqual(len(q), 201)
            q.close()  # a replay of generation 1: this snapshot is exact
        self.assertIn(f"{NAME}.000001.snap", os.listdir(self.dir))
        q = Queue(self.dir, NAME)
        self.assertEqual(len(q), 201)
        self.assertEqual(q.stats().ready, 201)
        q.close()

    def test_a_stale_snapshot_of_another_generation_is_removed(self) -> None:
        self.make()
        with small_threshold(10**9):
            q = Queue(self.dir, NAME)
            q.compact()
            q.close()
        with open(os.path.join(self.dir, SNAP), "wb") as f:  # as if a peer wrote it late
            f.write(b"stale")
        q = Queue(self.dir, NAME)
        self.assertNotIn(SNAP, os.listdir(self.dir))
        q.close()


if __name__ == "__main__":
    unittest.main()
