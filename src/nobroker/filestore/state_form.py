"""QueueState's own snapshot representation: the state as JSON-able fields and raw blocks, and back.

Owns: ``capture`` (the state's snapshot, taken under a lock, as a Captured
that encodes itself later, perhaps in another thread) and ``from_snapshot``
(snapshot.py frames and checks the file; this module says what goes in
it), with the cold rows' part of both. Imports: jobs, schedules, entry,
framing, limit_records, counting, index, replay, room.

The fields are one JSON object: ``hot`` (each hot Entry's slots in order,
its state as the text value), ``active_keys`` ([kind, key, id]), the rows'
fields, ``counts``, ``ints``, ``schedules``, ``limits``, ``counters`` and
``paused``; the blocks are the cold store's arrays as they are (ids,
columns, id table, every fifo's rows, the gone rows), written and read
without a Python object per job.

Every attribute of a QueueState must be named here: capture refuses a
state with one it does not know, so a new field cannot be left out of the
snapshots by accident.
"""

from __future__ import annotations

import heapq
import json
from array import array
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, compress, repeat
from operator import attrgetter, is_
from typing import Any

from ..jobs import JobState
from ..schedules import from_fields, to_fields
from . import counting, limit_records
from .entry import IN_DELAYED, IN_READY, LEASED, STATES, Entry
from .framing import RecordType
from .index import _ROW_BYTES, GONE, ROW_TYPE, Fifo, JobRows
from .replay import QueueState
from .room import bytes_with_room, list_with_room


class Captured:
    """A state's snapshot, taken under the caller's lock and encoded later (maybe in another thread).

    Everything it holds is its own or cannot change: the small fields as
    JSON text, the hot Entries' slots as one flat list of their values (a
    history, a result and a text are replaced, never changed in place), the
    dedupe keys as ((kind, key), id) pairs, the cold store's arrays as bytes. So
    ``fields_json`` may run while the state moves on.
    """

    __slots__ = ("small", "hot", "active_keys", "blocks")

    def __init__(self, small: str, hot: list[Any], active_keys: list[Any], blocks: list[bytes]) -> None:
        assert small.startswith("{") and small.endswith("}") and len(small) > 2, "the small fields are a JSON object"
        assert len(hot) % _WIDTH == 0, "the hot list holds whole Entries"
        self.small, self.hot, self.active_keys, self.blocks = small, hot, active_keys, blocks

    def fields_json(self, pause: Callable[[], None] | None = None) -> list[str]:
        """The snapshot's fields as compact JSON, in pieces; ``pause()`` after each piece of the long lists.

        The JSON encoder holds the GIL for as long as it runs: in pieces of
        ENCODE_CHUNK jobs, with a pause that lets this process's other
        threads run, a checkpoint written in a thread of its own does not
        stop them. The pieces are written one after another, never joined
        (that too would be one long hold of the GIL).
        """
        flat, width, states = self.hot, _WIDTH, _STATE_TEXT

        def hot_rows() -> Iterator[list[list[Any]]]:
            for start in range(0, len(flat), ENCODE_CHUNK * width):
                rows = [flat[i : i + width] for i in range(start, min(len(flat), start + ENCODE_CHUNK * width), width)]
                for row in rows:
                    row[_STATE_FIELD] = states[row[_STATE_FIELD]]
                yield rows

        pairs = self.active_keys
        keys = (
            [[kind, key, job_id] for (kind, key), job_id in pairs[start : start + ENCODE_CHUNK]]
            for start in range(0, len(pairs), ENCODE_CHUNK)
        )
        return [
            '{"hot":[', *_in_pieces(hot_rows(), pause), '],"active_keys":[', *_in_pieces(keys, pause),
            "]," + self.small[1:],
        ]  # fmt: skip


