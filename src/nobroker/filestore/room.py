"""Room to grow in the state's per-row containers, made where a copy of them costs nobody a wait.

Owns: how much spare capacity a bytearray or a list has (read from its
allocation, ``sys.getsizeof``), making more, and building one with room
from the start. Imports: nothing of nobroker.

A bytearray or a list that outgrows its allocation is copied whole into a
bigger one. For the cold store's row columns (48 bytes a job) at half a
million jobs that copy, and the fresh pages it touches, took 2 to 18 ms
here, and it fell on whichever append crossed the line: often a catch-up
under the file lock, while every peer waited, and always on the first
write after a state was loaded from a snapshot or a checkpoint (built to
its exact size). JobRows.tidy (outside the file lock) keeps room for
1/ROOM_SHARE more rows instead, and a loaded state comes with that room.
Room is made by growing, then cutting back: CPython's bytearray and list
keep their allocation on a cut to more than half of it. That is how
CPython behaves, not a promise of the language: where room cannot be read
(``sys.getsizeof`` refused) or a cut gave it back, room is no longer kept
in this process (``KEEPING``), and the containers grow as they will.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

#: Room kept: for 1/ROOM_SHARE more rows than a container holds; made again once less than half of it is left.
ROOM_SHARE = 8
#: Containers of fewer rows than this grow as they will: copying them costs well under a millisecond.
ROOM_FROM_ROWS = 1 << 16

_POINTER = 8 if sys.maxsize > 2**32 else 4
try:
    _BYTEARRAY_BASE, _LIST_BASE = sys.getsizeof(bytearray()), sys.getsizeof([])
    KEEPING = True  # room is kept in this process (see the module's docstring)
except TypeError:  # an interpreter that cannot say how much it allocated
    _BYTEARRAY_BASE = _LIST_BASE = 0
    KEEPING = False


def room_wanted(rows: int) -> int:
    """Rows of room a container of ``rows`` rows should have; 0 below ROOM_FROM_ROWS, or where room is not kept."""
    return 0 if rows < ROOM_FROM_ROWS or not KEEPING else rows // ROOM_SHARE


def bytes_room(buf: bytearray) -> int:
    """Bytes ``buf`` can take before it is copied into a bigger allocation (one is kept for its trailing NUL)."""
    return max(0, sys.getsizeof(buf) - _BYTEARRAY_BASE - len(buf) - 1)


def list_room(items: list[Any]) -> int:
    """Items ``items`` can take before it is copied into a bigger allocation."""
    return max(0, (sys.getsizeof(items) - _LIST_BASE) // _POINTER - len(items))


def keep_bytes_room(buf: bytearray, row_bytes: int, rows: int) -> None:
    """If ``buf`` (``rows`` rows of ``row_bytes``) has less than half its room left, make it whole (one copy, now)."""
    _keep_room(buf, room_wanted(rows) * row_bytes, bytes_room, bytes)


def keep_list_room(items: list[Any]) -> None:
    """As keep_bytes_room, for a list of one item per row."""
    _keep_room(items, room_wanted(len(items)), list_room, lambda count: [None] * count)


def _keep_room(container: Any, wanted: int, room_of: Callable[[Any], int], filler: Callable[[int], Any]) -> None:
    """Grow ``container`` by ``wanted`` items of ``filler``, then cut it back: its allocation keeps the room."""
    if wanted and room_of(container) < wanted // 2:
        size = len(container)
        container += filler(wanted)  # in place, for a bytearray as for a list
        del container[size:]  # a cut above half the allocation keeps it
        if room_of(container) < wanted // 2:
            _stop_keeping()


def _stop_keeping() -> None:
    """This interpreter gave the room back on the cut: making it again would copy every row at each tidy()."""
    global KEEPING
    KEEPING = False


def bytes_with_room(data: Any, row_bytes: int) -> bytearray:
    """A bytearray holding ``data`` (whole rows of ``row_bytes``) and room_wanted rows more, in one allocation.

    Joined, not made zeroed and then filled: each page is touched once, as in a
    plain copy (``bytearray(size)`` would write every byte twice).
    """
    size = len(data)
    room = room_wanted(size // row_bytes) * row_bytes
    if not room:
        return bytearray(data)
    buf = bytearray().join((data, bytes(room)))
    del buf[size:]  # a cut above half the allocation keeps it
    return buf


def list_with_room(value: Any, count: int) -> list[Any]:
    """``[value] * count``, with room_wanted(count) items of room."""
    items = [value] * (count + room_wanted(count))
    del items[count:]
    return items


__all__ = [
    "ROOM_FROM_ROWS", "ROOM_SHARE", "bytes_room", "bytes_with_room", "keep_bytes_room", "keep_list_room",
    "list_room", "list_with_room", "room_wanted",
]  # fmt: skip
