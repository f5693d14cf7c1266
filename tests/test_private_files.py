"""Private by default: folder 0700, files 0600 whatever the umask; unsafe folders and symlinks refused.

Owns: the permission, ownership and symlink tests of the file storage (real
files, real umask, chown to ``nobody`` when running as root). Imports: the
standard library, nobroker's public API and tests.support.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Any

from nobroker import Queue, UnsafeQueueError
from nobroker.filestore import wake
from nobroker.filestore.fs import not_a_regular_file
from nobroker.filestore.admin import verify

POSIX = sys.platform != "win32"


def mode_of(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@unittest.skipUnless(POSIX, "POSIX permissions")
class PrivateFiles(unittest.TestCase):
    def setUp(self) -> None:
        self.parent = tempfile.mkdtemp(prefix="nobroker-private-")
        self.addCleanup(shutil.rmtree, self.parent, True)
        self.dir = os.path.join(self.parent, "q")

    def use_every_file(self, path: str) -> None:
        """Create the log, the lock, a compaction's generation and pointer."""
        with Queue(path) as q:
            q.enqueue("a")
            job = q.lease_one()
            assert job is not None
            q.ack(job)
            q.enqueue("b")
            q.compact()
            q.enqueue("c")

    def test_folder_0700_and_files_0600_whatever_the_umask(self) -> None:
        for umask in (0o000, 0o002, 0o022, 0o077, 0o027):
            with self.subTest(umask=oct(umask)):
                path = os.path.join(self.parent, f"q{umask:o}")
                old = os.umask(umask)
                try:
                    self.use_every_file(path)
                finally:
                    os.umask(old)
                self.assertEqual(mode_of(path), 0o700)
                names = sorted(os.listdir(path))
                self.assertIn("default.current", names)
                self.assertIn("default.lock", names)
                for name in names:
                    self.assertEqual(mode_of(os.path.join(path, name)), 0o600, f"{name} under umask {umask:o}")

    def test_a_folder_writable_by_others_is_refused(self) -> None:
        os.mkdir(self.dir)
        for mode in (0o777, 0o702, 0o1777):
            with self.subTest(mode=oct(mode)):
                os.chmod(self.dir, mode)
                with self.assertRaises(UnsafeQueueError) as caught:
                    Queue(self.dir)
                self.assertIn("writable by every user", str(caught.exception))
                self.assertIn("chmod 700", str(caught.exception))
        self.assertEqual(os.listdir(self.dir), [], "a refused folder got files")
        self.assertFalse(verify(self.dir).ok)

    def test_a_group_readable_folder_the_user_made_is_accepted(self) -> None:
        os.mkdir(self.dir)
        os.chmod(self.dir, 0o750)
        with Queue(self.dir) as q:
            q.enqueue("x")
        for name in os.listdir(self.dir):
            self.assertEqual(mode_of(os.path.join(self.dir, name)), 0o600)

    @unittest.skipUnless(hasattr(os, "geteuid") and os.geteuid() == 0, "needs root to chown a folder to nobody")
    def test_a_folder_owned_by_another_user_is_refused(self) -> None:
        import pwd

        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            self.skipTest("no user named nobody")
        self.use_every_file(self.dir)
        os.chown(self.dir, nobody.pw_uid, nobody.pw_gid)
        before = sorted(os.listdir(self.dir))
        with self.assertRaises(UnsafeQueueError) as caught:
            Queue(self.dir)
        self.assertIn(f"uid {nobody.pw_uid}", str(caught.exception))
        self.assertIn("folder you own", str(caught.exception))
        self.assertEqual(sorted(os.listdir(self.dir)), before)
        self.assertFalse(verify(self.dir).ok)

    def test_symlinked_queue_files_are_refused(self) -> None:
        self.use_every_file(self.dir)
        outside = os.path.join(self.parent, "outside")
        for name in ("default.000001.log", "default.current", "default.lock"):
            with self.subTest(name=name):
                path = os.path.join(self.dir, name)
                real = os.path.join(self.parent, "real-" + name)
                shutil.copyfile(path, real)
                os.unlink(path)
                os.symlink(real, path)
                with open(real, "rb") as f:
                    content = f.read()
                with self.assertRaises(UnsafeQueueError) as caught:
                    Queue(self.dir)
                self.assertIn("symlink", str(caught.exception))
                with open(real, "rb") as f:
                    self.assertEqual(f.read(), content, "the symlink target was changed")
                os.unlink(path)
                shutil.copyfile(real, path)
                os.chmod(path, 0o600)
        self.assertFalse(os.path.exists(outside))
        with Queue(self.dir) as q:
            self.assertEqual(len(q), 2)

    def test_a_symlink_planted_at_a_temp_file_name_is_not_followed(self) -> None:
        """Temp files are created with O_EXCL: a link waiting at the name is removed, never written through."""
        self.use_every_file(self.dir)
        victim = os.path.join(self.parent, "victim")
        with open(victim, "w") as f:
            f.write("precious")
        for name in (f"default.current.{os.getpid()}.tmp", f"default.000002.log.{os.getpid()}.tmp"):
            os.symlink(victim, os.path.join(self.dir, name))
        with Queue(self.dir) as q:
            q.compact()
            self.assertEqual(len(q), 2)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")

    def test_a_queue_folder_that_is_a_file_is_refused(self) -> None:
        with open(self.dir, "w") as f:
            f.write("not a folder")
        with self.assertRaises(UnsafeQueueError) as caught:
            Queue(self.dir)
        self.assertIn("not a folder", str(caught.exception))

    def test_a_network_filesystem_is_refused(self) -> None:
        """NFS/SMB break flock and rename atomicity; the queue must refuse them where the OS can tell."""
        mounts = []
        try:
            with open("/proc/mounts") as f:
                for line in f:
                    _dev, point, fstype = line.split()[:3]
                    if fstype.startswith(("nfs", "cifs", "smb")) and os.access(point, os.W_OK):
                        mounts.append(point)
        except OSError:
            self.skipTest("no /proc/mounts to find a network filesystem")
        if not mounts:
            self.skipTest("no writable network filesystem mounted here")
        path = tempfile.mkdtemp(prefix="nobroker-nfs-", dir=mounts[0])
        self.addCleanup(shutil.rmtree, path, True)
        with self.assertRaises(UnsafeQueueError) as caught:
            Queue(os.path.join(path, "q"))
        self.assertIn("network", str(caught.exception))


