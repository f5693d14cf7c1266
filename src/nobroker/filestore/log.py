"""One generation file of the append-only log, and the pointer to the current one.

Owns: creating a generation (header, fsync, rename; the caller fsyncs the
folder), reading records forward from an offset, telling a torn tail from
damage in the middle, appending with short-write handling, group fsync, and
the ``<name>.current`` pointer (replaced in two steps a compactor can split:
a durable temp file, then one rename). Imports: errors, jobs, layout, fs,
framing.

Group commit: appends happen under the queue's lock, fsync does not. A thread
that appended waits until the file is durable through its own last byte; the
first waiter runs one fsync that covers everyone who appended before it began,
so eight threads (or four processes, through the kernel) share fsyncs.
"""

from __future__ import annotations

import errno as errno_mod
import os
import threading
from collections.abc import Iterator
from typing import Any
from zlib import crc32

from ..errors import CorruptLogError, StorageError, UnsafeQueueError
from .framing import (
    FRAME,
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
from .layout import MAX_GENERATION, generations, log_path, pointer_path, temp_path

_unpack_frame = FRAME.unpack_from

#: Bytes read per call while scanning. Big enough to amortise syscalls.
READ_CHUNK = 1 << 20
#: Bytes read at once for one job's record: most jobs' records fit, a longer one takes a second read.
JOB_READ_GUESS = 1024


# ---------------------------------------------------------------- pointer file
def read_pointer(fs: FileSystem, directory: str, name: str) -> int | None:
    """The authoritative generation, or None when no compaction has happened yet."""
    path = pointer_path(directory, name)
    try:
        fd = fs.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno_mod.ELOOP:
            raise UnsafeQueueError(f"{path} is a symlink; nobroker refuses symlinked queue files") from None
        raise storage_error(exc, "reading", path) from None
    try:
        data = fs.pread(fd, 64, 0)
    except OSError as exc:
        raise storage_error(exc, "reading", path) from None
    finally:
        fs.close(fd)
    text = data.decode("ascii", "replace").strip()
    if not text.isdigit() or int(text) > MAX_GENERATION:
        raise CorruptLogError(
            f"{path} should hold one generation number (0-{MAX_GENERATION}) but holds {text[:40]!r}. "
            "Run `nobroker verify` to see which generation files exist, then `nobroker repair`.",
            path=path,
        )
    return int(text)


def write_pointer(fs: FileSystem, directory: str, name: str, generation: int, *, sync: bool) -> None:
    """Atomically replace the pointer: temp file (O_EXCL), fsync, rename, fsync directory."""
    tmp = prepare_pointer(fs, directory, name, generation, sync=sync)
    install_pointer(fs, directory, name, tmp)
    if sync:
        try:
            fs.fsync_dir(directory)
        except OSError as exc:
            raise storage_error(exc, "writing the generation pointer", pointer_path(directory, name)) from None


def prepare_pointer(fs: FileSystem, directory: str, name: str, generation: int, *, sync: bool) -> str:
    """The first half of replacing the pointer: a durable temp file naming ``generation``; returns its path.

    Nothing reads the temp file; ``install_pointer`` renames it over the pointer.
    """
    path = pointer_path(directory, name)
    tmp = temp_path(path)
    try:
        if fs.exists(tmp):
            fs.unlink(tmp)
        fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            data = f"{generation}\n".encode("ascii")
            write_fully(fs, fd, data, 0)
            if sync:
                fs.fsync(fd)
        finally:
            fs.close(fd)
    except OSError as exc:
        raise storage_error(exc, "writing the generation pointer", path) from None
    return tmp


def install_pointer(fs: FileSystem, directory: str, name: str, tmp: str) -> None:
    """The second half: rename the prepared temp file over the pointer (atomic; durable after a folder fsync)."""
    path = pointer_path(directory, name)
    try:
        fs.replace(tmp, path)
    except OSError as exc:
        raise storage_error(exc, "writing the generation pointer", path) from None


# ---------------------------------------------------------------- one generation
class LogFile:
    """An open generation file: read forward, append, fsync together."""

    def __init__(self, fs: FileSystem, path: str, fd: int, generation: int, size: int) -> None:
        self.fs = fs
        self.path = path
        self.fd = fd
        self.generation = generation
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
    def create(cls, fs: FileSystem, directory: str, name: str, generation: int, *, sync: bool) -> LogFile:
        """Create generation ``generation`` with just a header: temp, fsync, rename.

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
                write_fully(fs, fd, encode_header(generation), 0)
                if sync:
                    fs.fsync(fd)
                fs.replace(tmp, path)
            except BaseException:
                fs.close(fd)
                raise
        except OSError as exc:
            raise storage_error(exc, "creating", path) from None
        return cls(fs, path, fd, generation, HEADER_SIZE)

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
        return cls(fs, path, fd, header.generation, HEADER_SIZE)

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
        """Every whole record from ``start`` up to ``end`` (default: end of file).

        Yields OK frames; if reading stops on anything else (a torn or damaged
        record) that frame is yielded last. Reads in chunks, so memory stays
        under twice the largest record however long the log is.
        """
        fs, fd = self.fs, self.fd
        file_end = fs.size(fd) if end is None else end
        pos = start
        want = READ_CHUNK
        while pos < file_end:
            buf = fs.pread(fd, min(want, file_end - pos), pos)
            if not buf:
                return
            i = 0
            n = len(buf)
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
                stop = decode_frame(buf, i, pos)
                if stop.status is FrameStatus.OK:  # cannot happen: both paths check the same things
                    raise AssertionError(f"record at {pos + i} decoded differently on the slow path")
                break
            if stop is None:
                pos += i
                want = READ_CHUNK
                continue
            if stop.status is FrameStatus.INCOMPLETE and pos + n < file_end:
                # The record runs past this chunk: read again from its start.
                pos = stop.offset
                want = max(READ_CHUNK, FRAME_SIZE + min(stop.length, MAX_RECORD_BYTES))
                continue
            yield stop
            return

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
            for i in range(limit):
                if plausible_frame_at(view, i):
                    return pos + i
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
        end = offset + len(data)
        with self._sync_lock:  # the Condition's own lock, without its Python-level wrapper
            # Bytes at ``offset`` and after are new: whatever an earlier fsync made
            # durable there is gone (a peer rolled its records back and we write over
            # the place they were), so nothing from here on counts as durable.
            self.durable_end = min(self.durable_end, offset)
            self.written_end = end
        return end

    def truncate(self, size: int) -> None:
        try:
            self.fs.truncate(self.fd, size)
        except OSError as exc:
            raise storage_error(exc, "truncating the torn tail of", self.path) from None
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
        cond = self._sync
        with cond:
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
                cond.release()
                try:
                    self.fs.fsync(self.fd)
                except OSError as exc:
                    # Never retry: after a failed fsync the kernel may have dropped
                    # the dirty pages and a second fsync would report success.
                    self._failed = storage_error(exc, "fsync of", self.path)
                finally:
                    cond.acquire()
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
