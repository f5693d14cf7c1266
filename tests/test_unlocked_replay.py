"""Opening without the file lock (filestore/unlocked.py): the replay up to a noted offset, before the lock.

Owns: an opener's folder fsyncs run before the exclusive lock, and under it
again only after a flip meanwhile; a peer writes while a queue replays; a
compaction or a log cut short meanwhile, or between two passes, is noticed
under the lock; what a peer appends during the replay is read by another
pass, not under the lock; the result equals a replay under the lock
(OpeningWithoutTheLock for both log formats). Imports: the standard
library, nobroker, tests.snapshotsupport and tests.support.
"""

from __future__ import annotations

import os
import unittest
from typing import Any
from unittest import mock

from nobroker import Queue
from nobroker.filestore import unlocked
from nobroker.filestore.storage import FileStorage
from tests.snapshotsupport import NAME, replayed_view, storage_of, view
from tests.support import FakeClock, TempDirTestCase, records_end


class FolderFsyncsBeforeTheLock(TempDirTestCase):
    """An opener fsyncs the folders before it takes the exclusive lock; again under it only if the pointer changed."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = FakeClock()
        with Queue(self.dir, NAME, clock=self.clock, auto_compact=None) as q:
            q.ack_many(q.lease(len(q.enqueue_many([{"i": i} for i in range(100)])) // 2))
            q.compact()  # a pointer exists

    def open_watching(self, between: Any = None) -> list[str]:
        from nobroker.filestore.fs import RealFileSystem
        from nobroker.filestore.recovery import QueueFiles

        events: list[str] = []
        real_sync, real_locate, real_first = RealFileSystem.fsync_dir, QueueFiles._locate, QueueFiles._sync_folders_first

        def sync(fs: Any, path: str) -> None:
            events.append("fsync_dir")
            real_sync(fs, path)

        def locate(files: Any, synced: object) -> None:
            events.append("locked")
            real_locate(files, synced)
            events.append("located")

        pending = [between] if between is not None else []

        def first(files: Any) -> object:
            result = real_first(files)
            if pending:
                pending.pop()()  # once: the peer it runs opens the queue too
                events[:] = ["peer done"]  # what the peer did is not the opener's
            return result

        with mock.patch.object(RealFileSystem, "fsync_dir", sync), mock.patch.object(QueueFiles, "_locate", locate), \
                mock.patch.object(QueueFiles, "_sync_folders_first", first):  # fmt: skip
            Queue(self.dir, NAME, clock=self.clock, auto_compact=None).close()
        return events[: events.index("located")]

    def test_none_under_the_lock_when_the_pointer_stayed(self) -> None:
        self.assertEqual(self.open_watching(), ["fsync_dir", "fsync_dir", "locked"])

    def test_again_under_the_lock_after_a_flip_meanwhile(self) -> None:
        def compact() -> None:
            with Queue(self.dir, NAME, clock=self.clock, auto_compact=None) as peer:
                peer.compact()

        events = self.open_watching(compact)
        self.assertEqual(events, ["peer done", "locked", "fsync_dir", "fsync_dir"])


class OpeningWithoutTheLock(TempDirTestCase):
    #: The log's format: 2 (room set aside after the records: read as far as whole records go), or 1.
    log_format = 2

    def setUp(self) -> None:
        super().setUp()
        self.clock = FakeClock()
        with Queue(self.dir, NAME, clock=self.clock, auto_compact=None, log_format=self.log_format) as q:
            jobs = q.enqueue_many([{"i": i} for i in range(400)])
            q.ack_many(q.lease(100))
            del jobs
        for entry in os.listdir(self.dir):  # as after a crash: no snapshot
            if entry.endswith(".snap"):
                os.unlink(os.path.join(self.dir, entry))

    def open_with(self, during: Any) -> Queue:
        """Open the queue, running ``during()`` while its unlocked replay runs."""
        original = unlocked.prepare
        ran = []

        def prepare(*args: Any) -> Any:
            result = original(*args)
            self.assertIsNotNone(result, "the unlocked replay went through")
            during()
            ran.append(True)
            return result

        with mock.patch.object(unlocked, "prepare", prepare):
            q = Queue(self.dir, NAME, clock=self.clock, auto_compact=None, lock_timeout=2.0)
        self.assertEqual(ran, [True], "the queue replayed without the lock")
        return q

    def test_a_peer_writes_while_a_queue_replays(self) -> None:
        peer = Queue(self.dir, NAME, clock=self.clock, auto_compact=None, lock_timeout=2.0)
        q = self.open_with(lambda: peer.enqueue("while the other replays"))  # a held lock: LockTimeoutError
        try:
            self.assertEqual(view(q), view(peer))
            self.assertEqual(view(q), replayed_view(self.dir, self.clock))
        finally:
            q.close()
            peer.close()

    def test_a_compaction_meanwhile_is_noticed(self) -> None:
        peer = Queue(self.dir, NAME, clock=self.clock, auto_compact=None)
        q = self.open_with(lambda: (peer.enqueue("x"), peer.compact()))
        try:
            self.assertEqual(storage_of(q).generation, 1)
            self.assertEqual(view(q), view(peer))
        finally:
            q.close()
            peer.close()

    def test_a_log_cut_short_meanwhile_is_noticed(self) -> None:
        path = os.path.join(self.dir, f"{NAME}.000000.log")
        size = records_end(path)

        def cut() -> None:
            with open(path, "r+b") as f:
                f.truncate(size - 1)  # as a rollback would (it cuts whole records; a torn one is worse)

        q = self.open_with(cut)
        try:
            self.assertGreater(q.recovery.torn_bytes, 0)
            self.assertEqual(view(q), replayed_view(self.dir, self.clock))
        finally:
            q.close()

    def locked_start(self, q_factory: Any) -> tuple[Queue, int]:
        """A queue from ``q_factory()`` and the offset its replay under the exclusive lock started at."""
        with mock.patch.object(FileStorage, "_read_forward", autospec=True, side_effect=FileStorage._read_forward) as read:
            q = q_factory()
        return q, read.call_args_list[0].args[3]

    def test_what_a_peer_appends_during_the_replay_is_read_by_another_pass_not_under_the_lock(self) -> None:
        path = os.path.join(self.dir, f"{NAME}.000000.log")
        for passes in (0, 1):
            with self.subTest(passes=passes), mock.patch.object(unlocked, "CATCH_UP_MIN_BYTES", 1), \
                    mock.patch.object(unlocked, "CATCH_UP_PASSES", passes):  # fmt: skip
                peer = Queue(self.dir, NAME, clock=self.clock, auto_compact=None)
                before = records_end(path)
                q, start = self.locked_start(lambda: self.open_with(lambda: peer.enqueue_many(list(range(50)))))
                try:
                    after = records_end(path)
                    self.assertGreater(after, before)
                    # Without a second pass the lock reads the peer's records; with one, nothing is left for it.
                    self.assertEqual(start, after if passes else before)
                    self.assertEqual(view(q), view(peer))
                    self.assertEqual(view(q), replayed_view(self.dir, self.clock))
                finally:
                    q.close()
                    peer.close()

    def between_passes(self, during: Any, between: Any) -> Queue:
        """Open the queue: ``during()`` while the first pass runs, ``between()`` before the second (only)."""
        original = unlocked.advance
        passes: list[int] = []

        def advance(*args: Any) -> Any:
            if not passes:
                between()
            passes.append(1)
            return original(*args)

        with mock.patch.object(unlocked, "CATCH_UP_MIN_BYTES", 1), mock.patch.object(unlocked, "advance", advance):
            return self.open_with(during)

    def test_a_log_cut_short_between_the_passes_is_noticed(self) -> None:
        path = os.path.join(self.dir, f"{NAME}.000000.log")
        peer = Queue(self.dir, NAME, clock=self.clock, auto_compact=None)

        def cut() -> None:
            with open(path, "r+b") as f:
                f.truncate(records_end(path) - 1)

        q = self.between_passes(lambda: peer.enqueue_many(list(range(20))), cut)
        try:
            self.assertGreater(q.recovery.torn_bytes, 0)
            self.assertEqual(view(q), replayed_view(self.dir, self.clock))
        finally:
            q.close()
            peer.close()

    def test_a_compaction_between_the_passes_is_noticed(self) -> None:
        peer = Queue(self.dir, NAME, clock=self.clock, auto_compact=None)
        q = self.between_passes(lambda: peer.enqueue_many(list(range(20))), lambda: (peer.enqueue("x"), peer.compact()))
        try:
            self.assertEqual(storage_of(q).generation, 1)
            self.assertEqual(view(q), view(peer))
            self.assertEqual(view(q), replayed_view(self.dir, self.clock))
        finally:
            q.close()
            peer.close()

    def test_the_result_matches_a_replay_under_the_lock(self) -> None:
        q = Queue(self.dir, NAME, clock=self.clock, auto_compact=None)
        try:
            self.assertEqual(q.recovery.records, 600)
            with mock.patch.object(FileStorage, "_prepare_unlocked", lambda self: None):
                plain = Queue(self.dir, NAME, clock=self.clock, auto_compact=None)
            try:
                self.assertEqual(view(q), view(plain))
            finally:
                plain.close()
        finally:
            q.close()


class OpeningWithoutTheLockVersionOne(OpeningWithoutTheLock):
    """The same with a version 1 log, whose size says where its records end (noted under a shared lock)."""

    log_format = 1


if __name__ == "__main__":
    unittest.main()
