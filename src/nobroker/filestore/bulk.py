"""Building many objects at once: the cyclic garbage collector paused meanwhile.

Owns: ``paused_collector``, a context manager around a build of a state (a
replay, a snapshot's load). Imports: nothing from nobroker.

CPython collects its oldest generation whenever the objects that survived
the younger ones have grown by a quarter since the last time, and each such
collection walks every tracked object of the process. Building a state of
many Entries keeps crossing that line: opening a queue of 1,000,000 jobs,
half of them done (each an Entry until a compaction drops it), spent 2.8
of its 6.0 seconds in those collections. Nothing a build makes is garbage
before it ends, so none is needed meanwhile. A build that leaves many new
objects ends with one full collection, there and then: left to itself,
the collector would walk them three times later (young, middle, old
generation: 0.47, 0.41 and 0.46 s at that size), in whatever operation
happened to cross its thresholds.

The collector is the process's: the pause is counted (threads may build at
once) and ends with the last build; a collector that was disabled before
the first stays disabled, and a child forked during a build starts with it
as it was before the build (the builds are its parent's).
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: New tracked objects a build may leave before its end runs a full collection (see above).
FULL_COLLECTION_AFTER = 100_000

_guard = threading.RLock()  # reentrant: a finalizer the collection runs may open a queue
_builds = 0  # builds running now, in every thread
_was_enabled = False  # the collector's state when the first of them began


@contextmanager
def paused_collector() -> Iterator[None]:
    """No cyclic collection while the block runs (and while any other thread's block runs)."""
    global _builds, _was_enabled
    with _guard:
        if _builds == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _builds += 1
    try:
        yield
    finally:
        with _guard:
            assert _builds > 0, "a pause ends only after it began"
            _builds -= 1
            if _builds == 0 and _was_enabled:
                if gc.get_count()[0] > FULL_COLLECTION_AFTER:
                    gc.collect()  # while still disabled: no young collection gets there first
                gc.enable()


def _after_fork_in_child() -> None:
    global _guard, _builds
    _guard = threading.RLock()  # another thread may have held it at the fork
    if _builds and _was_enabled:
        gc.enable()
    _builds = 0


os.register_at_fork(after_in_child=_after_fork_in_child)
