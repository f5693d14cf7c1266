"""The data model both storages share: jobs, states, stats, policies, limits.

Owns: Job, JobState, QueueStats, BackoffPolicy, RecoveryReport,
CompactionResult, the named limits, and the JSON codec every stored value
goes through (the encoder, its nesting limit, and a decoder that never
depends on the caller's stack depth). Imports: errors.

Nothing here touches a file or a clock; values are plain data.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import random
import _thread
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, TypeVar

from .errors import SerializationError

T = TypeVar("T")

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
#: The most a job's record can hold besides its payload, whichever writer writes it (an
#: enqueue, compaction, repair): the id, kind, dedupe key, stage, error text and traceback
#: at their longest, every character in its costliest escape, and the result at its limit.
RECORD_FIELDS_BYTES = (
    (MAX_ID_CHARS + 3 * MAX_NAME_CHARS + MAX_ERROR_CHARS + MAX_TRACEBACK_CHARS) * MAX_ESCAPED_CHAR_BYTES
    + MAX_RESULT_BYTES + RECORD_FIXED_BYTES
)
#: Largest payload, as compact JSON: what a record leaves once every other field is at its
#: limit, so whatever each operation accepts, the job's record always fits (15,417,344).
MAX_PAYLOAD_BYTES = MAX_RECORD_BYTES - RECORD_FIELDS_BYTES

DEFAULT_KIND = "default"
#: What list_jobs lists (besides every job): the jobs of one state, or of one
#: half of ready: ``runnable`` now or ``delayed`` (what stats() counts as ready
#: and as delayed). ``ready`` is both halves, as in nobroker 0.1.2.
LISTINGS = ("ready", "runnable", "delayed", "leased", "done", "dead")


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
    """Where a job is in its life: ready → leased → done, or dead (the DLQ)."""

    READY = "ready"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"

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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (state as its string value)."""
        out = dataclasses.asdict(self)
        out["state"] = self.state.value
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
        return cls(**known)

    def snapshot(self) -> Job:
        """A copy of this Job (it is a snapshot already: the queue never changes a Job it returned)."""
        return dataclasses.replace(self)

    def is_eligible(self, now: float) -> bool:
        """Could a lease at time ``now`` take this job (ready, and its ``available_at`` has come)?"""
        return self.state is JobState.READY and self.available_at <= now


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))


@dataclass(frozen=True)
class QueueStats:
    """Counts by state. ``ready`` is runnable now; ``delayed`` is ready later."""

    ready: int = 0
    delayed: int = 0
    leased: int = 0
    done: int = 0
    dead: int = 0

    @property
    def total(self) -> int:
        return self.ready + self.delayed + self.leased + self.done + self.dead

    def to_dict(self) -> dict[str, int]:
        return {
            "ready": self.ready,
            "delayed": self.delayed,
            "leased": self.leased,
            "done": self.done,
            "dead": self.dead,
            "total": self.total,
        }


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


# ---------------------------------------------------------------- JSON
_ENCODER = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"), check_circular=True)
# The C encoder built once, without the per-call setup of JSONEncoder.encode and without
# the circular-reference table: a cycle ends in RecursionError, and the checking encoder
# above then says which it was. Same output byte for byte; None where the C part is missing.
_make_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_FAST_ENCODE = (
    _make_c_encoder(None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)
    if _make_c_encoder is not None
    else None
)


def on_fresh_stack(call: Callable[[], T]) -> T:
    """``call()`` on a thread of its own: the whole recursion limit, whatever the caller's depth.

    For the rare retry after a RecursionError. The C JSON codec spends one
    frame of the caller's budget per level of nesting, so a value that is
    fine at the top of a stack fails inside a deep one; a fresh thread's
    stack holds any value within MAX_JSON_DEPTH.
    """
    # _thread, not threading: starting it takes no Python frames of the caller's budget,
    # which may be nearly spent (that is why we are here).
    outcome: list[Any] = []
    finished = _thread.allocate_lock()
    finished.acquire()

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller, re-raised there
            outcome.append((False, exc))
        finally:
            finished.release()

    _thread.start_new_thread(run, ())
    finished.acquire()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def compact_json(value: Any) -> str:
    """Compact, ASCII-only JSON text; raises what json.dumps raises (TypeError, ValueError, RecursionError).

    Its output never depends on the caller's stack depth (see on_fresh_stack).
    """
    if _FAST_ENCODE is None:
        try:
            return _ENCODER.encode(value)
        except RecursionError:
            return on_fresh_stack(lambda: _ENCODER.encode(value))
    try:
        return "".join(_FAST_ENCODE(value, 0))
    except RecursionError:
        # A cycle, or deep, or only a deep caller: the checking encoder tells a cycle
        # apart, and on a fresh stack the caller's depth no longer counts.
        return on_fresh_stack(lambda: _ENCODER.encode(value))


_decode = json.JSONDecoder().decode