def capture(state: QueueState) -> Captured:
    """``state``'s snapshot as it is now, under the caller's lock; ``Captured.fields_json`` and its blocks say it.

    Costs copies made in C (the Entries' slots, the arrays' bytes) and the
    small fields' JSON; the long part, JSON of every hot job, is left to
    ``fields_json``. The lazy heaps are not kept: ``from_snapshot`` rebuilds
    them from the Entries with exactly their valid items, which pop in the
    same order.
    """
    assert set(vars(state)) == _SNAPSHOT_FIELDS, "a new QueueState field must be added to the snapshot"
    state.finish_growing()  # one id table holds every cold row (the writer's checkpoints wait for this instead)
    rows_fields, arrays = _rows_to_snapshot(state)
    hot = state.hot.values()
    assert all(map(is_, map(state._rows.__getitem__, map(_row_of, hot)), hot)), "a hot Entry sits in its own row"
    small = {
        **rows_fields,
        "counts": [state._counts[job_state] for job_state in JobState],
        # n_cold, n_delayed, next_seq, records, anomalies, orphans, live_bytes and the table's sizes
        "ints": {name: value for name, value in vars(state).items() if type(value) is int and name not in _NOT_KEPT},
        "schedules": [to_fields(sched) for sched in state.schedules.values()],
        "limits": [body for _rtype, body in limit_records.replayed(state.limits, 0.0, state.turns)],
        "counters": state.counters,
        "paused": list(state.paused),
    }  # fmt: skip
    return Captured(
        _dumps(small),
        list(chain.from_iterable(map(_entry_fields, hot))),
        list(state.active_keys.items()),
        [bytes(memoryview(a).cast("B")) for a in arrays],
    )


def _in_pieces(chunks: Iterable[list[Any]], pause: Callable[[], None] | None) -> Iterator[str]:
    """Each chunk's items as JSON, comma-separated across the pieces; ``pause()`` after each piece."""
    for i, chunk in enumerate(chunks):
        yield ("," if i else "") + _dumps(chunk)[1:-1]
        if pause is not None:
            pause()


def _dumps(value: Any) -> str:
    # allow_nan: a log written by hand may hold NaN, and replay keeps it.
    return json.dumps(value, separators=(",", ":"), allow_nan=True)


def from_snapshot(fields: dict[str, Any], blocks: list[Any]) -> QueueState:
    """The state a Captured described (its fields decoded, its blocks). ValueError (or another plain error) if it does not add up."""
    state = QueueState()
    ints = fields["ints"]
    if set(ints) != _SNAPSHOT_INTS or not all(type(value) is int for value in ints.values()):
        raise ValueError("snapshot counters do not match")
    for name, value in ints.items():
        setattr(state, name, value)
    gone = _rows_from_snapshot(state, fields, blocks)
    rows, hot = state._rows, state.hot
    ready, delayed, leases = state.ready, state.delayed, state.leases
    of_slots = Entry.of_slots
    for values in fields["hot"]:
        if len(values) != len(Entry.__slots__):
            raise ValueError("a snapshot entry has the wrong number of fields")
        entry = of_slots(values)
        entry.state = STATES[entry.state]
        if rows[entry.row] is not None or entry.id in hot:
            raise ValueError("a snapshot row is claimed twice")
        rows[entry.row] = hot[entry.id] = entry
        if entry.heap == IN_READY and entry.group is not None:
            state.groups.push(entry)
        elif entry.heap == IN_READY:
            ready.setdefault(entry.kind, []).append((-entry.priority, entry.seq, entry.id))
        elif entry.heap == IN_DELAYED:
            delayed.append((entry.available_at, entry.seq, entry.id))
        if entry.state is LEASED:
            state.leased_kinds[entry.kind] = state.leased_kinds.get(entry.kind, 0) + 1
            if entry.group is not None:
                state.groups.count(entry, 1)
            if entry.lease_deadline is not None:
                leases.append((entry.lease_deadline, entry.seq, entry.id))
    for heap_list in ready.values():
        heapq.heapify(heap_list)
    heapq.heapify(delayed)
    heapq.heapify(leases)
    state._counts = dict(zip(JobState, fields["counts"], strict=True))
    state.active_keys = {(kind, key): job_id for kind, key, job_id in fields["active_keys"]}
    state.schedules = {sched.name: sched for sched in map(from_fields, fields.get("schedules", []))}
    for body in fields.get("limits", []):
        limit_records.apply(state.limits, RecordType.LIMIT, body, state.turns)
    state.counters = counting.checked(fields["counters"])  # a snapshot from before counters: replay instead
    state.paused = set(fields.get("paused", []))
    if len(hot) + gone + state.n_cold != len(rows) or sum(state._counts.values()) != len(hot):
        raise ValueError("snapshot counts do not add up")
    return state


