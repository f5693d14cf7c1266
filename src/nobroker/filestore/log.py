"""One generation file of the append-only log.

Owns: creating a generation (header, fsync, rename; the caller fsyncs the
folder), reading records forward from an offset, telling a torn tail from
damage in the middle, appending with short-write handling and (format
version 2) the room set aside ahead of the appends, finding where the
records end, and the group fsync. Imports: errors, jobs, layout, fs,
framing.

Group commit: appends happen under the queue's lock, fsync does not. A thread
that appended waits until the file is durable through its own last byte; the
first waiter runs one fsync that covers everyone who appended before it began,
so eight threads (or four processes, through the kernel) share fsyncs.

Room ahead (version 2, framing.py): an fdatasync that must also make a new
file size durable costs a journal commit on top of the data (on ext4, about
a third of the time of a small append). A version 2 writer extends the file
by a chunk of zero bytes (ROOM_MIN to ROOM_MAX, an eighth of the file) when
an append would pass its end, so most appends change no size. The records
then end at the first frame of zeros, not at the file's size: readers stop
there, and opening checks that nothing but zeros follows it (anything else is
a torn tail or damage, judged as in version 1).
"""

from __future__ import annotations

import errno as errno_mod
import os
import re
import threading
from collections.abc import Iterator
from typing import Any
from zlib import crc32

from ..errors import CorruptLogError, StorageError, UnsafeQueueError
from .framing import (
    DEFAULT_FORMAT_VERSION,
    END_OF_RECORDS,
    FORMAT_VERSION,
    FRAME,
    PREALLOCATED_VERSION,
    FRAME_SIZE,
    KNOWN_TYPES,
    TYPE_CRC,
    decode_body,
    HEADER_SIZE,
    Frame,
    FrameStatus,
    HeaderError,
    decode_frame,
    decode_header,
    encode_header,
    plausible_frame_at,
)
from .fs import FileSystem, storage_error, write_fully
from ..jobs import MAX_RECORD_BYTES
from .layout import generations, log_path, temp_path

_unpack_frame = FRAME.unpack_from
_NONZERO = re.compile(rb"[^\x00]")

#: Bytes read per call while scanning. Big enough to amortise syscalls.
READ_CHUNK = 1 << 20
#: Bytes read at once for one job's record: most jobs' records fit, a longer one takes a second read.
JOB_READ_GUESS = 1024
#: The first read of a version 2 catch-up, which has no file size to go by: what peers
#: appended since our last look fits most of the time; more takes READ_CHUNK reads.
CATCH_UP_GUESS = 4096
#: Room set aside ahead of the appends in a version 2 file: an eighth of the file, within these.
ROOM_MIN = 64 * 1024
ROOM_MAX = 1024 * 1024


def _ends_records(buf: bytes, i: int, more: bool) -> bool:
    """Version 2: do the bytes at ``buf[i]`` end the records (a frame of zeros, or zeros up to the file's end)?"""
    head = buf[i : i + FRAME_SIZE]
    return head == END_OF_RECORDS if len(head) == FRAME_SIZE else not more and head.count(0) == len(head)


