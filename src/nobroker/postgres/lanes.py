"""The work's two lanes: its connection, and a spare one for a thread that finds it busy.

Owns: Lanes, SparePause and SPARE_PAUSE. A Worker's threads share one Queue: its lease
loop leases while the thread that settles finished jobs acks them, and
threads of a web application enqueue side by side. On one connection each
waited for the other's statement; through Lanes, a run takes the work's
connection if no thread holds it, else the spare (opened the first time it
is needed), so two threads' work runs side by side, as two processes'
would. One thread alone always finds the first free and never opens the
spare. The spare is a shortcut, never a new way to fail: one that cannot
open at the first attempt (the server at its max_connections, say) sends the
work to wait its turn on the first, and is tried again only SPARE_PAUSE
later. Imports: connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from .connection import Link

T = TypeVar("T")

#: After a spare connection failed to open, the work waits its turn on the first this long before the spare is tried again.
SPARE_PAUSE = 30.0


class SparePause:
    """When a spare connection may be tried: at once, and again only SPARE_PAUSE after one failed to open (Lanes, AsyncLanes)."""

    def __init__(self) -> None:
        self._from = 0.0  # time.monotonic() from which the spare may be tried

    def may_try(self) -> bool:
        return time.monotonic() >= self._from

    def refused(self) -> None:
        self._from = time.monotonic() + SPARE_PAUSE


class Lanes:
    """The work's connection and a spare one: a run takes the first if no thread holds it, else the spare."""

    def __init__(self, first: Link, spare: Link) -> None:
        self.first, self.spare = first, spare
        self._pause = SparePause()

    def run(self, what: str, fn: Callable[[Any], T], *, retry: bool) -> T:
        ran, result = self.first.run_if_free(what, fn, retry=retry)
        if ran:
            return result  # type: ignore[return-value]
        if self._pause.may_try():
            if self.spare.open_at_once():
                return self.spare.run(what, fn, retry=retry)
            self._pause.refused()
        return self.first.run(what, fn, retry=retry)

    def let_others_in(self) -> None:
        self.first.let_others_in()


__all__ = ["SPARE_PAUSE", "Lanes", "SparePause"]
