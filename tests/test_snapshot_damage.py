"""Bad state snapshots are ignored: the log decides, and a damaged log is refused as without one.

Owns: flipped bits anywhere (and in every byte of the header and the block
lengths), truncation, a wrong generation or offset, another machine or
format: each ignored, the log replayed instead; a log whose prefix changed
is refused exactly as without a snapshot, and bytes changed under an open
handle are not laundered by its snapshot; a log cut short ignores it; all
again with the crcs summed in threads (prefix_crc), which are joined.
Imports: the standard library, nobroker, tests.snapshotsupport and
tests.support.
"""

from __future__ import annotations

import os
import random
import signal
import unittest
from typing import Any
from unittest import mock

from nobroker import CorruptLogError, Queue
from nobroker.filestore import prefix_crc, snapshot
from tests.snapshotsupport import NAME, SNAP, small_threshold
from tests.support import FakeClock, TempDirTestCase, records_end


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


if __name__ == "__main__":
    unittest.main()
