"""Limits per kind: what a limit is, and the token bucket's arithmetic, as pure functions of the time.

Owns: Limit (a kind's concurrency and rate limit, as a caller defines it,
checked by ``define``), Bucket (a rate limit's tokens as of a time), the
stored form both storages keep (``to_fields`` and ``from_fields``), the
token bucket (``filled``, ``taken``, ``seconds_to_token``, ``carried``),
``budget`` (how many jobs of a kind one lease may still take), ``spent``
(whether that is none), ``seconds_to_slot`` (the end of an idle wait) and
``holding`` (the text that names the limit holding a job back, for
``explain``); and the fair share between a kind's groups: Turns (the
rotation's state), ``start`` (where a group's next turn starts) and
``turned`` (the rotation after a lease of a group), with its stored form
(``turns_to_fields``, ``turns_from_fields``). Imports: jobs, checks. Pure: no
clock, no I/O; every function takes the time.

The limits hold for the whole queue, not per process: a storage decides
each lease with every lease of the queue in view (the file storage under
its lock, PostgreSQL with the queue's limit rows locked), so

- concurrency N: at most N jobs of the kind are leased at once; a lease that
  expired is reclaimed before the next lease is decided, which frees its
  slot;
- rate R per P seconds with burst B: a bucket of at most B tokens that
  refills at R/P tokens a second; each lease of the kind takes one, and a
  lease that finds less than one takes nothing of that kind. Any window of
  T seconds holds at most ``B + R * T / P`` leases of the kind.

Kinds without a limit, and the other kinds of a lease, are never held back
by a limited one.

Groups (``enqueue(..., group=)``, a tenant or a customer) of a kind whose
limit has ``group_concurrency`` or ``weights``:

- group_concurrency N: at most N jobs of each group of the kind are leased
  at once (jobs without a group are not counted: ``concurrency`` limits them);
- fair share: each lease of the kind goes to the group whose turn starts
  first, start-time fair queueing: a group's turn starts at
  ``max(its pass, clock)``; a lease of the group moves its pass to that
  start plus ``1 / weight`` and the clock to that start (``turned``). Ties go
  to the group whose best job comes first (priority, then age). Over any
  stretch in which groups always have runnable jobs, their leases differ
  from their weights' shares by at most one lease each; a group that was
  idle comes back at the clock, with no credit saved up. Jobs without a
  group are one group of their own (weight 1); priorities order the jobs
  inside a group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import checks
from .jobs import MAX_NAME_CHARS, finite_float

#: Most kinds one queue limits (each lease reads them all).
MAX_LIMITS = 1_000
#: Largest concurrency, rate and burst a limit takes.
MAX_LIMIT_COUNT = 1_000_000
#: Shortest and longest period a rate counts over (seconds).
MIN_PERIOD_SECONDS = 0.001
MAX_PERIOD_SECONDS = 366 * 86_400.0
#: Largest weight of a group (``weights=``), and most groups one limit names.
MAX_WEIGHT = 1_000
MAX_WEIGHTED_GROUPS = 1_000
#: Slack in "at least one token": the bucket's sums in floating point may land a hair below 1.
TOKEN_SLACK = 1e-9


@dataclass(frozen=True)
class Limit:
    """A kind's limits: ``concurrency`` leased at once, ``rate`` leases per ``per`` seconds (``burst`` at once)."""

    kind: str
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None  # None: the rate itself
    group_concurrency: int | None = None
    #: (group, weight) pairs, by group; None: no fair share asked for (unless group_concurrency).
    weights: tuple[tuple[str, int], ...] | None = None

    @property
    def fair(self) -> bool:
        """Does a lease of the kind rotate between its groups (and count them)?"""
        return self.group_concurrency is not None or self.weights is not None

    def weight(self, group: str | None) -> int:
        """A group's weight in the rotation: the one ``weights`` gives it, else 1."""
        if self.weights and group is not None:
            for name, weight in self.weights:
                if name == group:
                    return weight
        return 1

    @property
    def capacity(self) -> int:
        """The bucket's size: ``burst``, or ``rate`` when no burst was given."""
        assert self.rate is not None, "only a rate limit has a bucket"
        return self.burst if self.burst is not None else self.rate

    @property
    def refill(self) -> float:
        """Tokens per second."""
        assert self.rate is not None, "only a rate limit has a bucket"
        return self.rate / self.per

    def to_dict(self) -> dict[str, Any]:
        """Every field; ``group_concurrency`` and ``weights`` only when set (the shape before groups stays)."""
        out: dict[str, Any] = {"kind": self.kind, "concurrency": self.concurrency, "rate": self.rate, "per": self.per,
               "burst": self.burst}  # fmt: skip
        if self.group_concurrency is not None:
            out["group_concurrency"] = self.group_concurrency
        if self.weights is not None:
            out["weights"] = dict(self.weights)
        return out


