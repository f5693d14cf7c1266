"""Reading one generation file: its records forward from an offset, and what stops them.

Owns: LogReading, the part of log.LogFile that scans records forward
(``scan``), tells what follows an offset (a record, the end of the records,
a torn tail), tells a torn tail from damage in the middle (``torn_bytes``,
``valid_record_after``), checks that only zeros follow a version 2 file's
records (``only_zeros_after``) and reads one job's record back
(``read_job_body``, or its bytes as they are: ``read_job_record``).
Imports: errors, jobs, fs, framing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from zlib import crc32

from ..errors import CorruptLogError
from ..jobs import MAX_RECORD_BYTES
from .framing import (
    END_OF_RECORDS, FRAME, FRAME_SIZE, KNOWN_TYPES, TYPE_CRC, Frame, FrameStatus, decode_body, decode_frame,
    RecordType, plausible_frame_at,
)  # fmt: skip
from .fs import FileSystem, storage_error

_unpack_frame = FRAME.unpack_from
_ENQUEUE = int(RecordType.ENQUEUE)
_NONZERO = re.compile(rb"[^\x00]")

#: Bytes read per call while scanning. Big enough to amortise syscalls.
READ_CHUNK = 1 << 20
#: Bytes read at once for one job's record: most jobs' records fit, a longer one takes a second read.
JOB_READ_GUESS = 1024
#: The first read of a version 2 catch-up, which has no file size to go by: what peers
#: appended since our last look fits most of the time; more takes READ_CHUNK reads.
CATCH_UP_GUESS = 4096


def _ends_records(buf: bytes, i: int, more: bool) -> bool:
    """Version 2: do the bytes at ``buf[i]`` end the records (a frame of zeros, or zeros up to the file's end)?"""
    head = buf[i : i + FRAME_SIZE]
    return head == END_OF_RECORDS if len(head) == FRAME_SIZE else not more and head.count(0) == len(head)


class LogReading:
    """A mixin: LogFile sets the attributes below in its __init__."""

    fs: FileSystem
    path: str
    fd: int
    preallocated: bool

    def scan(self, start: int, end: int | None = None) -> Iterator[Frame]:
        try:
            yield from self._scan(start, end)
        except OSError as exc:
            raise storage_error(exc, "reading", self.path) from None

    def _scan(self, start: int, end: int | None = None) -> Iterator[Frame]:
        """Every whole record from ``start`` up to ``end`` (default: where the records end).

        Yields OK frames; if reading stops on anything else (a torn or damaged
        record, or in a version 2 file the frame of zeros that ends the
        records, FrameStatus.END) that frame is yielded last. Reads in chunks,
        so memory stays under twice the largest record however long the log
        is. A version 2 file read to its end has no size to go by: it is read
        until its records end (the first read small: a catch-up finds little).
        """
        fs, fd, room = self.fs, self.fd, self.preallocated
        file_end = None if end is None and room else (fs.size(fd) if end is None else end)
        pos = start
        want = CATCH_UP_GUESS if file_end is None else READ_CHUNK
        while file_end is None or pos < file_end:
            asked = want if file_end is None else min(want, file_end - pos)
            buf = fs.pread(fd, asked, pos)
            if not buf:
                return
            i = 0
            n = len(buf)
            # Does the file go on after buf? A short read means it ended, also before an ``end`` noted earlier
            # (a file cut since: reading that stretch again would find the same bytes, for ever).
            more = n == asked and (file_end is None or pos + n < file_end)
            stop = None
            while i < n:
                # The common case inline (one call per record adds up when a queue
                # opens); anything unusual goes through decode_frame, which says what.
                if n - i >= FRAME_SIZE:
                    length, rtype, crc = _unpack_frame(buf, i)
                    start = i + FRAME_SIZE
                    if length <= MAX_RECORD_BYTES and n - start >= length and rtype in KNOWN_TYPES:
                        data = buf[start : start + length]
                        if crc32(data, TYPE_CRC[rtype]) == crc:
                            try:
                                body = decode_body(data)
                            except ValueError:
                                body = None
                            if type(body) is dict:
                                yield Frame(FrameStatus.OK, pos + i, length, rtype, body)
                                i = start + length
                                continue
                if room and _ends_records(buf, i, more):
                    yield Frame(FrameStatus.END, pos + i)
                    return
                stop = decode_frame(buf, i, pos)
                if stop.status is FrameStatus.OK:  # cannot happen: both paths check the same things
                    raise AssertionError(f"record at {pos + i} decoded differently on the slow path")
                break
            if stop is None:
                pos += i
                want = READ_CHUNK
                if file_end is None and not more:
                    return  # the file ends where its last record ends
                continue
            if stop.status is FrameStatus.INCOMPLETE and more:
                # The record runs past this chunk: read again from its start.
                pos = stop.offset
                want = max(READ_CHUNK, FRAME_SIZE + min(stop.length, MAX_RECORD_BYTES))
                continue
            yield stop
            return

    def what_follows(self, offset: int) -> int:
        """Under the lock: 1 if something (a record, or damage) follows ``offset``, 0 if nothing yet, -1 if the file is shorter.

        One small read for a version 2 file (the catch-up of a process that
        looks before each operation), one fstat for a version 1 file.
        """
        try:
            if not self.preallocated:
                size = self.fs.size(self.fd)
                return (size > offset) - (size < offset)
            head = self.fs.pread(self.fd, FRAME_SIZE, offset)
            if head == END_OF_RECORDS:
                return 0  # the usual answer: nothing new
            if not head:
                return -1 if self.fs.size(self.fd) < offset else 0
        except OSError as exc:
            raise storage_error(exc, "reading", self.path) from None
        return 0 if head == END_OF_RECORDS[: len(head)] else 1

    def torn_bytes(self, offset: int) -> int:
        """How long a torn tail from ``offset`` is: to the end of the file, or (version 2) to its last byte that is not zero."""
        try:
            size = self.fs.size(self.fd)
            if not self.preallocated:
                return max(size - offset, 0)
            last, pos = offset, offset
            while pos < size:
                buf = self.fs.pread(self.fd, min(READ_CHUNK, size - pos), pos)
                if not buf:
                    break
                kept = len(buf.rstrip(b"\0"))
                if kept:
                    last = pos + kept
                pos += len(buf)
        except OSError as exc:
            raise storage_error(exc, "reading", self.path) from None
        return last - offset

    def only_zeros_after(self, offset: int) -> bool:
        """Is everything from ``offset`` to the end of the file a zero byte (version 2's room, untouched)?"""
        fs, fd = self.fs, self.fd
        try:
            pos, size = offset, fs.size(fd)
            while pos < size:
                buf = fs.pread(fd, min(READ_CHUNK, size - pos), pos)
                if not buf:
                    break
                if buf.count(0) != len(buf):
                    return False
                pos += len(buf)
        except OSError as exc:
            raise storage_error(exc, "reading", self.path) from None
        return True

    def valid_record_after(self, offset: int, end: int | None = None) -> int | None:
        try:
            return self._valid_record_after(offset, end)
        except OSError as exc:
            raise storage_error(exc, "reading", self.path) from None

    def _valid_record_after(self, offset: int, end: int | None = None) -> int | None:
        """Offset of the first whole, CRC-valid record starting after ``offset``, if any.

        This is what separates a torn tail (nothing valid follows: safe to cut)
        from damage in the middle (valid records follow: never drop them).
        """
        fs, fd = self.fs, self.fd
        file_end = fs.size(fd) if end is None else end
        pos = offset + 1
        overlap = FRAME_SIZE + MAX_RECORD_BYTES
        while pos < file_end:
            # Read a window; a record starting inside it may extend past it, so
            # windows overlap by the largest possible record.
            buf = fs.pread(fd, min(READ_CHUNK + overlap, file_end - pos), pos)
            limit = min(READ_CHUNK, len(buf))
            view = memoryview(buf)
            i = 0
            while i < limit:
                # A frame's type byte (4 after its start) is never zero: a run of zeros (version 2's
                # room, a hole) holds no start but the four before its end. Skipped at C speed.
                found = _NONZERO.search(buf, i + 4)
                if found is None or found.start() - 4 >= limit:
                    break
                last = min(found.start(), limit - 1)
                for i in range(max(i, found.start() - 4), last + 1):
                    if plausible_frame_at(view, i):
                        return pos + i
                i = last + 1
            pos += limit
        return None

    def read_job_body(self, offset: int, job_id: str) -> dict[str, Any]:
        """The record at ``offset`` (an ENQUEUE holding job ``job_id``), decoded.

        StorageError if the disk fails; CorruptLogError if the bytes there are
        not that job's record any more.
        """
        try:
            # One read covers a typical job's whole record; a longer one takes a second read.
            data = self.fs.pread(self.fd, JOB_READ_GUESS, offset)
            if len(data) < FRAME_SIZE:
                raise CorruptLogError(
                    f"{self.path}: job {job_id} at offset {offset} is past the end of the file", path=self.path, offset=offset
                )
            want = FRAME_SIZE + _unpack_frame(data, 0)[0]
            if want > len(data):
                data += self.fs.pread(self.fd, want - len(data), offset + len(data))
        except OSError as exc:
            raise storage_error(exc, f"reading job {job_id} at offset {offset} of", self.path) from None
        fr = decode_frame(data, 0, offset)
        if fr.status is not FrameStatus.OK or fr.body is None or fr.body.get("id") != job_id:
            raise CorruptLogError(
                f"{self.path}: the record of job {job_id} at offset {offset} no longer reads back ({fr.status.value})",
                path=self.path,
                offset=offset,
            )
        return fr.body

    def read_job_record(self, offset: int, size: int, prefix: bytes) -> bytes | None:
        """The framed ENQUEUE record of ``size`` bytes at ``offset``, as it is, if it checks out; else None.

        It checks out when its frame says that length and type, its crc
        matches and its body starts with ``prefix`` (``{"id":`` and the job's
        id): then it is that job's whole record. None sends the caller to
        ``read_job_body``, which names whatever is wrong. StorageError if the
        disk fails.
        """
        try:
            data = self.fs.pread(self.fd, size, offset)
        except OSError as exc:
            raise storage_error(exc, f"reading the record at offset {offset} of", self.path) from None
        if len(data) != size or size < FRAME_SIZE:
            return None
        length, rtype, crc = _unpack_frame(data, 0)
        if (
            rtype != _ENQUEUE or FRAME_SIZE + length != size or not data.startswith(prefix, FRAME_SIZE)
            or crc32(memoryview(data)[FRAME_SIZE:], TYPE_CRC[_ENQUEUE]) != crc
        ):  # fmt: skip
            return None
        return data


__all__ = ["CATCH_UP_GUESS", "JOB_READ_GUESS", "READ_CHUNK", "LogReading"]