def load_json(text: str) -> Any:
    """The value JSON ``text`` holds (ValueError if it is not JSON), whatever the caller's stack depth.

    RecursionError only for nesting deeper than a fresh stack holds, which
    nothing nobroker encodes ever is.
    """
    try:
        return _decode(text)
    except RecursionError:
        return on_fresh_stack(lambda: _decode(text))


# A nesting level takes two characters of JSON at least ("[" and "]").
_SHALLOW_CHARS = 2 * (MAX_JSON_DEPTH + 1)
# A string in compact ASCII JSON (what compact_json writes), in the unrolled form that is fast on long ones.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of compact JSON ``text`` nest (0 for a scalar)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def _too_deep(text: str) -> bool:
    """Is ``text`` nested deeper than MAX_JSON_DEPTH? Cheap answers first: most payloads are short."""
    if len(text) < _SHALLOW_CHARS or text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False
    return json_depth(text) > MAX_JSON_DEPTH


def dump_json(value: Any, *, what: str = "payload", limit: int = MAX_PAYLOAD_BYTES) -> str:
    """Compact JSON text for ``value``, or SerializationError saying why not.

    ASCII-only on purpose: lone surrogates survive as escapes, and the bytes
    are the same whichever language writes them.
    """
    if isinstance(value, str) and len(value) > limit:
        # Every character is at least one byte of JSON: refuse without a copy of it.
        raise SerializationError(
            f"{what} is a string of {len(value):,} characters; the limit is {limit:,} bytes of JSON. "
            "Store large data elsewhere and enqueue a reference to it."
        )
    try:
        text = compact_json(value)
    except RecursionError:
        text = None
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-serialisable: {exc}") from None
    if text is None or _too_deep(text):
        raise SerializationError(
            f"{what} is nested more than {MAX_JSON_DEPTH} levels deep (arrays and objects); flatten it"
        )
    if len(text) > limit:
        raise SerializationError(
            f"{what} is {len(text):,} bytes as JSON; the limit is {limit:,}. "
            "Store large data elsewhere and enqueue a reference to it."
        )
    return text


class _KeysCollide(ValueError):
    """Two keys of one object that JSON text cannot tell apart (the key is their text)."""


def _distinct_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Our encoder writes each key of a dict once, so a repeated key in its text
    # can only be two keys that became the same string (1 and "1", True and "true").
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _KeysCollide(key)
            seen.add(key)
    return out


_STORED = json.JSONDecoder(object_pairs_hook=_distinct_keys)
#: Values that come back from their JSON text as themselves (exact types only: not subclasses).
_SELF_DECODING = frozenset({str, int, float, bool, type(None)})


def _decode_stored(text: str, what: str) -> Any:
    """The value ``text`` (our own compact JSON) holds, whatever the caller's stack depth (as load_json)."""
    try:
        try:
            return _STORED.decode(text)
        except RecursionError:
            return on_fresh_stack(lambda: _STORED.decode(text))
    except _KeysCollide as exc:
        raise SerializationError(
            f"{what} has two keys that are both {json.dumps(str(exc))} as JSON text (keys become strings: "
            "1 and \"1\", or True and \"true\", collide); make the keys distinct strings"
        ) from None


def stored_json(value: Any, *, what: str = "payload", limit: int = MAX_PAYLOAD_BYTES) -> tuple[str, Any]:
    """(JSON text of ``value``, the value every reader gets back from it): what is stored, exactly.

    The second is decoded from the text, not the caller's object: a tuple
    comes back as a list, a key 1 as "1", and later changes to the caller's
    object change nothing. Keys that collide as text: SerializationError.
    """
    text = dump_json(value, what=what, limit=limit)
    if type(value) in _SELF_DECODING:
        return text, value
    return text, _decode_stored(text, what)


def stored_json_many(values: list[Any], *, what: str = "payload") -> tuple[list[str], list[Any]]:
    """``stored_json`` of every value, decoded in one go (enqueue_many's fast path)."""
    texts = [dump_json(value, what=what) for value in values]
    try:
        return texts, _decode_stored("[" + ",".join(texts) + "]", what)
    except SerializationError:  # one by one, so the error names the payload
        return texts, [stored_json(value, what=f"{what} {i}")[1] for i, value in enumerate(values)]


def check_json(value: Any, *, what: str = "payload", limit: int = MAX_PAYLOAD_BYTES) -> Any:
    """Validate that ``value`` stores as JSON within ``limit``; return it unchanged."""
    dump_json(value, what=what, limit=limit)
    return value


__all__ = [
    "Job",
    "JobState",
    "QueueStats",
    "BackoffPolicy",
    "RecoveryReport",
    "CompactionResult",
    "Damage",
    "dump_json",
    "stored_json",
    "stored_json_many",
    "check_json",
    "MAX_RECORD_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_BATCH_JOBS",
    "MAX_JSON_DEPTH",
    "DEFAULT_KIND",
    "LISTINGS",
]
