"""The queue as a pure state machine: records in, state out.

Owns: Entry (one job's in-memory record), QueueState (every job plus the
indexes that make lease/stats cheap) and ``apply``, which folds one decoded
record into the state. Imports: errors, jobs, framing.

Invariant 2 of the design lives here: nothing in this module reads the clock,
draws a random number or makes an id. Every such value arrives inside a
record, chosen once by the writer. Replaying the same bytes always yields the
same state, which is what lets the tests cut a log at every byte and compare.

The payload is not kept in memory: an Entry remembers the file offset of the
record that holds it, and the storage reads it back when a caller needs it.

Indexes (lazy: stale heap items are skipped when popped, never searched for):
  ready[kind]  heap of (-priority, seq, id)   jobs runnable now
  delayed      heap of (available_at, seq, id) ready jobs whose time has not come
  leases       heap of (deadline, seq, id)     leased jobs, for reclaiming
  active_keys  (kind, dedupe_key) -> id        for ready/leased jobs only
"""

from __future__ import annotations

import heapq
from typing import Any

from .framing import RecordType
from .jobs import DEFAULT_KIND, Job, JobState, QueueStats

READY, LEASED, DONE, DEAD = JobState.READY, JobState.LEASED, JobState.DONE, JobState.DEAD

# Where an Entry sits among the heaps (the heap item itself may be stale).
_NOWHERE, _IN_READY, _IN_DELAYED = 0, 1, 2


