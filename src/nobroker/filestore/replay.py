"""The queue as a pure state machine: records in, state out.

Owns: QueueState (every job plus the indexes that make lease and stats
cheap, with a small mapping-like API: get, hold, in, len, entries) and
``apply``, which folds one decoded record into the state; also the
schedules (periodic jobs) by name, which schedule_records.py folds records
into; the limits by kind, which limit_records.py folds records into, and how
many jobs of each kind are leased, and the runnable and leased jobs of
groups (ready.py); the paused kinds (control_records.py);
the counters by kind, counted as the records are applied (counting.py)
(the state's snapshot form is state_form.py's). Imports: jobs, schedules,
limits, framing, entry, records, schedule_records, limit_records,
control_records, counting, index, ready, relocation.

Invariant 2 of the design lives here: nothing in this module reads the clock,
draws a random number or makes an id. Every such value arrives inside a
record, chosen once by the writer. Replaying the same bytes always yields the
same state, which is what lets the tests cut a log at every byte and compare.

The payload is not kept in memory: an Entry remembers the file offset of the
record that holds it, and the storage reads it back when a caller needs it.
Where each job lives (a hot Entry or a packed cold row) is index.py's
business; callers see one set of jobs either way.

Indexes (lazy: stale heap items are skipped when popped, never searched for):
  ready[kind]  heap of (-priority, seq, id)   hot jobs runnable now
  heads[kind]  heap of (-priority, seq, ...)  the oldest cold row of each (kind, priority) (index.py)
  delayed      heap of (available_at, seq, id) ready jobs whose time has not come
  leases       heap of (deadline, seq, id)     leased jobs, for reclaiming (ready.py)
  active_keys  (kind, dedupe_key) -> id        for ready/leased jobs only
  leased_kinds kind -> leased jobs of it        what a concurrency limit counts
  groups       kind -> group -> heap, and counts  hot jobs of a group (ready.py)

What a lease rests on (``enables_end``): the end of the last record applied
that could give a lease something to take (a job enqueued or made ready
again, a pause lifted, a limit changed; under limits, any record, as an ack
frees a slot). A lease's answer needs the log durable only through there,
not through a peer's later leases, acks and heartbeats: those take jobs
away or touch none it could hand out (commit.py's lazy operations).
NO_BASIS (past any offset) until the state knows: a state rebuilt from a
snapshot says where the snapshot ends (snapshot.load), one moved into a new
generation says nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..jobs import DEFAULT_KIND, JobState, QueueStats
from ..limits import Turns
from ..schedules import Schedule
from . import control_records, counting, limit_records, records, schedule_records
from .entry import CANCELLED, DEAD, DONE, DROPPED, IN_DELAYED, IN_READY, LEASED, NOWHERE, READ_MAX_ATTEMPTS, READY, Entry
from .framing import RecordType
from .index import GONE, ID_TEXT, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, id_number
from .ready import ReadyJobs
from .relocation import count_live_bytes, drop_gone_rows, move_rows

#: ``enables_end`` of a state that cannot tell what a lease rests on: past any offset (all of it).
NO_BASIS = 1 << 63


class QueueState(ReadyJobs):
    """Every job the log holds (JobRows keeps where, ReadyJobs which are runnable), and the indexes derived from them."""

    def __init__(self) -> None:
        super().__init__()
        self.active_keys: dict[tuple[str, str], str] = {}
        self._counts: dict[JobState, int] = {state: 0 for state in JobState}  # hot jobs only
        self.next_seq = 1
        self.records = 0
        #: Records a sound writer never writes: ones that name a job the state does not
        #: hold (``orphans``, counted there too) and ENQUEUEs that repeat an id.
        self.anomalies = 0
        self.orphans = 0
        #: Periodic jobs by name (schedule_records.py); a PURGE keeps them.
        self.schedules: dict[str, Schedule] = {}
        #: The paused kinds (None: the whole queue), from PAUSE and RESUME records; a PURGE keeps them.
        self.paused: set[str | None] = set()
        #: Limits by kind, each with its bucket (limit_records.py); a PURGE keeps them.
        self.limits: dict[str, limit_records.Held] = {}
        #: Counters by kind (counting.py): derived from the records, kept by a PURGE.
        self.counters: dict[str, list[int]] = {}
        self.leased_kinds: dict[str, int] = {}
        #: The rotation between the groups of each kind under a fair limit (limit_records.py); a PURGE keeps it.
        self.turns: dict[str, Turns] = {}
        #: Where what a lease rests on ends (see the module's docstring); not part of a snapshot.
        self.enables_end = NO_BASIS

    # ------------------------------------------------------------ the jobs, as a mapping
    @property
    def counts(self) -> Mapping[JobState, int]:
        """Jobs per state (read-only: the state keeps them itself)."""
        counts = dict(self._counts)
        counts[READY] += self.n_cold
        return MappingProxyType(counts)

    def hold(self, job_id: str) -> Entry | None:
        """The job's stored Entry, moving a cold job to hot first: for anything that changes it."""
        entry = self.hot.get(job_id)
        if entry is not None:
            return entry
        row = self._cold_row(job_id)
        return None if row < 0 else self._warm(row, IN_READY)

    def relocate(
        self, offsets: dict[str, int], base: int | None = None, shift: int = 0, end: int | None = None
    ) -> int:
        """After compaction: point every job at its record in the new generation.

        A job whose ENQUEUE lay before ``base`` (all, without one) moved to
        ``offsets[id]``; one missing there was done and is dropped. A record at or
        after ``base`` moved by ``shift``. ``offsets`` lists the new records back
        to back up to ``end`` (default ``base + shift``), which gives each its new
        size (without either, the last keeps its old one). Returns how many
        dropped jobs were not done: a sound compaction drops none.
        """
        unsound = 0
        self.enables_end = NO_BASIS  # offsets of another generation: what a lease rests on is not known here
        for entry in move_rows(self, offsets, base, shift, end):
            if entry.state not in DROPPED:
                unsound += 1
            self._counts[entry.state] -= 1
            del self.hot[entry.id]
            self._rows[entry.row] = GONE
        count_live_bytes(self)
        drop_gone_rows(self)
        return unsound

    # ------------------------------------------------------------ apply
    def apply(self, rtype: int, body: dict[str, Any], offset: int, size: int = 0) -> None:
        """Fold one record into the state. ``offset`` is where the record starts, ``size`` its
        framed length (only an ENQUEUE's counts: see ``live_bytes``; 0 leaves it uncounted)."""
        self.records += 1
        if self.limits or rtype not in _NEVER_ENABLES:
            self.enables_end = offset + size if size else NO_BASIS
        if rtype == RecordType.ENQUEUE:
            self._enqueue(body, offset, size)
            counting.add(self.counters, body.get("kind", DEFAULT_KIND))  # a kind that is not a string never gets here
            return
        if rtype in _QUEUE_TYPES:
            self._apply_to_queue(rtype, body)
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
            entry = self._warm(row, IN_READY if rtype in _KEEPS_READY else NOWHERE)
        deadline = entry.lease_deadline if entry.state is LEASED else None
        if rtype == RecordType.LEASE:
            attempts, deadline, token, entry.leased_at, entry.leased_by = records.decode_lease(body, entry.attempts)
            self._set_state(entry, LEASED)
            entry.attempts, entry.lease_token, entry.lease_deadline, entry.stage = attempts, token, deadline, None
            heapq.heappush(self.leases, (deadline, entry.seq, entry.id))
            if self.limits:
                limit_records.leased(self.limits, self.turns, entry, body)
        elif rtype == RecordType.ACK:
            has_result, result = records.decode_ack(body)
            self._set_state(entry, DONE)
            if has_result:
                entry.result = result
        elif rtype == RecordType.NACK:
            available_at, at, entry.attempts, entry.last_error, entry.traceback = records.decode_nack(body, entry.attempts)
            self._make_ready(entry, available_at, at)
        elif rtype == RecordType.RECLAIM or rtype == RecordType.RUN_NOW:  # (RUN_NOW: control_records.py)
            self._make_ready(entry, *records.decode_reclaim(body))
        elif rtype == RecordType.DEAD:
            error = records.decode_dead(body)
            if error is not None:  # a new last_error, and the traceback that goes with it
                entry.last_error, entry.traceback = error
            self._set_state(entry, DEAD)
        elif rtype == RecordType.REQUEUE:
            available_at, at = records.decode_requeue(body)
            entry.attempts = 0
            self._make_ready(entry, available_at, at)
        elif rtype == RecordType.EXTEND:
            if entry.state is LEASED:  # a job that is not leased has no deadline to move (as in 0.1.2)
                entry.lease_deadline = records.decode_extend(body)
                heapq.heappush(self.leases, (entry.lease_deadline, entry.seq, entry.id))
        elif rtype == RecordType.STAGE:
            entry.stage = records.decode_stage(body)
        elif rtype == RecordType.CANCEL:
            if not records.decode_cancel(body):
                self._set_state(entry, CANCELLED)
            elif entry.state is LEASED:  # a mark for a job no longer leased marks nothing
                entry.cancel_requested = True
            elif entry.state is READY and entry.heap == NOWHERE:  # warmed from a cold row: index it again
                self._push_ready(entry, entry.available_at)
        elif rtype == RecordType.SNOOZE:
            self._snooze(entry, body, deadline)
        elif rtype == RecordType.DELETE:
            self._drop(entry)
        if deadline is not None and entry.state is not LEASED:  # the attempt ended: into its history (bounded)
            entry.end_attempt(body.get("at"), deadline)
        if rtype in counting.COUNTED:  # once the record was applied: a refused one counts nothing
            counting.count_outcome(self.counters, rtype, body, entry.kind)

    def _apply_to_queue(self, rtype: int, body: dict[str, Any]) -> None:
        """A record about the queue, not one job: a PURGE, a schedule's, a pause's or a limit's."""
        if rtype == RecordType.PURGE:
            self.clear()
            carried = body.get(counting.CARRIED)
            if carried is not None:  # a compacted generation's first record: the counters so far
                self.counters = counting.checked(carried)
        elif rtype in schedule_records.SCHEDULE_TYPES:
            schedule_records.apply(self.schedules, rtype, body)
        elif rtype in control_records.PAUSE_TYPES:
            control_records.fold_pause(self.paused, rtype, body)
        else:
            assert rtype in limit_records.LIMIT_TYPES, rtype
            limit_records.apply(self.limits, rtype, body, self.turns)

    def _enqueue(self, body: dict[str, Any], offset: int, size: int) -> None:
        # The hot loop of opening a queue: most records are plain new jobs, which
        # become cold rows. Checks are inlined, cheapest first; any miss or odd
        # value takes the Entry path, which applies defaults and explains bad fields.
        get = body.get
        try:
            job_id, priority, seq = body["id"], get("priority", 0), body["seq"]
            enqueued_at = body["enqueued_at"]
            available_at = get("available_at", enqueued_at)  # left out when equal (format version 4)
            attempts, max_attempts = get("attempts", 0), get("max_attempts", READ_MAX_ATTEMPTS)
            plain = (
                get("state", "ready") == "ready" and get("lease_deadline") is None and get("lease_token") is None
                and get("last_error") is None
            )  # fmt: skip
        except KeyError:
            plain = False
        if plain:
            kind = body.get("kind", DEFAULT_KIND)
            if (
                type(job_id) is str and len(job_id) == 16 and type(enqueued_at) is float
                and type(available_at) is float and not available_at > enqueued_at and type(priority) is int
                and type(seq) is int and type(kind) is str and type(attempts) is int and type(max_attempts) is int
                and INT32_MIN <= attempts <= INT32_MAX and INT32_MIN <= max_attempts <= INT32_MAX
                and _HOT_KEYS.isdisjoint(body) and job_id not in self.hot
            ):  # fmt: skip
                fifo = self._fifos.get((kind, priority)) or self._fifo_for(kind, priority)
                if fifo is not None and fifo.last_seq < seq <= INT64_MAX:
                    try:
                        number = int(job_id, 16)
                    except ValueError:
                        number = -1
                    if number >= 0 and ID_TEXT % number == job_id:  # a library-format id (see id_number)
                        if self._insert_cold(
                            number, fifo, seq, offset, size, enqueued_at, available_at, attempts, max_attempts
                        ):  # fmt: skip
                            self.anomalies += 1  # a sound writer never repeats an id; last one wins
                        if seq >= self.next_seq:
                            self.next_seq = seq + 1
                        return
        self._add_hot(Entry(body, offset, size))

    def add(self, entry: Entry, number: int = -2) -> None:
        """Index a job that an ENQUEUE record introduced (built from values by the writer).

        ``number``: ``id_number(entry.id)`` when the writer made the id from it (-2: parse it here).
        """
        counting.add(self.counters, entry.kind)
        if (
            entry.state is READY and entry.dedupe_key is None and entry.lease_deadline is None
            and entry.lease_token is None and entry.last_error is None and entry.stage is None
            and entry.result is None and entry.traceback is None and entry.timeout is None and not entry.history
            and entry.group is None
        ):  # fmt: skip
            if number == -2:
                number = id_number(entry.id)
            if number >= 0 and self._add_cold(
                number, entry.id, entry.seq, entry.offset, entry.size, entry.enqueued_at, entry.available_at,
                entry.priority, entry.attempts, entry.max_attempts, entry.kind,
            ):  # fmt: skip
                return
        self._add_hot(entry)

    def add_new(
        self, number: int, job_id: str, seq: int, offset: int, size: int, now: float, priority: int,
        max_attempts: int, kind: str,
    ) -> bool:  # fmt: skip
        """Index a plain job ready now that the writer just made (add() without an Entry): False if none fits.

        False (nothing changed) when it cannot be a cold row; the caller then
        builds its Entry and calls add().
        """
        if not self._add_cold(number, job_id, seq, offset, size, now, now, priority, 0, max_attempts, kind):
            return False
        counting.add(self.counters, kind)
        return True

    def _add_cold(
        self, number: int, job_id: str, seq: Any, offset: int, size: int, enqueued_at: Any, available_at: Any,
        priority: Any, attempts: Any, max_attempts: Any, kind: str,
    ) -> bool:  # fmt: skip
        """Store a READY job as a cold row if every field fits; False (nothing changed) if not."""
        if not (
            type(enqueued_at) is float and type(available_at) is float and not available_at > enqueued_at
            and type(priority) is int and INT32_MIN <= priority <= INT32_MAX
            and type(seq) is int and INT64_MIN < seq <= INT64_MAX
            and type(attempts) is int and INT32_MIN <= attempts <= INT32_MAX
            and type(max_attempts) is int and INT32_MIN <= max_attempts <= INT32_MAX
        ):  # fmt: skip
            return False
        fifo = self._fifos.get((kind, priority)) or self._fifo_for(kind, priority)
        if fifo is None or seq <= fifo.last_seq or job_id in self.hot:
            # Out of seq order for its group (only a hot job can sit anywhere), or a
            # repeated id (an anomaly the hot path resolves).
            return False
        if self._insert_cold(number, fifo, seq, offset, size, enqueued_at, available_at, attempts, max_attempts):
            self.anomalies += 1  # a sound writer never repeats an id; last one wins
        if seq >= self.next_seq:
            self.next_seq = seq + 1
        return True

    def _add_hot(self, entry: Entry) -> None:
        old = self.hold(entry.id)
        if old is not None:  # a sound writer never repeats an id; last one wins
            self.anomalies += 1
            self._drop(old)
        self.hot[entry.id] = entry
        self._append_hot_row(entry)
        self._counts[entry.state] += 1
        if entry.state not in DROPPED:
            self.live_bytes += entry.size
        if entry.seq >= self.next_seq:
            self.next_seq = entry.seq + 1
        if entry.state is READY:
            self._push_ready(entry, entry.enqueued_at)
        elif entry.state is LEASED:
            self.leased_kinds[entry.kind] = self.leased_kinds.get(entry.kind, 0) + 1
            if entry.group is not None:
                self.groups.count(entry, 1)
            if entry.lease_deadline is not None:
                heapq.heappush(self.leases, (entry.lease_deadline, entry.seq, entry.id))
        if entry.dedupe_key is not None and entry.state in (READY, LEASED):
            self.active_keys.setdefault((entry.kind, entry.dedupe_key), entry.id)

    def _drop(self, entry: Entry) -> None:
        """Forget a hot job (a DELETE, or an ENQUEUE that repeats its id): its count, dedupe key and row go."""
        self._set_state(entry, DONE)
        self._counts[DONE] -= 1
        del self.hot[entry.id]
        self._rows[entry.row] = GONE

    def _warm(self, row: int, heap: int) -> Entry:
        """Move a cold row's job to ``hot``; indexed in its kind's ready heap if ``heap`` says so."""
        entry = self._entry_of(row)
        self._rows[row] = entry  # the fifo's reference to the row is stale from now on
        self.hot[entry.id] = entry
        self.n_cold -= 1
        self._counts[READY] += 1
        entry.heap = heap
        if heap == IN_READY:
            heapq.heappush(self.ready.setdefault(entry.kind, []), (-entry.priority, entry.seq, entry.id))
        return entry

    def _snooze(self, entry: Entry, body: dict[str, Any], deadline: float | None) -> None:
        available_at, at, attempts = control_records.decode_snooze(body)
        self._make_ready(entry, available_at, at)
        if deadline is not None:  # the attempt (by the number it ran as) ended snoozed
            entry.end_attempt(at, deadline, "snoozed")
        entry.attempts = attempts  # what it had before the lease: a snooze spends none

    def _make_ready(self, entry: Entry, available_at: float, at: float) -> None:
        self._set_state(entry, READY)
        entry.available_at = available_at
        self._push_ready(entry, at)
        if entry.dedupe_key is not None:
            self.active_keys.setdefault((entry.kind, entry.dedupe_key), entry.id)

    def _set_state(self, entry: Entry, state: JobState) -> None:
        old = entry.state
        if (old in DROPPED) is not (state in DROPPED):  # final in a sound log; either way, count right
            self.live_bytes += entry.size if old in DROPPED else -entry.size
        if entry.heap == IN_DELAYED:
            self.n_delayed -= 1
        entry.heap = NOWHERE
        entry.cancel_requested = False  # a mark lives as long as the lease it was made for
        if state is not LEASED:
            # A done job shows no lease (as in nobroker 0.1.2), but remembers the token
            # that finished it, so a repeated ack under that lease stays harmless.
            entry.finished_token = entry.lease_token if state is DONE else None
            entry.lease_deadline = entry.lease_token = None
        if state in (DONE, DEAD, CANCELLED) and entry.dedupe_key is not None:
            key = (entry.kind, entry.dedupe_key)
            if self.active_keys.get(key) == entry.id:
                del self.active_keys[key]
        if old is LEASED:
            self.leased_kinds[entry.kind] -= 1
            if entry.group is not None:
                self.groups.count(entry, -1)
        if state is LEASED:
            kinds = self.leased_kinds
            kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
            if entry.group is not None:
                self.groups.count(entry, 1)
        self._counts[old] -= 1
        self._counts[state] += 1
        entry.state = state

    def clear(self) -> None:
        """After a PURGE: no jobs, but the counts of what the log held so far, schedules, limits (and their turns),
        pauses, counters carry on."""
        kept = (self.next_seq, self.records, self.anomalies, self.orphans, self.schedules, self.limits, self.paused,
                self.counters, self.turns)  # fmt: skip
        self.__init__()  # type: ignore[misc]
        (self.next_seq, self.records, self.anomalies, self.orphans, self.schedules, self.limits, self.paused,
         self.counters, self.turns) = kept  # fmt: skip

    def stats(self, now: float) -> QueueStats:
        self.promote(now)
        c = self._counts
        return QueueStats(
            ready=c[READY] + self.n_cold - self.n_delayed, delayed=self.n_delayed, leased=c[LEASED], done=c[DONE],
            dead=c[DEAD], cancelled=c[CANCELLED],
        )


#: Fields a writer includes only when set (to something a cold row cannot hold).
_HOT_KEYS = frozenset({
    "dedupe_key", "stage", "result", "traceback", "cancel_requested", "timeout", "attempt_history", "leased_at", "group",
})  # fmt: skip
#: Records that may leave a READY job READY without indexing it again.
#: Records that never give a lease something to take, where no limit is set (with one, an ack
#: or a dead job frees a slot): they take jobs away, or touch leased ones only.
_NEVER_ENABLES = frozenset({
    RecordType.LEASE, RecordType.ACK, RecordType.DEAD, RecordType.EXTEND, RecordType.STAGE, RecordType.PAUSE,
    RecordType.CANCEL, RecordType.DELETE,
})  # fmt: skip
_KEEPS_READY = frozenset({RecordType.EXTEND, RecordType.STAGE})  # (a CANCEL mark never meets a ready job)
#: Records about the queue rather than one job (QueueState._apply_to_queue).
_QUEUE_TYPES = frozenset(
    {RecordType.PURGE, *schedule_records.SCHEDULE_TYPES, *control_records.PAUSE_TYPES, *limit_records.LIMIT_TYPES}
)
