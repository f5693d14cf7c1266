"""The data model both storages share: jobs, states, stats, policies, limits.

Owns: Job, JobState, QueueStats, BackoffPolicy, RecoveryReport,
CompactionResult, and the named limits. Imports: nothing from nobroker. The
JSON codec every stored value goes through lives beside it, in codec.py.

Nothing here touches a file or a clock; values are plain data.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
import threading
from dataclasses import dataclass
from typing import Any



# ---------------------------------------------------------------- limits
#: Largest record body (compact JSON) the file storage writes or reads.
#: A length field above it is damage, so a reader never allocates more.
MAX_RECORD_BYTES = 16 * 1024 * 1024
#: Deepest nesting of arrays and objects in a payload or a result (``[[1]]`` is 2).
#: Far below the interpreter's recursion limit (1,000 frames), so whatever holds a
#: stored value (a record, a snapshot: a few levels more) always decodes again.
MAX_JSON_DEPTH = 100
#: Largest result stored with an ack, and largest error text kept with a nack.
MAX_RESULT_BYTES = 1024 * 1024
MAX_ERROR_CHARS = 8 * 1024
#: A failed attempt's traceback keeps its last this many characters (its end names the error).
MAX_TRACEBACK_CHARS = 16 * 1024
#: Most jobs one enqueue_many call takes, and most one lease call returns.
MAX_BATCH_JOBS = 100_000
#: Longest job id, kind, dedupe key and stage (characters).
MAX_ID_CHARS = 256
MAX_NAME_CHARS = 256
#: Priorities are 32-bit signed integers so both storages order them the same.
MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1
#: Longest delay, visibility timeout or extension: about 10 years.
MAX_SECONDS = 10 * 365 * 24 * 3600.0
#: Most attempts a job may be given.
MAX_ATTEMPTS_LIMIT = 1_000_000
#: Bytes one character can take as ASCII-only JSON: an astral one (an emoji) is two escapes,
#: ``\ud83d\ude00``; a lone surrogate or any other non-ASCII character takes 6.
MAX_ESCAPED_CHAR_BYTES = 12
#: Room in a job's record for its field names, numbers and lease token (they take under 1 KiB).
RECORD_FIXED_BYTES = 4 * 1024
#: Attempts a job remembers (its ``attempt_history``): the last this many, oldest first.
MAX_ATTEMPT_HISTORY = 20
#: Longest worker label ("host:pid") kept with an attempt; an ASCII-only label (worker_label).
MAX_WORKER_CHARS = 64
#: The most one remembered attempt takes in a record: ``[n,started,finished,"<label>","cancelled"],``.
ATTEMPT_RECORD_BYTES = 192
#: The most a job's record can hold besides its payload, whichever writer writes it (an
#: enqueue, compaction, repair): the id, kind, dedupe key, stage, error text and traceback
#: at their longest, every character in its costliest escape, and the result at its limit.
RECORD_FIELDS_BYTES = (
    (MAX_ID_CHARS + 3 * MAX_NAME_CHARS + MAX_ERROR_CHARS + MAX_TRACEBACK_CHARS) * MAX_ESCAPED_CHAR_BYTES
    + MAX_RESULT_BYTES + RECORD_FIXED_BYTES + MAX_ATTEMPT_HISTORY * ATTEMPT_RECORD_BYTES
)
#: Largest payload, as compact JSON: what a record leaves once every other field is at its
#: limit, so whatever each operation accepts, the job's record always fits (15,413,504).
MAX_PAYLOAD_BYTES = MAX_RECORD_BYTES - RECORD_FIELDS_BYTES

DEFAULT_KIND = "default"
#: What list_jobs lists (besides every job): the jobs of one state, or of one
#: half of ready: ``runnable`` now or ``delayed`` (what stats() counts as ready
#: and as delayed). ``ready`` is both halves, as in nobroker 0.1.2.
LISTINGS = ("ready", "runnable", "delayed", "leased", "done", "dead", "cancelled")


def finite_float(value: object) -> float | None:
    """``value`` as a finite float; None for a bool, a non-number, NaN, ±inf or an int past float range.

    Never raises: ``float(10**400)`` raises OverflowError, and a check that
    converts before it compares would let that escape instead of a ValueError.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def shown(value: object, limit: int = 40) -> str:
    """``repr(value)`` for an error message, cut short (a 400-digit number is no help there)."""
    try:
        text = repr(value)
    except ValueError:  # an int past the interpreter's int-to-text limit
        return f"an int of about {int.bit_length(value) * 0.30103:.0f} digits" if isinstance(value, int) else "?"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class JobState(str, enum.Enum):
    """Where a job is in its life: ready → leased → done, or dead (the DLQ), or cancelled.

    DONE, DEAD and CANCELLED are final. A cancelled job is kept as a done one
    is (until compaction or pruning drops it) and never runs again.
    """

    READY = "ready"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


