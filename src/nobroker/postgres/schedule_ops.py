"""Periodic jobs on PostgreSQL: the schedules table (sql/005_schedules.sql) and the tick transaction.

Owns: ScheduleStatements (the SQL text for one schema), and one function per
schedule operation, written as the steps it sends (steps.py, as operations.py's
are: a Queue drives them, an AsyncQueue awaits them): ``put``, ``remove``,
``listed`` and ``fire``. Imports: jobs, schedules, storage, naming, steps,
operations, enqueueing.

Times are epoch seconds of the database clock plus the queue's test-only
``clock_offset``, as the jobs table's are, so hosts with skewed clocks agree
on when a tick is due. ``fire`` is one transaction: it locks the due rows
(``FOR UPDATE SKIP LOCKED``: a row another worker holds is that worker's to
move), enqueues each one's due ticks with their deterministic ids
(``INSERT ... ON CONFLICT DO NOTHING``), and moves ``next_run`` past them.
Either all of it commits or none: a lost connection leaves the old cursor,
and the next look makes the same ids again.
"""

from __future__ import annotations

from typing import Any

from ..jobs import Job
from ..schedules import MAX_SCHEDULES, Schedule, ScheduleSpec, first_run, from_fields, plan, tick_id, to_fields
from ..storage import EnqueueSpec
from . import enqueueing
from . import operations as ops
from .naming import quote_schema
from .steps import Steps, atomic, every, one, run

_COLUMNS = ("name", "payload", "every", "cron", "kind", "priority", "tz", "catch_up", "anchor", "next_run")
_NOW = "SELECT extract(epoch FROM now())::float8 + %(off)s::float8"


class ScheduleStatements:
    """The statements on one schema's schedules table, by name."""

    def __init__(self, schema: str) -> None:
        table = f"{quote_schema(schema)}.schedules"
        jobs = f"{quote_schema(schema)}.jobs"
        cols = ", ".join(_COLUMNS)
        read = cols.replace("payload", "payload::text", 1)  # the text byte for byte, never decoded by the driver
        values = ", ".join(f"%({c})s" for c in _COLUMNS)
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _COLUMNS[1:])
        self.text = {
            "one": f"SELECT {read} FROM {table} WHERE queue = %(q)s AND name = %(name)s FOR UPDATE",
            "count": f"SELECT count(*) FROM {table} WHERE queue = %(q)s",
            "upsert": f"INSERT INTO {table} (queue, {cols}) VALUES (%(q)s, {values}) "
                      f"ON CONFLICT (queue, name) DO UPDATE SET {updates}",
            "delete": f"DELETE FROM {table} WHERE queue = %(q)s AND name = %(name)s RETURNING 1",
            "all": f"SELECT {read} FROM {table} WHERE queue = %(q)s ORDER BY name",
            "due": f"SELECT {read} FROM {table} WHERE queue = %(q)s AND next_run <= %(now)s "
                   "ORDER BY name FOR UPDATE SKIP LOCKED",
            "any_due": f"SELECT 1 FROM {table} WHERE queue = %(q)s AND next_run <= ({_NOW}) LIMIT 1",
            "advance": f"UPDATE {table} SET next_run = %(next)s WHERE queue = %(q)s AND name = %(name)s",
            "held": f"SELECT id FROM {jobs} WHERE queue = %(q)s AND id = ANY(%(ids)s)",
        }  # fmt: skip


def _row(row: tuple[Any, ...]) -> Schedule:
    return from_fields(dict(zip(_COLUMNS, row)))


def _now(t: ops.Target) -> Steps[float]:
    return float((yield one(_NOW, t.params()))[0])


def put(t: ops.Target, sql: ScheduleStatements, spec: ScheduleSpec) -> Steps[Schedule]:
    """Define ``spec`` (the same definition again: the stored one, unchanged)."""
    schedule: Schedule = yield atomic(_put(t, sql, spec))
    return schedule


def _put(t: ops.Target, sql: ScheduleStatements, spec: ScheduleSpec) -> Steps[Schedule]:
    found = yield one(sql.text["one"], t.params(name=spec.name))
    if found is not None:
        old = _row(found)
        if old.spec.same_definition(spec):
            return old
    elif (yield one(sql.text["count"], t.params()))[0] >= MAX_SCHEDULES:
        raise ValueError(f"a queue holds at most {MAX_SCHEDULES:,} schedules; remove one first")
    sched = first_run(spec, (yield from _now(t)))
    yield run(sql.text["upsert"], t.params(**to_fields(sched)))
    return sched


def remove(t: ops.Target, sql: ScheduleStatements, name: str) -> Steps[bool]:
    return (yield one(sql.text["delete"], t.params(name=name))) is not None


def listed(t: ops.Target, sql: ScheduleStatements) -> Steps[list[Schedule]]:
    return [_row(row) for row in (yield every(sql.text["all"], t.params()))]


def fire(t: ops.Target, sql: ScheduleStatements, max_attempts: int) -> Steps[list[Job]]:
    """Enqueue every due tick of every due schedule no other worker holds; returns the jobs this call added."""
    if (yield one(sql.text["any_due"], t.params())) is None:
        return []  # the common look: nothing due, no transaction
    jobs: list[Job] = yield atomic(_fire(t, sql, max_attempts))
    return jobs


def _fire(t: ops.Target, sql: ScheduleStatements, max_attempts: int) -> Steps[list[Job]]:
    added: list[Job] = []
    now = yield from _now(t)
    for row in (yield every(sql.text["due"], t.params(now=now))):
        sched = _row(row)
        ticks = plan(sched, now)
        spec = sched.spec
        specs = [
            EnqueueSpec(spec.payload, spec.payload_json, spec.priority, 0.0, max_attempts,
                        tick_id(spec.name, due), spec.kind, None)  # fmt: skip
            for due in ticks.dues
        ]
        held = {r[0] for r in (yield every(sql.text["held"], t.params(ids=[s.job_id for s in specs])))}
        fresh = [s for s in specs if s.job_id not in held]
        if fresh:
            added.extend((yield from enqueueing.enqueue(t, fresh, own=False, notify=True)))
        yield run(sql.text["advance"], t.params(next=ticks.next_run, name=spec.name))
    return added
