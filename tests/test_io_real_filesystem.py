"""Real filesystems: a tiny tmpfs for a real ENOSPC, a read-only remount and bind mount for a real EROFS (root only).

Owns: a full disk raises StorageError with errno ENOSPC and loses nothing,
and the queue works again once space is freed; a read-only filesystem is
read (API and CLI; a torn tail read around, not cut; without a lock file,
with a warning that the view may be stale) and every write refused in one
line; a read-only bind mount follows a writer on the other side. Without
root, or where mounting is not allowed, each test is skipped with the
reason. Imports: the standard library, nobroker's public API and
filestore.admin, tests.clisupport (run_main) and tests.ioerrorsupport
(TOTALS).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import unittest
from collections.abc import Callable
from typing import Any

from nobroker import Queue, StorageError
from nobroker.filestore.admin import verify
from tests.ioerrorsupport import TOTALS


def _root_mount(args: list[str]) -> str | None:
    """Run mount/umount; None on success, else why not."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")


class RealFilesystem(unittest.TestCase):
    """A real tiny tmpfs (real ENOSPC) and a read-only remount (real EROFS). Root only."""

    def setUp(self) -> None:
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            self.skipTest("needs root to mount a tmpfs")
        if not shutil.which("mount"):
            self.skipTest("no mount command")
        self.mnt = tempfile.mkdtemp(prefix="nobroker-tmpfs-")
        why = _root_mount(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", self.mnt])
        if why is not None:
            os.rmdir(self.mnt)
            self.skipTest(f"cannot mount a tmpfs here: {why}")
        self.addCleanup(self._unmount)

    def _unmount(self) -> None:
        _root_mount(["umount", "-l", self.mnt])
        shutil.rmtree(self.mnt, ignore_errors=True)

    def test_a_full_disk_raises_and_loses_nothing(self) -> None:
        path = os.path.join(self.mnt, "q")
        acknowledged = []
        blob = "x" * 20_000
        ballast = os.path.join(self.mnt, "ballast")
        with open(ballast, "wb") as f:  # the space a user frees once the disk is full
            f.write(bytes(256 * 1024))
        with Queue(path, auto_compact=None) as q:
            with self.assertRaises(StorageError) as caught:
                for i in range(1_000):
                    acknowledged.append(q.enqueue({"i": i, "blob": blob}).id)
            self.assertEqual(caught.exception.errno, errno.ENOSPC)
            self.assertIn("disk is full", str(caught.exception))
            self.assertGreater(len(acknowledged), 5)
            os.remove(ballast)
            # The failed append was rolled back, so the queue keeps working once space is freed.
            for job_id in acknowledged[:10]:
                job = q.lease_one()
                assert job is not None
            TOTALS["faults injected"] += 1
        with Queue(path, auto_compact=None) as q:
            self.assertEqual({j.id for j in q.list_jobs()}, set(acknowledged))
            self.assertTrue(verify(path).ok)
            self.assertGreater(q.purge(), 0)
            q.compact()
            q.enqueue({"after": "space freed"})

    def remount(self, mode: str) -> None:
        why = _root_mount(["mount", "-o", f"remount,{mode}", self.mnt])
        if why is not None:
            self.skipTest(f"cannot remount {mode}: {why}")
        if mode == "ro":
            self.addCleanup(_root_mount, ["mount", "-o", "remount,rw", self.mnt])

    def fill(self, path: str) -> dict[str, Any]:
        """A queue with a job in every state; returns what reading it shows."""
        with Queue(path, auto_compact=None) as q:
            q.enqueue("kept", job_id="kept")
            q.enqueue_many(["a", "b", "c"])
            done, dead, leased = q.lease(3)
            q.ack(done, result={"ok": True})
            q.nack(dead, error="boom", permanent=True)
            return {"stats": q.stats().to_dict(), "jobs": [j.to_dict() for j in q.list_jobs()], "leased": leased.id}

    def test_a_read_only_filesystem_is_read_and_every_write_refused_in_one_line(self) -> None:
        path = os.path.join(self.mnt, "q")
        before = self.fill(path)
        self.remount("ro")
        with Queue(path) as q:
            self.assertEqual(q.stats().to_dict(), before["stats"])
            self.assertEqual([j.to_dict() for j in q.list_jobs()], before["jobs"])
            self.assertEqual(q.get("kept").payload, "kept")
            self.assertEqual((len(q), len(q.dlq())), (4, 1))
            self.assertIsInstance(q.wait_for_jobs(0.01), bool)  # polls: no pipe can be made there
            writes: dict[str, Callable[[], Any]] = {
                "enqueue": lambda: q.enqueue("more"), "lease": lambda: q.lease(1),
                "ack": lambda: q.ack(before["leased"]), "nack": lambda: q.nack(before["leased"]),
                "extend": lambda: q.extend(before["leased"], 5), "set_stage": lambda: q.set_stage(before["leased"], "x"),
                "requeue_dead": q.requeue_dead, "purge": q.purge, "compact": q.compact,
            }  # fmt: skip
            for name, write in writes.items():
                with self.subTest(write=name):
                    with self.assertRaises(StorageError) as caught:
                        write()
                    message = str(caught.exception)
                    self.assertEqual(caught.exception.errno, errno.EROFS)
                    self.assertIn("read-only", message)
                    self.assertNotIn("\n", message)
            self.assertEqual([j.to_dict() for j in q.list_jobs()], before["jobs"], "a refused write changed something")
        report = verify(path)
        self.assertTrue(report.ok, report.problems)
        self.assertEqual(report.jobs, 4)
        self.remount("rw")
        with Queue(path) as q:
            self.assertEqual([j.to_dict() for j in q.list_jobs()], before["jobs"])
            q.enqueue("writable again")

    def test_the_cli_reads_a_read_only_queue(self) -> None:
        from tests.clisupport import run_main

        path = os.path.join(self.mnt, "q")
        before = self.fill(path)
        self.remount("ro")
        stats = run_main(["--dir", path, "--json", "stats"])
        self.assertEqual(stats.code, 0, stats.err)
        self.assertEqual(stats.json(), before["stats"])
        listing = run_main(["--dir", path, "--json", "list"])
        self.assertEqual(listing.code, 0, listing.err)
        self.assertEqual(len(listing.json()), 4)  # type: ignore[arg-type]
        got = run_main(["--dir", path, "--json", "get", "kept"])
        self.assertEqual(got.code, 0, got.err)
        self.assertEqual(got.json()["payload"], "kept")  # type: ignore[index]
        refused = run_main(["--dir", path, "enqueue", "more"])
        self.assertEqual(refused.code, 1)
        self.assertEqual(len(refused.err.strip().splitlines()), 1, refused.err)
        self.assertIn("read-only", refused.err)

    def test_a_torn_tail_on_a_read_only_filesystem_is_read_around_not_cut(self) -> None:
        path = os.path.join(self.mnt, "q")
        self.fill(path)
        log = os.path.join(path, "default.000000.log")
        with open(log, "ab") as f:
            f.write(b"\x05\x00\x00")
        size = os.path.getsize(log)
        self.remount("ro")
        with Queue(path) as q:
            self.assertEqual(len(q), 4)
            self.assertEqual(q.recovery.torn_bytes, 0, "a reader cannot cut, and says it cut nothing")
        self.assertEqual(os.path.getsize(log), size)

    def test_without_a_lock_file_it_reads_and_says_the_view_may_be_stale(self) -> None:
        path = os.path.join(self.mnt, "q")
        before = self.fill(path)
        os.unlink(os.path.join(path, "default.lock"))
        self.remount("ro")
        with self.assertLogs("nobroker", "WARNING") as logs, Queue(path) as q:
            self.assertEqual(q.stats().to_dict(), before["stats"])
        self.assertIn("stale", " ".join(logs.output))
        with self.assertRaises(StorageError) as caught:
            Queue(path, "missing")
        self.assertIn("no queue named 'missing'", str(caught.exception))

    def test_a_read_only_bind_mount_follows_a_writer_on_the_other_side(self) -> None:
        view = tempfile.mkdtemp(prefix="nobroker-ro-view-")
        self.addCleanup(os.rmdir, view)
        for args in (["mount", "--bind", self.mnt, view], ["mount", "-o", "remount,bind,ro", view]):
            why = _root_mount(args)
            if why is not None:
                self.skipTest(f"cannot make a read-only bind mount: {why}")
        self.addCleanup(_root_mount, ["umount", "-l", view])
        path = os.path.join(self.mnt, "q")
        self.fill(path)
        with Queue(path) as writer, Queue(os.path.join(view, "q")) as reader:
            self.assertEqual(len(reader), 4)
            writer.enqueue("seen through the view", job_id="new")
            self.assertEqual(reader.get("new").payload, "seen through the view")
            writer.compact()  # the reader follows the new generation too
            self.assertEqual(len(reader), 4)
            with self.assertRaises(StorageError):
                reader.enqueue("not here")


if __name__ == "__main__":
    unittest.main()
