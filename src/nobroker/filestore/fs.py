"""The one narrow seam every byte of file I/O passes through.

Owns: FileSystem (the interface), RealFileSystem (the operating system),
``write_fully`` (pwrite until every byte is written), ``unmap`` (let go of
a file ``map_all`` mapped) and ``storage_error`` (an OSError as the
StorageError a user reads). Imports: errors.

Why a seam: durability claims are claims about which bytes survive a power
cut, and they can only be tested if a test can stand in for the disk. The
reliability suite substitutes a simulated disk that forgets unsynced writes
and renames; it implements exactly these methods, nothing else.

Assumptions about the disk, written down so tests can check each one:
  1. pwrite of n bytes at offset o either lands whole, or a crash leaves a
     prefix of it (never bytes out of order, never bytes after a hole).
  2. fsync(fd) returns only when the file's data and size are durable.
  3. A new name or a rename is durable only after fsync of its directory.
  4. rename/replace is atomic: after a crash either name state is whole.
  5. A failed fsync may have dropped the dirty pages: the caller must not
     assume its earlier writes are on disk, and must not simply retry.
"""

from __future__ import annotations

import errno
import mmap
import os
import time
import stat
import sys
from typing import Any

from ..errors import StorageError, UnsafeQueueError

_IS_WINDOWS = sys.platform == "win32"

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

try:  # Windows
    import msvcrt
except ImportError:
    msvcrt = None  # type: ignore[assignment]