#: Generous: opening a queue takes well under a second; a hang must not take the suite with it.
CHILD_TIMEOUT = 60.0
ENV = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
#: Opens the queue in argv[1] (and compacts with argv[2] == "compact"); prints what happened.
CHILD = """
import sys
from nobroker import Queue
try:
    with Queue(sys.argv[1]) as q:
        q.stats()
        if sys.argv[2] == "compact":
            q.compact()
except Exception as exc:
    print(type(exc).__name__ + ": " + str(exc))
else:
    print("opened")
"""


@unittest.skipUnless(POSIX and hasattr(os, "mkfifo"), "named pipes")
class SpecialFiles(unittest.TestCase):
    """A named pipe, a folder or a socket at a queue file's name: refused at once, never waited on."""

    def setUp(self) -> None:
        self.parent = tempfile.mkdtemp(prefix="nobroker-special-")
        self.addCleanup(shutil.rmtree, self.parent, True)
        self.dir = os.path.join(self.parent, "q")
        PrivateFiles.use_every_file(self, self.dir)  # type: ignore[arg-type]

    def in_a_child(self, action: str = "open") -> str:
        try:
            done = subprocess.run(
                [sys.executable, "-c", CHILD, self.dir, action], env=ENV, capture_output=True, text=True,
                timeout=CHILD_TIMEOUT,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            self.fail(f"{action} of the queue hung for {CHILD_TIMEOUT:g} s (it waited on a special file)")
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.strip()

    def plant(self, name: str, make: Any) -> str:
        path = os.path.join(self.dir, name)
        if os.path.lexists(path):
            os.unlink(path)
        make(path)
        return path

    def test_a_named_pipe_at_any_queue_file_is_refused_at_once(self) -> None:
        files = {
            "default.current": "open", "default.000001.log": "open", "default.000001.snap": "open",
            "default.lock": "open", "default.compactor": "compact",
        }  # fmt: skip
        for name, action in files.items():
            with self.subTest(name=name):
                saved = os.path.join(self.parent, "saved")
                real = os.path.join(self.dir, name)
                if os.path.exists(real):
                    os.replace(real, saved)
                path = self.plant(name, os.mkfifo)
                outcome = self.in_a_child(action)
                self.assertTrue(outcome.startswith("UnsafeQueueError: "), outcome)
                self.assertIn(f"{path} is a named pipe, not a regular file", outcome)
                os.unlink(path)
                if os.path.exists(saved):
                    os.replace(saved, real)
                self.assertEqual(self.in_a_child(action), "opened")

    def test_a_folder_or_a_socket_at_a_queue_file_is_refused(self) -> None:
        def bind(path: str) -> None:
            server = socket.socket(socket.AF_UNIX)
            self.addCleanup(server.close)
            server.bind(path)

        for name, make, kind in (
            ("default.lock", os.mkdir, "a folder"), ("default.current", os.mkdir, "a folder"),
            ("default.lock", bind, "a socket"), ("default.000001.snap", bind, "a socket"),
        ):  # fmt: skip
            with self.subTest(name=name, kind=kind):
                saved = os.path.join(self.parent, "saved")
                real = os.path.join(self.dir, name)
                if os.path.exists(real):
                    os.replace(real, saved)
                path = self.plant(name, make)
                expected = not_a_regular_file(path, os.lstat(path).st_mode)
                self.assertEqual(self.in_a_child(), f"UnsafeQueueError: {expected}")
                self.assertIn(f"is {kind}, not a regular file", str(expected))
                (os.rmdir if os.path.isdir(path) else os.unlink)(path)
                if os.path.exists(saved):
                    os.replace(saved, real)

    def test_verify_reports_a_named_pipe_as_a_problem(self) -> None:
        os.unlink(os.path.join(self.dir, "default.000001.log"))
        self.plant("default.000001.log", os.mkfifo)
        code = "import sys\nfrom nobroker.filestore.admin import verify\nprint(verify(sys.argv[1]).problems)"
        done = subprocess.run(
            [sys.executable, "-c", code, self.dir], env=ENV, capture_output=True, text=True, timeout=CHILD_TIMEOUT
        )
        self.assertIn("is a named pipe", done.stdout, done.stderr)

    def test_a_regular_file_at_a_wake_pipe_name_is_never_written(self) -> None:
        for name in ("default.wake", "default.wake-kinds"):
            self.plant(name, lambda path: open(path, "xb").close())
        with self.assertLogs("nobroker", "WARNING") as logs, Queue(self.dir) as q:
            self.assertFalse(q.wakes_waiters(), "a regular file cannot wake anyone")
            self.assertFalse(q.wait_for_jobs(0.05, kinds=["x"]))
            for _ in range(3):
                q.enqueue("wake up")
                job = q.lease_one()
                q.nack(job, delay=0)  # type: ignore[arg-type]
                time.sleep(wake.RETRY_OPEN * 1.5)  # past a writer's pause between tries
        for name in ("default.wake", "default.wake-kinds"):
            self.assertEqual(os.path.getsize(os.path.join(self.dir, name)), 0, f"{name} was written to")
        warnings = [line for line in logs.output if "not a named pipe" in line]
        self.assertEqual(len(warnings), 2, logs.output)  # one per name, not one per wake-up


if __name__ == "__main__":
    unittest.main()
