"""QueueState's own snapshot representation: the state as JSON-able fields and raw blocks, and back.

Owns: ``to_snapshot`` and ``from_snapshot`` (snapshot.py frames and checks
the file; this module says what goes in it). Imports: jobs, schedules,
entry, framing, limit_records, counting, replay.

Every attribute of a QueueState must be named here: to_snapshot refuses a
state with one it does not know, so a new field cannot be left out of the
snapshots by accident.
"""

from __future__ import annotations

import heapq
from operator import attrgetter
from typing import Any

from ..jobs import JobState
from ..schedules import from_fields, to_fields
from . import counting, limit_records
from .entry import IN_DELAYED, IN_READY, LEASED, STATES, Entry, new_entry
from .framing import RecordType
from .replay import QueueState


def to_snapshot(state: QueueState) -> tuple[dict[str, Any], list[Any]]:
    """The state as (JSON-able fields, raw blocks) for snapshot.py; ``from_snapshot`` undoes it.

    The blocks are the cold store's arrays as they are (ids, columns, id
    table, every fifo's rows, the gone rows): buffers, written and read
    without a Python object per job. Hot Entries go as JSON (they are few).
    The lazy heaps are not kept: ``from_snapshot`` rebuilds them from the
    Entries with exactly their valid items, which pop in the same order.
    """
    assert set(vars(state)) == _SNAPSHOT_FIELDS, "a new QueueState field must be added to the snapshot"
    fields, blocks = state._rows_to_snapshot()
    hot = []
    for entry in state.hot.values():
        assert state._rows[entry.row] is entry, "a hot Entry sits in its own row"
        values = list(_entry_fields(entry))
        values[_STATE_FIELD] = entry.state.value
        hot.append(values)
    fields.update({
        "hot": hot,
        "counts": [state._counts[job_state] for job_state in JobState],
        # n_cold, n_delayed, next_seq, records, anomalies, orphans, live_bytes and the table's sizes
        "ints": {name: value for name, value in vars(state).items() if type(value) is int and name not in _NOT_KEPT},
        "active_keys": [[kind, key, job_id] for (kind, key), job_id in state.active_keys.items()],
        "schedules": [to_fields(sched) for sched in state.schedules.values()],
        "limits": [body for _rtype, body in limit_records.replayed(state.limits, 0.0, state.turns)],
        "counters": state.counters,
        "paused": list(state.paused),
    })  # fmt: skip
    return fields, blocks


def from_snapshot(fields: dict[str, Any], blocks: list[Any]) -> QueueState:
    """The state ``to_snapshot`` described. ValueError (or another plain error) if it does not add up."""
    state = QueueState()
    ints = fields["ints"]
    if set(ints) != _SNAPSHOT_INTS or not all(type(value) is int for value in ints.values()):
        raise ValueError("snapshot counters do not match")
    for name, value in ints.items():
        setattr(state, name, value)
    gone = state._rows_from_snapshot(fields, blocks)
    rows, hot = state._rows, state.hot
    ready, delayed, leases = state.ready, state.delayed, state.leases
    for values in fields["hot"]:
        if len(values) != len(Entry.__slots__):
            raise ValueError("a snapshot entry has the wrong number of fields")
        entry = new_entry(Entry)
        for name, value in zip(Entry.__slots__, values):
            setattr(entry, name, value)
        entry.state = STATES[entry.state]  # type: ignore[index]
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


#: Every attribute of a QueueState: to_snapshot refuses a state with one it does not know.
_SNAPSHOT_FIELDS = frozenset(vars(QueueState()))
#: Fields a snapshot leaves out: what a lease rests on is an offset the loader sets (snapshot.load).
_NOT_KEPT = frozenset({"enables_end"})
_SNAPSHOT_INTS = frozenset(
    name for name, value in vars(QueueState()).items() if type(value) is int and name not in _NOT_KEPT
)
#: A hot Entry in a snapshot: every slot, in order (its state as the text value).
_entry_fields = attrgetter(*Entry.__slots__)
_STATE_FIELD = Entry.__slots__.index("state")

