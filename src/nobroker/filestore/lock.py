"""The cross-process locks of one queue: the writers' lock and the compactor's.

Owns: QueueLock (an exclusive lock for writers, a shared one for readers, a
timeout, a try without waiting; opened read-only where the folder or the
filesystem allows no more) and ``held_elsewhere`` (is a lock file held
by anyone else right now). Imports: errors, fs.

Two lock files: ``<name>.lock`` serialises every operation (held for
microseconds); ``<name>.compactor`` is held by the one process compacting the
queue, for the whole compaction, most of which runs without the first lock.

The kernel arbitrates: flock on POSIX, msvcrt.locking on Windows, both on a
zero-byte ``<name>.lock`` file whose descriptor is held for the queue's life
(reopening it per operation once cost 44% of a non-durable enqueue). Both
associate the lock with the open file description, which a forked child
shares; so a child must open its own (the storage does, see ``reopen``).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable

from ..errors import LockTimeoutError, UnsafeQueueError
from .fs import FileSystem, storage_error

#: Attempts at a busy lock, each after giving the processor away (sched_yield), before
#: the first sleep. A holder keeps the lock for tens of microseconds, but on a busy
#: machine it is often waiting for a processor: yielding lets it run and let go, where
#: the shortest sleep takes 60-150 µs (measured: a 4-process Worker pool drained 1.3x
#: faster). Where sched_yield does not exist, the sleeps alone.
YIELDS = 20
#: Longest sleep between two attempts at a busy lock. Short, because holders
#: keep it for tens of microseconds (fsync happens after the lock is released):
#: a long sleep would idle a waiter long after the lock came free.
MAX_BACKOFF = 0.0002
#: First sleep; doubled after each failed attempt up to MAX_BACKOFF.
FIRST_BACKOFF = 0.00001
_sched_yield = getattr(os, "sched_yield", None)
#: What opening a file for writing says on a read-only filesystem or in a folder we may
#: only read: such a file can still be opened for reading.
READ_ONLY_ERRORS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


class QueueLock:
    """One lock file. With ``allow_read_only``, a lock file that cannot be opened for
    writing is opened for reading (``read_only`` is the errno that said why; flock works on either), and a
    missing one that cannot be made leaves ``fd`` None: taking the lock then does nothing."""

    def __init__(self, fs: FileSystem, path: str, timeout: float, *, allow_read_only: bool = False) -> None:
        self.fs = fs
        self.path = path
        self.timeout = timeout
        self.allow_read_only = allow_read_only
        self.read_only: int | None = None
        self.fd = self._open()
        self.held = False

    def _open(self) -> int | None:
        try:
            return self.fs.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            if not (self.allow_read_only and exc.errno in READ_ONLY_ERRORS):
                raise self._refusal(exc) from None
            self.read_only = exc.errno
        try:
            return self.fs.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # nothing to lock, and nothing to make it with
        except OSError as exc:
            raise self._refusal(exc) from None

    def _refusal(self, exc: OSError) -> Exception:
        if exc.errno == errno.ELOOP:
            return UnsafeQueueError(f"{self.path} is a symlink; nobroker refuses symlinked queue files")
        return storage_error(exc, "opening the lock file", self.path)

    def reopen(self) -> None:
        """After fork: drop the inherited descriptor (its lock is the parent's) and open our own."""
        self._close_fd()
        self.fd = self._open()
        self.held = False

    def acquire(self, *, exclusive: bool = True, meanwhile: Callable[[], bool] | None = None) -> None:
        """Take the lock, waiting up to ``timeout`` (LockTimeoutError).

        ``meanwhile``: work to do while the lock is busy, instead of idling:
        called between attempts, it says whether it did any (then the next
        attempt follows at once). It must end in moments: the lock may come
        free while it runs. An operation reads what its peers append there,
        so less is left to read once it holds the lock.
        """
        fs, fd = self.fs, self.fd
        if fd is None or fs.lock(fd, exclusive=exclusive, blocking=False):
            self.held = True
            return
        deadline = time.monotonic() + self.timeout
        yields, pause = YIELDS, FIRST_BACKOFF
        while True:
            if meanwhile is not None and meanwhile():
                pass  # it did some work: try again at once
            elif yields and _sched_yield is not None:
                yields -= 1
                _sched_yield()
            else:
                time.sleep(pause)
                pause = min(pause * 2, MAX_BACKOFF)
            if fs.lock(fd, exclusive=exclusive, blocking=False):
                self.held = True
                return
            if time.monotonic() >= deadline:
                raise LockTimeoutError(
                    f"could not lock {self.path} within {self.timeout:g} s: another process holds it. "
                    "Raise lock_timeout, or find the process (e.g. `fuser` on the lock file)."
                )

    def try_acquire(self, *, exclusive: bool = True) -> bool:
        """Take the lock if it is free right now; never waits."""
        if self.fd is None or self.fs.lock(self.fd, exclusive=exclusive, blocking=False):
            self.held = True
            return True
        return False

    def forget(self) -> None:
        """In a forked child: drop the inherited descriptor without unlocking (the lock is the parent's)."""
        self._close_fd()
        self.held = False

    def release(self) -> None:
        if self.held:
            self.held = False
            if self.fd is not None:
                self.fs.unlock(self.fd)

    def close(self) -> None:
        self.release()
        self._close_fd()

    def _close_fd(self) -> None:
        if self.fd is not None:
            try:
                self.fs.close(self.fd)
            except OSError:
                pass


def held_elsewhere(fs: FileSystem, path: str) -> bool:
    """True if some descriptor (another process's, or another of ours) holds the lock on ``path`` now.

    A missing file is a free lock. Used for rare decisions only (opening a
    queue, rolling back after a failed fsync): it opens and closes the file.
    """
    try:
        fd = fs.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise storage_error(exc, "opening the lock file", path) from None
    try:
        if fs.lock(fd, exclusive=False, blocking=False):
            fs.unlock(fd)
            return False
        return True
    finally:
        fs.close(fd)
