"""The crc32 of a log prefix in parts (filestore/prefix_crc.py): the same number zlib gives for the whole."""

from __future__ import annotations

import errno
import os
import random
import unittest
import zlib
from unittest import mock

from nobroker.filestore import prefix_crc
from nobroker.filestore.fs import RealFileSystem
from nobroker.filestore.prefix_crc import PrefixCrc, PrefixError, crc32_combine, log_crc
from tests.support import TempDirTestCase


class Combine(unittest.TestCase):
    def test_two_crcs_combine_to_the_crc_of_both_stretches(self) -> None:
        rng = random.Random(14)
        lengths = [0, 1, 2, 3, 7, 8, 255, 4096, 65_537, 1 << 20]
        for first in lengths:
            for second in lengths:
                with self.subTest(first=first, second=second):
                    a, b = rng.randbytes(first), rng.randbytes(second)
                    self.assertEqual(crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)), zlib.crc32(a + b))

    def test_a_long_stretch_of_zeros_without_reading_it(self) -> None:
        # crc32 of n zero bytes after a message: checked against zlib on a length that fits in memory.
        message = b"nobroker"
        n = 48 << 20
        self.assertEqual(crc32_combine(zlib.crc32(message), zlib.crc32(bytes(n)), n), zlib.crc32(message + bytes(n)))


class InParts(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.fs = RealFileSystem()
        self.data = random.Random(19).randbytes(3 * 1024 * 1024 + 17)
        self.path = os.path.join(self.dir, "log")
        with open(self.path, "wb") as f:
            f.write(self.data)
        self.fd = os.open(self.path, os.O_RDONLY)
        self.addCleanup(os.close, self.fd)
        patcher = mock.patch.object(prefix_crc, "PARALLEL_CRC_MIN", 1024)
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_the_parts_give_the_crc_of_the_whole_prefix(self) -> None:
        for parts in (1, 2, 3, 7):
            for end in (1024, 4096, 1_000_003, len(self.data)):
                with self.subTest(parts=parts, end=end), mock.patch.object(prefix_crc, "PARTS", parts):
                    crc = PrefixCrc(self.fs, self.fd, end, len(self.data))
                    try:
                        expected_threads = parts if end >= parts * 1024 else 1
                        self.assertEqual(len(crc.threads), expected_threads)
                        self.assertEqual(crc.result(end), zlib.crc32(self.data[:end]))
                    finally:
                        crc.join()

    def test_another_end_than_guessed_is_computed_in_the_callers_thread(self) -> None:
        crc = PrefixCrc(self.fs, self.fd, 100_000, len(self.data))
        try:
            self.assertEqual(crc.result(99_999), zlib.crc32(self.data[:99_999]))
        finally:
            crc.join()

    def test_short_prefixes_and_unknown_ends_start_no_thread(self) -> None:
        for end in (None, 1023, len(self.data) + 1):  # below the minimum; past the file's end
            with self.subTest(end=end):
                self.assertEqual(PrefixCrc(self.fs, self.fd, end, len(self.data)).threads, [])

    def test_a_file_shorter_than_the_stretch_is_an_error(self) -> None:
        with self.assertRaises(PrefixError):
            log_crc(self.fs, self.fd, 0, len(self.data) + 1)

    def test_a_read_error_in_a_part_reaches_the_caller(self) -> None:
        fs = self.fs
        calls = {"n": 0}

        class Failing(RealFileSystem):
            def pread(self, fd: int, size: int, offset: int) -> bytes:
                if offset >= len(fs_data) // 2:
                    calls["n"] += 1
                    raise OSError(errno.EIO, "injected")
                return fs.pread(fd, size, offset)

        fs_data = self.data
        crc = PrefixCrc(Failing(), self.fd, len(self.data), len(self.data))
        try:
            with self.assertRaises(OSError) as caught:
                crc.result(len(self.data))
            self.assertEqual(caught.exception.errno, errno.EIO)
            self.assertGreater(calls["n"], 0)
        finally:
            crc.join()


if __name__ == "__main__":
    unittest.main()
