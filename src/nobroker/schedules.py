"""Periodic jobs: what a schedule is, and which of its ticks are due, as pure functions of the time.

Owns: ScheduleSpec (a schedule as a caller defines it, checked by
``define``), Schedule (one as the queue stores it: the definition plus when
its next tick is due), the stored form both storages keep (``to_fields`` and
``from_fields``), ``first_run`` (the first tick of a new definition),
``plan`` (which ticks a worker enqueues now, by the schedule's catch_up
rule, and where the schedule's cursor moves), and ``tick_id`` (a tick's job
id). Imports: cron, jobs, codec, checks. Pure: no clock, no I/O; every
function takes the time.

Exactly once: a tick's identity is (schedule name, due time), and its job id
is made from exactly that (``tick_id``). A storage enqueues a schedule's due
ticks and moves its cursor (``next_run``) past them in one atomic write (one
batch of records under the file lock; one PostgreSQL transaction that holds
the schedule's row), so two workers never both see the same tick due; and a
write cut short by a crash is redone from the same cursor, making the same
ids, which idempotent enqueue turns into the jobs already there.

catch_up says what happens to ticks that came due while no worker ran:

- ``"all"``: every one is enqueued, oldest first, at most MAX_CATCH_UP_TICKS
  per look (the rest at the next looks, so none is lost);
- ``"last"`` (the default): only the most recent due tick is enqueued, however
  late; the earlier ones are skipped;
- ``"none"``: a tick is enqueued only if a worker finds it due within
  ON_TIME_SECONDS of its time; a later one counts as missed and is skipped.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from . import checks
from .codec import load_json, stored_json
from .cron import Cron, time_zone
from .jobs import DEFAULT_KIND, MAX_NAME_CHARS, MAX_PRIORITY, MIN_PRIORITY

#: The catch_up rules, in the order the docs list them.
CATCH_UP_RULES = ("none", "last", "all")
DEFAULT_CATCH_UP = "last"
#: Most ticks one look enqueues for one schedule under catch_up="all" (the rest follow at the next looks).
MAX_CATCH_UP_TICKS = 100
#: How late a tick may be found and still count as on time under catch_up="none".
ON_TIME_SECONDS = 60.0
#: The shortest interval ``every=`` takes: tick ids name the due time in milliseconds.
MIN_EVERY_SECONDS = 0.01
#: A schedule's name is part of its ticks' job ids, which must stay under MAX_ID_CHARS.
MAX_SCHEDULE_NAME_CHARS = 128
#: Most schedules one queue holds (each look at the queue reads them all).
MAX_SCHEDULES = 10_000
#: Times a stored schedule may hold (epoch seconds; year 5138 or so).
MAX_EPOCH_SECONDS = 1e11
#: How far back latest_due first looks for a cron tick before now (widening in these steps).
LOOKBACK_WINDOWS = (3600.0, 86_400.0, 32 * 86_400.0, 367 * 86_400.0, 29 * 366 * 86_400.0)
#: Prefix of every tick's job id.
TICK_ID_PREFIX = "tick:"


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule as defined: ``every`` seconds or a ``cron`` expression (exactly one), and its job's fields."""

    name: str
    payload_json: str
    payload: Any
    every: float | None
    cron: str | None
    kind: str
    priority: int
    tz: str | None
    catch_up: str

    def same_definition(self, other: ScheduleSpec) -> bool:
        """Would ``other`` make the same ticks as this one? (Then defining it again changes nothing.)"""
        return (self.payload_json, self.every, self.cron, self.kind, self.priority, self.tz, self.catch_up) == (
            other.payload_json, other.every, other.cron, other.kind, other.priority, other.tz, other.catch_up,
        )  # fmt: skip


