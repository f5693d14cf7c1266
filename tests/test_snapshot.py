"""State snapshots (snapshot.py): a checked cache that must never change what a queue holds.

Owns: opening with a snapshot gives exactly what replaying the whole log
gives (random workloads, compared job by job, in list order, stats and the
order of the next leases); every kind of bad snapshot is ignored; a log
whose prefix changed is refused exactly as without a snapshot; a process
killed while writing one leaves only a temp file; files are private and
never followed through a symlink; repair and compaction leave no stale
snapshot in use. Imports: the standard library, nobroker and tests.support.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import unittest
from typing import Any
from unittest import mock

from nobroker import CorruptLogError, Queue
from nobroker.filestore import prefix_crc, snapshot
from nobroker.filestore.storage import FileStorage
from nobroker.filestore.admin import repair, verify
from nobroker.limits import turns_to_fields
from tests.support import FakeClock, TempDirTestCase, records_end

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + ROOT)
NAME = "q"
SNAP = f"{NAME}.000000.snap"


def small_threshold(records: int = 1) -> Any:
    return mock.patch.object(snapshot, "SNAPSHOT_MIN_RECORDS", records)


def workload(q: Queue, clock: FakeClock, rng: random.Random, steps: int) -> None:
    """Random operations through the public API: every record type, plus compaction now and then."""
    held: list[Any] = []
    for _ in range(steps):
        roll = rng.random()
        try:
            if roll < 0.35:
                q.enqueue(
                    {"n": rng.randrange(1000), "s": "x" * rng.randrange(5)},
                    priority=rng.choice((0, 0, 1, 5, -2)),
                    delay=rng.choice((0, 0, 0, 3.0, 60.0)),
                    job_id=f"user-{rng.randrange(200)}" if rng.random() < 0.15 else None,
                    kind=rng.choice(("default", "default", "mail", "pdf")),
                    dedupe_key=f"k{rng.randrange(20)}" if rng.random() < 0.1 else None,
                    max_attempts=rng.choice((None, 1, 3)),
                    group=rng.choice((None, None, "acme", "bolt")),
                )
            elif roll < 0.45:
                q.enqueue_many([{"m": i} for i in range(rng.randrange(1, 30))], priority=rng.choice((0, 2)))
            elif roll < 0.6:
                kinds = rng.choice((None, ["mail"], ["default", "pdf"]))
                held.extend(q.lease(rng.randrange(1, 4), kinds=kinds))
            elif roll < 0.7 and held:
                q.ack(held.pop(rng.randrange(len(held))), result=rng.choice((None, {"ok": True}, [1, 2.5])))
            elif roll < 0.78 and held:
                q.nack(held.pop(rng.randrange(len(held))), error="boom", delay=rng.choice((None, 0.0, 10.0)))
            elif roll < 0.83 and held:
                q.extend(rng.choice(held), rng.choice((5.0, 100.0)))
            elif roll < 0.87 and held:
                q.set_stage(rng.choice(held), rng.choice(("half", None, "late")))
            elif roll < 0.885 and held:
                job = rng.choice(held)  # a mark, or (the holder) the end of a cancelled attempt
                q.cancel(job, stopped=rng.random() < 0.5)
            elif roll < 0.89:
                q.cancel(rng.choice([j.id for j in q.list_jobs("ready", limit=20)] or ["none"]))
            elif roll < 0.895:
                kind = rng.choice(("mail", "pdf"))  # LIMIT / UNLIMIT; a lease of a rate-limited kind spends a token
                if rng.random() < 0.3:
                    q.clear_limit(kind)
                else:
                    q.set_limit(kind, concurrency=rng.choice((None, 1, 3)), rate=rng.choice((2, 10)), per=5.0,
                                group_concurrency=rng.choice((None, 1, 2)), weights=rng.choice((None, {"acme": 3})))  # fmt: skip
            elif roll < 0.9:
                q.requeue_dead()
            elif roll < 0.905:
                q.purge()
                held.clear()
            elif roll < 0.915:
                q.compact()
            elif roll < 0.925 and held:
                q.snooze(held.pop(rng.randrange(len(held))), rng.choice((0.0, 30.0)))
            elif roll < 0.93:
                kind = rng.choice((None, "mail", "pdf"))
                (q.resume if rng.random() < 0.6 else q.pause)(kind)
            elif roll < 0.935:
                q.run_now(rng.choice([j.id for j in q.list_jobs("delayed", limit=20)] or ["none"]))
            elif roll < 0.94:
                q.delete(rng.choice([j.id for j in q.list_jobs(limit=40)] or ["none"]))
            else:
                clock.advance(rng.choice((0.5, 4.0, 40.0)))
        except Exception as exc:  # a stale token after a reclaim, a taken dedupe key: part of the game
            if type(exc).__name__ not in (
                "NotLeasedError", "ValueError", "JobNotFoundError", "JobCancelledError", "JobFinishedError",
                "JobStateError",
            ):
                raise


def picture(directory: str, clock: FakeClock, snapshot_used: bool, leases: int = 50) -> dict[str, Any]:
    """Everything a caller can see of a queue, then the order in which its jobs lease."""
    q = Queue(directory, NAME, clock=clock, auto_compact=None)
    try:
        out: dict[str, Any] = {
            "jobs": [j.to_dict() for j in q.list_jobs()],
            "stats": q.stats().to_dict(),
            "dlq": [j.id for j in q.dlq()],
            "mail": [j.id for j in q.list_jobs(kind="mail")],
            "records": q.recovery.records,
            "bytes": q.recovery.bytes_read,
            "len": len(q),
            "paused": q.paused(),
        }
        storage = q.storage
        assert isinstance(storage, FileStorage)
        assert storage._snap_loaded == snapshot_used, "the snapshot was (not) loaded"
        state = storage._state
        out["seq"], out["anomalies"], out["live"] = state.next_seq, state.anomalies, state.live_bytes
        out["keys"] = dict(state.active_keys)
        out["limits"] = {kind: (held, bucket) for kind, (held, bucket) in state.limits.items()}
        out["leased_kinds"] = {kind: n for kind, n in state.leased_kinds.items() if n}
        out["leased_groups"] = state.groups.leased
        out["turns"] = {kind: turns_to_fields(turns) for kind, turns in state.turns.items()}  # passes behind the clock say nothing
        # What happens next: reclaims in deadline order, leases in priority and FIFO order.
        clock.advance(1000.0)
        out["leases"] = [(j.id, j.attempts) for j in q.lease(leases)]
        out["then"] = [(j.id, j.attempts) for j in q.lease(leases, kinds=["mail"])]
        out["new"] = q.enqueue("after").seq
        return out
    finally:
        # The leases above changed the log: put it back so both pictures start equal.
        q.close()


def copy_dir(src: str, dst: str) -> None:
    os.makedirs(dst, mode=0o700, exist_ok=True)
    for name in os.listdir(src):
        with open(os.path.join(src, name), "rb") as f:
            data = f.read()
        fd = os.open(os.path.join(dst, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


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


class BadSnapshotsAreIgnored(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.clock = FakeClock()
        with small_threshold():
            q = Queue(self.dir, NAME, clock=self.clock)
            q.enqueue_many([{"i": i} for i in range(200)], priority=1)
            for job in q.lease(20):
                q.ack(job)
            q.enqueue("tail", job_id="custom-id", dedupe_key="k")
            q.close()
        self.snap = os.path.join(self.dir, SNAP)
        self.log = os.path.join(self.dir, f"{NAME}.000000.log")
        with open(self.snap, "rb") as f:
            self.data = f.read()
        self.expected = self.opened()

    def opened(self) -> tuple[Any, ...]:
        q = Queue(self.dir, NAME, clock=self.clock)
        try:
            return ([j.to_dict() for j in q.list_jobs()], q.stats().to_dict(), q.recovery.records)
        finally:
            with small_threshold(10**9):
                q.close()

    def write_snap(self, data: bytes) -> None:
        with open(self.snap, "wb") as f:
            f.write(data)

    def assert_ignored(self) -> None:
        with self.assertLogs("nobroker", "INFO") as logs:
            self.assertEqual(self.opened(), self.expected)
        self.assertTrue(any("ignoring the snapshot" in line for line in logs.output), logs.output)

    def test_flipped_bits_anywhere(self) -> None:
        rng = random.Random(7)
        for position in [0, 9, 20, 40, len(self.data) // 2, len(self.data) - 1] + rng.sample(range(len(self.data)), 10):
            with self.subTest(position=position):
                damaged = bytearray(self.data)
                damaged[position] ^= 1 << rng.randrange(8)
                self.write_snap(bytes(damaged))
                self.assert_ignored()

    def test_a_flipped_bit_in_any_part_of_the_file(self) -> None:
        # The state is built from the snapshot's bytes before its crc is known: whatever a flipped
        # bit makes of a count, a length, the fields or a block, the snapshot is still refused for it.
        head = snapshot._HEADER.size + snapshot._HEADER.unpack_from(self.data, 0)[-1] * snapshot._LENGTH.size
        # The header and the block lengths byte by byte, then 200 places through the rest.
        positions = [*range(head), *range(head, len(self.data), max(1, (len(self.data) - head) // 200))]
        rng = random.Random(11)
        for position in positions:
            with self.subTest(position=position):
                damaged = bytearray(self.data)
                damaged[position] ^= 1 << rng.randrange(8)
                self.write_snap(bytes(damaged))
                with self.assertLogs("nobroker", "INFO") as logs:
                    self.assertEqual(self.opened(), self.expected)
                self.assertTrue(any("checksum does not match" in line for line in logs.output), logs.output)

    def test_truncated(self) -> None:
        for size in (0, 5, 30, len(self.data) // 2, len(self.data) - 1):
            with self.subTest(size=size):
                self.write_snap(self.data[:size])
                self.assert_ignored()

    def test_wrong_generation(self) -> None:
        # A snapshot of generation 0 renamed to be generation 1's, after a compaction.
        with small_threshold(10**9):
            q = Queue(self.dir, NAME, clock=self.clock)
            q.compact()
            q.close()
        self.expected = self.opened()
        self.snap = os.path.join(self.dir, f"{NAME}.000001.snap")
        self.write_snap(self.data)
        self.assert_ignored()

    def test_wrong_offset(self) -> None:
        import struct
        import zlib

        for delta in (-9, 1, 10**6):
            with self.subTest(delta=delta):
                damaged = bytearray(self.data)
                (offset,) = struct.unpack_from("<Q", damaged, 14)
                struct.pack_into("<Q", damaged, 14, offset + delta)
                struct.pack_into("<I", damaged, len(damaged) - 4, zlib.crc32(damaged[:-4]))
                self.write_snap(bytes(damaged))
                self.assert_ignored()

    def test_a_changed_log_prefix_is_refused_as_without_a_snapshot(self) -> None:
        with open(self.log, "r+b") as f:
            f.seek(200)
            byte = f.read(1)
            f.seek(200)
            f.write(bytes([byte[0] ^ 0x20]))
        with self.assertRaises(CorruptLogError) as with_snapshot:
            Queue(self.dir, NAME)
        os.unlink(self.snap)
        with self.assertRaises(CorruptLogError) as without:
            Queue(self.dir, NAME)
        self.assertEqual(str(with_snapshot.exception), str(without.exception))
        self.assertEqual(with_snapshot.exception.offset, without.exception.offset)

    def test_bytes_changed_after_they_were_read_are_not_laundered_by_a_snapshot(self) -> None:
        # A handle's snapshot covers the bytes it applied, not whatever the file holds when
        # it closes: damage (or a peer's rollback) under an open handle is still found.
        os.unlink(self.snap)
        with small_threshold():
            q = Queue(self.dir, NAME)
            q.enqueue("one more")
            with open(self.log, "r+b") as f:
                f.seek(200)
                byte = f.read(1)
                f.seek(200)
                f.write(bytes([byte[0] ^ 0x20]))
            q.close()
        self.assertIn(SNAP, os.listdir(self.dir))
        with self.assertRaises(CorruptLogError) as caught:
            Queue(self.dir, NAME)
        self.assertEqual(caught.exception.offset, self.record_at(200))

    def record_at(self, offset: int) -> int:
        """The offset of the record holding byte ``offset`` of the log."""
        from nobroker.filestore.log import LogFile
        from nobroker.filestore.fs import OS_FILESYSTEM

        log = LogFile.open(OS_FILESYSTEM, self.log, writable=False)
        try:
            return max(fr.offset for fr in log.scan(16) if fr.offset <= offset)
        finally:
            log.close()

    def test_a_log_cut_short_ignores_the_snapshot(self) -> None:
        size = records_end(self.log)
        with open(self.log, "r+b") as f:
            f.truncate(size - 3)  # a torn tail inside the snapshot's range
        q = Queue(self.dir, NAME)
        self.assertGreater(q.recovery.torn_bytes, 0)
        self.assertLess(q.recovery.bytes_read, size)
        self.assertEqual(len(q), len(self.expected[0]) - 1)
        q.close()

    def test_another_machine_or_format_is_refused(self) -> None:
        import struct
        import zlib

        for position, value in ((8, snapshot.VERSION + 1), (26, 1 - self.data[26]), (27, 4)):
            with self.subTest(position=position):
                damaged = bytearray(self.data)
                if position == 8:
                    struct.pack_into("<H", damaged, 8, value)
                else:
                    damaged[position] = value
                struct.pack_into("<I", damaged, len(damaged) - 4, zlib.crc32(damaged[:-4]))
                self.write_snap(bytes(damaged))
                self.assert_ignored()


@unittest.skipUnless(hasattr(signal, "SIGKILL"), "needs SIGKILL")
class BadSnapshotsAreIgnoredWithTheLogCrcInAThread(BadSnapshotsAreIgnored):
    """The same, with the log prefix's crc computed in threads while the snapshot is read (prefix_crc.PrefixCrc)."""

    def setUp(self) -> None:
        patcher = mock.patch.object(prefix_crc, "PARALLEL_CRC_MIN", 1)
        patcher.start()
        self.addCleanup(patcher.stop)
        super().setUp()

    def test_the_threads_ran_and_were_joined(self) -> None:
        started: list[Any] = []
        real = prefix_crc.PrefixCrc.__init__

        def init(crc: Any, *args: Any) -> None:
            real(crc, *args)
            started.append(crc)

        with mock.patch.object(prefix_crc.PrefixCrc, "__init__", init):
            self.assertEqual(self.opened(), self.expected)
        self.assertTrue(started, "no crc of the log prefix was computed")
        self.assertEqual(len(started[0].threads), prefix_crc.PARTS, "a prefix of PARTS bytes or more is split")
        self.assertFalse(any(thread.is_alive() for thread in started[0].threads))

    def test_the_snapshots_own_crc_ran_in_a_thread_that_was_joined(self) -> None:
        started: list[Any] = []
        real = prefix_crc.BufferCrc.__init__

        def init(crc: Any, buffer: Any) -> None:
            real(crc, buffer)
            started.append(crc)

        with mock.patch.object(prefix_crc.BufferCrc, "__init__", init):
            self.assertEqual(self.opened(), self.expected)
        self.assertEqual(len(started), 1, "the snapshot's crc")
        self.assertIsNotNone(started[0].thread, "computed in a thread of its own")
        self.assertFalse(started[0].thread.is_alive())
        with self.assertRaises(ValueError):  # its view of the mapping was let go
            started[0].view.tobytes()


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