def _rows_to_snapshot(self: JobRows) -> tuple[dict[str, Any], list[Any]]:
    """The rows' part of ``capture``: fields, and the raw blocks (ids, columns, table, fifo rows, gone rows)."""
    rows = self._rows
    gone = array("i", compress(range(len(rows)), map(is_, rows, repeat(GONE))))
    fifo_numbers = {}
    fifos = []
    fifo_rows = array("i")
    for number, fifo in enumerate(self._fifos.values()):
        fifo_numbers[id(fifo)] = number
        fifos.append([
            fifo.kind, fifo.priority, fifo.kind_number, fifo.serial, fifo.head, fifo.last_seq,
            fifo.queued, len(fifo.rows),
        ])  # fmt: skip
        fifo_rows.extend(fifo.rows)
    heads = [
        [kind, [[item[0], item[1], item[2], fifo_numbers[id(item[3])]] for item in heap]]
        for kind, heap in self._heads.items()
    ]  # fmt: skip
    fields = {"rows": len(rows), "kind_names": self._kind_names, "fifos": fifos, "heads": heads}
    return fields, [self._ids, self._columns, self._table, fifo_rows, gone]


def _rows_from_snapshot(self: JobRows, fields: dict[str, Any], blocks: list[Any]) -> int:
    """Undo ``_rows_to_snapshot`` (the counters are set already); returns how many rows are gone.

    ValueError (or another plain error) if the blocks do not fit the fields.
    """
    n = fields["rows"]
    ids, table, fifo_rows, gone = array("Q"), array(ROW_TYPE), array("i"), array("i")
    columns = bytes_with_room(blocks[1], _ROW_BYTES)  # the first write after loading must not copy every row (room.py)
    ids.frombytes(blocks[0])
    table.frombytes(blocks[2])
    fifo_rows.frombytes(blocks[3])
    gone.frombytes(blocks[4])
    if len(ids) != n or len(columns) != n * _ROW_BYTES or len(table) != self._mask + 1:
        raise ValueError("snapshot blocks do not match its row count")
    rows: list[Entry | None] = list_with_room(None, n)
    for row in gone:
        rows[row] = GONE
    self._rows, self._ids, self._columns, self._table = rows, ids, columns, table
    self._tidied_rows = n  # loaded, not added: a growth the next tidy() starts moves a slice, not them all
    self._kind_names = list(fields["kind_names"])
    self._kind_numbers = {kind: number for number, kind in enumerate(self._kind_names)}
    fifo_list = []
    start = 0
    for kind, priority, kind_number, serial, head, last_seq, queued, length in fields["fifos"]:
        fifo = Fifo(kind, kind_number, priority, serial)
        # The one fifo holding every row takes the array itself (no copy); an empty one never does (it would be shared).
        fifo.rows = fifo_rows if 0 < length == len(fifo_rows) else fifo_rows[start : start + length]
        fifo.head, fifo.last_seq, fifo.queued = head, last_seq, queued
        start += length
        self._fifos[(kind, priority)] = fifo
        fifo_list.append(fifo)
    if start != len(fifo_rows):
        raise ValueError("snapshot fifo rows do not add up")
    self._heads = {kind: [(a, b, c, fifo_list[d]) for a, b, c, d in heap] for kind, heap in fields["heads"]}
    return len(gone)


#: Every attribute of a QueueState: capture refuses a state with one it does not know.
_SNAPSHOT_FIELDS = frozenset(vars(QueueState()))
#: Fields a snapshot leaves out: what a lease rests on is an offset the loader sets (snapshot.load);
#: how many rows the last tidy() saw (index.py: what the next one moves of a growing id table).
_NOT_KEPT = frozenset({"enables_end", "_tidied_rows"})
_SNAPSHOT_INTS = frozenset(
    name for name, value in vars(QueueState()).items() if type(value) is int and name not in _NOT_KEPT
)
#: A hot Entry in a snapshot: every slot, in order (its state as the text value).
_entry_fields = attrgetter(*Entry.__slots__)
_row_of = attrgetter("row")
_WIDTH = len(Entry.__slots__)
_STATE_FIELD = Entry.__slots__.index("state")
_STATE_TEXT = {job_state: job_state.value for job_state in JobState}
#: Hot jobs (or dedupe keys) per piece of JSON ``Captured.fields_json`` writes between two pauses
#: (about a millisecond of the encoder's time).
ENCODE_CHUNK = 64

