"""The queue as a pure state machine: records in, state out.

Owns: Entry (one job's in-memory record), QueueState (every job plus the
indexes that make lease/stats cheap, with a small mapping-like API: get, hold,
in, len, entries) and ``apply``, which folds one decoded record into the
state; also its own snapshot representation (``to_snapshot`` and
``from_snapshot``; snapshot.py frames and checks the file). Imports: jobs,
framing.

Invariant 2 of the design lives here: nothing in this module reads the clock,
draws a random number or makes an id. Every such value arrives inside a
record, chosen once by the writer. Replaying the same bytes always yields the
same state, which is what lets the tests cut a log at every byte and compare.

The payload is not kept in memory: an Entry remembers the file offset of the
record that holds it, and the storage reads it back when a caller needs it.

Most jobs of a big queue are plain READY jobs nobody has touched since they
were enqueued. Those live in a columnar "cold" store (packed rows, an
open-addressing id table, FIFOs per kind and priority) with no Python object
per job; every other job is a "hot" Entry. QueueState's docstring has the
details; callers see one set of jobs either way.

Indexes (lazy: stale heap items are skipped when popped, never searched for):
  ready[kind]  heap of (-priority, seq, id)   hot jobs runnable now
  heads[kind]  heap of (-priority, seq, ...)  the oldest cold row of each (kind, priority)
  delayed      heap of (available_at, seq, id) ready jobs whose time has not come
  leases       heap of (deadline, seq, id)     leased jobs, for reclaiming
  active_keys  (kind, dedupe_key) -> id        for ready/leased jobs only
"""

from __future__ import annotations

import heapq
import struct
from bisect import bisect_right
from array import array
from collections.abc import Iterator, Mapping
from itertools import compress, repeat
from operator import attrgetter, is_
from types import MappingProxyType
from typing import Any

from .framing import RecordType
from ..jobs import DEFAULT_KIND, Job, JobState, QueueStats

READY, LEASED, DONE, DEAD = JobState.READY, JobState.LEASED, JobState.DONE, JobState.DEAD

# Where an Entry sits among the heaps (the heap item itself may be stale).
_NOWHERE, _IN_READY, _IN_DELAYED = 0, 1, 2


class Entry:
    """One job's fields, minus its payload (``offset`` says where that lives)."""

    __slots__ = (
        "id", "priority", "state", "attempts", "max_attempts", "available_at", "enqueued_at",
        "lease_deadline", "lease_token", "last_error", "seq", "kind", "dedupe_key", "stage",
        "result", "offset", "size", "heap", "row", "finished_token", "traceback",
    )  # fmt: skip

    def __init__(self, body: dict[str, Any], offset: int, size: int = 0) -> None:
        # The hot loop of opening a queue: one call per ENQUEUE record, so the
        # type checks are inlined and the slow, explaining path runs only on a miss.
        get = body.get
        self.id: str = body["id"]
        self.priority: int = get("priority", 0)
        self.attempts: int = get("attempts", 0)
        self.max_attempts: int = get("max_attempts", 5)
        self.seq: int = get("seq", 0)
        self.enqueued_at: float = get("enqueued_at", 0.0)
        available_at = get("available_at", 0.0)
        # Equal times share one float object: no delay is the common case.
        self.available_at: float = self.enqueued_at if available_at == self.enqueued_at else available_at
        self.kind: str = get("kind", DEFAULT_KIND)
        self.state: JobState = _STATES.get(get("state", "ready"))  # type: ignore[assignment]
        self.lease_deadline: float | None = get("lease_deadline")
        self.lease_token: Any = get("lease_token")
        self.last_error: str | None = get("last_error")
        self.dedupe_key: str | None = get("dedupe_key")
        self.stage: str | None = get("stage")
        self.result: Any = get("result")
        # The token of the lease that finished a done job (see _set_state); a done
        # job's own lease_token is None, except in a hand-made body that says otherwise.
        self.finished_token: Any = self.lease_token if self.state is DONE else None
        self.traceback: str | None = get("traceback")
        self.offset = offset
        self.size = size  # bytes of the framed ENQUEUE record at ``offset``
        self.heap = _NOWHERE
        self.row = -1
        if not (
            type(self.id) is str and type(self.priority) is int and type(self.attempts) is int
            and type(self.max_attempts) is int and type(self.seq) is int and type(self.kind) is str
            and type(self.enqueued_at) in _NUMBERS and type(self.available_at) in _NUMBERS
            and self.state is not None
            and (self.lease_deadline is None or type(self.lease_deadline) in _NUMBERS)
            and (self.dedupe_key is None or type(self.dedupe_key) is str)
            and (self.traceback is None or type(self.traceback) is str)
        ):  # fmt: skip
            self._explain(body)

    @staticmethod
    def _explain(body: dict[str, Any]) -> None:
        """Raise a TypeError naming the first field of an ENQUEUE body with the wrong type."""
        _text(body["id"], "id")
        for name in ("priority", "attempts", "max_attempts", "seq"):
            if name in body:
                _int(body[name], name)
        for name in ("enqueued_at", "available_at"):
            if name in body:
                _time(body[name], name)
        if body.get("lease_deadline") is not None:
            _time(body["lease_deadline"], "lease_deadline")
        _text(body.get("kind", DEFAULT_KIND), "kind")
        for name in ("dedupe_key", "traceback"):
            if body.get(name) is not None:
                _text(body[name], name)
        raise ValueError(f"field state is {body.get('state')!r}, expected one of ready, leased, done, dead")

    @classmethod
    def fresh(
        cls, job_id: str, priority: int, max_attempts: int, available_at: float, enqueued_at: float,
        seq: int, kind: str, dedupe_key: str | None, offset: int,
    ) -> Entry:  # fmt: skip
        """A just-enqueued job, built from values instead of a decoded body (the writer's fast path)."""
        self = cls.__new__(cls)
        self.id, self.priority, self.state, self.attempts = job_id, priority, READY, 0
        self.max_attempts, self.available_at, self.enqueued_at = max_attempts, available_at, enqueued_at
        self.lease_deadline = self.lease_token = self.last_error = self.stage = self.result = None
        self.finished_token = self.traceback = None
        self.seq, self.kind, self.dedupe_key, self.offset, self.heap = seq, kind, dedupe_key, offset, _NOWHERE
        self.size, self.row = 0, -1  # the writer sets the size once the record is framed
        return self

    def to_job(self, payload: Any) -> Job:
        # Positional, in Job's field order: measurably cheaper than keywords, and
        # enqueue_many builds one Job per job.
        return Job(
            self.id, payload, self.priority, self.state, self.attempts, self.max_attempts,
            self.available_at, self.enqueued_at, self.lease_deadline, self.lease_token,
            self.last_error, self.seq, self.kind, self.dedupe_key, self.stage, self.result, self.traceback,
        )  # fmt: skip

    def state_fields(self) -> dict[str, Any]:
        """The mutable fields as an ENQUEUE body would carry them (for compaction)."""
        out: dict[str, Any] = {
            "priority": self.priority, "state": self.state.value, "attempts": self.attempts,
            "max_attempts": self.max_attempts, "available_at": self.available_at,
            "enqueued_at": self.enqueued_at, "lease_deadline": self.lease_deadline,
            "lease_token": self.lease_token, "last_error": self.last_error, "seq": self.seq,
        }  # fmt: skip
        # Newer fields only when used, so a log without them stays readable by 0.1.2.
        if self.kind != DEFAULT_KIND:
            out["kind"] = self.kind
        if self.dedupe_key is not None:
            out["dedupe_key"] = self.dedupe_key
        if self.stage is not None:
            out["stage"] = self.stage
        if self.result is not None:
            out["result"] = self.result
        if self.traceback is not None:
            out["traceback"] = self.traceback
        return out


