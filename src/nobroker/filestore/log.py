"""One generation file of the append-only log.

Owns: LogFile: creating a generation (header, fsync, rename; the caller
fsyncs the folder), opening one, appending with short-write handling and
(format version 2) the room set aside ahead of the appends, and the group
fsync; reading its records comes from reading.LogReading. Imports: errors,
layout, fs, framing, reading.

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
import threading

from ..errors import CorruptLogError, StorageError, UnsafeQueueError
from .framing import (
    DEFAULT_FORMAT_VERSION, FORMAT_VERSION, HEADER_SIZE, HeaderError, decode_header, encode_header, has_room, is_lean,
)  # fmt: skip
from .fs import FileSystem, storage_error, write_fully
from .reading import LogReading
from .layout import generations, log_path, temp_path

#: Room set aside ahead of the appends in a version 2 file: an eighth of the file, within these.
ROOM_MIN = 64 * 1024
ROOM_MAX = 1024 * 1024


# ---------------------------------------------------------------- one generation
class LogFile(LogReading):
    """An open generation file: read forward, append, fsync together."""

    def __init__(
        self, fs: FileSystem, path: str, fd: int, generation: int, size: int, version: int = FORMAT_VERSION
    ) -> None:
        self.fs = fs
        self.path = path
        self.fd = fd
        self.generation = generation
        self.version = version
        #: Versions 2 and 4: the records end at a frame of zeros, not at the file's size.
        self.preallocated = has_room(version)
        #: Version 4: a new job's ENQUEUE leaves out an available_at equal to its enqueued_at.
        self.lean = is_lean(version)
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
