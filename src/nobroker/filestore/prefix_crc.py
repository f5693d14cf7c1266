"""The crc32 of a log's first bytes, which a snapshot is checked against, computed in parallel.

Owns: ``log_crc`` (the crc32 of a stretch of a file, read in small pieces),
PrefixCrc (a log prefix's crc32 computed in threads of its own while the
caller does something else: building the state a snapshot holds, say),
BufferCrc (the same for a buffer: the snapshot's own body) and ``crc32_combine``
(the crc32 of two stretches one after the other, from theirs and the second's
length: what lets the threads each take a part). Imports: fs.

zlib.crc32 and pread let go of the GIL on large buffers. Loading the
checkpoint of a compacted queue of 1,000,000 jobs checks a 69 MB log
prefix and the 42 MB checkpoint itself (about 50 ms of crc32 on one core
here): both are computed in threads while the caller builds the state from
the checkpoint, unchecked, and checks the two crcs after it.

crc32_combine is the arithmetic of CRC-32 (the reflected polynomial
0xEDB88320, as zlib's crc32), done on 32-bit numbers: appending n zero
bytes to a message multiplies its CRC (before the final xor) by x^(8n)
modulo the polynomial, and x^(8n) is a product of the precomputed powers
x^(2^k), one per bit of 8n.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any

from .fs import FileSystem

#: Bytes per read while computing the crc of a log prefix. Small on purpose: glibc's
#: malloc raises its mmap and trim thresholds to the largest block freed, so one
#: 8 MB read buffer left up to 16 MB of freed heap in the process for good.
READ_CHUNK = 1 << 20
#: A log prefix at least this long has its crc computed in threads of its own (PrefixCrc).
PARALLEL_CRC_MIN = 4 << 20
#: Threads (parts) a long prefix is split into: this machine's kind has two cores.
PARTS = 2

_POLY = 0xEDB88320  # CRC-32, bit-reflected: bit 31 of a number is x^0


class PrefixError(ValueError):
    """The file ends before the stretch whose crc was asked for."""


def log_crc(fs: FileSystem, fd: int, start: int, end: int, crc: int = 0) -> int:
    """crc32 of the bytes [start, end) of ``fd``, continuing from ``crc`` (that of [0, start))."""
    pos = start
    while pos < end:
        data = fs.pread(fd, min(READ_CHUNK, end - pos), pos)
        if not data:
            raise PrefixError(f"the log ends at {pos}, before offset {end}")
        crc = zlib.crc32(data, crc)
        pos += len(data)
    return crc


def _times(a: int, b: int) -> int:
    """a times b modulo the polynomial (both bit-reflected 32-bit numbers)."""
    product = 0
    for bit in range(31, -1, -1):
        if a >> bit & 1:
            product ^= b
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


def _powers() -> list[int]:
    """x^(2^k) modulo the polynomial, for k = 0 .. 63."""
    power = 1 << 30  # x^1
    table = [power]
    for _ in range(63):
        power = _times(power, power)
        table.append(power)
    return table


_X_TO_2_TO_K = _powers()


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """zlib.crc32(a + b) from crc1 = zlib.crc32(a), crc2 = zlib.crc32(b) and length2 = len(b)."""
    assert 0 <= length2 < 1 << 61, "a stretch of a file"
    shift = 1 << 31  # x^0: multiply crc1 by x^(8 * length2)
    bits, k = length2, 3  # 8 * length2 = length2 << 3: start at the power x^(2^3)
    while bits:
        if bits & 1:
            shift = _times(_X_TO_2_TO_K[k], shift)
        bits >>= 1
        k += 1
    return _times(shift, crc1) ^ crc2


class BufferCrc:
    """The crc32 of a buffer (a mapped snapshot's body), computed in a thread of its own when it is large.

    ``result`` gives it (computed in the caller's thread for a small
    buffer); ``join`` must follow, whatever happened: the thread reads a
    view of a mapping the caller unmaps, and ``join`` lets go of that view.
    """

    def __init__(self, buffer: Any) -> None:
        self.view = memoryview(buffer)
        self.value: int | BaseException | None = None
        self.thread: threading.Thread | None = None
        if len(self.view) >= PARALLEL_CRC_MIN:
            self.thread = threading.Thread(target=self._run, name="nobroker-snapshot-crc", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        try:
            self.value = zlib.crc32(self.view)
        except BaseException as exc:  # handed to result(), in the caller's thread
            self.value = exc

    def result(self) -> int:
        if self.thread is None:
            return zlib.crc32(self.view)
        self.thread.join()
        if isinstance(self.value, BaseException):
            raise self.value
        assert self.value is not None, "the thread ran to its end"
        return self.value

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()
        self.view.release()


class PrefixCrc:
    """The crc32 of a log's first ``end`` bytes, computed in threads of their own when they are many.

    ``result`` gives it (computed in the caller's thread if ``end`` turned
    out other than guessed); ``join`` must follow, whatever happened (the
    threads read a descriptor the caller may close).
    """

    def __init__(self, fs: FileSystem, fd: int, end: int | None, size: int) -> None:
        self.fs, self.fd, self.end = fs, fd, end
        self.parts: list[tuple[int, int]] = []  # (start, end) of each thread's stretch
        self.values: list[int | BaseException | None] = []
        self.threads: list[threading.Thread] = []
        if end is None or not PARALLEL_CRC_MIN <= end <= size:
            return
        parts = PARTS if end >= PARTS * PARALLEL_CRC_MIN else 1
        bounds = [end * i // parts for i in range(parts + 1)]
        self.parts = list(zip(bounds, bounds[1:]))
        self.values = [None] * parts
        for i in range(parts):
            thread = threading.Thread(target=self._run, args=(i,), name="nobroker-snapshot-crc", daemon=True)
            self.threads.append(thread)
            thread.start()

    def _run(self, i: int) -> None:
        start, end = self.parts[i]
        try:
            self.values[i] = log_crc(self.fs, self.fd, start, end)
        except BaseException as exc:  # handed to result(), in the caller's thread
            self.values[i] = exc

    def result(self, end: int) -> int:
        if not self.threads or end != self.end:
            return log_crc(self.fs, self.fd, 0, end)
        self.join()
        crc = 0
        for (start, stop), value in zip(self.parts, self.values):
            if isinstance(value, BaseException):
                raise value
            assert value is not None, "every part's thread ran to its end"
            crc = crc32_combine(crc, value, stop - start)
        return crc

    def join(self) -> None:
        for thread in self.threads:
            thread.join()
