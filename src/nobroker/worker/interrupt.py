"""Ending an idle wait at once: a private pipe the queue's wait watches.

Owns: InterruptPipe. ``Worker.stop()`` (from any thread, and so from a stop
signal's watcher) writes one byte to it; the run() thread's
``wait_for_jobs(timeout, interrupt=fd)`` returns as soon as the read end is
readable. The byte is never read, so every later wait ends at once too.
Imports: nothing from nobroker.
"""

from __future__ import annotations

import os
import threading


class InterruptPipe:
    """Open only during ``run()``, and only for a queue whose wait takes an interrupt."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Guarded by _lock: a write must never reach a descriptor number closed and reused.
        self._read: int | None = None
        self._write: int | None = None
        self._sent = False

    @property
    def fd(self) -> int | None:
        """The read end to hand to ``wait_for_jobs``, or None (not open: waits end on their own)."""
        return self._read

    def open(self) -> None:
        try:
            read_end, write_end = os.pipe()
        except OSError:  # out of descriptors: idle waits then end on their own
            return
        set_blocking = getattr(os, "set_blocking", None)  # Windows has it from Python 3.12 on
        for fd in (read_end, write_end):
            try:
                if set_blocking is not None:
                    set_blocking(fd, False)
            except OSError:  # one byte into an empty pipe never blocks anyway
                pass
        with self._lock:
            assert self._read is None and self._write is None, "opened twice"
            self._read, self._write = read_end, write_end

    def interrupt(self) -> None:
        """End the current idle wait, and every later one."""
        with self._lock:
            if self._write is None or self._sent:
                return
            try:
                os.write(self._write, b"\0")
                self._sent = True
            except OSError:  # a full or closing pipe: a byte is already waiting, or nobody is
                pass

    def close(self) -> None:
        with self._lock:
            read_end, write_end = self._read, self._write
            self._read = self._write = None
        for fd in (read_end, write_end):
            if fd is not None:
                os.close(fd)
