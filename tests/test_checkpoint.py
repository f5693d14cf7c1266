"""Checkpoints (filestore/checkpoint.py): the state a writer leaves as its log grows, and the one a compactor leaves.

Owns: a checkpoint is a checked cache (a good one is used; bit flips,
truncation, one of another generation, one past the log's end after a torn
tail are ignored); when a writer leaves one as the log grows (not while a
compaction runs, not without fsync, not before a lease is durable, never
after close's newer snapshot) and that a crashed writer reopens from it;
the capture made under the mutex and encoded off the operation; a power cut
at every mutating disk call while one is written. A peer following a
compaction by its checkpoint is tests/test_checkpoint_follow.py; opening
without the lock tests/test_unlocked_replay.py. Imports: the standard
library, nobroker, tests.simdisk, tests.snapshotsupport and tests.support.
"""

from __future__ import annotations

import json
import os
import random
import unittest
from typing import Any
from unittest import mock

from nobroker import Queue
from nobroker.filestore import checkpoint, snapshot
from nobroker.filestore.state_form import ENCODE_CHUNK, Captured, capture
from tests.snapshotsupport import NAME, replayed_view, storage_of, view, workload
from tests.support import FakeClock, TempDirTestCase, records_end


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

    def test_none_while_the_id_table_grows_and_one_once_it_has(self) -> None:
        """A capture moves what the growing id table still owes, under the mutex: the checkpoint waits for tidy() instead."""
        from nobroker.filestore import index

        with mock.patch.object(checkpoint, "CHECKPOINT_EVERY", 50):
            q = Queue(self.dir, NAME, auto_compact=None)
            self.addCleanup(q.close)
            storage = storage_of(q)
            state = storage._state
            for i in range(200):
                q.enqueue({"i": i})
            storage._close_checkpoints()
            first = storage._snap_records
            self.assertGreaterEqual(first, 150, "checkpoints every 50 records")
        with mock.patch.object(checkpoint, "CHECKPOINT_EVERY", 50), mock.patch.object(index, "GROW_STEP", 0):
            state._start_growing()
            writes = 0
            while state.growing:  # each write's tidy() moves two rows (two per row the write added)
                self.assertLess(writes, 500)
                q.enqueue({"more": writes})
                writes += 1
                storage._close_checkpoints()
                if state.growing:
                    self.assertEqual(storage._snap_records, first, "a checkpoint was taken while the table grew")
            self.assertGreater(200 + writes - first, 50, "CHECKPOINT_EVERY records went by while it grew")
            q.enqueue({"last": True})
            storage._close_checkpoints()
            self.assertGreaterEqual(storage._snap_records, 200 + writes, "the checkpoint came once it had grown")

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
