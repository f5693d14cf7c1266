"""One job as the file storage keeps it in memory, and the checks of a record's fields.

Owns: Entry (a job's fields minus its payload: ``offset`` says which record
holds that), the job states under their short names, where an Entry sits
among the state's heaps (NOWHERE, IN_READY, IN_DELAYED), and the checks that
turn a field of the wrong type into a TypeError naming it (``check_int``,
``check_time``, ``check_text``, ``check_traceback``). Imports: jobs.

A record with a valid checksum may still hold nonsense (a hand-edited log,
a bug elsewhere): replay refuses it with the field's name rather than keep a
job whose attempts are a string.
"""

from __future__ import annotations

from typing import Any

from ..jobs import DEFAULT_KIND, MAX_ATTEMPT_HISTORY, Job, JobState, attempt_history

READY, LEASED, DONE, DEAD = JobState.READY, JobState.LEASED, JobState.DONE, JobState.DEAD
CANCELLED = JobState.CANCELLED
#: The states whose jobs a compaction drops (done, and cancelled: kept as done is).
DROPPED = frozenset({DONE, CANCELLED})
#: Where an Entry sits among the state's heaps (the heap item itself may be stale).
NOWHERE, IN_READY, IN_DELAYED = 0, 1, 2
#: What an ENQUEUE body without "max_attempts" means: every reader's default (nobroker 0.1.2's
#: Job.from_dict, replay's fast path, the playground), so a new job's writer leaves it out at this.
READ_MAX_ATTEMPTS = 5
#: The job states by their text in a record.
STATES = {s.value: s for s in JobState}
_NUMBERS = frozenset({int, float})
#: An attempt that ended before its deadline, by the job's new state (READY: it failed, for a retry).
_ENDED_AS = {DONE: "done", DEAD: "dead", CANCELLED: "cancelled"}


