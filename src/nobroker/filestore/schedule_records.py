"""Periodic jobs in the log: the SCHEDULE, UNSCHEDULE and TICK records, and what replay makes of them.

Owns: one encoder per record type (``schedule``, ``unschedule``, ``tick``),
``apply`` (fold one of them into the state's schedules, a dict by name) and
``replayed`` (the records a compaction or a repair writes to carry every
schedule into a new generation). Imports: schedules, framing.

Bodies:

- SCHEDULE (20) ``{"at", "name", "payload" (JSON text), "every", "cron",
  "kind", "priority", "tz", "catch_up", "anchor", "next_run"}``: the schedule
  as it is from now on, replacing one of that name;
- UNSCHEDULE (21) ``{"at", "name"}``: the schedule is gone (none of that name:
  nothing changes);
- TICK (22) ``{"at", "name", "next_run"}``: the ticks before ``next_run``
  were enqueued (their ENQUEUE records come before it, in the same batch).

Like every record, these carry each time as an absolute value chosen by the
writer: replay never reads the clock.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..schedules import Schedule, from_fields, to_fields
from .framing import RecordType

Record = tuple[RecordType, dict[str, Any]]
#: The record types this module owns.
SCHEDULE_TYPES = frozenset({RecordType.SCHEDULE, RecordType.UNSCHEDULE, RecordType.TICK})


def schedule(sched: Schedule, at: float) -> Record:
    body: dict[str, Any] = {"at": at}
    body.update(to_fields(sched))
    return RecordType.SCHEDULE, body


def unschedule(name: str, at: float) -> Record:
    return RecordType.UNSCHEDULE, {"at": at, "name": name}


def tick(name: str, at: float, next_run: float) -> Record:
    return RecordType.TICK, {"at": at, "name": name, "next_run": next_run}


def apply(schedules: dict[str, Schedule], rtype: int, body: dict[str, Any]) -> None:
    """Fold one schedule record into ``schedules``; KeyError, TypeError or ValueError (nothing changed) if it is wrong."""
    if rtype == RecordType.SCHEDULE:
        sched = from_fields(body)
        schedules[sched.name] = sched
    elif rtype == RecordType.UNSCHEDULE:
        name = body["name"]
        if not isinstance(name, str):
            raise TypeError("UNSCHEDULE names its schedule by a string")
        schedules.pop(name, None)
    else:
        assert rtype == RecordType.TICK, "apply takes the schedule record types only"
        name, next_run = body["name"], body["next_run"]
        if isinstance(next_run, bool) or not isinstance(next_run, (int, float)):
            raise TypeError(f"TICK's next_run must be a number, got {next_run!r}")
        old = schedules.get(name)
        if old is None:
            raise ValueError(f"TICK names schedule {name!r}, which the log does not hold")
        schedules[name] = dataclasses.replace(old, next_run=float(next_run))


def replayed(schedules: dict[str, Schedule], at: float) -> list[Record]:
    """One SCHEDULE record per schedule, as it is now: what a new generation starts with."""
    return [schedule(sched, at) for sched in schedules.values()]