@dataclass
class Job:
    """One unit of work, as the queue last recorded it.

    A Job is a snapshot: changing its fields changes nothing in the queue.
    ``lease_token`` is the fencing token of the lease you hold; pass the Job
    (not its id) to ack/nack/extend so a stale lease is refused.
    """

    id: str
    payload: Any
    priority: int = 0
    state: JobState = JobState.READY
    attempts: int = 0
    max_attempts: int = 5
    available_at: float = 0.0
    enqueued_at: float = 0.0
    lease_deadline: float | None = None
    lease_token: str | None = None
    last_error: str | None = None
    seq: int = 0
    kind: str = DEFAULT_KIND
    dedupe_key: str | None = None
    stage: str | None = None
    result: Any = None
    #: The traceback of the failure that ``last_error`` names, when the Worker
    #: (or a nack with ``traceback=``) recorded one: its last MAX_TRACEBACK_CHARS.
    traceback: str | None = None
    #: A leased job that ``cancel`` was asked for: its lease ends cancelled (its ack
    #: and nack are refused), and the Worker sets ``cancelled`` for the handler.
    cancel_requested: bool = False
    #: The job's own time limit in seconds (``enqueue(..., timeout=)``): a Worker fails an
    #: attempt that runs longer. None: the Worker's ``timeout``, if it has one.
    timeout: float | None = None
    #: Its last MAX_ATTEMPT_HISTORY attempts, oldest first, each a dict: ``attempt`` (its number),
    #: ``started`` and ``finished`` (epoch seconds; finished None while it runs), ``seconds``,
    #: ``by`` (the leasing worker, "host:pid") and ``outcome`` (running, done, failed, dead,
    #: expired, cancelled, snoozed).
    attempt_history: tuple[dict[str, Any], ...] = ()
    #: The job's group (``enqueue(..., group=)``: a tenant, a customer), which a kind's
    #: group_concurrency and fair share count by; None: it has none.
    group: str | None = None

    @property
    def cancelled(self) -> CancelFlag:
        """A flag a running handler can check (``if job.cancelled: ...``, ``job.cancelled.wait(1)``).

        The Worker sets it when its heartbeat learns that the job was
        cancelled; it is this Job object's own (a copy starts unset).
        """
        flag: CancelFlag | None = self.__dict__.get("_cancel_flag")
        if flag is None:
            flag = self.__dict__.setdefault("_cancel_flag", CancelFlag())
            if self.cancel_requested:
                flag.set()
        return flag

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (state as its string value).

        ``cancel_requested`` only when true, ``timeout`` and ``group`` only when set: a job
        that uses neither keeps the shape of nobroker 0.1.2 and 0.2 (the log's
        newer fields work the same way).
        """
        out = dataclasses.asdict(self)
        out["state"] = self.state.value
        if not self.cancel_requested:
            del out["cancel_requested"]
        if self.timeout is None:
            del out["timeout"]
        if self.group is None:
            del out["group"]
        if self.attempt_history:
            out["attempt_history"] = [dict(attempt) for attempt in self.attempt_history]
        else:
            del out["attempt_history"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        """The Job a ``to_dict()`` dict describes (keys it does not know are ignored; missing ones take defaults)."""
        known = {name: data[name] for name in _JOB_FIELDS if name in data}
        known["state"] = JobState(known.get("state", JobState.READY))
        for name in ("priority", "attempts", "max_attempts", "seq"):
            if name in known:
                known[name] = int(known[name])
        for name in ("available_at", "enqueued_at"):
            if name in known:
                known[name] = float(known[name])
        if known.get("timeout") is not None:
            known["timeout"] = float(known["timeout"])
        known["attempt_history"] = tuple(dict(attempt) for attempt in known.get("attempt_history") or ())
        return cls(**known)

    def snapshot(self) -> Job:
        """A copy of this Job (it is a snapshot already: the queue never changes a Job it returned)."""
        return dataclasses.replace(self)

    def is_eligible(self, now: float) -> bool:
        """Could a lease at time ``now`` take this job (ready, and its ``available_at`` has come)?"""
        return self.state is JobState.READY and self.available_at <= now


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
#: An attempt as both storages keep it: [attempt, started, finished, by, outcome].
AttemptRow = list[Any]


def attempt_view(row: AttemptRow) -> dict[str, Any]:
    """One remembered attempt (a stored row) as Job.attempt_history shows it."""
    attempt, started, finished, by, outcome = row
    seconds = None if finished is None or started is None else round(max(finished - started, 0.0), 6)
    return {"attempt": attempt, "started": started, "finished": finished, "seconds": seconds, "by": by, "outcome": outcome}


def attempt_history(rows: Any, running: AttemptRow | None) -> tuple[dict[str, Any], ...]:
    """The attempts a job shows: its stored rows (a list, or None), then the one that runs now, if any."""
    shown = [attempt_view(row) for row in rows or ()]
    if running is not None:
        shown.append(attempt_view(running))
    return tuple(shown[-MAX_ATTEMPT_HISTORY:])
#: The final states: a job in one of them never runs again.
FINISHED_STATES = frozenset({JobState.DONE, JobState.DEAD, JobState.CANCELLED})


class CancelFlag(threading.Event):
    """``job.cancelled``: an Event that is also true once set (``if job.cancelled``)."""

    def __bool__(self) -> bool:
        return self.is_set()


@dataclass(frozen=True)
class QueueStats:
    """Counts by state. ``ready`` is runnable now; ``delayed`` is ready later."""

    ready: int = 0
    delayed: int = 0
    leased: int = 0
    done: int = 0
    dead: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        return self.ready + self.delayed + self.leased + self.done + self.dead + self.cancelled

    def to_dict(self) -> dict[str, int]:
        """The counts and their total; ``cancelled`` only when some job is (0.1.2's shape otherwise)."""
        out = {"ready": self.ready, "delayed": self.delayed, "leased": self.leased, "done": self.done, "dead": self.dead}
        if self.cancelled:
            out["cancelled"] = self.cancelled
        out["total"] = self.total
        return out


#: The counters a queue keeps per kind (``Queue.counters()``), in the order the storages store them:
#: jobs enqueued; attempts that succeeded, that failed and will be retried (a nack, or an
#: expired lease, back to ready), that ended dead; jobs cancelled. They only grow: compaction,
#: purge, requeue and restarts never lower them.
COUNTER_NAMES = ("enqueued", "succeeded", "failed", "dead", "cancelled")
#: Counters by kind: ``{kind: {"enqueued": n, "succeeded": n, ...}}``.
Counters = dict[str, dict[str, int]]


@dataclass(frozen=True)
class BackoffPolicy:
    """Retry delay: ``min(base * factor**(attempts-1), max_delay)``, then jitter.

    ``jitter`` is the fraction of that delay drawn at random: 0.5 means the
    delay lands uniformly in [0.5 d, d]. The writer draws it once and records
    the resulting absolute time, so replay never sees randomness. A job that
    has not failed yet (``attempts <= 0``) waits 0.

    Refused with ValueError, as nobroker 0.1.2 refused them: ``base < 0``,
    ``factor < 1`` (delays that shrink) and ``jitter`` outside [0, 1]; and
    beyond 0.1.2, any value that is not a finite number, and ``max_delay < 0``.
    """

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        for name in ("base", "factor", "max_delay", "jitter"):
            value = getattr(self, name)
            if finite_float(value) is None or value < 0:
                raise ValueError(f"BackoffPolicy.{name} must be a finite number >= 0, got {shown(value)}")
        if self.factor < 1:
            raise ValueError(f"BackoffPolicy.factor must be >= 1 (each retry waits at least as long), got {self.factor!r}")
        if self.jitter > 1:
            raise ValueError(f"BackoffPolicy.jitter is a fraction between 0 and 1, got {self.jitter!r}")

    def nominal_delay(self, attempts: int) -> float:
        """The delay before jitter: the longest ``delay_for(attempts)`` can return."""
        if attempts <= 0 or self.base == 0:
            return 0.0
        try:
            raw = self.base * (self.factor ** (attempts - 1))
        except OverflowError:
            raw = self.max_delay
        return min(raw, self.max_delay)

    def delay_for(self, attempts: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``attempts`` (1 = after the first failure; 0 or less: 0)."""
        delay = self.nominal_delay(attempts)
        if self.jitter and delay:
            draw = (rng or random).random()
            delay = delay * (1.0 - self.jitter * draw)
        return delay


class Damage(str, enum.Enum):
    """Why the last record of a log was cut off when it was opened (nobroker 0.1.2's values)."""

    NONE = "none"
    TRUNCATED_HEADER = "truncated record header"
    TRUNCATED_BODY = "truncated record body"
    BAD_CHECKSUM = "checksum mismatch"
    OVERSIZE = "record length exceeds maximum"
    UNKNOWN_TYPE = "unknown record type"


#: Bytes of the file header in front of a log's first record (framing.HEADER_SIZE;
#: this module may not import framing).
_LOG_HEADER_BYTES = 16


@dataclass(frozen=True)
class RecoveryReport:
    """What opening the queue found on disk.

    ``records`` (also ``records_applied``, its name in nobroker 0.1.2) the state
    was built from; ``bytes_read``: the log's size up to its last whole record;
    ``torn_bytes`` (``bytes_discarded``): a torn tail cut off, and ``damage``
    what was wrong with it; ``orphan_records``: records that named a job the
    queue did not hold (a sound log has none).
    """

    generation: int = 0
    records: int = 0
    bytes_read: int = 0
    torn_bytes: int = 0
    jobs: int = 0
    elapsed: float = 0.0
    damage: Damage = Damage.NONE
    orphan_records: int = 0

    @property
    def clean(self) -> bool:
        """True when no torn tail had to be cut off."""
        return self.torn_bytes == 0

    @property
    def repaired(self) -> bool:
        """True when a torn tail was cut off (the opposite of ``clean``)."""
        return self.torn_bytes > 0

    @property
    def records_applied(self) -> int:
        return self.records

    @property
    def bytes_scanned(self) -> int:
        """Bytes of records the state was built from (the log after its 16-byte header)."""
        return max(self.bytes_read - _LOG_HEADER_BYTES, 0)

    @property
    def bytes_discarded(self) -> int:
        return self.torn_bytes

    def describe(self) -> str:
        """One line for people and logs."""
        if not self.repaired:
            return f"clean: {self.records} records, {self.bytes_scanned} bytes"
        return (
            f"repaired: {self.records} records applied, {self.torn_bytes} bytes discarded from the tail "
            f"({self.damage.value})"
        )


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction did."""

    old_generation: int = 0
    new_generation: int = 0
    jobs_kept: int = 0
    jobs_dropped: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    elapsed: float = 0.0
    #: Longest time (seconds) the compaction held the queue's lock at once: how
    #: long it could make another process wait. 0.0 where it does not apply.
    lock_held: float = 0.0

    @property
    def bytes_reclaimed(self) -> int:
        """How much smaller the log became (0 where the storage has no log: PostgreSQL)."""
        return self.bytes_before - self.bytes_after

    def describe(self) -> str:
        """One line for people and logs."""
        share = 100.0 * self.bytes_reclaimed / self.bytes_before if self.bytes_before else 0.0
        return (
            f"compacted {self.bytes_before} -> {self.bytes_after} bytes ({share:.1f}% reclaimed), "
            f"kept {self.jobs_kept} jobs, dropped {self.jobs_dropped} completed"
        )


__all__ = [
    "Job",
    "JobState",
    "CancelFlag",
    "FINISHED_STATES",
    "QueueStats",
    "BackoffPolicy",
    "RecoveryReport",
    "CompactionResult",
    "Damage",
    "MAX_RECORD_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_ATTEMPT_HISTORY",
    "MAX_BATCH_JOBS",
    "MAX_JSON_DEPTH",
    "DEFAULT_KIND",
    "LISTINGS",
]