@dataclass(frozen=True)
class Bucket:
    """A rate limit's tokens as of ``at`` (epoch seconds, the writer's clock)."""

    tokens: float
    at: float


def _count(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int or None, got {type(value).__name__}")
    if not 1 <= value <= MAX_LIMIT_COUNT:
        raise ValueError(f"{what} must be from 1 to {MAX_LIMIT_COUNT:,}, got {value!r}")
    return value


def _weights(weights: Any) -> tuple[tuple[str, int], ...] | None:
    if weights is None:
        return None
    if not isinstance(weights, dict):
        raise TypeError(f"weights must be a dict of group to int weight, got {type(weights).__name__}")
    if len(weights) > MAX_WEIGHTED_GROUPS:
        raise ValueError(f"weights names at most {MAX_WEIGHTED_GROUPS:,} groups, got {len(weights):,}")
    out = []
    for group, weight in weights.items():
        group = checks.text(group, "a group in weights", MAX_NAME_CHARS)
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise TypeError(f"the weight of group {group!r} must be an int, got {type(weight).__name__}")
        if not 1 <= weight <= MAX_WEIGHT:
            raise ValueError(f"the weight of group {group!r} must be from 1 to {MAX_WEIGHT:,}, got {weight!r}")
        out.append((group, weight))
    return tuple(sorted(out))


def define(
    kind: Any, concurrency: Any = None, rate: Any = None, per: Any = 1.0, burst: Any = None,
    group_concurrency: Any = None, weights: Any = None,
) -> Limit:  # fmt: skip
    """The limit as checked: TypeError or ValueError for anything a storage must not store."""
    kind = checks.text(kind, "kind", MAX_NAME_CHARS)
    concurrency = _count(concurrency, "concurrency")
    group_concurrency = _count(group_concurrency, "group_concurrency")
    weighted = _weights(weights)
    rate = _count(rate, "rate")
    burst = _count(burst, "burst")
    if isinstance(per, bool) or not isinstance(per, (int, float)):
        raise TypeError(f"per must be a number of seconds, got {type(per).__name__}")
    period = finite_float(per)
    if period is None or not MIN_PERIOD_SECONDS <= period <= MAX_PERIOD_SECONDS:
        raise ValueError(f"per must be from {MIN_PERIOD_SECONDS:g} to {MAX_PERIOD_SECONDS:g} seconds, got {per!r}")
    if concurrency is None and rate is None and group_concurrency is None and weighted is None:
        raise ValueError(
            "a limit needs concurrency=, rate=, group_concurrency= or weights= (to remove a kind's limit, use clear_limit)"
        )
    if rate is None and burst is not None:
        raise ValueError("burst= goes with rate=: it is how many leases a rate limit lets through at once")
    return Limit(kind, concurrency, rate, period, burst, group_concurrency, weighted)


def to_fields(limit: Limit, bucket: Bucket | None) -> dict[str, Any]:
    """The stored form: the limit, and a rate limit's bucket as of its time."""
    fields = limit.to_dict()
    if bucket is not None:
        fields["tokens"], fields["tokens_at"] = bucket.tokens, bucket.at
    return fields


def from_fields(fields: dict[str, Any]) -> tuple[Limit, Bucket | None]:
    """What ``to_fields`` wrote: KeyError, TypeError or ValueError if it is not a sound limit."""
    limit = define(fields["kind"], fields.get("concurrency"), fields.get("rate"), fields.get("per", 1.0),
                   fields.get("burst"), fields.get("group_concurrency"), fields.get("weights"))  # fmt: skip
    if limit.rate is None:
        return limit, None
    tokens, at = fields["tokens"], fields["tokens_at"]
    for value in (tokens, at):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise TypeError(f"a bucket's tokens and time must be finite numbers, got {value!r}")
    return limit, Bucket(min(float(tokens), float(limit.capacity)), float(at))


# ---------------------------------------------------------------- the token bucket
def filled(limit: Limit, bucket: Bucket, now: float) -> float:
    """The tokens at ``now``: refilled since ``bucket.at``, at most the capacity (a clock behind adds none)."""
    elapsed = now - bucket.at
    if elapsed <= 0:
        return bucket.tokens
    return min(float(limit.capacity), bucket.tokens + elapsed * limit.refill)


def taken(limit: Limit, bucket: Bucket, now: float) -> Bucket:
    """The bucket after one lease at ``now`` (the caller checked ``filled`` gave at least one token)."""
    return Bucket(filled(limit, bucket, now) - 1.0, max(now, bucket.at))


def has_token(limit: Limit, bucket: Bucket, now: float) -> bool:
    return filled(limit, bucket, now) >= 1.0 - TOKEN_SLACK


def seconds_to_token(limit: Limit, bucket: Bucket, now: float) -> float:
    """How long until the bucket holds a whole token (0: it does now)."""
    tokens = filled(limit, bucket, now)
    if tokens >= 1.0 - TOKEN_SLACK:
        return 0.0
    return (1.0 - tokens) / limit.refill + max(bucket.at - now, 0.0)


def carried(limit: Limit, old: tuple[Limit, Bucket | None] | None, now: float) -> Bucket | None:
    """The bucket a (re)defined limit starts with: full when new, the old one's tokens (refilled, capped) when not."""
    if limit.rate is None:
        return None
    if old is None or old[1] is None:
        return Bucket(float(limit.capacity), now)
    return Bucket(min(float(limit.capacity), filled(old[0], old[1], now)), max(now, old[1].at))


# ---------------------------------------------------------------- a lease's view
def budget(limit: Limit, bucket: Bucket | None, leased: int, now: float) -> int:
    """How many jobs of the kind a lease may still take now: 0 when either limit is spent."""
    room = MAX_LIMIT_COUNT
    if limit.concurrency is not None:
        room = max(limit.concurrency - leased, 0)
    if limit.rate is not None:
        assert bucket is not None, "a rate limit keeps a bucket"
        room = min(room, int(filled(limit, bucket, now) + TOKEN_SLACK))
    return room


def spent(limit: Limit, leased: int, bucket: Bucket | None, now: float) -> bool:
    """Is either limit spent now (``budget`` is 0)? The lease's check, once per pick: the cheap tests first."""
    concurrency = limit.concurrency
    if concurrency is not None and leased >= concurrency:
        return True
    if bucket is None or bucket.tokens >= 1.0 - TOKEN_SLACK:  # a bucket only fills as time passes
        return False
    return filled(limit, bucket, now) < 1.0 - TOKEN_SLACK


def seconds_to_slot(limit: Limit, bucket: Bucket | None, leased: int, runnable: bool, now: float) -> float | None:
    """When a waiting job of the kind may next be leased as far as its rate is concerned; None: no time to wait for.

    None when no job of the kind is runnable, when its concurrency limit is
    spent (the end of a lease frees a slot, not the clock), or when it has
    no rate limit; 0 when a token is there now.
    """
    if not runnable or bucket is None:
        return None
    if limit.concurrency is not None and leased >= limit.concurrency:
        return None
    return seconds_to_token(limit, bucket, now)


def holding(limit: Limit | None, bucket: Bucket | None, leased: int, now: float) -> str | None:
    """Which limit holds a ready job of ``limit.kind`` back now, in words; None when none does.

    For ``explain``: ``leased`` is how many jobs of the kind are leased.
    """
    if limit is None:
        return None
    if limit.concurrency is not None and leased >= limit.concurrency:
        return (f"the concurrency limit of kind {limit.kind!r}: {leased} of {limit.concurrency} "
                "allowed are leased; a slot frees when one of them ends")  # fmt: skip
    if limit.rate is not None:
        assert bucket is not None, "a rate limit keeps a bucket"
        if not has_token(limit, bucket, now):
            wait = seconds_to_token(limit, bucket, now)
            return (f"the rate limit of kind {limit.kind!r}: {limit.rate} per {limit.per:g} s is spent; "
                    f"the next lease is allowed in {wait:.3f} s")  # fmt: skip
    return None


def holding_group(limit: Limit | None, group: str | None, leased: int) -> str | None:
    """Does the group concurrency limit hold a ready job of ``group`` back (``leased`` of the group are leased)?"""
    if limit is None or group is None or limit.group_concurrency is None or leased < limit.group_concurrency:
        return None
    return (f"the group concurrency limit of kind {limit.kind!r}: {leased} of {limit.group_concurrency} "
            f"allowed for group {group!r} are leased; a slot frees when one of them ends")  # fmt: skip


# ---------------------------------------------------------------- fair share
@dataclass
class Turns:
    """A kind's rotation between its groups: the clock (the start of the last turn) and each group's pass.

    A group missing from ``passes`` (or at or below the clock) starts its next
    turn at the clock. Mutable: the file storage keeps one per fair kind and
    turns it as each LEASE record is applied.
    """

    clock: float = 0.0
    passes: dict[str | None, float] | None = None


def start(turns: Turns | None, group: str | None) -> float:
    """Where the group's next turn starts: its pass, or the clock if that is later (None: no turn taken yet)."""
    if turns is None:
        return 0.0
    passes = turns.passes
    at = passes.get(group) if passes else None
    return turns.clock if at is None or at < turns.clock else at


def turned(limit: Limit, turns: Turns, group: str | None) -> None:
    """The rotation after one lease of ``group``: its pass moves on by ``1 / weight``, the clock to its start."""
    begins = start(turns, group)
    if turns.passes is None:
        turns.passes = {}
    turns.passes[group] = begins + 1.0 / limit.weight(group)
    turns.clock = begins


def choose(limit: Limit, turns: Turns | None, candidates: list[tuple[str | None, Any, int]]) -> int | None:
    """Which candidate a lease of a fair kind takes: each is (group, its best job's key, its leased jobs).

    The group whose turn starts first, ties to the best key (priority, then
    age); a group at ``group_concurrency`` is passed over (jobs without a
    group, the group None, never are). None: no candidate may be taken.
    """
    cap = limit.group_concurrency
    best: tuple[float, Any] | None = None
    chosen = None
    for index, (group, key, leased) in enumerate(candidates):
        if cap is not None and group is not None and leased >= cap:
            continue
        rank = (start(turns, group), key)
        if best is None or rank < best:
            best, chosen = rank, index
    return chosen


def turns_to_fields(turns: Turns) -> dict[str, Any]:
    """The stored form: the clock and the passes still ahead of it (the rest say nothing the clock does not)."""
    ahead = [[group, at] for group, at in (turns.passes or {}).items() if at > turns.clock]
    return {"clock": turns.clock, "passes": sorted(ahead, key=lambda pair: (pair[0] is not None, pair[0] or ""))}


def turns_from_fields(fields: Any) -> Turns:
    """What ``turns_to_fields`` wrote: TypeError or ValueError if it is not a sound rotation."""
    if not isinstance(fields, dict):
        raise TypeError(f"a rotation is a JSON object, got {type(fields).__name__}")
    clock, pairs = fields.get("clock"), fields.get("passes")
    if isinstance(clock, bool) or not isinstance(clock, (int, float)) or not math.isfinite(clock) or not isinstance(pairs, list):
        raise TypeError("a rotation has a finite clock and a list of passes")
    passes: dict[str | None, float] = {}
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and (pair[0] is None or isinstance(pair[0], str))
                and isinstance(pair[1], (int, float)) and not isinstance(pair[1], bool) and math.isfinite(pair[1])):  # fmt: skip
            raise TypeError(f"a rotation's pass is [group, number], got {pair!r}")
        passes[pair[0]] = float(pair[1])
    return Turns(float(clock), passes or None)