_NUMBERS = frozenset({int, float})
_STATES = {s.value: s for s in JobState}


def _int(value: Any, name: str) -> int:
    if type(value) is not int:
        raise TypeError(f"field {name} is {value!r}, expected an integer")
    return value


def _time(value: Any, name: str) -> float:
    if type(value) is not float and type(value) is not int:
        raise TypeError(f"field {name} is {value!r}, expected a number of seconds")
    return value


def _text(value: Any, name: str) -> str:
    if type(value) is not str:
        raise TypeError(f"field {name} is {value!r}, expected a string")
    return value


def _traceback(body: dict[str, Any]) -> str | None:
    value = body.get("traceback")
    return None if value is None else _text(value, "traceback")


#: A just-enqueued job's columns in the cold store (see QueueState), packed per row:
#: seq, offset, enqueued_at, available_at, priority, attempts, max_attempts, the size of
#: its ENQUEUE record, kind number.
_COLUMNS = struct.Struct("<qqddiiiIH")
_ROW_BYTES = _COLUMNS.size
_SIZE_COLUMN = struct.calcsize("<qqddiii")  # where a row's record size sits in it
_NO_COLUMNS = bytes(_ROW_BYTES)  # what a hot row holds there: nothing is read from it
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: Distinct kinds the cold store numbers (its kind column is two bytes); jobs of more go hot.
_MAX_COLD_KINDS = 0xFFFF
#: Rows (jobs since the last compaction) one state holds: fifos number them in 32 bits.
_MAX_ROWS = 2**31 - 1
#: A library-made job id: 16 lowercase hex digits, the text of one 64-bit number.
_ID_TEXT = "%016x"
_HASH_MULTIPLIER = 0x9E3779B97F4A7C15  # Fibonacci hashing: spreads patterned user ids too
_U64 = (1 << 64) - 1
_EMPTY = -1
#: Marks a row whose job is gone (removed or replaced); it stays until the rows are rebuilt.
_GONE = Entry.__new__(Entry)


def _id_number(job_id: str) -> int:
    """The 64-bit number a library-format id spells, or -1 for any other id."""
    if len(job_id) != 16:
        return -1
    try:
        number = int(job_id, 16)
    except ValueError:
        return -1
    return number if _ID_TEXT % number == job_id else -1


class _Fifo:
    """Cold rows of one (kind, priority), oldest first: they arrive in increasing seq."""

    __slots__ = ("rows", "head", "last_seq", "queued", "kind", "kind_number", "priority", "serial")

    def __init__(self, kind: str, kind_number: int, priority: int, serial: int) -> None:
        self.kind, self.kind_number = kind, kind_number
        self.rows = array("i")
        self.head = 0  # rows before it were taken (or went hot); trimmed now and then
        self.last_seq = _INT64_MIN
        self.queued = False  # does the kind's head heap hold an item for this fifo?
        self.priority = priority
        self.serial = serial  # breaks ties in the heap so fifos are never compared


