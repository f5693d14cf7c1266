"""The cross-process lock that serialises every writer of one queue.

Owns: QueueLock (an exclusive lock for writers, a shared one for readers, a
timeout). Imports: errors, fs, log (for error wrapping).

The kernel arbitrates: flock on POSIX, msvcrt.locking on Windows, both on a
zero-byte ``<name>.lock`` file whose descriptor is held for the queue's life
(reopening it per operation once cost 44% of a non-durable enqueue). Both
associate the lock with the open file description, which a forked child
shares; so a child must open its own (the storage does, see ``reopen``).
"""

from __future__ import annotations

import os
import time

from .errors import LockTimeoutError, UnsafeQueueError
from .fs import FileSystem
from .log import storage_error

#: Longest sleep between two attempts at a busy lock. Short, because holders
#: keep it for tens of microseconds (fsync happens after the lock is released):
#: a long sleep would idle a waiter long after the lock came free.
MAX_BACKOFF = 0.0002
#: First sleep; doubled after each failed attempt up to MAX_BACKOFF.
FIRST_BACKOFF = 0.00001


class QueueLock:
    def __init__(self, fs: FileSystem, path: str, timeout: float) -> None:
        self.fs = fs
        self.path = path
        self.timeout = timeout
        self.fd = self._open()
        self.held = False

    def _open(self) -> int:
        try:
            return self.fs.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            if exc.errno == getattr(__import__("errno"), "ELOOP", -1):
                raise UnsafeQueueError(f"{self.path} is a symlink; nobroker refuses symlinked queue files") from None
            raise storage_error(exc, "opening the lock file", self.path) from None

    def reopen(self) -> None:
        """After fork: drop the inherited descriptor (its lock is the parent's) and open our own."""
        try:
            self.fs.close(self.fd)
        except OSError:
            pass
        self.fd = self._open()
        self.held = False

    def acquire(self, *, exclusive: bool = True) -> None:
        fs, fd = self.fs, self.fd
        if fs.lock(fd, exclusive=exclusive, blocking=False):
            self.held = True
            return
        deadline = time.monotonic() + self.timeout
        pause = FIRST_BACKOFF
        while True:
            time.sleep(pause)
            if fs.lock(fd, exclusive=exclusive, blocking=False):
                self.held = True
                return
            if time.monotonic() >= deadline:
                raise LockTimeoutError(
                    f"could not lock {self.path} within {self.timeout:g} s: another process holds it. "
                    "Raise lock_timeout, or find the process (e.g. `fuser` on the lock file)."
                )
            pause = min(pause * 2, MAX_BACKOFF)

    def release(self) -> None:
        if self.held:
            self.held = False
            self.fs.unlock(self.fd)

    def close(self) -> None:
        self.release()
        try:
            self.fs.close(self.fd)
        except OSError:
            pass