class Entry:
    """One job's fields, minus its payload (``offset`` says where that lives)."""

    __slots__ = (
        "id", "priority", "state", "attempts", "max_attempts", "available_at", "enqueued_at",
        "lease_deadline", "lease_token", "last_error", "seq", "kind", "dedupe_key", "stage",
        "result", "offset", "heap",
    )  # fmt: skip

    def __init__(self, body: dict[str, Any], offset: int) -> None:
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
        self.offset = offset
        self.heap = _NOWHERE
        if not (
            type(self.id) is str and type(self.priority) is int and type(self.attempts) is int
            and type(self.max_attempts) is int and type(self.seq) is int and type(self.kind) is str
            and type(self.enqueued_at) in _NUMBERS and type(self.available_at) in _NUMBERS
            and self.state is not None
            and (self.lease_deadline is None or type(self.lease_deadline) in _NUMBERS)
            and (self.dedupe_key is None or type(self.dedupe_key) is str)
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
        if body.get("dedupe_key") is not None:
            _text(body["dedupe_key"], "dedupe_key")
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
        self.seq, self.kind, self.dedupe_key, self.offset, self.heap = seq, kind, dedupe_key, offset, _NOWHERE
        return self

    def to_job(self, payload: Any) -> Job:
        # Positional, in Job's field order: measurably cheaper than keywords, and
        # enqueue_many builds one Job per job.
        return Job(
            self.id, payload, self.priority, self.state, self.attempts, self.max_attempts,
            self.available_at, self.enqueued_at, self.lease_deadline, self.lease_token,
            self.last_error, self.seq, self.kind, self.dedupe_key, self.stage, self.result,
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


class QueueState:
    """Every job the log holds, and the indexes derived from them."""

    def __init__(self) -> None:
        self.jobs: dict[str, Entry] = {}
        self.ready: dict[str, list[tuple[int, int, str]]] = {}
        self.delayed: list[tuple[float, int, str]] = []
        self.leases: list[tuple[float, int, str]] = []
        self.active_keys: dict[tuple[str, str], str] = {}
        self.counts: dict[JobState, int] = {READY: 0, LEASED: 0, DONE: 0, DEAD: 0}
        self.n_delayed = 0
        self.next_seq = 1
        self.records = 0
        #: Records that named a job the state does not hold; a sound log has none.
        self.anomalies = 0
        #: Bytes of records whose information is superseded; compaction reclaims them.
        self.live_records = 0

    # ------------------------------------------------------------ apply
    def apply(self, rtype: int, body: dict[str, Any], offset: int) -> None:
        """Fold one record into the state. ``offset`` is where the record starts."""
        self.records += 1
        if rtype == RecordType.ENQUEUE:
            self._enqueue(body, offset)
            return
        if rtype == RecordType.PURGE:
            self.clear()
            return
        entry = self.jobs.get(body.get("id"))  # type: ignore[arg-type]
        if entry is None:
            self.anomalies += 1
            return
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
            self._make_ready(entry, available_at, at)
        elif rtype == RecordType.RECLAIM:
            self._make_ready(entry, _time(body["available_at"], "available_at"), _time(body["at"], "at"))
        elif rtype == RecordType.DEAD:
            entry.last_error = body.get("error", entry.last_error)
            self._set_state(entry, DEAD)
        elif rtype == RecordType.REQUEUE:
            available_at, at = _time(body["available_at"], "available_at"), _time(body["at"], "at")
            entry.attempts = 0
            self._make_ready(entry, available_at, at)
        elif rtype == RecordType.EXTEND:
            entry.lease_deadline = _time(body["deadline"], "deadline")
            heapq.heappush(self.leases, (entry.lease_deadline, entry.seq, entry.id))
        elif rtype == RecordType.STAGE:
            entry.stage = body.get("stage")

    def _enqueue(self, body: dict[str, Any], offset: int) -> None:
        self.add(Entry(body, offset))

    def add(self, entry: Entry) -> None:
        """Index a job that an ENQUEUE record introduced."""
        old = self.jobs.get(entry.id)
        if old is not None:  # a sound writer never repeats an id; last one wins
            self.anomalies += 1
            self._set_state(old, DONE)
            self.counts[DONE] -= 1
            del self.jobs[old.id]
        self.jobs[entry.id] = entry
        self.counts[entry.state] += 1
        if entry.seq >= self.next_seq:
            self.next_seq = entry.seq + 1
        if entry.state is READY:
            self._push_ready(entry, entry.enqueued_at)
        elif entry.state is LEASED and entry.lease_deadline is not None:
            heapq.heappush(self.leases, (entry.lease_deadline, entry.seq, entry.id))
        if entry.dedupe_key is not None and entry.state in (READY, LEASED):
            self.active_keys.setdefault((entry.kind, entry.dedupe_key), entry.id)

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
        if entry.heap == _IN_DELAYED:
            self.n_delayed -= 1
        entry.heap = _NOWHERE
        if state is not LEASED:
            entry.lease_deadline = None
            if state is not DONE:  # a done job keeps the token that finished it: a repeat ack is harmless
                entry.lease_token = None
        if state in (DONE, DEAD) and entry.dedupe_key is not None:
            key = (entry.kind, entry.dedupe_key)
            if self.active_keys.get(key) == entry.id:
                del self.active_keys[key]
        self.counts[old] -= 1
        self.counts[state] += 1
        entry.state = state

    def clear(self) -> None:
        next_seq, records = self.next_seq, self.records
        self.__init__()  # type: ignore[misc]
        self.next_seq, self.records = next_seq, records

    # ------------------------------------------------------------ queries (writer side)
    def promote(self, now: float) -> None:
        """Move delayed jobs whose time has come into the ready heaps."""
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            available_at, _seq, job_id = heapq.heappop(delayed)
            entry = self.jobs.get(job_id)
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
                    entry = self.jobs.get(heap[0][2])
                    if entry is not None and entry.heap == _IN_READY and entry.seq == heap[0][1]:
                        break
                    heapq.heappop(heap)  # stale
                if heap and (best_heap is None or heap[0] < best_heap[0]):
                    best_heap = heap
            if best_heap is None:
                return None
            entry = self.jobs[heapq.heappop(best_heap)[2]]
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
        leases, jobs = self.leases, self.jobs
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
        c = self.counts
        return QueueStats(
            ready=c[READY] - self.n_delayed, delayed=self.n_delayed, leased=c[LEASED], done=c[DONE], dead=c[DEAD]
        )

    def __len__(self) -> int:
        return len(self.jobs)