class Entry:
    """One job's fields, minus its payload (``offset`` says where that lives)."""

    __slots__ = (
        "id", "priority", "state", "attempts", "max_attempts", "available_at", "enqueued_at",
        "lease_deadline", "lease_token", "last_error", "seq", "kind", "dedupe_key", "stage",
        "result", "offset", "size", "heap", "row", "finished_token", "traceback", "cancel_requested",
        "timeout", "history", "leased_by", "leased_at", "group",
    )  # fmt: skip

    def __init__(self, body: dict[str, Any], offset: int, size: int = 0) -> None:
        """The job an ENQUEUE record's decoded ``body`` describes (the record's decoder)."""
        # The hot loop of opening a queue: one call per ENQUEUE record, so the
        # type checks are inlined and the slow, explaining path runs only on a miss.
        get = body.get
        self.id: str = body["id"]
        self.priority: int = get("priority", 0)
        self.attempts: int = get("attempts", 0)
        self.max_attempts: int = get("max_attempts", READ_MAX_ATTEMPTS)
        self.seq: int = get("seq", 0)
        self.enqueued_at: float = get("enqueued_at", 0.0)
        # Left out when equal (format version 4); equal times share one float object: no delay is the common case.
        available_at = get("available_at", self.enqueued_at)
        self.available_at: float = self.enqueued_at if available_at == self.enqueued_at else available_at
        self.kind: str = get("kind", DEFAULT_KIND)
        self.state: JobState = STATES.get(get("state", "ready"))  # type: ignore[assignment]
        self.lease_deadline: float | None = get("lease_deadline")
        self.lease_token: Any = get("lease_token")
        self.last_error: str | None = get("last_error")
        self.dedupe_key: str | None = get("dedupe_key")
        self.stage: str | None = get("stage")
        self.result: Any = get("result")
        # The token of the lease that finished a done job (see QueueState._set_state); a done
        # job's own lease_token is None, except in a hand-made body that says otherwise.
        self.finished_token: Any = self.lease_token if self.state is DONE else None
        self.traceback: str | None = get("traceback")
        self.cancel_requested: bool = get("cancel_requested", False) is True
        self.timeout: float | None = get("timeout")
        # Attempts that ended ([attempt, started, finished, by, outcome] each), and who leased
        # the running one when (a compaction writes them; a LEASE record sets the lease's).
        self.history: list[Any] | None = get("attempt_history")
        self.leased_by: str | None = get("leased_by")
        self.leased_at: float | None = get("leased_at")
        self.group: str | None = get("group")  # None for a job without one (a cold row never has one)
        self.offset = offset
        self.size = size  # bytes of the framed ENQUEUE record at ``offset``
        self.heap = NOWHERE
        self.row = -1
        if not (
            type(self.id) is str and type(self.priority) is int and type(self.attempts) is int
            and type(self.max_attempts) is int and type(self.seq) is int and type(self.kind) is str
            and type(self.enqueued_at) in _NUMBERS and type(self.available_at) in _NUMBERS
            and self.state is not None
            and (self.lease_deadline is None or type(self.lease_deadline) in _NUMBERS)
            and (self.dedupe_key is None or type(self.dedupe_key) is str)
            and (self.traceback is None or type(self.traceback) is str)
            and (self.timeout is None or type(self.timeout) in _NUMBERS)
            and (self.history is None or type(self.history) is list)
            and (self.leased_at is None or type(self.leased_at) in _NUMBERS)
            and (self.group is None or type(self.group) is str)
        ):  # fmt: skip
            self._explain(body)

    @staticmethod
    def _explain(body: dict[str, Any]) -> None:
        """Raise a TypeError naming the first field of an ENQUEUE body with the wrong type."""
        check_text(body["id"], "id")
        for name in ("priority", "attempts", "max_attempts", "seq"):
            if name in body:
                check_int(body[name], name)
        for name in ("enqueued_at", "available_at"):
            if name in body:
                check_time(body[name], name)
        if body.get("attempt_history") is not None and type(body["attempt_history"]) is not list:
            raise TypeError(f"field attempt_history is {body['attempt_history']!r}, expected a list")
        for name in ("lease_deadline", "timeout", "leased_at"):
            if body.get(name) is not None:
                check_time(body[name], name)
        check_text(body.get("kind", DEFAULT_KIND), "kind")
        for name in ("dedupe_key", "traceback", "group"):
            if body.get(name) is not None:
                check_text(body[name], name)
        raise ValueError(f"field state is {body.get('state')!r}, expected one of ready, leased, done, dead, cancelled")

    @classmethod
    def of_slots(cls, values: list[Any]) -> Entry:
        """An Entry whose slots, in ``__slots__``'s order, hold ``values`` (a snapshot's, as they are).

        One unpacking, not a setattr per slot: twelve times faster, and a
        snapshot of a queue with many finished jobs holds hundreds of
        thousands of them. The order is checked once, below the class.
        """
        self = cls.__new__(cls)
        (
            self.id, self.priority, self.state, self.attempts, self.max_attempts, self.available_at,
            self.enqueued_at, self.lease_deadline, self.lease_token, self.last_error, self.seq, self.kind,
            self.dedupe_key, self.stage, self.result, self.offset, self.size, self.heap, self.row,
            self.finished_token, self.traceback, self.cancel_requested, self.timeout, self.history,
            self.leased_by, self.leased_at, self.group,
        ) = values  # fmt: skip
        return self

    @classmethod
    def fresh(
        cls, job_id: str, priority: int, max_attempts: int, available_at: float, enqueued_at: float,
        seq: int, kind: str, dedupe_key: str | None, offset: int, timeout: float | None = None,
        group: str | None = None,
    ) -> Entry:  # fmt: skip
        """A just-enqueued job, built from values instead of a decoded body (the writer's fast path)."""
        self = cls.__new__(cls)
        self.id, self.priority, self.state, self.attempts = job_id, priority, READY, 0
        self.max_attempts, self.available_at, self.enqueued_at = max_attempts, available_at, enqueued_at
        self.lease_deadline = self.lease_token = self.last_error = self.stage = self.result = None
        self.finished_token = self.traceback = None
        self.cancel_requested = False
        self.timeout = timeout
        self.history = self.leased_by = self.leased_at = None
        self.group = group
        self.seq, self.kind, self.dedupe_key, self.offset, self.heap = seq, kind, dedupe_key, offset, NOWHERE
        self.size, self.row = 0, -1  # the writer sets the size once the record is framed
        return self

    def to_job(self, payload: Any) -> Job:
        # Positional, in Job's field order: measurably cheaper than keywords, and
        # enqueue_many builds one Job per job.
        return Job(
            self.id, payload, self.priority, self.state, self.attempts, self.max_attempts,
            self.available_at, self.enqueued_at, self.lease_deadline, self.lease_token,
            self.last_error, self.seq, self.kind, self.dedupe_key, self.stage, self.result, self.traceback,
            self.cancel_requested, self.timeout,
            attempt_history(self.history, self.running_attempt()) if self.history or self.leased_at is not None else (),
            self.group,
        )  # fmt: skip

    def running_attempt(self) -> list[Any] | None:
        """The attempt that runs now, as a history row (None unless leased with its start known)."""
        if self.state is not LEASED or self.leased_at is None:
            return None
        return [self.attempts, self.leased_at, None, self.leased_by, "running"]

    def ended_attempt(self, at: Any, deadline: float, state: JobState, ended_as: str | None = None) -> list[Any]:
        """The running attempt as a history row, ended at ``at`` with the job now in ``state``.

        ``ended_as`` names an ending the state does not tell (a snooze: "snoozed").

        Past the lease's ``deadline`` it expired (its worker went away): it
        finished at the deadline, whatever wrote it down later.
        """
        expired = type(at) not in _NUMBERS or at >= deadline
        outcome = "cancelled" if state is CANCELLED else "expired" if expired else ended_as or _ENDED_AS.get(state, "failed")
        return [self.attempts, self.leased_at, deadline if expired else at, self.leased_by, outcome]

    def end_attempt(self, at: Any, deadline: float, ended_as: str | None = None) -> None:
        """The running attempt ended (a record at ``at`` left the job in its new state): into its history."""
        if self.leased_at is None:
            return
        row, history = self.ended_attempt(at, deadline, self.state, ended_as), self.history
        self.history = [*history[1 - MAX_ATTEMPT_HISTORY :], row] if history else [row]
        self.leased_at = self.leased_by = None


#: An Entry with no field set, for code that fills every slot itself (the cold rows, snapshots).
new_entry = Entry.__new__
_probe = Entry.of_slots(list(Entry.__slots__))
assert all(getattr(_probe, name) == name for name in Entry.__slots__), "of_slots fills the slots in their order"
del _probe


def check_int(value: Any, name: str) -> int:
    if type(value) is not int:
        raise TypeError(f"field {name} is {value!r}, expected an integer")
    return value


def check_time(value: Any, name: str) -> float:
    if type(value) is not float and type(value) is not int:
        raise TypeError(f"field {name} is {value!r}, expected a number of seconds")
    return value


def check_text(value: Any, name: str) -> str:
    if type(value) is not str:
        raise TypeError(f"field {name} is {value!r}, expected a string")
    return value


def check_traceback(body: dict[str, Any]) -> str | None:
    value = body.get("traceback")
    return None if value is None else check_text(value, "traceback")
