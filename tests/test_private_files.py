"""Private by default: folder 0700, files 0600 whatever the umask; unsafe folders and symlinks refused.

Owns: the permission, ownership and symlink tests of the file storage (real
files, real umask, chown to ``nobody`` when running as root). Imports: the
standard library, nobroker's public API and tests.support.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import unittest

from nobroker import Queue, UnsafeQueueError
from nobroker.maintenance import verify

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


if __name__ == "__main__":
    unittest.main()