# ---------------------------------------------------------------- one generation
class LogFile:
    """An open generation file: read forward, append, fsync together."""

    def __init__(
        self, fs: FileSystem, path: str, fd: int, generation: int, size: int, version: int = FORMAT_VERSION
    ) -> None:
        self.fs = fs
        self.path = path
        self.fd = fd
        self.generation = generation
        self.version = version
        #: Version 2: the records end at a frame of zeros, not at the file's size.
        self.preallocated = version == PREALLOCATED_VERSION
        self._room_end = 0  # version 2: the file's size as last seen (an append up to it changes no size)
        self.written_end = size  # end of what this process knows is in the file
        self.durable_end = size if size else HEADER_SIZE
        self._sync_lock = threading.Lock()
        self._sync = threading.Condition(self._sync_lock)  # holding _sync_lock is holding _sync
        self._syncing = False
        self._waiters = 0  # threads waiting in sync_through or close for the fsync under way
        self._failed: StorageError | None = None
        self.closed = False

    # ---------------- opening
    @classmethod
    def create(
        cls, fs: FileSystem, directory: str, name: str, generation: int, *, sync: bool, version: int = DEFAULT_FORMAT_VERSION
    ) -> LogFile:  # fmt: skip
        """Create generation ``generation`` (format ``version``) with just a header: temp, fsync, rename.

        The new name is not durable yet: the caller fsyncs the folder before it
        acknowledges anything written in the file (QueueFiles._open does, for
        every queue it opens). A folder fsync here as well would be a second
        one in a row, which no power cut can tell from the first.
        """
        path = log_path(directory, name, generation)
        tmp = temp_path(path)
        try:
            if fs.exists(tmp):
                fs.unlink(tmp)
            fd = fs.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                write_fully(fs, fd, encode_header(generation, version), 0)
                if sync:
                    fs.fsync(fd)
                fs.replace(tmp, path)
            except BaseException:
                fs.close(fd)
                raise
        except OSError as exc:
            raise storage_error(exc, "creating", path) from None
        return cls(fs, path, fd, generation, HEADER_SIZE, version)

    @classmethod
    def open(cls, fs: FileSystem, path: str, *, writable: bool = True, expect_generation: int | None = None) -> LogFile:
        try:
            fd = fs.open(path, os.O_RDWR if writable else os.O_RDONLY)
        except FileNotFoundError:
            raise
        except OSError as exc:
            if exc.errno == errno_mod.ELOOP:
                    raise UnsafeQueueError(f"{path} is a symlink; nobroker refuses symlinked queue files") from None
            raise storage_error(exc, "opening", path) from None
        try:
            try:
                head = fs.pread(fd, HEADER_SIZE, 0)
            except OSError as exc:
                raise storage_error(exc, "reading the header of", path) from None
            try:
                header = decode_header(head)
            except HeaderError as exc:
                hint = (
                    " The file is empty: if this queue never held jobs, delete it; otherwise restore it from a backup."
                    if not head
                    else ""
                )
                raise CorruptLogError(f"{path}: {exc}.{hint}", path=path, offset=0) from None
            if expect_generation is not None and header.generation != expect_generation:
                raise CorruptLogError(
                    f"{path}: header says generation {header.generation}, file name says {expect_generation}. "
                    "Run `nobroker verify`, then `nobroker repair` (or restore the file from a backup).",
                    path=path,
                    offset=0,
                )
        except BaseException:
            fs.close(fd)
            raise
        return cls(fs, path, fd, header.generation, HEADER_SIZE, header.version)

    # ---------------- reading
    def size(self) -> int:
        try:
            return self.fs.size(self.fd)
        except OSError as exc:
            raise storage_error(exc, "reading the size of", self.path) from None

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
            more = n == asked if file_end is None else pos + n < file_end  # does the file go on after buf?
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

    # ---------------- writing
    def append(self, data: bytes, offset: int) -> int:
        """Write ``data`` at ``offset`` (the current end); returns the new end.

        A failed or short write is rolled back by truncating to ``offset``, so
        the file never keeps a torn record in the middle of live records.
        """
        self.check_usable()
        end = offset + len(data)
        if self.preallocated and end > self._room_end:
            self._make_room(end)
        try:
            write_fully(self.fs, self.fd, data, offset)
        except OSError as exc:
            error = storage_error(exc, "appending to", self.path)
            try:
                self.fs.truncate(self.fd, offset)
            except OSError:
                # Could not roll back: whatever is past ``offset`` is a torn tail that
                # the next opener truncates. This object must not write again.
                self._failed = error
            raise error from None
        with self._sync_lock:  # the Condition's own lock, without its Python-level wrapper
            # Bytes at ``offset`` and after are new: whatever an earlier fsync made
            # durable there is gone (a peer rolled its records back and we write over
            # the place they were), so nothing from here on counts as durable.
            self.durable_end = min(self.durable_end, offset)
            self.written_end = end
        return end

    def _make_room(self, end: int) -> None:
        """Version 2, before an append that would end at ``end``: the file reaches past it (zeros), by ROOM_MIN to ROOM_MAX.

        The first fsync after this makes the new size durable (a journal
        commit); the appends into the room after it need none. Nothing is
        written when it fails (StorageError: a full disk, say).
        """
        fs, fd = self.fs, self.fd
        try:
            size = fs.size(fd)  # a peer may have made room already
            if size < end:
                room = min(max(size // 8, ROOM_MIN), ROOM_MAX)
                fs.allocate(fd, size, end + room - size)
                size = end + room
        except OSError as exc:
            raise storage_error(exc, "making room for an append in", self.path) from None
        self._room_end = size

    def truncate(self, size: int) -> None:
        try:
            self.fs.truncate(self.fd, size)
        except OSError as exc:
            raise storage_error(exc, "truncating the torn tail of", self.path) from None
        self._room_end = min(self._room_end, size)
        with self._sync:
            self.written_end = size
            self.durable_end = min(self.durable_end, size)

    def note_end(self, end: int) -> None:
        """Records up to ``end`` exist (a peer wrote them); we may need to fsync them too."""
        with self._sync:
            if end > self.written_end:
                self.written_end = end

    def sync_through(self, end: int) -> None:
        """Return once the file is durable through ``end``, sharing fsyncs with other threads."""
        cond, lock = self._sync, self._sync_lock
        with lock:  # the Condition's own lock (holding it is holding the Condition), without its Python wrappers
            assert self.durable_end <= self.written_end, "durable past what was written"
            while self.durable_end < end:
                if self._failed is not None:
                    raise self._failed
                if self._syncing:
                    self._waiters += 1
                    try:
                        cond.wait()
                    finally:
                        self._waiters -= 1
                    continue
                self._syncing = True
                target = self.written_end
                lock.release()
                try:
                    self.fs.fsync(self.fd)
                except OSError as exc:
                    # Never retry: after a failed fsync the kernel may have dropped
                    # the dirty pages and a second fsync would report success.
                    self._failed = storage_error(exc, "fsync of", self.path)
                finally:
                    lock.acquire()
                    self._syncing = False
                    if self._waiters:  # a lone writer (the common case) skips the Python-level notify
                        cond.notify_all()
                if self._failed is None and target > self.durable_end:
                    self.durable_end = target
            if self._failed is not None and self.durable_end < end:
                raise self._failed

    def check_usable(self) -> None:
        if self._failed is not None:
            raise StorageError(
                f"{self._failed} This queue object refuses further writes; open the queue again.",
                errno=self._failed.errno,
                path=self.path,
            )

    @property
    def failed(self) -> StorageError | None:
        return self._failed

    def close(self) -> None:
        with self._sync:
            while self._syncing:
                self._waiters += 1
                try:
                    self._sync.wait()
                finally:
                    self._waiters -= 1
            if self.closed:
                return
            self.closed = True
        try:
            self.fs.close(self.fd)
        except OSError:
            pass


def list_generations(fs: FileSystem, directory: str, name: str) -> list[int]:
    """Generation numbers that have a log file for ``name`` in ``directory``."""
    return generations(fs.listdir(directory), name)
