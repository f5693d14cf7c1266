"""The counters of the file storage: what each record adds, and how a compaction carries them.

Owns: the counters' shape in QueueState (``{kind: [enqueued, succeeded,
failed, dead, cancelled]}``, COUNTER_NAMES' order), what each record type
adds to them (``add`` for an ENQUEUE, ``count_outcome`` for the rest),
their checks when read from a file (``checked``), the answer of
``Queue.counters()`` (``by_kind``), and ``carried_record``: the first
record of a compacted generation, which carries them over the done jobs
that compaction drops. Imports: jobs, framing, entry, records.

What counts (replay is pure: every count comes from a record): an ENQUEUE
is one job enqueued (also a repeated id, which a sound writer never
writes); an ACK one success; a NACK or a RECLAIM (an expired lease, retried)
one failure; a DEAD one job dead (its last attempt failed, or a handler's
PermanentError); a CANCEL that ends a job one job cancelled (a CANCEL that
only marks a leased job counts nothing: its end does). A PURGE keeps them.

Through compaction: the next generation holds one ENQUEUE per live job,
which replay counts as enqueued again; so it opens with a PURGE (of
nothing: the queue is empty at that point) whose ``counters`` key carries
the counts with those live jobs' enqueues taken off. The records copied
after the jobs count on from there, as they did before. A PURGE rather
than a record type of its own: nobroker 0.1.2 reads a compacted
generation as before (a PURGE of an empty queue, with a key it reads past).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..jobs import COUNTER_NAMES, Counters
from . import records
from .entry import Entry
from .framing import RecordType

#: The key of the PURGE record that opens a compacted generation: the counters it carries.
CARRIED = "counters"
WIDTH = len(COUNTER_NAMES)
ENQUEUED, SUCCEEDED, FAILED, DEAD, CANCELLED = range(WIDTH)
#: Most kinds a counters field may name (bounds what a hostile file can make us build).
MAX_COUNTED_KINDS = 1 << 20
#: Largest count a file may hold (a signed 64-bit integer, as PostgreSQL's bigint).
MAX_COUNT = (1 << 63) - 1
#: The record types, other than ENQUEUE, that count an outcome.
COUNTED = frozenset({RecordType.ACK, RecordType.NACK, RecordType.RECLAIM, RecordType.DEAD, RecordType.CANCEL})
_BY_TYPE = {RecordType.ACK: SUCCEEDED, RecordType.NACK: FAILED, RecordType.RECLAIM: FAILED, RecordType.DEAD: DEAD}


def add(counters: dict[str, list[int]], kind: str, which: int = ENQUEUED) -> None:
    row = counters.get(kind)
    if row is None:
        row = counters[kind] = [0] * WIDTH
    row[which] += 1


def count_outcome(counters: dict[str, list[int]], rtype: int, body: dict[str, Any], kind: str) -> None:
    """What one applied ACK, NACK, RECLAIM, DEAD or CANCEL record adds."""
    if rtype == RecordType.CANCEL:
        if not records.decode_cancel(body):  # a mark of a leased job counts nothing
            add(counters, kind, CANCELLED)
        return
    add(counters, kind, _BY_TYPE[rtype])  # type: ignore[index]


def by_kind(counters: dict[str, list[int]]) -> Counters:
    """``{kind: {"enqueued": n, ...}}``, kinds in order."""
    return {kind: dict(zip(COUNTER_NAMES, row)) for kind, row in sorted(counters.items())}


def checked(value: Any) -> dict[str, list[int]]:
    """Counters read from a snapshot or a PURGE record; ValueError if they are not ``{kind: [n, ...]}``."""
    if not isinstance(value, dict) or len(value) > MAX_COUNTED_KINDS:
        raise ValueError("counters must be an object of kinds")
    out: dict[str, list[int]] = {}
    for kind, row in value.items():
        if (
            not isinstance(kind, str) or not isinstance(row, list) or len(row) != WIDTH
            or not all(type(n) is int and 0 <= n <= MAX_COUNT for n in row)
        ):  # fmt: skip
            raise ValueError(f"counters of kind {kind!r} must be {WIDTH} counts from 0 up")
        out[kind] = list(row)
    return out


def carried_record(counters: dict[str, list[int]], live: Iterable[Entry], at: float) -> records.Record:
    """The PURGE that opens a compacted generation, carrying ``counters`` less the enqueues of ``live``."""
    carried = {kind: list(row) for kind, row in counters.items()}
    for entry in live:
        row = carried.get(entry.kind)
        # Every live job was counted when it was enqueued, unless the log began in a compacted
        # generation written before counters existed: never below zero, then.
        if row is not None and row[ENQUEUED] > 0:
            row[ENQUEUED] -= 1
    return RecordType.PURGE, {"at": at, CARRIED: carried}
