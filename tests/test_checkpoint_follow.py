"""Following a compaction: the compactor's checkpoint, loaded by a peer before it takes the lock.

Owns: a compactor leaves a checkpoint of the generation it flips to, there
before the flip (removed, and memory rebuilt from the old generation, when
the flip fails); a process that follows the flip loads it and fsyncs the
folder before the lock, reads only the records after it under the lock,
and lets go of the generation it leaves after the lock; only following a
flip waits for a checkpoint; a damaged one is ignored, a second compaction
before the lock is noticed, and random workloads followed across
compactions show what the compactor shows. Imports: the standard library,
nobroker, tests.snapshotsupport and tests.support.
"""

from __future__ import annotations

import os
import random
import unittest
from typing import Any
from unittest import mock

from nobroker import Queue
from nobroker.filestore import checkpoint
from nobroker.filestore.storage import FileStorage
from tests.snapshotsupport import NAME, replayed_view, storage_of, view, workload
from tests.support import FakeClock, TempDirTestCase


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

    def test_nothing_is_read_without_the_lock_from_the_generation_a_peer_flipped_away_from(self) -> None:
        """What a peer appended there before the flip is in the new generation: reading it would be work thrown away.

        After a compaction of a busy queue that was tens of thousands of
        records, read by the look before the lock or while it was busy: a
        second of work for the first operation after it, at 1,000,000 jobs.
        """
        b_storage = storage_of(self.b)
        self.a.enqueue("a peer's")
        self.b.stats()  # b found a peer's record under the lock: it looks before the lock from now on
        self.a.enqueue_many([{"before the flip": i} for i in range(200)])
        self.a.compact()
        offset = b_storage._offset
        self.assertFalse(b_storage._read_unlocked_quietly(), "it read on while the lock was busy")  # the lock's meanwhile
        self.assertEqual(b_storage._offset, offset)
        read: list[tuple[int, int, int]] = []
        original = b_storage._read_forward

        def spy(log: Any, state: Any, start: int, **kw: Any) -> tuple[int, int]:
            end, torn = original(log, state, start, **kw)
            read.append((log.generation, start, end))
            return end, torn

        with mock.patch.object(b_storage, "_read_forward", spy):
            self.b.enqueue("b follows")  # its look before the lock, then the catch-up under it
        self.assertEqual(b_storage.generation, 1)
        self.assertEqual([generation for generation, _start, _end in read], [1], "generation 0 was read on")
        self.assertEqual(view(self.b), view(self.a))
        self.assertEqual(view(self.b), replayed_view(self.dir, self.clock))

    def test_what_peers_append_while_the_checkpoint_loads_is_read_before_the_lock(self) -> None:
        """The follower catches up without the lock after loading, as an opener does: the lock covers a moment."""
        from nobroker.filestore import unlocked

        b_storage = storage_of(self.b)
        self.a.compact()
        real_prepare = unlocked.prepare

        def prepare_while_a_appends(*args: Any, **kwargs: Any) -> Any:
            prepared = real_prepare(*args, **kwargs)
            self.a.enqueue_many([{"while b loads": i} for i in range(50)])  # a peer, meanwhile
            return prepared

        reads = Reads(b_storage)
        with mock.patch.object(unlocked, "prepare", prepare_while_a_appends):
            self.b.enqueue("b follows")
        self.assertEqual(b_storage.generation, 1)
        # Under the lock: one look, which found nothing left but b's own append after it.
        self.assertEqual(len(reads.calls), 1)
        start, end = reads.calls[0]
        self.assertEqual(start, end, "what a appended while b loaded was read under the lock")
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


if __name__ == "__main__":
    unittest.main()
