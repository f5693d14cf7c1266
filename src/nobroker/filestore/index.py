"""Where each job of the state lives: a hot Entry, or a packed "cold" row.

Owns: JobRows, the storage under QueueState (replay.py builds on it): every
job's row in the order its ENQUEUE record arrived, the ``hot`` Entries by id,
the cold store (packed columns, an open-addressing id table, FIFOs per kind
and priority with a small heap of their heads per kind), finding a job by
id, walking them in order, and the id table's growth, a slice of rows per
operation (Growth). Moving them after a compaction is relocation.py's; the
rows' part of a snapshot, state_form.py's. Imports: jobs, entry, room.

Most jobs of a big queue are plain READY jobs nobody has touched since they
were enqueued. Those are cold: about 100 bytes each and no Python object;
an Entry costs several hundred. A cold job is READY with a library-format id
and no dedupe key, stage, result or error, and not delayed. Anything that
changes one first makes it hot (QueueState._warm); read-only walks may see a
transient Entry built from its row (``get``, ``entries``).

Rows keep insertion order for every job, hot or cold: ``_rows[r]`` is None
for a cold job, its Entry for a hot one, GONE for a removed one, so
``entries`` walks jobs in the order their ENQUEUE records arrived, as a
plain dict would. Cold ids live in ``_table`` (row numbers, hashed on the
id's 64-bit number), not in a dict.

Ready order for cold rows: the rows of one (kind, priority) arrive in
increasing seq, so each such group is a FIFO with a head pointer, and the
kind's heap orders the FIFO heads. A row that would break that order goes
hot instead.
"""

from __future__ import annotations

import heapq
import struct
from array import array
from collections.abc import Iterator
from itertools import compress, repeat
from operator import is_

from ..jobs import JobState
from .entry import IN_DELAYED, IN_READY, READY, Entry, new_entry
from .room import keep_bytes_room, keep_list_room

#: A just-enqueued job's columns in the cold store, packed per row: seq, offset,
#: enqueued_at, available_at, priority, attempts, max_attempts, the size of its
#: ENQUEUE record, kind number.
_COLUMNS = struct.Struct("<qqddiiiIH")
_ROW_BYTES = _COLUMNS.size
_SIZE_COLUMN = struct.calcsize("<qqddiii")  # where a row's record size sits in it
_NO_COLUMNS = bytes(_ROW_BYTES)  # what a hot row holds there: nothing is read from it
_INT64 = struct.Struct("<q")
_UINT32 = struct.Struct("<I")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Distinct kinds the cold store numbers (its kind column is two bytes); jobs of more go hot.
MAX_COLD_KINDS = 0xFFFF
#: Rows (jobs since the last compaction) one state holds: fifos and the id table number them in 32 bits.
MAX_ROWS = 2**31 - 1
#: The array type of a row number (the id table's and the fifos' items): four bytes, not eight, per slot.
ROW_TYPE = "i"
#: A library-made job id: 16 lowercase hex digits, the text of one 64-bit number.
ID_TEXT = "%016x"
_HASH_MULTIPLIER = 0x9E3779B97F4A7C15  # Fibonacci hashing: spreads patterned user ids too
_U64 = (1 << 64) - 1
_EMPTY = -1
#: Marks a row whose job is gone (removed or replaced); it stays until the rows are rebuilt.
GONE = new_entry(Entry)
#: Rows whose cold ids one tidy() moves into a growing id table (see JobRows._grow), and two
#: more per row added since the last: about a millisecond's work after one job, where moving
#: them all at once cost 0.68 s at 1,000,000 jobs; all of them after a replay of as many.
GROW_STEP = 2048


class Growth:
    """The id table a bigger one replaces, emptied into it a slice of rows per tidy() (JobRows._grow)."""

    __slots__ = ("table", "mask", "shift", "moved", "end")

    def __init__(self, table: array[int], mask: int, shift: int, end: int) -> None:
        self.table, self.mask, self.shift = table, mask, shift
        self.moved = 0  # rows below this one are in the new table, if cold
        self.end = end  # rows from here on went into the new table as they came


def id_number(job_id: str) -> int:
    """The 64-bit number a library-format id spells, or -1 for any other id."""
    if len(job_id) != 16:
        return -1
    try:
        number = int(job_id, 16)
    except ValueError:
        return -1
    return number if ID_TEXT % number == job_id else -1


