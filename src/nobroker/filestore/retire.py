"""Letting go of a generation this process no longer uses, without making anyone wait for it.

Owns: ``let_go`` (the file of a generation left behind closed, and the
state replayed from it taken apart) and ``Retiring`` (the thread doing it,
joined at close). Imports: log, replay.

Both take long for a large queue, and neither may happen under the file
lock (every peer would wait) nor in the operation that found the flip (its
caller would): closing the last descriptor of an unlinked generation makes
the filesystem free its blocks (a good part of a second for a million
jobs), and freeing a state of a million jobs drops as many objects. A
thread of its own does both after the operation returned. Freeing one big
container is a single call that holds the GIL throughout, so the thread
empties the state's lists and dicts RETIRE_STEP items at a time, and
between two steps lets this process's other threads run (at once: a
waiting thread would otherwise wait out the interpreter's switch interval,
5 ms).
"""

from __future__ import annotations

import threading
import time

from .log import LogFile
from .replay import QueueState

#: Items a retired state's lists, dicts and sets lose per step while they are taken apart.
#: One step holds the GIL for about a millisecond at most, so other threads hardly notice.
RETIRE_STEP = 4096

Retired = LogFile | QueueState


def _step_done() -> None:
    """Between two steps: hand the GIL to a thread waiting for it now, not at the end of the switch interval."""
    time.sleep(0)


def _empty(container: object) -> None:
    """Empty a list, dict or set a step at a time (with the lists and dicts it holds, one level down)."""
    if isinstance(container, list):
        while container:
            del container[-RETIRE_STEP:]
            _step_done()
    elif isinstance(container, dict):
        while container:
            for _ in range(min(RETIRE_STEP, len(container))):
                value = container.popitem()[1]
                if isinstance(value, (list, dict)) and len(value) > RETIRE_STEP:
                    _empty(value)
            del value
            _step_done()
    elif isinstance(container, set):
        while container:
            for _ in range(min(RETIRE_STEP, len(container))):
                container.pop()
            _step_done()


def take_apart(retired: list[Retired]) -> None:
    """Close every file and empty every state of ``retired`` (each is no longer used by anyone)."""
    while retired:
        item = retired.pop()
        if isinstance(item, LogFile):
            item.close()
        else:
            for value in list(vars(item).values()):
                _empty(value)
        del item


class Retiring:
    """The thread taking apart what a switch to another generation left, if one runs."""

    __slots__ = ("thread",)

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None

    def let_go(self, retired: list[Retired], *, in_thread: bool) -> None:
        """Take ``retired`` apart: in a thread of its own (``in_thread``), else here and now.

        The caller must hold no other reference to the items. One thread at a
        time: a second retirement (two flips in a row) waits for the first.
        """
        if not retired:
            return
        if not in_thread:
            take_apart(retired)
            return
        self.join()
        thread = threading.Thread(target=take_apart, args=(retired,), name="nobroker-retire", daemon=True)
        self.thread = thread
        thread.start()

    def join(self) -> None:
        """Wait for the thread, if one runs (at close: every file of ours closed before close returns)."""
        thread, self.thread = self.thread, None
        if thread is not None:
            thread.join()

    def forget(self) -> None:
        """After a fork: the parent's thread does not exist here."""
        self.thread = None


__all__ = ["RETIRE_STEP", "Retiring", "take_apart"]
