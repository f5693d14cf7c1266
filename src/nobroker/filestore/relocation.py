"""The rows after a compaction: each job pointed at its record in the new generation, and the gone rows dropped.

Owns: ``move_rows`` (the offsets and sizes of every row, hot or cold),
``count_live_bytes`` and ``drop_gone_rows`` (the rows renumbered without
the gone ones), what QueueState.relocate (replay.py) does to the rows.
Functions of a JobRows, written beside it as state_form.py's are.
Imports: entry, index.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from itertools import compress, repeat
from operator import is_

from .entry import DROPPED, Entry
from .index import _COLUMNS, _EMPTY, _INT64, _ROW_BYTES, _SIZE_COLUMN, _UINT32, GONE, ID_TEXT, ROW_TYPE, JobRows


def move_rows(self: JobRows, offsets: dict[str, int], base: int | None, shift: int, end: int | None) -> list[Entry]:
    """Point every job at its record in the new generation (see QueueState.relocate).

    Returns the hot jobs that were live before ``base`` and are missing
    from ``offsets``: the caller drops them (a sound compaction drops only done ones).
    """
    columns, ids, rows = self._columns, self._ids, self._rows
    pack_offset, unpack_offset = _INT64.pack_into, _INT64.unpack_from
    starts = list(offsets.values())  # increasing: written in this order
    assert all(a < b for a, b in zip(starts, starts[1:])), "a compaction writes its records in order"
    if end is None and base is not None:
        end = base + shift

    def new_size(start: int, old: int) -> int:
        following = bisect_right(starts, start)
        if following < len(starts):
            return starts[following] - start
        return old if end is None else end - start

    dropped = []
    for row, entry in enumerate(rows):
        if entry is None:
            at = row * _ROW_BYTES
            old = unpack_offset(columns, at + 8)[0]  # the offset column
            if base is not None and old >= base:
                pack_offset(columns, at + 8, old + shift)
            else:  # a cold job is ready, so it was live at ``base``
                moved = offsets[ID_TEXT % ids[row]]
                pack_offset(columns, at + 8, moved)
                size = new_size(moved, _UINT32.unpack_from(columns, at + _SIZE_COLUMN)[0])
                _UINT32.pack_into(columns, at + _SIZE_COLUMN, size)
        elif entry is GONE:
            continue
        elif base is not None and entry.offset >= base:
            entry.offset += shift
        else:
            new_offset = offsets.get(entry.id)
            if new_offset is None:
                dropped.append(entry)
            else:
                entry.offset, entry.size = new_offset, new_size(new_offset, entry.size)
    return dropped

def count_live_bytes(self: JobRows) -> None:
    """``live_bytes`` summed afresh over every job (after a compaction rewrote their records)."""
    columns = self._columns
    total = sum(
        _UINT32.unpack_from(columns, row * _ROW_BYTES + _SIZE_COLUMN)[0]
        for row in compress(range(len(self._rows)), map(is_, self._rows, repeat(None)))
    )
    self.live_bytes = total + sum(entry.size for entry in self.hot.values() if entry.state not in DROPPED)

def drop_gone_rows(self: JobRows) -> None:
    """Renumber the rows without the gone ones, once they are a quarter (gone rows cost memory)."""
    if self._rows.count(GONE) * 4 <= len(self._rows):
        return
    old_rows, old_ids, old_columns, live_bytes = self._rows, self._ids, self._columns, self.live_bytes
    self._rows, self._ids, self._columns = [], array("Q"), bytearray()
    self._table = array(ROW_TYPE, [_EMPTY]) * 16
    self._mask, self._shift, self._table_used, self._table_limit = 15, 60, 0, 8
    self._growing, self._tidied_rows = None, 0  # the next tidy() counts every row as added
    self._fifos, self._heads, self.n_cold = {}, {}, 0
    kind_names = self._kind_names
    for row, entry in enumerate(old_rows):
        if entry is None:
            seq, offset, enqueued_at, available_at, priority, attempts, max_attempts, size, kind_number = (
                _COLUMNS.unpack_from(old_columns, row * _ROW_BYTES)
            )  # fmt: skip
            fifo = self._fifo_for(kind_names[kind_number], priority)
            assert fifo is not None and seq > fifo.last_seq, "cold rows of a group stay in seq order"
            self._insert_cold(old_ids[row], fifo, seq, offset, size, enqueued_at, available_at, attempts, max_attempts)
        elif entry is not GONE:
            self._append_hot_row(entry)
    self.live_bytes = live_bytes  # the same jobs: re-inserting them counted them again


__all__ = ["count_live_bytes", "drop_gone_rows", "move_rows"]