class Fifo:
    """Cold rows of one (kind, priority), oldest first: they arrive in increasing seq."""

    __slots__ = ("rows", "head", "last_seq", "queued", "kind", "kind_number", "priority", "serial")

    def __init__(self, kind: str, kind_number: int, priority: int, serial: int) -> None:
        self.kind, self.kind_number = kind, kind_number
        self.rows = array("i")
        self.head = 0  # rows before it were taken (or went hot); trimmed now and then
        self.last_seq = INT64_MIN
        self.queued = False  # does the kind's head heap hold an item for this fifo?
        self.priority = priority
        self.serial = serial  # breaks ties in the heap so fifos are never compared


class JobRows:
    """Every job's row, hot or cold, and the lookups over them (see the module's docstring)."""

    def __init__(self) -> None:
        self.hot: dict[str, Entry] = {}
        self.n_cold = 0
        #: Bytes of the ENQUEUE records of every job that is not done: about what a compaction
        #: keeps. The rest of the log (every other record, and done jobs) it reclaims.
        self.live_bytes = 0
        self._rows: list[Entry | None] = []
        self._ids = array("Q")  # per row: the id's number (0 for a hot row)
        self._columns = bytearray()  # per row: _COLUMNS
        self._table = array(ROW_TYPE, [_EMPTY]) * 16  # id number -> latest row; load kept under a half
        self._mask, self._shift, self._table_used, self._table_limit = 15, 60, 0, 8
        self._growing: Growth | None = None  # the table _table replaces, while its rows move (never in a snapshot)
        self._tidied_rows = 0  # len(_rows) at the last tidy() (never in a snapshot)
        self._kind_names: list[str] = []
        self._kind_numbers: dict[str, int] = {}
        self._fifos: dict[tuple[str, int], Fifo] = {}  # (kind, priority) -> fifo
        self._heads: dict[str, list[tuple[int, int, int, Fifo]]] = {}  # kind -> heap of (-priority, seq, serial, fifo)

    # ------------------------------------------------------------ the jobs, as a mapping
    def __len__(self) -> int:
        return len(self.hot) + self.n_cold

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.hot or self._cold_row(job_id) >= 0

    def has_cold(self, kind: str) -> bool:
        """Does ``kind`` have a cold row left (a used-up fifo at the head is tidied away first)?"""
        heads = self._heads.get(kind)
        return heads is not None and self._cold_head(heads) is not None

    def cold_kinds(self) -> set[str]:
        """Every kind with cold rows (or had them: a used-up fifo may linger until it is tidied)."""
        return set(self._heads)

    def holds_number(self, job_id: str, number: int) -> bool:
        """``job_id in self`` for a library-format id whose number the caller has: ``id_number(job_id)``, not parsed again."""
        return job_id in self.hot or self._row_of_number(number) >= 0

    def get(self, job_id: str) -> Entry | None:
        """The job's fields, for reading only: a cold job's Entry is built for the call, not kept."""
        entry = self.hot.get(job_id)
        if entry is not None:
            return entry
        row = self._cold_row(job_id)
        return None if row < 0 else self._entry_of(row)

    def entries(self, state: JobState | None = None) -> Iterator[Entry]:
        """Every job (or every job in JobState ``state``) in the order their ENQUEUE records arrived.

        Cold jobs appear as Entries built for the walk: read them, do not change them.
        """
        if state is not None and state is not READY:  # cold jobs are all READY: skip them cheaply
            for entry in self._rows:
                if entry is not None and entry is not GONE and entry.state is state:
                    yield entry
            return
        entry_of = self._entry_of
        for row, entry in enumerate(self._rows):
            if entry is None:
                yield entry_of(row)
            elif entry is not GONE and (state is None or entry.state is state):
                yield entry

    def delayed_entries(self) -> Iterator[Entry]:
        """The jobs stats() counts as delayed (after ``promote(now)``), in enqueue order."""
        for entry in self._rows:  # cold rows (None) are never delayed: skipped cheaply
            if entry is not None and entry is not GONE and entry.heap == IN_DELAYED:
                yield entry

    # ------------------------------------------------------------ adding rows
    def _append_hot_row(self, entry: Entry) -> None:
        entry.row = len(self._rows)
        self._rows.append(entry)
        self._ids.append(0)
        self._columns += _NO_COLUMNS

    def _fifo_for(self, kind: str, priority: int) -> Fifo | None:
        """The fifo of (kind, priority), made if new; None if the columns cannot hold it."""
        fifo = self._fifos.get((kind, priority))
        if fifo is not None:
            return fifo
        if not INT32_MIN <= priority <= INT32_MAX:
            return None
        kind_number = self._kind_numbers.get(kind)
        if kind_number is None:
            if len(self._kind_names) >= MAX_COLD_KINDS:
                return None
            kind_number = self._kind_numbers[kind] = len(self._kind_names)
            self._kind_names.append(kind)
        fifo = self._fifos[(kind, priority)] = Fifo(kind, kind_number, priority, len(self._fifos))
        return fifo

    def _insert_cold(
        self, number: int, fifo: Fifo, seq: int, offset: int, size: int, enqueued_at: float, available_at: float,
        attempts: int, max_attempts: int,
    ) -> bool:  # fmt: skip
        """Store a READY job as a cold row (``seq`` after the fifo's last). True if it replaced a cold job of its id."""
        rows, ids, table = self._rows, self._ids, self._table
        row = len(rows)
        if row >= MAX_ROWS:
            raise OverflowError(f"more than {MAX_ROWS} jobs in one queue")
        assert seq > fifo.last_seq, "a fifo's rows arrive in seq order"
        replaced = False
        # The id's slot: its own (a repeated or returning id) or the first empty one.
        slot = ((number * _HASH_MULTIPLIER) & _U64) >> self._shift
        held = table[slot]
        while held != _EMPTY:
            if ids[held] == number:
                if rows[held] is None:  # a sound writer never repeats an id; last one wins
                    replaced = self._forget_cold(held)
                break
            slot = (slot + 1) & self._mask
            held = table[slot]
        else:
            self._table_used += 1
            if self._growing is not None and (held := self._old_row(self._growing, number)) >= 0:
                replaced = self._forget_cold(held)  # its row has not moved yet
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
        if self._table_used > (self._mask + 1) * 3 // 4:  # the storage calls tidy() before this, see there
            if self._growing is None:
                self._start_growing()  # maybe under the file lock: the rows move later, in tidy()
            else:
                self._rehash()  # the new table filled before the old one was empty: all at once
        return replaced

    def _forget_cold(self, row: int) -> bool:
        """A cold job whose id a new row takes: its row is gone. True."""
        self._rows[row] = GONE
        self.n_cold -= 1
        self.live_bytes -= _UINT32.unpack_from(self._columns, row * _ROW_BYTES + _SIZE_COLUMN)[0]
        return True

    def tidy(self) -> None:
        """Grow the id table once it is over half full, GROW_STEP rows at a time; keep room for more rows (room.py).

        Growing re-inserts every cold row: 0.68 s for a million jobs in
        Python, once paid by the operation that crossed the mark. Now a new
        table takes the rows a slice after each operation (GROW_STEP, and
        two per row the operation added: a long replay ends the growth), and
        a lookup that misses in it looks in the old one. The
        storage calls this after it lets go of the queue's file lock, so other
        processes never wait for it; inserts start the growth themselves past
        three quarters (a huge read under one lock).
        """
        budget = GROW_STEP + 2 * max(0, len(self._rows) - self._tidied_rows)
        self._tidied_rows = len(self._rows)
        if self._growing is None and self._table_used > self._table_limit:
            self._start_growing()
        if self._growing is not None:
            self._grow(self._growing, budget)
        keep_bytes_room(self._columns, _ROW_BYTES, len(self._rows))
        keep_list_room(self._rows)

    @property
    def growing(self) -> bool:
        """Is the id table growing (its old rows not all moved)? A snapshot waits until it is not."""
        return self._growing is not None

    def finish_growing(self) -> None:
        """Move every row the growing id table still owes (a snapshot holds one table)."""
        if self._growing is not None:
            self._grow(self._growing, len(self._rows))

    def _start_growing(self, extra: int = 0) -> None:
        """A new empty table sized for three times the cold rows and ``extra`` more; the old one is emptied into it by _grow."""
        size = 16
        while size <= 3 * (self.n_cold + extra):
            size *= 2
        self._growing = Growth(self._table, self._mask, self._shift, len(self._rows))
        self._table = array(ROW_TYPE, [_EMPTY]) * size
        self._mask, self._shift, self._table_used, self._table_limit = size - 1, 65 - size.bit_length(), 0, size // 2

    def _grow(self, growing: Growth, budget: int) -> None:
        """Move the cold ids of the next ``budget`` rows below ``growing.end`` into the new table; done, forget the old."""
        rows, ids, table, mask, shift = self._rows, self._ids, self._table, self._mask, self._shift
        start = growing.moved
        stop = min(start + budget, growing.end)
        used = 0
        for row in compress(range(start, stop), map(is_, rows[start:stop], repeat(None))):  # the cold rows
            number = ids[row]
            slot = ((number * _HASH_MULTIPLIER) & _U64) >> shift
            while (held := table[slot]) != _EMPTY:
                assert ids[held] != number or rows[held] is not None, "a cold id is in one table only"
                slot = (slot + 1) & mask
            table[slot] = row
            used += 1
        self._table_used += used
        growing.moved = stop
        if stop == growing.end:
            self._growing = None

    def _rehash(self, extra: int = 0) -> None:
        """A bigger table holding the live cold rows only (slots of gone and hot rows are dropped), and room for ``extra`` more."""
        size = 16
        while size <= 3 * (self.n_cold + extra):
            size *= 2
        table = array(ROW_TYPE, [_EMPTY]) * size
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
        self._growing = None  # every cold row is in the new table: the old one is not needed

    # ------------------------------------------------------------ reading rows
    def _cold_row(self, job_id: str) -> int:
        """The row of a cold job with this id, or -1."""
        number = id_number(job_id)
        if number < 0:
            return -1
        return self._row_of_number(number)

    def _row_of_number(self, number: int) -> int:
        """The row of a cold job whose id spells ``number``, or -1."""
        table, ids = self._table, self._ids
        mask = self._mask
        slot = ((number * _HASH_MULTIPLIER) & _U64) >> self._shift
        while True:
            row = table[slot]
            if row == _EMPTY:
                return -1 if self._growing is None else self._old_row(self._growing, number)
            if ids[row] == number:
                return row if self._rows[row] is None else -1
            slot = (slot + 1) & mask

    def _old_row(self, growing: Growth, number: int) -> int:
        """The row of a cold job whose id spells ``number`` and that has not moved to the new table yet, or -1."""
        table, ids, mask = growing.table, self._ids, growing.mask
        slot = ((number * _HASH_MULTIPLIER) & _U64) >> growing.shift
        while (row := table[slot]) != _EMPTY:
            if ids[row] == number:
                return row if row >= growing.moved and self._rows[row] is None else -1
            slot = (slot + 1) & mask
        return -1

    def _entry_of(self, row: int) -> Entry:
        """An Entry with a cold row's fields, not stored anywhere."""
        seq, offset, enqueued_at, available_at, priority, attempts, max_attempts, size, kind_number = (
            _COLUMNS.unpack_from(self._columns, row * _ROW_BYTES)
        )  # fmt: skip
        entry = new_entry(Entry)
        entry.id, entry.priority, entry.state, entry.attempts = ID_TEXT % self._ids[row], priority, READY, attempts
        entry.max_attempts, entry.available_at, entry.enqueued_at = max_attempts, available_at, enqueued_at
        entry.lease_deadline = entry.lease_token = entry.last_error = entry.stage = entry.result = None
        entry.finished_token = entry.traceback = None
        entry.cancel_requested = False
        entry.timeout = entry.history = entry.leased_by = entry.leased_at = entry.group = None
        entry.seq, entry.kind, entry.dedupe_key, entry.offset = seq, self._kind_names[kind_number], None, offset
        entry.size, entry.heap, entry.row = size, IN_READY, row
        return entry

    def _cold_head(self, heads: list[tuple[int, int, int, Fifo]]) -> Fifo | None:
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

    def _best_cold(
        self, kinds: frozenset[str] | None, skip: frozenset[str] = frozenset()
    ) -> tuple[tuple[int, int, str], Fifo] | None:
        """The best cold row of these kinds (none of ``skip``) as (its ready-heap key, its fifo); None if there is none."""
        best: tuple[tuple[int, int, str], Fifo] | None = None
        for kind, heads in self._heads.items():
            if (kinds is not None and kind not in kinds) or kind in skip:
                continue
            found = self._cold_of(heads)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        return best

    def cold_pick(self, kind: str) -> tuple[tuple[int, int, str], Fifo] | None:
        """The best cold row of ``kind`` as (its ready-heap key, its fifo); None if it has none."""
        return self._cold_of(self._heads.get(kind))

    def _cold_of(self, heads: list[tuple[int, int, int, Fifo]] | None) -> tuple[tuple[int, int, str], Fifo] | None:
        """The best cold row of one kind (``heads``: its heap of fifo heads) as (its ready-heap key, its fifo)."""
        fifo = None if heads is None else self._cold_head(heads)
        if fifo is None:
            return None
        item = heads[0]  # type: ignore[index]
        return (item[0], item[1], ID_TEXT % self._ids[fifo.rows[fifo.head]]), fifo
