"""State snapshots (snapshot.py): a checked cache that must never change what a queue holds.

Owns: opening with a snapshot gives exactly what replaying the whole log
gives (random workloads, compared job by job, in list order, stats and the
order of the next leases), also with records a peer appended after it, at
the very end of the log, and loaded from a deep stack; a result changed by
the caller after its ack is not snapshotted; no snapshot below the
threshold or without fsync; a loaded one is used, read through a mapping
let go after loading. Bad snapshots are tests/test_snapshot_damage.py;
writing them, their files and leftovers tests/test_snapshot_files.py.
Imports: the standard library, nobroker, tests.semantics (the deepest
values), tests.snapshotsupport and tests.support.
"""

from __future__ import annotations

import os
import random
import shutil
import unittest
from typing import Any
from unittest import mock

from nobroker import Queue
from nobroker.filestore import snapshot
from nobroker.filestore.storage import FileStorage
from tests.snapshotsupport import NAME, SNAP, copy_dir, picture, small_threshold, workload
from tests.support import FakeClock, TempDirTestCase, records_end


class SnapshotMatchesReplay(TempDirTestCase):
    def compare(self, directory: str, clock: FakeClock) -> None:
        """Open with the snapshot and without it (in a copy): everything must be equal."""
        snaps = [n for n in os.listdir(directory) if n.endswith(".snap")]
        self.assertEqual(len(snaps), 1, os.listdir(directory))
        without = directory + "-nosnap"
        copy_dir(directory, without)
        self.addCleanup(shutil.rmtree, without, True)  # beside the test's folder when it is the folder itself
        os.unlink(os.path.join(without, snaps[0]))
        now = clock()
        with_snapshot = picture(directory, clock, True)
        clock._now = now
        replayed = picture(without, clock, False)
        self.assertEqual(with_snapshot, replayed)

    def test_random_workloads(self) -> None:
        for seed in range(12):
            with self.subTest(seed=seed), small_threshold():
                rng = random.Random(seed)
                directory = os.path.join(self.dir, f"s{seed}")
                clock = FakeClock()
                q = Queue(directory, NAME, clock=clock, auto_compact=None, visibility_timeout=20.0)
                workload(q, clock, rng, rng.randrange(50, 400))
                q.close()
                # A second life on top of the loaded snapshot, then a fresh snapshot.
                q = Queue(directory, NAME, clock=clock, auto_compact=None, visibility_timeout=20.0)
                workload(q, clock, rng, rng.randrange(20, 200))
                q.close()
                if not [n for n in os.listdir(directory) if n.endswith(".snap")]:
                    with small_threshold(0):  # it compacted last: take the snapshot on a replay
                        Queue(directory, NAME, clock=clock, auto_compact=None).close()
                self.compare(directory, clock)

    def test_records_a_peer_appended_after_the_snapshot_are_read_forward(self) -> None:
        clock = FakeClock()
        with small_threshold():
            q = Queue(self.dir, NAME, clock=clock)
            q.enqueue_many(list(range(100)))
            first = q.lease(3)
            q.close()
            size = os.path.getsize(os.path.join(self.dir, SNAP))
            peer = Queue(self.dir, NAME, clock=clock)
            peer.ack(first[0])
            peer.enqueue("late", priority=9)
            # Closed without enough new records for a snapshot of its own: the old one stays.
            with small_threshold(10**9):
                peer.close()
            self.assertEqual(os.path.getsize(os.path.join(self.dir, SNAP)), size)
            q = Queue(self.dir, NAME, clock=clock)
            self.assertEqual(q.get(first[0].id).state.value, "done")
            self.assertEqual(q.list_jobs("ready")[-1].payload, "late")
            q.close()
            self.compare(self.dir, clock)

    def test_a_snapshot_after_reading_a_peers_records_forward_is_loaded(self) -> None:
        # The crc a close's snapshot is checked by covers the records read forward from a
        # peer, a few of them (one catch-up read) or many (a long read forward).
        clock = FakeClock()
        for jobs in (3, 30_000):
            with self.subTest(jobs=jobs), small_threshold():
                directory = os.path.join(self.dir, f"p{jobs}")
                q = Queue(directory, NAME, clock=clock)
                q.enqueue("first")
                peer = Queue(directory, NAME, clock=clock)
                peer.enqueue_many([{"n": n} for n in range(jobs)])
                with small_threshold(10**9):
                    peer.close()  # no snapshot of its own
                q.enqueue("after the peer's")  # reads the peer's records forward first
                q.close()
                loads: list[Any] = []
                real = snapshot.load
                with mock.patch.object(snapshot, "load", lambda *a: loads.append(real(*a)) or loads[-1]):
                    reopened = Queue(directory, NAME, clock=clock)
                self.assertTrue(loads and all(loads), "the snapshot was loaded, not ignored")
                self.assertEqual(len(reopened), jobs + 2)
                reopened.close()

    def test_snapshot_at_the_very_end_of_the_log(self) -> None:
        clock = FakeClock()
        with small_threshold():
            q = Queue(self.dir, NAME, clock=clock)
            q.enqueue_many(list(range(10)))
            q.close()
            q = Queue(self.dir, NAME, clock=clock)
            self.assertEqual(len(q), 10)
            self.assertEqual(q.recovery.records, 10)
            q.close()
            self.compare(self.dir, clock)

    def test_a_result_changed_by_the_caller_after_ack_is_not_snapshotted(self) -> None:
        clock = FakeClock()
        with small_threshold():
            q = Queue(self.dir, NAME, clock=clock)
            q.enqueue("x")
            result = {"rows": [1, 2]}
            job = q.lease_one()
            q.ack(job, result=result)  # type: ignore[arg-type]
            result["rows"].append(3)
            q.close()
            self.compare(self.dir, clock)

    def test_the_deepest_results_are_snapshotted_and_loaded_from_a_deep_stack(self) -> None:
        from tests.semantics import DEEP_STACKS, NESTING_LIMIT, called_at_depth, nested

        deepest = nested(NESTING_LIMIT)
        frames = DEEP_STACKS[-1]
        with small_threshold():
            q = Queue(self.dir, NAME)
            q.enqueue_many(["a", "b"])
            for job in q.lease(2):
                q.ack(job, result=deepest)  # done jobs are hot: their results go into the snapshot's JSON
            called_at_depth(frames, q.close)
            self.assertTrue(os.path.exists(os.path.join(self.dir, SNAP)), "no snapshot was written")
            again = called_at_depth(frames, lambda: Queue(self.dir, NAME))
            self.assertTrue(again.storage._snap_loaded, "the snapshot was not loaded")  # type: ignore[attr-defined]
            self.assertEqual([job.result for job in again.list_jobs()], [deepest, deepest])
            again.close()

    def test_no_snapshot_below_the_threshold_or_when_not_durable(self) -> None:
        q = Queue(self.dir, NAME)
        q.enqueue_many(list(range(10)))
        q.close()
        self.assertNotIn(SNAP, os.listdir(self.dir))
        with small_threshold():
            q = Queue(self.dir, NAME, fsync=False)
            q.enqueue("x")
            q.close()
        self.assertNotIn(SNAP, os.listdir(self.dir))

    def test_a_loaded_snapshot_is_used(self) -> None:
        with small_threshold():
            q = Queue(self.dir, NAME)
            q.enqueue_many(list(range(20)))
            q.close()
        with mock.patch.object(FileStorage, "_read_forward", autospec=True, side_effect=FileStorage._read_forward) as read:
            q = Queue(self.dir, NAME)
            q.close()
        start = read.call_args_list[0].args[3]
        self.assertEqual(start, records_end(os.path.join(self.dir, f"{NAME}.000000.log")))

    @unittest.skipUnless(os.path.exists("/proc/self/maps"), "needs /proc/self/maps")
    def test_it_is_read_through_a_mapping_let_go_after_loading(self) -> None:
        from nobroker.filestore import fs as fs_module

        with small_threshold():
            q = Queue(self.dir, NAME)
            q.enqueue_many(list(range(20)))
            q.close()
        snap = os.path.join(self.dir, f"{NAME}.000000.snap")
        mapped: list[Any] = []
        real = fs_module.RealFileSystem.map_all

        def map_all(fs: Any, fd: int) -> Any:
            mapped.append(real(fs, fd))
            return mapped[-1]

        with mock.patch.object(fs_module.RealFileSystem, "map_all", map_all):
            q = Queue(self.dir, NAME)
        try:
            self.assertTrue(q.storage._snap_loaded)  # type: ignore[attr-defined]
            self.assertEqual(len(mapped), 1)
            self.assertNotIsInstance(mapped[0], bytes, "the snapshot was copied, not mapped")
            self.assertTrue(mapped[0].closed, "the mapping outlived the load")
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
                self.assertNotIn(os.path.realpath(snap), f.read())
        finally:
            q.close()


if __name__ == "__main__":
    unittest.main()
