"""Checkpoints and replaying without the file lock (filestore/checkpoint.py).

A compactor leaves a checkpoint of the generation it flipped to; a process
that follows the flip loads it before it takes the lock and catches up only
the records after it under the lock. Opening replays up to a noted offset
without the lock. Each is checked against a plain replay, and against what
could go wrong between the unlocked replay and the lock: another compaction,
a log cut short, a damaged or foreign checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import unittest
from typing import Any
from unittest import mock

from nobroker import Queue
from nobroker.filestore import checkpoint, snapshot, unlocked
from nobroker.filestore.state_form import ENCODE_CHUNK, Captured, capture
from nobroker.filestore.storage import FileStorage
from tests.support import FakeClock, TempDirTestCase, records_end
from tests.test_snapshot import copy_dir, workload

NAME = "q"


def storage_of(q: Queue) -> FileStorage:
    storage = q.storage
    assert isinstance(storage, FileStorage)
    return storage


def view(q: Queue) -> dict[str, Any]:
    """What a caller sees of a queue (no lease: that would change it)."""
    return {
        "jobs": [j.to_dict() for j in q.list_jobs()],
        "stats": q.stats().to_dict(),
        "dlq": [j.id for j in q.dlq()],
        "len": len(q),
        "seq": storage_of(q)._state.next_seq,
        "live": storage_of(q)._state.live_bytes,
    }


def replayed_view(directory: str, clock: FakeClock) -> dict[str, Any]:
    """The view of a copy of ``directory`` without any snapshot: a plain replay of the log."""
    copy = directory + f"-replay{random.random()}"
    copy_dir(directory, copy)
    for entry in os.listdir(copy):
        if entry.endswith(".snap"):
            os.unlink(os.path.join(copy, entry))
    q = Queue(copy, NAME, clock=clock, auto_compact=None)
    try:
        assert not storage_of(q)._snap_loaded
        return view(q)
    finally:
        q.close()
        shutil.rmtree(copy, ignore_errors=True)  # beside the test's folder, not in it: nothing else removes it


class Reads:
    """Records every _read_forward of one storage: (start, end, whether the replay began at a snapshot)."""

    def __init__(self, storage: FileStorage) -> None:
        self.calls: list[tuple[int, int]] = []
        original = storage._read_forward

        def spy(log: Any, state: Any, start: int, **kw: Any) -> tuple[int, int]:
            end, torn = original(log, state, start, **kw)
            self.calls.append((start, end))
            return end, torn

        storage._read_forward = spy  # type: ignore[method-assign]


class FollowingACompaction(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.clock = FakeClock()
        self.a = Queue(self.dir, NAME, clock=self.clock, auto_compact=None)
        self.b = Queue(self.dir, NAME, clock=self.clock, auto_compact=None)
        jobs = self.a.enqueue_many([{"i": i} for i in range(300)])
        self.a.ack_many(self.a.lease(len(jobs) // 2))
        self.b.stats()  # b is caught up with generation 0

    def tearDown(self) -> None:
        self.a.close()
        self.b.close()
        super().tearDown()

    def test_the_compactor_leaves_a_checkpoint_of_the_new_generation(self) -> None:
        self.a.compact()
        snaps = sorted(n for n in os.listdir(self.dir) if n.endswith(".snap"))
        self.assertEqual(snaps, [f"{NAME}.000001.snap"])

    def test_the_checkpoint_is_there_before_the_flip(self) -> None:
        """A follower that sees the flip finds the checkpoint at once: it never waits for it, nor replays."""
        from nobroker.filestore import compactor

        real = compactor.finish_flip
        seen: list[bool] = []

        def flip(fs: Any, directory: str, name: str, prepared: str) -> None:
            seen.append(os.path.exists(os.path.join(directory, f"{NAME}.000001.snap")))
            real(fs, directory, name, prepared)

        with mock.patch.object(compactor, "finish_flip", flip):
            self.a.compact()
        self.assertEqual(seen, [True])
        self.assertFalse(os.path.exists(os.path.join(self.dir, f"{NAME}.000000.snap")), "the old one is removed after the flip")
        with mock.patch.object(checkpoint, "CHECKPOINT_WAIT", 0.0):
            self.b.enqueue("b follows")
        self.assertTrue(storage_of(self.b)._snap_loaded)
        self.assertEqual(view(self.b), view(self.a))
        self.assertEqual(view(self.b), replayed_view(self.dir, self.clock))

    def test_the_follower_fsyncs_the_folder_before_the_lock(self) -> None:
        """The flip it follows must be durable before it answers from the new generation: made so without the lock."""
        from nobroker.filestore.fs import RealFileSystem

        b_storage = storage_of(self.b)
        self.a.compact()
        held: list[bool] = []
        real = RealFileSystem.fsync_dir

        def sync(fs: Any, path: str) -> None:
            held.append(b_storage._lock.held)
            real(fs, path)

        with mock.patch.object(RealFileSystem, "fsync_dir", sync):
            self.b.enqueue("b follows")
        self.assertEqual(held, [False])
        self.assertEqual(view(self.b), view(self.a))

    def test_a_compaction_that_fails_before_its_flip_removes_its_checkpoint_and_reloads(self) -> None:
        """The state already points into the new generation when the flip fails: memory is rebuilt from the old one."""
        from nobroker.errors import CompactionError
        from nobroker.filestore import compactor

        expected = view(self.a)

        def fail(*args: Any, **kwargs: Any) -> str:
            raise CompactionError("no flip today")

        with mock.patch.object(compactor, "prepare_flip", fail):
            with self.assertRaises(CompactionError):
                self.a.compact()
        self.assertEqual(sorted(n for n in os.listdir(self.dir) if n.endswith(".snap")), [])
        self.assertTrue(storage_of(self.a)._stale)
        self.assertEqual(view(self.a), expected)
        self.assertEqual(storage_of(self.a).generation, 0)
        self.a.enqueue("after the failed compaction")
        self.b.enqueue("b too")
        self.assertEqual(view(self.b), view(self.a))
        self.assertEqual(view(self.a), replayed_view(self.dir, self.clock))

    def test_only_following_a_flip_waits_for_a_checkpoint_never_a_reload_of_the_same_generation(self) -> None:
        """A reload (after a failed write) runs under the exclusive lock: waiting there for a checkpoint of a
        generation nobody is writing one of would hold every peer up (while a compaction runs: its whole wait)."""
        from nobroker.filestore import recovery

        self.a.compact()
        waited: list[int] = []
        real = recovery.checkpoint.wait_for_checkpoint

        def wait(fs: Any, directory: str, name: str, generation: int, **kwargs: Any) -> bool:
            waited.append(generation)
            return real(fs, directory, name, generation, **kwargs)

        with mock.patch.object(recovery.checkpoint, "wait_for_checkpoint", wait):
            self.b.stats()  # follows the flip to generation 1 (it may wait for the checkpoint there)
            followed = list(waited)
            waited.clear()
            storage_of(self.b)._stale = True  # as after a failed write: reload generation 1 under the lock
            self.b.enqueue("after the reload")
        self.assertEqual(waited, [], "a reload of the same generation waited for a checkpoint")
        self.assertLessEqual(set(followed), {1})
        self.assertEqual(len(self.b), len(self.a))

    def test_a_follower_loads_it_and_reads_only_the_tail_under_the_lock(self) -> None:
        self.a.compact()
        self.a.enqueue("after the flip")  # past the checkpoint: read under the lock
        reads = Reads(storage_of(self.b))
        b_storage = storage_of(self.b)
        took = []
        original = b_storage._prepare_follow

        def watch(sig: Any) -> None:
            original(sig)
            took.append(b_storage._prepared is not None)

        with mock.patch.object(b_storage, "_prepare_follow", watch):
            self.b.enqueue("b follows")
        self.assertEqual(took, [True], "the checkpoint was loaded before the lock")
        self.assertTrue(b_storage._snap_loaded)
        self.assertEqual(b_storage.generation, 1)
        # Under the lock only what came after the checkpoint was read.
        self.assertEqual(len(reads.calls), 1)
        start, end = reads.calls[0]
        self.assertGreater(start, 1000)
        self.assertEqual(view(self.b), view(self.a))
        self.assertEqual(view(self.b), replayed_view(self.dir, self.clock))

    def test_the_generation_it_leaves_is_let_go_after_the_lock(self) -> None:
        """Freeing a large queue's state and closing an unlinked file take long: never while peers wait for the lock."""
        import weakref

        from nobroker.filestore.log import LogFile

        b_storage = storage_of(self.b)
        self.a.compact()
        held: dict[str, bool] = {}
        old_log = b_storage._log
        weakref.finalize(b_storage._state, lambda: held.setdefault("state", b_storage._lock.held))
        real_close = LogFile.close

        def close(log: LogFile) -> None:
            if log is old_log:
                held["log"] = b_storage._lock.held
            real_close(log)

        with mock.patch.object(LogFile, "close", close):
            self.b.enqueue("b follows")
            b_storage._retiring.join()  # the thread that lets go of them
        self.assertEqual(b_storage.generation, 1)
        self.assertEqual(held, {"state": False, "log": False}, "let go of under the lock, or not at all")
        self.assertEqual(view(self.b), view(self.a))

    def test_a_damaged_checkpoint_is_ignored(self) -> None:
        self.a.compact()
        path = os.path.join(self.dir, f"{NAME}.000001.snap")
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            data[len(data) // 2] ^= 0x10
            f.seek(0)
            f.write(data)
        self.b.enqueue("b follows")
        self.assertFalse(storage_of(self.b)._snap_loaded)
        self.assertEqual(view(self.b), view(self.a))

    def test_a_second_compaction_before_the_lock_is_noticed(self) -> None:
        self.a.compact()
        b_storage = storage_of(self.b)
        original = b_storage._prepare_follow

        def then_compact_again(sig: Any) -> None:
            original(sig)
            self.assertIsNotNone(b_storage._prepared)
            self.a.enqueue("between")
            self.a.compact()  # generation 2: what b prepared is stale

        with mock.patch.object(b_storage, "_prepare_follow", then_compact_again):
            self.b.stats()
        self.assertEqual(b_storage.generation, 2)
        self.assertEqual(view(self.b), view(self.a))
        self.assertEqual(view(self.b), replayed_view(self.dir, self.clock))

    def test_random_workloads_follow_correctly(self) -> None:
        rng = random.Random(7)
        for _ in range(6):
            workload(self.a, self.clock, rng, rng.randrange(30, 120))
            self.a.compact()
            workload(self.a, self.clock, rng, rng.randrange(0, 30))
            self.assertEqual(view(self.b), view(self.a))


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


class Checkpoints(TempDirTestCase):
    """A checkpoint is a checked cache: anything wrong with it is ignored."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = FakeClock()
        with Queue(self.dir, NAME, clock=self.clock, auto_compact=None) as q:
            q.enqueue_many(list(range(200)))
            q.ack_many(q.lease(50))
            q.compact()
            q.enqueue_many(list(range(20)))
        self.snap = os.path.join(self.dir, f"{NAME}.000001.snap")
        self.assertTrue(os.path.exists(self.snap))
        self.truth = replayed_view(self.dir, self.clock)

    def opened(self) -> tuple[dict[str, Any], bool]:
        with Queue(self.dir, NAME, clock=self.clock, auto_compact=None) as q:
            return view(q), storage_of(q)._snap_loaded

    def test_a_good_one_is_used(self) -> None:
        self.assertEqual(self.opened(), (self.truth, True))

    def test_bit_flips_are_ignored(self) -> None:
        with open(self.snap, "rb") as f:
            good = f.read()
        for i in range(0, len(good), max(1, len(good) // 40)):
            damaged = bytearray(good)
            damaged[i] ^= 1 << (i % 8)
            with open(self.snap, "wb") as f:
                f.write(damaged)
            with self.subTest(byte=i):
                self.assertEqual(self.opened(), (self.truth, False))

    def test_truncation_is_ignored(self) -> None:
        with open(self.snap, "rb") as f:
            good = f.read()
        for cut in (0, 1, 10, len(good) // 2, len(good) - 1):
            with open(self.snap, "wb") as f:
                f.write(good[:cut])
            with self.subTest(cut=cut):
                self.assertEqual(self.opened(), (self.truth, False))

    def test_one_of_another_generation_is_ignored(self) -> None:
        with open(self.snap, "rb") as f:
            first = f.read()
        with Queue(self.dir, NAME, clock=self.clock, auto_compact=None) as q:
            q.compact()
        second = self.snap.replace("000001", "000002")
        self.assertFalse(os.path.exists(self.snap), "the older checkpoint was removed")
        with open(second, "wb") as f:
            f.write(first)  # generation 1's checkpoint, named as generation 2's
        truth = replayed_view(self.dir, self.clock)
        self.assertEqual(self.opened(), (truth, False))

    def test_one_newer_than_the_log_after_a_torn_tail_is_ignored(self) -> None:
        log = os.path.join(self.dir, f"{NAME}.000001.log")
        with Queue(self.dir, NAME, clock=self.clock, auto_compact=None) as q:
            q.enqueue("one more")
        with mock.patch.object(snapshot, "SNAPSHOT_MIN_RECORDS", 1):
            with Queue(self.dir, NAME, clock=self.clock, auto_compact=None) as q:
                q.enqueue("and its snapshot")  # the snapshot at close covers this record
        size = records_end(log)
        with open(log, "r+b") as f:
            f.truncate(size - 3)  # a torn tail: the last record is cut, the snapshot is past the end
        truth = replayed_view(self.dir, self.clock)
        self.assertEqual(self.opened(), (truth, False))


class CheckpointsAsTheLogGrows(TempDirTestCase):
    def test_a_writer_leaves_one_every_checkpoint_every_records(self) -> None:
        with mock.patch.object(checkpoint, "CHECKPOINT_EVERY", 50):
            q = Queue(self.dir, NAME, auto_compact=None)
            for i in range(120):
                q.enqueue({"i": i})
            storage = storage_of(q)
            storage._close_checkpoints()  # wait for the thread writing one
            snap = os.path.join(self.dir, f"{NAME}.000000.snap")
            self.assertTrue(os.path.exists(snap), "no checkpoint after 120 records")
            q2 = Queue(self.dir, NAME, auto_compact=None)
            try:
                self.assertTrue(storage_of(q2)._snap_loaded, "opening loaded the checkpoint")
                self.assertEqual(len(q2), 120)
                # The checkpoint covered at least 100 of the records: the replay after it read fewer than 50.
                self.assertGreaterEqual(storage_of(q2)._snap_records, 100)
            finally:
                q2.close()
                q.close()

    def test_none_while_a_compaction_runs_and_one_after_it(self) -> None:
        """A compaction leaves the next generation's checkpoint: a writer's own of this one waits, then comes."""
        import fcntl

        from nobroker.filestore.layout import compactor_path

        snap = os.path.join(self.dir, f"{NAME}.000000.snap")
        with mock.patch.object(checkpoint, "CHECKPOINT_EVERY", 50), \
                mock.patch.object(checkpoint, "CHECKPOINT_RETRY", 10):  # fmt: skip
            q = Queue(self.dir, NAME, auto_compact=None)
            try:
                storage = storage_of(q)
                fd = os.open(compactor_path(self.dir, NAME), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)  # as a compacting peer holds it
                    for i in range(120):
                        q.enqueue({"i": i})
                    storage._close_checkpoints()
                    self.assertFalse(os.path.exists(snap), "a checkpoint was written while a compaction ran")
                    self.assertEqual(storage._snap_records, 0)
                    after = storage._checkpoint_after
                    self.assertEqual(after, 120 + 10, "the writer looks again CHECKPOINT_RETRY records later")
                finally:
                    os.close(fd)  # the compaction ended (without a flip)
                for i in range(15):
                    q.enqueue({"after": i})
                storage._close_checkpoints()
                self.assertTrue(os.path.exists(snap), "no checkpoint once the compaction was over")
                self.assertEqual(storage._snap_records, after, "it came at the first look after")
            finally:
                q.close()

    def test_a_writer_that_may_not_take_one_looks_again_only_records_later(self) -> None:
        """Without fsync no checkpoint is ever taken (nothing durable to vouch for): not a look at every write either.

        A look asks the compactor's lock file (an open, a lock, a close): at
        every write once CHECKPOINT_EVERY records went by, that cost a
        non-durable lease and ack 10-18 % more CPU.
        """
        with mock.patch.object(checkpoint, "CHECKPOINT_EVERY", 50), \
                mock.patch.object(checkpoint, "CHECKPOINT_RETRY", 10):  # fmt: skip
            q = Queue(self.dir, NAME, auto_compact=None, fsync=False)
            self.addCleanup(q.close)
            storage = storage_of(q)
            with mock.patch.object(type(storage), "_compaction_busy", autospec=True, return_value=False) as looks:
                for i in range(100):
                    q.enqueue({"i": i})
            self.assertEqual(looks.call_count, 6, "one look at 50 records, then one every 10 (at 60, ... 100)")
            self.assertEqual(storage._snap_records, 0)
            self.assertFalse(os.path.exists(os.path.join(self.dir, f"{NAME}.000000.snap")))

    def test_one_that_fell_due_on_a_lease_not_yet_durable_comes_with_the_next_write(self) -> None:
        """A lease is fsynced lazily: the checkpoint waits for the write that makes it durable, not CHECKPOINT_RETRY records."""
        with mock.patch.object(checkpoint, "CHECKPOINT_EVERY", 50):
            q = Queue(self.dir, NAME, auto_compact=None, visibility_timeout=300)
            self.addCleanup(q.close)
            storage = storage_of(q)
            q.enqueue_many([{"i": i} for i in range(60)])
            storage._close_checkpoints()
            first = storage._snap_records
            self.assertGreaterEqual(first, 50, "no checkpoint after 60 records")
            leased = []
            while storage._state.records - first < 50:
                leased.append(q.lease_one())
            storage._close_checkpoints()
            self.assertEqual(storage._snap_records, first, "a checkpoint vouched for a lease not yet durable")
            q.ack(leased[0])
            storage._close_checkpoints()
            self.assertGreater(storage._snap_records, first, "the write that made it durable took no checkpoint")

    def test_close_waits_for_a_checkpoint_being_written_before_it_writes_the_newer_snapshot(self) -> None:
        """Both write the same .snap: the checkpoint thread's older state must never land after close's."""
        import threading

        real_write = snapshot.write
        close_wrote = threading.Event()
        writes: list[tuple[str, int]] = []

        def write(fs: Any, directory: str, name: str, generation: int, offset: int, *rest: Any) -> str:
            in_thread = threading.current_thread().name == "nobroker-checkpoint"
            if in_thread:
                close_wrote.wait(0.5)  # a slow checkpoint: were close not to wait for it, it would write last
            path = real_write(fs, directory, name, generation, offset, *rest)
            writes.append(("checkpoint" if in_thread else "close", offset))
            if not in_thread:
                close_wrote.set()
            return path

        with mock.patch.object(checkpoint, "CHECKPOINT_EVERY", 5), mock.patch.object(snapshot, "write", write), \
                mock.patch.object(snapshot, "SNAPSHOT_MIN_RECORDS", 1):  # fmt: skip
            q = Queue(self.dir, NAME, auto_compact=None)
            for i in range(6):
                q.enqueue({"i": i})
            for i in range(3):
                q.enqueue({"later": i})
            q.close()
        self.assertEqual([who for who, _ in writes][-1], "close", writes)
        self.assertEqual(writes[-1][1], max(offset for _, offset in writes), writes)
        with Queue(self.dir, NAME, auto_compact=None) as q2:
            self.assertEqual(storage_of(q2)._snap_records, 9, "opening replayed records the close had covered")

    def test_a_crashed_writer_reopens_from_its_checkpoint(self) -> None:
        code = (
            "import os, sys\n"
            "from unittest import mock\n"
            "from nobroker import Queue\n"
            "from nobroker.filestore import checkpoint\n"
            "from nobroker.filestore.recovery import QueueFiles\n"
            "QueueFiles.checkpoint_in_thread = False\n"
            "with mock.patch.object(checkpoint, 'CHECKPOINT_EVERY', 100):\n"
            "    q = Queue(sys.argv[1], 'q', auto_compact=None)\n"
            "    for i in range(250):\n"
            "        q.enqueue({'i': i})\n"
            "    os._exit(0)  # no close: no snapshot at close, only the checkpoints\n"
        )
        import subprocess
        import sys

        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.dirname(__file__)), "src"))
        subprocess.run([sys.executable, "-c", code, self.dir], check=True, env=env, timeout=300)
        q = Queue(self.dir, NAME, auto_compact=None)
        try:
            self.assertTrue(storage_of(q)._snap_loaded)
            self.assertEqual(storage_of(q)._snap_records, 200)
            self.assertEqual(len(q), 250)
        finally:
            q.close()


class ACheckpointOffTheOperation(TempDirTestCase):
    """A periodic checkpoint: the state captured under the mutex, encoded and written after, in a thread."""

    def test_what_happens_after_a_capture_is_not_in_it(self) -> None:
        clock, rng = FakeClock(), random.Random(11)
        with Queue(self.dir, NAME, clock=clock, auto_compact=None, fsync=False) as q:
            workload(q, clock, rng, 400)
            state = storage_of(q)._state
            at_once = capture(state)
            text, blocks = "".join(at_once.fields_json()), at_once.blocks
            later = capture(state)
            workload(q, clock, rng, 400)  # every record type, compactions among them, after the capture
            self.assertEqual(json.loads("".join(later.fields_json())), json.loads(text))
            self.assertEqual(later.blocks, blocks)
            moved = capture(state)
            self.assertNotEqual(json.loads("".join(moved.fields_json())), json.loads(text), "the state moved on")

    def test_the_long_encoding_pauses_between_pieces(self) -> None:
        with Queue(self.dir, NAME, auto_compact=None, fsync=False) as q:
            for i in range(3 * ENCODE_CHUNK):
                q.enqueue({"i": i}, dedupe_key=f"k{i}")  # hot jobs, and as many dedupe keys
            pauses: list[int] = []
            pieces = capture(storage_of(q)._state).fields_json(lambda: pauses.append(1))
            self.assertGreaterEqual(len(pauses), 6, "one pause per piece of jobs and of dedupe keys")
            self.assertEqual(len(json.loads("".join(pieces))["hot"]), 3 * ENCODE_CHUNK)

    def test_the_operation_that_crosses_the_mark_does_not_wait_for_the_encoding(self) -> None:
        import threading

        real = Captured.fields_json
        started, release, finished = threading.Event(), threading.Event(), threading.Event()

        def held(captured: Captured, pause: Any = None) -> list[str]:
            started.set()
            release.wait(30)  # were the encoding inside the operation, the operation would wait here
            finished.set()
            return real(captured, pause)

        with mock.patch.object(checkpoint, "CHECKPOINT_EVERY", 5), mock.patch.object(Captured, "fields_json", held):
            q = Queue(self.dir, NAME, auto_compact=None)
            try:
                for i in range(7):
                    q.enqueue({"i": i})
                self.assertTrue(started.wait(60), "no checkpoint was begun")
                q.enqueue({"while": "it encodes"})
                self.assertFalse(finished.is_set(), "the operations waited for the checkpoint's encoding")
                release.set()
                storage_of(q)._close_checkpoints()
                self.assertTrue(finished.is_set())
            finally:
                release.set()
                q.close()
        with Queue(self.dir, NAME, auto_compact=None) as q2:
            self.assertTrue(storage_of(q2)._snap_loaded, "the checkpoint loads (a close of 8 records writes none)")
            self.assertEqual(len(q2), 8)


class CheckpointsUnderPowerCuts(unittest.TestCase):
    """A cut at every mutating disk call of writing a checkpoint: the acknowledged state, always."""

    def test_every_cut_while_a_checkpoint_is_written(self) -> None:
        from tests.simdisk import POWER_CUT_MODES, SimDisk, fresh_queue_path
        from nobroker.filestore.recovery import QueueFiles

        disk = SimDisk()
        path = fresh_queue_path(disk, random.Random(3))
        rng = random.Random(4)
        cuts: list[tuple[str, SimDisk, Any]] = []
        writes = []
        before_flip: dict[str, Any] = {}

        def jobs(q: Queue) -> dict[str, Any]:
            return {j.id: j.to_dict() for j in q.list_jobs()}

        q = Queue(path, filesystem=disk, clock=FakeClock(), auto_compact=None)
        original_write = QueueFiles._write_checkpoint
        original_save = checkpoint.save_before_flip

        def write(self: Any, *args: Any) -> None:
            expected = jobs(q)
            writes.append(len(cuts))

            def cut(d: SimDisk, op: str) -> None:
                cuts.extend((f"{mode} cut before {op} (periodic)", d.power_cut(mode, rng), expected) for mode in POWER_CUT_MODES)

            disk.before_mutation = cut
            try:
                original_write(self, *args)
            finally:
                disk.before_mutation = None

        def save(*args: Any) -> Any:
            def cut(d: SimDisk, op: str) -> None:
                cuts.extend((f"{mode} cut before {op} (compaction)", d.power_cut(mode, rng), before_flip) for mode in POWER_CUT_MODES)

            disk.before_mutation = cut
            try:
                return original_save(*args)
            finally:
                disk.before_mutation = None

        with mock.patch.object(checkpoint, "CHECKPOINT_EVERY", 10), \
                mock.patch.object(QueueFiles, "checkpoint_in_thread", False), \
                mock.patch.object(QueueFiles, "_write_checkpoint", write), \
                mock.patch.object(checkpoint, "save_before_flip", save):  # fmt: skip
            for i in range(25):
                q.enqueue({"n": i})
            q.ack_many(q.lease(5))
            periodic = len(cuts)
            before_flip.update(jobs(q))  # the checkpoint is written before the flip: the old generation is the truth
            q.compact()
            q.close()
        self.assertGreaterEqual(len(writes), 2, "the workload wrote periodic checkpoints")
        self.assertGreater(periodic, 0)
        self.assertGreater(len(cuts), periodic, "the compaction's checkpoint was cut too")
        loaded = ignored = 0
        for where, cut_disk, expected in cuts:
            with self.subTest(where=where):
                with Queue(path, filesystem=cut_disk, clock=FakeClock(), auto_compact=None) as opened:
                    self.assertEqual(jobs(opened), expected)
                    if storage_of(opened)._snap_loaded:
                        loaded += 1
                    else:
                        ignored += 1
        self.assertGreater(loaded, 0, "no cut left a usable checkpoint")
        self.assertGreater(ignored, 0, "no cut left a missing or torn checkpoint")


if __name__ == "__main__":
    unittest.main()