@dataclass(frozen=True)
class Schedule:
    """A stored schedule: its definition, the time its ticks count from, and when the next one is due.

    ``next_run`` is the due time (epoch seconds) of the oldest tick not yet
    enqueued; ``anchor`` is when an ``every`` schedule was defined (its ticks
    fall at anchor + k * every, k >= 1).
    """

    spec: ScheduleSpec
    anchor: float
    next_run: float

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def payload(self) -> Any:
        return self.spec.payload

    @property
    def every(self) -> float | None:
        return self.spec.every

    @property
    def cron(self) -> str | None:
        return self.spec.cron

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def tz(self) -> str | None:
        return self.spec.tz

    @property
    def catch_up(self) -> str:
        return self.spec.catch_up

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly: what the CLI prints and the dashboard shows."""
        return {
            "name": self.name, "every": self.every, "cron": self.cron, "tz": self.tz, "kind": self.kind,
            "priority": self.priority, "catch_up": self.catch_up, "payload": self.payload, "next_run": self.next_run,
        }  # fmt: skip


@dataclass(frozen=True)
class TickPlan:
    """What one look at a due schedule does: enqueue ticks due at ``dues``, then move the cursor to ``next_run``."""

    dues: list[float]
    next_run: float


# ---------------------------------------------------------------- defining
def define(
    name: Any, payload: Any, *, every: Any = None, cron: Any = None, kind: Any = DEFAULT_KIND, priority: Any = 0,
    tz: Any = None, catch_up: Any = DEFAULT_CATCH_UP,
) -> ScheduleSpec:  # fmt: skip
    """A checked ScheduleSpec, or the TypeError/ValueError that says what is wrong (nothing is written)."""
    name = checks.text(name, "schedule name", MAX_SCHEDULE_NAME_CHARS)
    if (every is None) == (cron is None):
        raise ValueError("a schedule needs exactly one of every=SECONDS or cron='MIN HOUR DOM MON DOW'")
    if every is not None:
        every = checks.seconds(every, "every", allow_zero=False)
        if every < MIN_EVERY_SECONDS:
            raise ValueError(f"every must be at least {MIN_EVERY_SECONDS:g} seconds, got {every!r}")
        if tz is not None:
            raise ValueError("tz applies to cron schedules only (an interval is the same in every zone)")
    else:
        if not isinstance(cron, str):
            raise TypeError(f"cron must be a string such as '*/5 * * * *', got {type(cron).__name__}")
        cron = Cron.parse(cron).text
        if tz is not None:
            time_zone(tz)  # ValueError for an unknown zone
    kind = checks.text(kind, "kind", MAX_NAME_CHARS)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, got {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}, got {priority}")
    if catch_up not in CATCH_UP_RULES:
        raise ValueError(f"catch_up must be one of {', '.join(repr(r) for r in CATCH_UP_RULES)}, got {catch_up!r}")
    payload_json, payload = stored_json(payload)
    return ScheduleSpec(name, payload_json, payload, every, cron, kind, priority, tz, catch_up)


def first_run(spec: ScheduleSpec, now: float) -> Schedule:
    """The schedule ``spec`` defined at ``now``: its first tick is the first due time after now."""
    if spec.every is not None:
        return Schedule(spec, now, now + spec.every)
    return Schedule(spec, now, _cron_after(spec, now))


# ---------------------------------------------------------------- ticking
def following(schedule: Schedule, due: float) -> float:
    """The due time of the tick after the one due at ``due``."""
    spec = schedule.spec
    if spec.every is not None:
        k = round((due - schedule.anchor) / spec.every)  # ``due`` is anchor + k * every: round, never floor
        return schedule.anchor + (k + 1) * spec.every
    return _cron_after(spec, due)


def latest_due(schedule: Schedule, now: float) -> float:
    """The most recent due time at or before ``now`` (never before next_run; callers check next_run <= now)."""
    assert schedule.next_run <= now, "only a due schedule has a latest due tick"
    spec = schedule.spec
    if spec.every is not None:
        k = max(round((schedule.next_run - schedule.anchor) / spec.every), math.floor((now - schedule.anchor) / spec.every))
        return schedule.anchor + k * spec.every
    # Cron: walk forward from a tick shortly before now, widening the window
    # until it holds one (never walking the whole time the queue was left alone).
    due = schedule.next_run
    for window in LOOKBACK_WINDOWS:
        start = now - window
        if start <= schedule.next_run:
            break
        candidate = _cron_after(spec, start)
        if candidate <= now:
            due = candidate
            break
    while True:
        after = _cron_after(spec, due)
        if after > now:
            return due
        due = after


def plan(schedule: Schedule, now: float) -> TickPlan:
    """Which ticks to enqueue at ``now`` by the schedule's catch_up rule, and the cursor after them."""
    if schedule.next_run > now:
        return TickPlan([], schedule.next_run)
    rule = schedule.spec.catch_up
    if rule == "all":
        dues = [schedule.next_run]
        nxt = following(schedule, schedule.next_run)
        while nxt <= now and len(dues) < MAX_CATCH_UP_TICKS:
            dues.append(nxt)
            nxt = following(schedule, nxt)
        return TickPlan(dues, nxt)
    last = latest_due(schedule, now)
    dues = [last] if rule == "last" or now - last <= ON_TIME_SECONDS else []
    return TickPlan(dues, following(schedule, last))


def tick_id(name: str, due: float) -> str:
    """The job id of the tick of schedule ``name`` due at ``due``: the same in every process, every time."""
    return f"{TICK_ID_PREFIX}{name}@{round(due * 1000)}"


def _cron_after(spec: ScheduleSpec, when: float) -> float:
    assert spec.cron is not None
    return _parsed(spec.cron).next_after(when, time_zone(spec.tz))


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> Cron:
    return Cron.parse(text)


# ---------------------------------------------------------------- the stored form
def to_fields(schedule: Schedule) -> dict[str, Any]:
    """The schedule as both storages keep it (a record body's fields; a row's columns)."""
    spec = schedule.spec
    return {
        "name": spec.name, "payload": spec.payload_json, "every": spec.every, "cron": spec.cron, "kind": spec.kind,
        "priority": spec.priority, "tz": spec.tz, "catch_up": spec.catch_up, "anchor": schedule.anchor,
        "next_run": schedule.next_run,
    }  # fmt: skip


def from_fields(fields: dict[str, Any]) -> Schedule:
    """The schedule ``to_fields`` gave, checked again (KeyError, TypeError or ValueError if the fields are wrong)."""
    payload_json = fields["payload"]
    if not isinstance(payload_json, str):
        raise TypeError("a schedule's payload is stored as JSON text")
    spec = define(
        fields["name"], load_json(payload_json), every=fields["every"], cron=fields["cron"], kind=fields["kind"],
        priority=fields["priority"], tz=fields["tz"], catch_up=fields["catch_up"],
    )  # fmt: skip
    anchor, next_run = fields["anchor"], fields["next_run"]
    for value, what in ((anchor, "anchor"), (next_run, "next_run")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) <= MAX_EPOCH_SECONDS:
            raise ValueError(f"a schedule's {what} must be a time in epoch seconds, got {value!r}")
    # The stored text stays the one the writer made (define re-encodes the value; the bytes may differ).
    spec = ScheduleSpec(spec.name, payload_json, spec.payload, spec.every, spec.cron, spec.kind, spec.priority,
                        spec.tz, spec.catch_up)  # fmt: skip
    return Schedule(spec, float(anchor), float(next_run))
