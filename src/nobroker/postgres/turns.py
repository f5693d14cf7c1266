"""Turns at one connection: a mutex whose holder, between two runs of one long operation, lets a waiting thread go first.

Owns: Turns. A plain lock is not fair: a thread that lets go of it and
takes it again at once (the next batch of a compaction, say) wins against
a thread the release woke, which still has to be scheduled and to get the
interpreter lock; a dashboard's reads that share the connection could wait
for the whole compaction. ``let_others_in`` closes that: called between two
runs, it returns once a thread that was waiting has had the mutex (or after
``patience``, a safety net). An uncontended take costs one plain acquire.
Imports: nothing from nobroker.
"""

from __future__ import annotations

import threading
from types import TracebackType


class Turns:
    """A mutex (``with turns:``) with ``let_others_in``; see the module's docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = threading.Condition(threading.Lock())  # guards the three counts below
        self._waiting = 0  # threads blocked in acquire
        self._taken = 0  # takes by threads that had to wait
        self._yielding = 0  # threads in let_others_in

    def acquire(self) -> None:
        if self._lock.acquire(blocking=False):
            return
        with self._state:
            self._waiting += 1
        taken = False
        try:
            taken = self._lock.acquire()
        finally:
            with self._state:
                self._waiting -= 1
                self._taken += taken
                if self._yielding:
                    self._state.notify_all()

    def try_acquire(self) -> bool:
        """Take the mutex if no thread holds it now; False at once if one does."""
        return self._lock.acquire(blocking=False)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> Turns:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def let_others_in(self, patience: float) -> None:
        """Not holding the mutex: if a thread waits for it, return once one that waited has taken it (at most ``patience`` s)."""
        with self._state:
            if not self._waiting:
                return
            taken = self._taken
            self._yielding += 1
            try:
                self._state.wait_for(lambda: self._taken != taken or not self._waiting, patience)
            finally:
                self._yielding -= 1


__all__ = ["Turns"]