class QueueState:
    """Every job the log holds, and the indexes derived from them.

    Two homes for a job. *Hot*: an Entry in ``hot`` (id -> Entry), for any job
    in any state. *Cold*: a row of packed columns, for the common case of a
    READY job enqueued and not touched since (library-format id, no dedupe key,
    stage, result or error, not delayed). A cold job costs about 100 bytes and
    no Python object; an Entry costs several hundred. Anything that changes a
    cold job first moves it to ``hot`` (``hold``); read-only walks may see a
    transient Entry built from the row (``get``, ``entries``).

    Rows keep insertion order for every job, hot or cold (``_rows[r]`` is None
    for a cold job, its Entry for a hot one, ``_GONE`` for a removed one), so
    ``entries`` walks jobs in the order their ENQUEUE records arrived, as a
    plain dict would. Cold ids live in an open-addressing table of row numbers
    (``_table``, hashed on the id's 64-bit number), not in a dict.

    Ready order for cold rows: the rows of one (kind, priority) arrive in
    increasing seq, so each such group is a FIFO with a head pointer, and a
    small heap per kind orders the FIFO heads. A row that would break that
    order goes hot instead.
    """

    def __init__(self) -> None:
        self.hot: dict[str, Entry] = {}
        self.ready: dict[str, list[tuple[int, int, str]]] = {}
        self.delayed: list[tuple[float, int, str]] = []
        self.leases: list[tuple[float, int, str]] = []
        self.active_keys: dict[tuple[str, str], str] = {}
        self._counts: dict[JobState, int] = {READY: 0, LEASED: 0, DONE: 0, DEAD: 0}  # hot jobs only
        self.n_delayed = 0
        self.next_seq = 1
        self.records = 0
        #: Records a sound writer never writes: ones that name a job the state does not
        #: hold (``orphans``, counted there too) and ENQUEUEs that repeat an id.
        self.anomalies = 0
        self.orphans = 0
        #: Bytes of the ENQUEUE records of every job that is not done: about what a compaction
        #: keeps. The rest of the log (every other record, and done jobs) it reclaims.
        self.live_bytes = 0
        # The cold store.
        self.n_cold = 0
        self._rows: list[Entry | None] = []
        self._ids = array("Q")  # per row: the id's number (0 for a hot row)
        self._columns = bytearray()  # per row: _COLUMNS
        self._table = array("q", [_EMPTY]) * 16  # id number -> latest row; load kept under a half
        self._mask, self._shift, self._table_used, self._table_limit = 15, 60, 0, 8
        self._kind_names: list[str] = []
        self._kind_numbers: dict[str, int] = {}
        self._fifos: dict[tuple[str, int], _Fifo] = {}  # (kind, priority) -> fifo
        self._heads: dict[str, list[tuple[int, int, int, _Fifo]]] = {}  # kind -> heap of (-priority, seq, serial, fifo)

    # ------------------------------------------------------------ the jobs, as a mapping
    @property
    def counts(self) -> Mapping[JobState, int]:
        """Jobs per state (read-only: the state keeps them itself)."""
        counts = dict(self._counts)
        counts[READY] += self.n_cold
        return MappingProxyType(counts)

    def __len__(self) -> int:
        return len(self.hot) + self.n_cold

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.hot or self._cold_row(job_id) >= 0

    def get(self, job_id: str) -> Entry | None:
        """The job's fields, for reading only: a cold job's Entry is built for the call, not kept."""
        entry = self.hot.get(job_id)
        if entry is not None:
            return entry
        row = self._cold_row(job_id)
        return None if row < 0 else self._entry_of(row)

    def hold(self, job_id: str) -> Entry | None:
        """The job's stored Entry, moving a cold job to hot first: for anything that changes it."""
        entry = self.hot.get(job_id)
        if entry is not None:
            return entry
        row = self._cold_row(job_id)
        return None if row < 0 else self._warm(row, _IN_READY)

    def entries(self, state: JobState | None = None) -> Iterator[Entry]:
        """Every job (or every job in ``state``) in the order their ENQUEUE records arrived.

        Cold jobs appear as Entries built for the walk: read them, do not change them.
        """
        if state is not None and state is not READY:  # cold jobs are all READY: skip them cheaply
            for entry in self._rows:
                if entry is not None and entry is not _GONE and entry.state is state:
                    yield entry
            return
        entry_of = self._entry_of
        for row, entry in enumerate(self._rows):
            if entry is None:
                yield entry_of(row)
            elif entry is not _GONE and (state is None or entry.state is state):
                yield entry

    def is_delayed(self, entry: Entry) -> bool:
        """Does stats() count this job as delayed (after ``promote(now)``)? Cold jobs never are."""
        return entry.heap == _IN_DELAYED

    def delayed_entries(self) -> Iterator[Entry]:
        """The jobs stats() counts as delayed (after ``promote(now)``), in enqueue order."""
        for entry in self._rows:  # cold rows (None) are never delayed: skipped cheaply
            if entry is not None and entry is not _GONE and entry.heap == _IN_DELAYED:
                yield entry

    def relocate(
        self, offsets: dict[str, int], base: int | None = None, shift: int = 0, end: int | None = None
    ) -> int:
        """After compaction: point every job at its record in the new generation.

        A job whose ENQUEUE record lay before ``base`` (all jobs, without a
        ``base``) moved to ``offsets[id]``; one missing there was done at
        ``base`` and is dropped. A record at or after ``base`` (copied after
        the live jobs) moved by ``shift``. ``offsets`` lists the new records in
        the order they were written, back to back up to ``end`` (default:
        ``base + shift``, where the copied records begin), which gives each its
        new size; without either, the last one keeps its old size. Returns
        how many dropped jobs were not done: a sound compaction drops none.
        """
        columns, ids, rows = self._columns, self._ids, self._rows
        pack_offset, unpack_offset = _INT64.pack_into, _INT64.unpack_from
        starts = list(offsets.values())  # increasing: written in this order
        if end is None and base is not None:
            end = base + shift

        def new_size(start: int, old: int) -> int:
            following = bisect_right(starts, start)
            if following < len(starts):
                return starts[following] - start
            return old if end is None else end - start

        gone = unsound = 0
        for row, entry in enumerate(rows):
            if entry is None:
                at = row * _ROW_BYTES
                old = unpack_offset(columns, at + 8)[0]  # the offset column
                if base is not None and old >= base:
                    pack_offset(columns, at + 8, old + shift)
                else:  # a cold job is ready, so it was live at ``base``
                    moved = offsets[_ID_TEXT % ids[row]]
                    pack_offset(columns, at + 8, moved)
                    size = new_size(moved, _UINT32.unpack_from(columns, at + _SIZE_COLUMN)[0])
                    _UINT32.pack_into(columns, at + _SIZE_COLUMN, size)
            elif entry is _GONE:
                gone += 1
            elif base is not None and entry.offset >= base:
                entry.offset += shift
            else:
                new_offset = offsets.get(entry.id)
                if new_offset is not None:
                    entry.offset, entry.size = new_offset, new_size(new_offset, entry.size)
                    continue
                if entry.state is not DONE:
                    unsound += 1
                self._counts[entry.state] -= 1
                del self.hot[entry.id]
                rows[row] = _GONE
                gone += 1
        self._count_live_bytes()
        if gone * 4 > len(rows):  # gone rows cost memory until renumbered; renumbering costs time
            self._rebuild_rows()
        return unsound

    def _count_live_bytes(self) -> None:
        """``live_bytes`` summed afresh over every job (after a compaction rewrote their records)."""
        columns = self._columns
        total = sum(
            _UINT32.unpack_from(columns, row * _ROW_BYTES + _SIZE_COLUMN)[0]
            for row in compress(range(len(self._rows)), map(is_, self._rows, repeat(None)))
        )
        self.live_bytes = total + sum(entry.size for entry in self.hot.values() if entry.state is not DONE)

    # ------------------------------------------------------------ snapshots
    def to_snapshot(self) -> tuple[dict[str, Any], list[Any]]:
        """The state as (JSON-able fields, raw blocks) for snapshot.py; ``from_snapshot`` undoes it.

        The blocks are the cold store's arrays as they are (ids, columns, id
        table, every fifo's rows, the gone rows): buffers, written and read
        without a Python object per job. Hot Entries go as JSON (they are few).
        The lazy heaps are not kept: ``from_snapshot`` rebuilds them from the
        Entries with exactly their valid items, which pop in the same order.
        """
        assert set(vars(self)) == _SNAPSHOT_FIELDS, "a new QueueState field must be added to the snapshot"
        rows = self._rows
        hot = []
        for entry in self.hot.values():
            assert rows[entry.row] is entry, "a hot Entry sits in its own row"
            values = list(_entry_fields(entry))
            values[_STATE_FIELD] = entry.state.value
            hot.append(values)
        gone = array("i", compress(range(len(rows)), map(is_, rows, repeat(_GONE))))
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
        fields = {
            "rows": len(rows),
            "hot": hot,
            "counts": [self._counts[state] for state in JobState],
            # n_cold, n_delayed, next_seq, records, anomalies, orphans, live_bytes and the table's sizes
            "ints": {name: value for name, value in vars(self).items() if type(value) is int},
            "kind_names": self._kind_names,
            "fifos": fifos,
            "heads": heads,
            "active_keys": [[kind, key, job_id] for (kind, key), job_id in self.active_keys.items()],
        }
        return fields, [self._ids, self._columns, self._table, fifo_rows, gone]

    @classmethod
    def from_snapshot(cls, fields: dict[str, Any], blocks: list[Any]) -> QueueState:
        """The state ``to_snapshot`` described. ValueError (or another plain error) if it does not add up."""
        self = cls()
        n = fields["rows"]
        ids, columns, table, fifo_rows, gone = array("Q"), bytearray(blocks[1]), array("q"), array("i"), array("i")
        ids.frombytes(blocks[0])
        table.frombytes(blocks[2])
        fifo_rows.frombytes(blocks[3])
        gone.frombytes(blocks[4])
        ints = fields["ints"]
        if set(ints) != _SNAPSHOT_INTS or not all(type(value) is int for value in ints.values()):
            raise ValueError("snapshot counters do not match")
        for name, value in ints.items():
            setattr(self, name, value)
        if len(ids) != n or len(columns) != n * _ROW_BYTES or len(table) != self._mask + 1:
            raise ValueError("snapshot blocks do not match its row count")
        rows: list[Entry | None] = [None] * n
        for row in gone:
            rows[row] = _GONE
        hot = self.hot
        ready, delayed, leases = self.ready, self.delayed, self.leases
        for values in fields["hot"]:
            if len(values) != len(Entry.__slots__):
                raise ValueError("a snapshot entry has the wrong number of fields")
            entry = _new_entry(Entry)
            for name, value in zip(Entry.__slots__, values):
                setattr(entry, name, value)
            entry.state = _STATES[entry.state]  # type: ignore[index]
            if rows[entry.row] is not None or entry.id in hot:
                raise ValueError("a snapshot row is claimed twice")
            rows[entry.row] = hot[entry.id] = entry
            if entry.heap == _IN_READY:
                ready.setdefault(entry.kind, []).append((-entry.priority, entry.seq, entry.id))
            elif entry.heap == _IN_DELAYED:
                delayed.append((entry.available_at, entry.seq, entry.id))
            if entry.state is LEASED and entry.lease_deadline is not None:
                leases.append((entry.lease_deadline, entry.seq, entry.id))
        for heap_list in ready.values():
            heapq.heapify(heap_list)
        heapq.heapify(delayed)
        heapq.heapify(leases)
        self._rows, self._ids, self._columns, self._table = rows, ids, columns, table
        self._kind_names = list(fields["kind_names"])
        self._kind_numbers = {kind: number for number, kind in enumerate(self._kind_names)}
        fifo_list = []
        start = 0
        for kind, priority, kind_number, serial, head, last_seq, queued, length in fields["fifos"]:
            fifo = _Fifo(kind, kind_number, priority, serial)
            fifo.rows = fifo_rows[start : start + length]
            fifo.head, fifo.last_seq, fifo.queued = head, last_seq, queued
            start += length
            self._fifos[(kind, priority)] = fifo
            fifo_list.append(fifo)
        if start != len(fifo_rows):
            raise ValueError("snapshot fifo rows do not add up")
        self._heads = {kind: [(a, b, c, fifo_list[d]) for a, b, c, d in heap] for kind, heap in fields["heads"]}
        self._counts = dict(zip(JobState, fields["counts"], strict=True))
        self.active_keys = {(kind, key): job_id for kind, key, job_id in fields["active_keys"]}
        if len(hot) + len(gone) + self.n_cold != n or sum(self._counts.values()) != len(hot):
            raise ValueError("snapshot counts do not add up")
        return self

    # ------------------------------------------------------------ apply
    def apply(self, rtype: int, body: dict[str, Any], offset: int, size: int = 0) -> None:
        """Fold one record into the state. ``offset`` is where the record starts, ``size`` its
        framed length (only an ENQUEUE's counts: see ``live_bytes``; 0 leaves it uncounted)."""
        self.records += 1
        if rtype == RecordType.ENQUEUE:
            self._enqueue(body, offset, size)
            return
        if rtype == RecordType.PURGE:
            self.clear()
            return
        job_id = body.get("id")
        entry = self.hot.get(job_id)  # type: ignore[arg-type]
        if entry is None:
            row = self._cold_row(job_id) if type(job_id) is str else -1
            if row < 0:
                self.anomalies += 1
                self.orphans += 1
                return
            # Only these two records leave a job READY without indexing it again.
            entry = self._warm(row, _IN_READY if rtype in _KEEPS_READY else _NOWHERE)
        if rtype == RecordType.LEASE:
            attempts, deadline = _int(body["attempts"], "attempts"), _time(body["deadline"], "deadline")
            self._set_state(entry, LEASED)
            entry.attempts = attempts
            entry.lease_token = body["token"]
            entry.lease_deadline = deadline
            entry.stage = None
            heapq.heappush(self.leases, (entry.lease_deadline, entry.seq, entry.id))
        elif rtype == RecordType.ACK:
            self._set_state(entry, DONE)
            if "result" in body:
                entry.result = body["result"]
        elif rtype == RecordType.NACK:
            available_at, at = _time(body["available_at"], "available_at"), _time(body["at"], "at")
            entry.attempts = _int(body.get("attempts", entry.attempts), "attempts")
            entry.last_error = body.get("error")
            entry.traceback = _traceback(body)  # it goes with last_error
            self._make_ready(entry, available_at, at)
        elif rtype == RecordType.RECLAIM:
            self._make_ready(entry, _time(body["available_at"], "available_at"), _time(body["at"], "at"))
        elif rtype == RecordType.DEAD:
            if "error" in body:  # a new last_error, and the traceback that goes with it
                entry.last_error, entry.traceback = body["error"], _traceback(body)
            self._set_state(entry, DEAD)
        elif rtype == RecordType.REQUEUE:
            available_at, at = _time(body["available_at"], "available_at"), _time(body["at"], "at")
            entry.attempts = 0
            self._make_ready(entry, available_at, at)
        elif rtype == RecordType.EXTEND:
            if entry.state is LEASED:  # a job that is not leased has no deadline to move (as in 0.1.2)
                entry.lease_deadline = _time(body["deadline"], "deadline")
                heapq.heappush(self.leases, (entry.lease_deadline, entry.seq, entry.id))
        elif rtype == RecordType.STAGE:
            entry.stage = body.get("stage")

    def _enqueue(self, body: dict[str, Any], offset: int, size: int) -> None:
        # The hot loop of opening a queue: most records are plain new jobs, which
        # become cold rows. Checks are inlined, cheapest first; a writer's body has
        # every key below, and any miss or odd value takes the Entry path, which
        # applies defaults and explains bad fields exactly as it always has.
        try:
            job_id, priority, seq = body["id"], body["priority"], body["seq"]
            enqueued_at, available_at = body["enqueued_at"], body["available_at"]
            attempts, max_attempts = body["attempts"], body["max_attempts"]
            plain = (
                body["state"] == "ready" and body["lease_deadline"] is None and body["lease_token"] is None
                and body["last_error"] is None
            )  # fmt: skip
        except KeyError:
            plain = False
        if plain:
            kind = body.get("kind", DEFAULT_KIND)
            if (
                type(job_id) is str and len(job_id) == 16 and type(enqueued_at) is float
                and type(available_at) is float and not available_at > enqueued_at and type(priority) is int
                and type(seq) is int and type(kind) is str and type(attempts) is int and type(max_attempts) is int
                and _INT32_MIN <= attempts <= _INT32_MAX and _INT32_MIN <= max_attempts <= _INT32_MAX
                and _HOT_KEYS.isdisjoint(body) and job_id not in self.hot
            ):  # fmt: skip
                fifo = self._fifos.get((kind, priority)) or self._new_fifo(kind, priority)
                if fifo is not None and fifo.last_seq < seq <= _INT64_MAX:
                    try:
                        number = int(job_id, 16)
                    except ValueError:
                        number = -1
                    if number >= 0 and _ID_TEXT % number == job_id:  # a library-format id (see _id_number)
                        self._insert_cold(
                            number, fifo, seq, offset, size, enqueued_at, available_at, attempts, max_attempts
                        )
                        return
        self._add_hot(Entry(body, offset, size))

    def add(self, entry: Entry) -> None:
        """Index a job that an ENQUEUE record introduced (built from values by the writer)."""
        if (
            entry.state is READY and entry.dedupe_key is None and entry.lease_deadline is None
            and entry.lease_token is None and entry.last_error is None and entry.stage is None
            and entry.result is None and entry.traceback is None
        ):  # fmt: skip
            number = _id_number(entry.id)
            if number >= 0 and self._add_cold(
                number, entry.id, entry.seq, entry.offset, entry.size, entry.enqueued_at, entry.available_at,
                entry.priority, entry.attempts, entry.max_attempts, entry.kind,
            ):  # fmt: skip
                return
        self._add_hot(entry)

    def _add_hot(self, entry: Entry) -> None:
        old = self.hold(entry.id)
        if old is not None:  # a sound writer never repeats an id; last one wins
            self.anomalies += 1
            self._set_state(old, DONE)
            self._counts[DONE] -= 1
            self._remove(old)
        self.hot[entry.id] = entry
        entry.row = len(self._rows)
        self._rows.append(entry)
        self._ids.append(0)
        self._columns += _NO_COLUMNS
        self._counts[entry.state] += 1
        if entry.state is not DONE:
            self.live_bytes += entry.size
        if entry.seq >= self.next_seq:
            self.next_seq = entry.seq + 1
        if entry.state is READY:
            self._push_ready(entry, entry.enqueued_at)
        elif entry.state is LEASED and entry.lease_deadline is not None:
            heapq.heappush(self.leases, (entry.lease_deadline, entry.seq, entry.id))
        if entry.dedupe_key is not None and entry.state in (READY, LEASED):
            self.active_keys.setdefault((entry.kind, entry.dedupe_key), entry.id)

    def _remove(self, entry: Entry) -> None:
        del self.hot[entry.id]
        self._rows[entry.row] = _GONE

    def _make_ready(self, entry: Entry, available_at: float, at: float) -> None:
        self._set_state(entry, READY)
        entry.available_at = available_at
        self._push_ready(entry, at)
        if entry.dedupe_key is not None:
            self.active_keys.setdefault((entry.kind, entry.dedupe_key), entry.id)

    def _push_ready(self, entry: Entry, at: float) -> None:
        """Index a READY job: runnable at ``at`` (the record's own time) or later."""
        if entry.available_at > at:
            entry.heap = _IN_DELAYED
            self.n_delayed += 1
            heapq.heappush(self.delayed, (entry.available_at, entry.seq, entry.id))
        else:
            entry.heap = _IN_READY
            heapq.heappush(self.ready.setdefault(entry.kind, []), (-entry.priority, entry.seq, entry.id))

    def _set_state(self, entry: Entry, state: JobState) -> None:
        old = entry.state
        if (old is DONE) is not (state is DONE):  # done is final in a sound log; either way, count right
            self.live_bytes += entry.size if old is DONE else -entry.size
        if entry.heap == _IN_DELAYED:
            self.n_delayed -= 1
        entry.heap = _NOWHERE
        if state is not LEASED:
            # A done job shows no lease (as in nobroker 0.1.2), but remembers the token
            # that finished it, so a repeated ack under that lease stays harmless.
            entry.finished_token = entry.lease_token if state is DONE else None
            entry.lease_deadline = entry.lease_token = None
        if state in (DONE, DEAD) and entry.dedupe_key is not None:
            key = (entry.kind, entry.dedupe_key)
            if self.active_keys.get(key) == entry.id:
                del self.active_keys[key]
        self._counts[old] -= 1
        self._counts[state] += 1
        entry.state = state

    def clear(self) -> None:
        """After a PURGE: no jobs, but the counts of what the log held so far carry on."""
        kept = self.next_seq, self.records, self.anomalies, self.orphans
        self.__init__()  # type: ignore[misc]
        self.next_seq, self.records, self.anomalies, self.orphans = kept

    # ------------------------------------------------------------ the cold store
    def _add_cold(
        self, number: int, job_id: str, seq: Any, offset: int, size: int, enqueued_at: Any, available_at: Any,
        priority: Any, attempts: Any, max_attempts: Any, kind: str,
    ) -> bool:  # fmt: skip
        """Store a READY job as a cold row if every field fits; False (nothing changed) if not."""
        if not (
            type(enqueued_at) is float and type(available_at) is float and not available_at > enqueued_at
            and type(priority) is int and _INT32_MIN <= priority <= _INT32_MAX
            and type(seq) is int and _INT64_MIN < seq <= _INT64_MAX
            and type(attempts) is int and _INT32_MIN <= attempts <= _INT32_MAX
            and type(max_attempts) is int and _INT32_MIN <= max_attempts <= _INT32_MAX
        ):  # fmt: skip
            return False
        fifo = self._fifos.get((kind, priority)) or self._new_fifo(kind, priority)
        if fifo is None or seq <= fifo.last_seq or job_id in self.hot:
            # Out of seq order for its group (only a hot job can sit anywhere), or a
            # repeated id (an anomaly the hot path resolves).
            return False
        self._insert_cold(number, fifo, seq, offset, size, enqueued_at, available_at, attempts, max_attempts)
        return True

    def _new_fifo(self, kind: str, priority: int) -> _Fifo | None:
        """The fifo for a new (kind, priority); None if the columns cannot hold it."""
        if not _INT32_MIN <= priority <= _INT32_MAX:
            return None
        kind_number = self._kind_numbers.get(kind)
        if kind_number is None:
            if len(self._kind_names) >= _MAX_COLD_KINDS:
                return None
            kind_number = self._kind_numbers[kind] = len(self._kind_names)
            self._kind_names.append(kind)
        fifo = self._fifos[(kind, priority)] = _Fifo(kind, kind_number, priority, len(self._fifos))
        return fifo

    def _insert_cold(
        self, number: int, fifo: _Fifo, seq: int, offset: int, size: int, enqueued_at: float, available_at: float,
        attempts: int, max_attempts: int,
    ) -> None:  # fmt: skip
        rows, ids, table = self._rows, self._ids, self._table
        row = len(rows)
        if row >= _MAX_ROWS:
            raise OverflowError(f"more than {_MAX_ROWS} jobs in one queue")
        # The id's slot: its own (a repeated or returning id) or the first empty one.
        slot = ((number * _HASH_MULTIPLIER) & _U64) >> self._shift
        held = table[slot]
        while held != _EMPTY:
            if ids[held] == number:
                if rows[held] is None:  # a sound writer never repeats an id; last one wins
                    self.anomalies += 1
                    rows[held] = _GONE
                    self.n_cold -= 1
                    self.live_bytes -= _UINT32.unpack_from(self._columns, held * _ROW_BYTES + _SIZE_COLUMN)[0]
                break
            slot = (slot + 1) & self._mask
            held = table[slot]
        else:
            self._table_used += 1
        table[slot] = row
        rows.append(None)
        ids.append(number)
        self._columns += _COLUMNS.pack(
            seq, offset, enqueued_at, available_at, fifo.priority, attempts, max_attempts, size, fifo.kind_number
        )
        self.live_bytes += size
        fifo.rows.append(row)
        fifo.last_seq = seq
        if not fifo.queued:
            fifo.queued = True
            heapq.heappush(self._heads.setdefault(fifo.kind, []), (-fifo.priority, seq, fifo.serial, fifo))
        self.n_cold += 1
        if seq >= self.next_seq:
            self.next_seq = seq + 1
        if self._table_used > (self._mask + 1) * 3 // 4:
            self._rehash()  # past three quarters: now (the storage calls tidy() before this, see there)

    def tidy(self) -> None:
        """Grow the id table once it is over half full.

        Growing re-inserts every cold row: about half a second for a million
        jobs in Python. The storage calls this after it lets go of the queue's
        file lock, so other processes never wait for it; inserts do it
        themselves only past three quarters (a huge read under one lock).
        """
        if self._table_used > self._table_limit:
            self._rehash()

    def _rehash(self) -> None:
        """A bigger table holding the live cold rows only (slots of gone and hot rows are dropped)."""
        size = 16
        while size <= 3 * self.n_cold:
            size *= 2
        table = array("q", [_EMPTY]) * size
        mask, shift = size - 1, 65 - size.bit_length()
        rows, ids = self._rows, self._ids
        for row in compress(range(len(rows)), map(is_, rows, repeat(None))):  # the cold rows
            slot = ((ids[row] * _HASH_MULTIPLIER) & _U64) >> shift
            while table[slot] != _EMPTY:
                slot = (slot + 1) & mask
            table[slot] = row
        self._table, self._mask, self._shift, self._table_used, self._table_limit = (
            table, mask, shift, self.n_cold, size // 2
        )  # fmt: skip

    def _cold_row(self, job_id: str) -> int:
        """The row of a cold job with this id, or -1."""
        number = _id_number(job_id)
        if number < 0:
            return -1
        table, ids = self._table, self._ids
        mask = self._mask
        slot = ((number * _HASH_MULTIPLIER) & _U64) >> self._shift
        while True:
            row = table[slot]
            if row == _EMPTY:
                return -1
            if ids[row] == number:
                return row if self._rows[row] is None else -1
            slot = (slot + 1) & mask

    def _entry_of(self, row: int) -> Entry:
        """An Entry with a cold row's fields, not stored anywhere."""
        seq, offset, enqueued_at, available_at, priority, attempts, max_attempts, size, kind_number = (
            _COLUMNS.unpack_from(self._columns, row * _ROW_BYTES)
        )  # fmt: skip
        entry = _new_entry(Entry)
        entry.id, entry.priority, entry.state, entry.attempts = _ID_TEXT % self._ids[row], priority, READY, attempts
        entry.max_attempts, entry.available_at, entry.enqueued_at = max_attempts, available_at, enqueued_at
        entry.lease_deadline = entry.lease_token = entry.last_error = entry.stage = entry.result = None
        entry.finished_token = entry.traceback = None
        entry.seq, entry.kind, entry.dedupe_key, entry.offset = seq, self._kind_names[kind_number], None, offset
        entry.size, entry.heap, entry.row = size, _IN_READY, row
        return entry

    def _warm(self, row: int, heap: int) -> Entry:
        """Move a cold row's job to ``hot``; indexed in its kind's ready heap if ``heap`` says so."""
        entry = self._entry_of(row)
        self._rows[row] = entry  # the fifo's reference to the row is stale from now on
        self.hot[entry.id] = entry
        self.n_cold -= 1
        self._counts[READY] += 1
        entry.heap = heap
        if heap == _IN_READY:
            heapq.heappush(self.ready.setdefault(entry.kind, []), (-entry.priority, entry.seq, entry.id))
        return entry

    def _cold_head(self, heads: list[tuple[int, int, int, _Fifo]]) -> _Fifo | None:
        """The fifo holding a kind's best cold row, its heap item up to date; None if none is left."""
        rows = self._rows
        columns = self._columns
        while heads:
            item = heads[0]
            fifo = item[3]
            queue, head = fifo.rows, fifo.head
            end = len(queue)
            while head < end and rows[queue[head]] is not None:
                head += 1  # went hot since it arrived
            if head == end:
                heapq.heappop(heads)
                fifo.queued, fifo.rows, fifo.head = False, array("i"), 0
                continue
            if head > 4096 and head * 2 > end:
                del queue[:head]  # taken rows: give their memory back
                head = 0
            fifo.head = head
            seq = _INT64.unpack_from(columns, queue[head] * _ROW_BYTES)[0]
            if seq != item[1]:
                heapq.heapreplace(heads, (item[0], seq, item[2], fifo))
                continue
            return fifo
        return None

    def _rebuild_rows(self) -> None:
        """Renumber the rows without the gone ones (after compaction dropped jobs)."""
        old_rows, old_ids, old_columns, live_bytes = self._rows, self._ids, self._columns, self.live_bytes
        self._rows, self._ids, self._columns = [], array("Q"), bytearray()
        self._table = array("q", [_EMPTY]) * 16
        self._mask, self._shift, self._table_used, self._table_limit = 15, 60, 0, 8
        self._fifos, self._heads, self.n_cold = {}, {}, 0
        kind_names = self._kind_names
        for row, entry in enumerate(old_rows):
            if entry is None:
                seq, offset, enqueued_at, available_at, priority, attempts, max_attempts, size, kind_number = (
                    _COLUMNS.unpack_from(old_columns, row * _ROW_BYTES)
                )  # fmt: skip
                kind = kind_names[kind_number]
                fifo = self._fifos.get((kind, priority)) or self._new_fifo(kind, priority)
                assert fifo is not None and seq > fifo.last_seq, "cold rows of a group stay in seq order"
                self._insert_cold(
                    old_ids[row], fifo, seq, offset, size, enqueued_at, available_at, attempts, max_attempts
                )
            elif entry is not _GONE:
                entry.row = len(self._rows)
                self._rows.append(entry)
                self._ids.append(0)
                self._columns += _NO_COLUMNS
        self.live_bytes = live_bytes  # the same jobs: re-inserting them counted them again

    # ------------------------------------------------------------ queries (writer side)
    def promote(self, now: float) -> None:
        """Move delayed jobs whose time has come into the ready heaps."""
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            available_at, _seq, job_id = heapq.heappop(delayed)
            entry = self.hot.get(job_id)
            if entry is None or entry.heap != _IN_DELAYED or entry.available_at != available_at:
                continue
            self.n_delayed -= 1
            entry.heap = _IN_READY
            heapq.heappush(self.ready.setdefault(entry.kind, []), (-entry.priority, entry.seq, entry.id))

    def pop_ready(self, now: float, kinds: frozenset[str] | None) -> Entry | None:
        """Remove and return the best runnable job (highest priority, then oldest)."""
        while True:
            best_heap = None
            for kind, heap in self.ready.items():
                if kinds is not None and kind not in kinds:
                    continue
                while heap:
                    entry = self.hot.get(heap[0][2])
                    if entry is not None and entry.heap == _IN_READY and entry.seq == heap[0][1]:
                        break
                    heapq.heappop(heap)  # stale
                if heap and (best_heap is None or heap[0] < best_heap[0]):
                    best_heap = heap
            best = best_heap[0] if best_heap is not None else None
            best_fifo = None
            for kind, heads in self._heads.items():
                if kinds is not None and kind not in kinds:
                    continue
                fifo = self._cold_head(heads)
                if fifo is None:
                    continue
                item = heads[0]
                key = (item[0], item[1], _ID_TEXT % self._ids[fifo.rows[fifo.head]])
                if best is None or key < best:
                    best, best_fifo = key, fifo
            if best is None:
                return None
            if best_fifo is not None:
                row = best_fifo.rows[best_fifo.head]
                best_fifo.head += 1
                entry = self._warm(row, _NOWHERE)
            else:
                assert best_heap is not None
                entry = self.hot[heapq.heappop(best_heap)[2]]
                entry.heap = _NOWHERE
            if entry.available_at > now:  # a peer's clock ran ahead of ours: not yet
                entry.heap = _IN_DELAYED
                self.n_delayed += 1
                heapq.heappush(self.delayed, (entry.available_at, entry.seq, entry.id))
                continue
            return entry

    def push_back(self, entry: Entry) -> None:
        """Undo pop_ready for a job that was not leased after all."""
        entry.heap = _IN_READY
        heapq.heappush(self.ready.setdefault(entry.kind, []), (-entry.priority, entry.seq, entry.id))

    def expired(self, now: float) -> list[Entry]:
        """Leased jobs whose deadline has passed, earliest first.

        Non-destructive: the heap items go stale once the caller records the
        reclaim, so a failed write leaves the index intact for the next try.
        """
        leases, jobs = self.leases, self.hot  # a leased job is always hot
        while leases:  # drop stale items at the top so the walk below stays short
            deadline, _seq, job_id = leases[0]
            entry = jobs.get(job_id)
            if entry is not None and entry.state is LEASED and entry.lease_deadline == deadline:
                break
            heapq.heappop(leases)
        found: dict[str, Entry] = {}
        stack = [0]
        while stack:
            i = stack.pop()
            if i >= len(leases) or leases[i][0] > now:
                continue  # heap order: nothing below an item later than now is due
            deadline, _seq, job_id = leases[i]
            entry = jobs.get(job_id)
            if entry is not None and entry.state is LEASED and entry.lease_deadline == deadline:
                found[job_id] = entry
            stack.append(2 * i + 1)
            stack.append(2 * i + 2)
        return sorted(found.values(), key=lambda e: (e.lease_deadline, e.seq))

    def stats(self, now: float) -> QueueStats:
        self.promote(now)
        c = self._counts
        return QueueStats(
            ready=c[READY] + self.n_cold - self.n_delayed, delayed=self.n_delayed, leased=c[LEASED], done=c[DONE], dead=c[DEAD]
        )


_INT64 = struct.Struct("<q")
_UINT32 = struct.Struct("<I")
_new_entry = Entry.__new__
#: Fields a writer includes only when set (to something a cold row cannot hold).
_HOT_KEYS = frozenset({"dedupe_key", "stage", "result", "traceback"})
#: Records that may leave a READY job READY without indexing it again.
_KEEPS_READY = frozenset({RecordType.EXTEND, RecordType.STAGE})
#: Every attribute of a QueueState: to_snapshot refuses a state with one it does not know.
_SNAPSHOT_FIELDS = frozenset(vars(QueueState()))
_SNAPSHOT_INTS = frozenset(name for name, value in vars(QueueState()).items() if type(value) is int)
#: A hot Entry in a snapshot: every slot, in order (its state as the text value).
_entry_fields = attrgetter(*Entry.__slots__)
_STATE_FIELD = Entry.__slots__.index("state")