#: Flags for opening queue files: binary, never through a symlink, never inherited.
_BASE_FLAGS = getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
#: Opening never waits: a named pipe planted at a queue file's name would block a plain
#: open until someone opened its other end. Cleared again once the file proved regular.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: What open() reports for a special file it cannot open without blocking or at all:
#: a pipe nobody reads (for writing), a socket, a device without its driver, a folder.
#: Can os.access look at a symlink itself (not where it points)? Where not, lstat_or_none lstats.
_ACCESS_NOFOLLOW = os.access in os.supports_follow_symlinks
_SPECIAL_FILE_ERRORS = frozenset({errno.ENXIO, errno.EISDIR, getattr(errno, "EOPNOTSUPP", -1)})
_FILE_KINDS = (
    (stat.S_ISFIFO, "a named pipe"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symlink"),
)  # fmt: skip


def not_a_regular_file(path: str, mode: int) -> UnsafeQueueError:
    """The refusal of a queue file that is not a regular file, saying what it is and what to do."""
    kind = next((name for test, name in _FILE_KINDS if test(mode)), f"a special file (mode {mode:o})")
    return UnsafeQueueError(
        f"{path} is {kind}, not a regular file; nobroker opens only regular files in a queue folder. "
        "Remove it if nobroker did not make it (someone else can write to this folder?), then retry."
    )


def storage_error(exc: OSError, doing: str, path: str | None) -> StorageError:
    """Wrap an OSError in a StorageError whose message says what failed and what to do."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    hint = ""
    if exc.errno == errno.ENOSPC:
        hint = " The disk is full: free space, then retry (nothing was reported done)."
    elif exc.errno == errno.EROFS:
        hint = " The filesystem is read-only."
    elif exc.errno == errno.EIO:
        hint = " The disk reported an I/O error: check it, then reopen the queue."
    return StorageError(f"{doing} {path or ''} failed: {reason}.{hint}".replace("  ", " "), errno=exc.errno, path=path)


def write_fully(fs: FileSystem, fd: int, data: bytes | memoryview, offset: int) -> None:
    """pwrite until every byte is written; a write that makes no progress is an error."""
    n = fs.pwrite(fd, data, offset)
    if n == len(data):  # almost always: one call, no view
        return
    if n <= 0:
        raise OSError(errno.EIO, "write made no progress")
    view = memoryview(data)[n:]
    offset += n
    while view:
        n = fs.pwrite(fd, view, offset)
        if n <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[n:]
        offset += n


class FileSystem:
    """The operations nobroker performs on files, by file descriptor or path.

    Subclasses: RealFileSystem here; a simulated disk in the tests.
    """

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        raise NotImplementedError

    def close(self, fd: int) -> None:
        raise NotImplementedError

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        raise NotImplementedError

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        raise NotImplementedError

    def fsync(self, fd: int) -> None:
        raise NotImplementedError

    def truncate(self, fd: int, size: int) -> None:
        raise NotImplementedError

    def allocate(self, fd: int, offset: int, length: int) -> None:
        """Make the file hold the bytes [offset, offset + length): zeros where it did not (never shorter)."""
        raise NotImplementedError

    def size(self, fd: int) -> int:
        raise NotImplementedError

    def replace(self, src: str, dst: str) -> None:
        raise NotImplementedError

    def unlink(self, path: str) -> None:
        raise NotImplementedError

    def fsync_dir(self, path: str) -> None:
        raise NotImplementedError

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        raise NotImplementedError

    def listdir(self, path: str) -> list[str]:
        raise NotImplementedError

    def lstat(self, path: str) -> os.stat_result:
        raise NotImplementedError

    def chmod(self, path: str, mode: int) -> None:
        raise NotImplementedError

    def touch(self, path: str) -> None:
        """Change the modification time ``lstat`` shows (to a value it never had), and nothing else; not durable."""
        raise NotImplementedError

    def lock(self, fd: int, *, exclusive: bool, blocking: bool) -> bool:
        """Take the cross-process lock on ``fd``; False if busy and not blocking."""
        raise NotImplementedError

    def unlock(self, fd: int) -> None:
        raise NotImplementedError

    # Helpers built on the primitives, shared by every implementation.
    def lstat_or_none(self, path: str) -> os.stat_result | None:
        """``lstat(path)``, or None where nothing is at ``path``."""
        try:
            return self.lstat(path)
        except FileNotFoundError:
            return None

    def exists(self, path: str) -> bool:
        try:
            self.lstat(path)
        except FileNotFoundError:
            return False
        return True

    def read_all(self, fd: int) -> bytes:
        return self.pread(fd, self.size(fd), 0)

    def map_all(self, fd: int) -> Any:
        """The whole file as a read-only buffer (``unmap`` it when done): a copy, here."""
        return self.read_all(fd)


def unmap(buffer: Any) -> None:
    """Let go of what ``map_all`` gave (a mapping still viewed is unmapped when its last view goes)."""
    close = getattr(buffer, "close", None)
    if close is not None:
        try:
            close()
        except BufferError:
            pass


class RealFileSystem(FileSystem):
    """The operating system's files, with the flags nobroker always wants."""

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        """Open a regular file; UnsafeQueueError (never a wait) for a named pipe, a device or a folder."""
        try:
            fd = os.open(path, flags | _BASE_FLAGS | _NONBLOCK, mode)
        except OSError as exc:
            if exc.errno in _SPECIAL_FILE_ERRORS:
                try:
                    found = os.lstat(path).st_mode
                except OSError:
                    raise exc from None
                if not stat.S_ISREG(found):
                    raise not_a_regular_file(path, found) from None
            raise
        try:
            found = os.fstat(fd).st_mode  # the file opened, not whatever the name points at by now
            if not stat.S_ISREG(found):
                raise not_a_regular_file(path, found)
            if _NONBLOCK and fcntl is not None:
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def close(self, fd: int) -> None:
        os.close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if _IS_WINDOWS:  # pragma: no cover - no pread there
            os.lseek(fd, offset, os.SEEK_SET)
            return os.read(fd, size)
        chunks = []
        while size > 0:
            chunk = os.pread(fd, size, offset)
            if not chunk:
                break
            chunks.append(chunk)
            size -= len(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if _IS_WINDOWS:  # pragma: no cover
            os.lseek(fd, offset, os.SEEK_SET)
            return os.write(fd, data)
        return os.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        # fdatasync is enough: an append changes the size, which it must flush.
        (getattr(os, "fdatasync", None) or os.fsync)(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def allocate(self, fd: int, offset: int, length: int) -> None:
        fallocate = getattr(os, "posix_fallocate", None)
        if fallocate is not None:
            try:
                fallocate(fd, offset, length)  # blocks reserved: no ENOSPC in the middle of an append
                return
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
        if os.fstat(fd).st_size < offset + length:  # a filesystem without it: a sparse extension
            os.ftruncate(fd, offset + length)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def map_all(self, fd: int) -> Any:
        """The whole file mapped read-only (no copy, no fresh pages to zero), else read.

        For files nobroker never changes in place once written (snapshots):
        a mapping of a file cut short under it would fault on the lost pages.
        The mapping keeps its own descriptor: ``fd`` may be closed at once.
        """
        size = self.size(fd)
        if size > 0:
            try:
                return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                pass  # a filesystem that cannot map: read it
        return self.read_all(fd)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        if _IS_WINDOWS:  # pragma: no cover - directories cannot be fsynced there
            return
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        os.mkdir(path, mode)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def lstat(self, path: str) -> os.stat_result:
        return os.lstat(path)

    def lstat_or_none(self, path: str) -> os.stat_result | None:
        # Asked under the lock at every operation, of a pointer most queues do not have
        # yet: a FileNotFoundError raised and caught costs more than the two system calls.
        if _ACCESS_NOFOLLOW and not os.access(path, os.F_OK, follow_symlinks=False):
            return None
        return super().lstat_or_none(path)

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(path, mode)

    def touch(self, path: str) -> None:
        st = os.lstat(path)
        # One nanosecond past the last value: the clock's own granularity may repeat it.
        os.utime(path, ns=(st.st_atime_ns, max(st.st_mtime_ns + 1, time.time_ns())), follow_symlinks=False)

    def lock(self, fd: int, *, exclusive: bool, blocking: bool) -> bool:
        if fcntl is not None:
            op = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
            if not blocking:
                op |= fcntl.LOCK_NB
            try:
                fcntl.flock(fd, op)
            except BlockingIOError:
                return False
            return True
        # Windows: msvcrt locks are exclusive only; a shared lock is taken as exclusive.
        os.lseek(fd, 0, os.SEEK_SET)  # pragma: no cover
        try:  # pragma: no cover
            msvcrt.locking(fd, msvcrt.LK_NBLCK if not blocking else msvcrt.LK_LOCK, 1)
        except OSError:  # pragma: no cover
            if not blocking:
                return False
            raise
        return True  # pragma: no cover

    def unlock(self, fd: int) -> None:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return
        os.lseek(fd, 0, os.SEEK_SET)  # pragma: no cover
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)  # pragma: no cover


#: The file system used unless a test passes another.
OS_FILESYSTEM: FileSystem = RealFileSystem()
