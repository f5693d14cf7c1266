"""Worker announcements on PostgreSQL: the workers table (sql/010_counters_and_workers.sql).

Owns: RosterStatements (the SQL text for one schema) and one operation per
call, each written as the steps it sends (steps.py), as operations.py's are:
``announce`` (one statement: the removal of rows PRUNE_AFTER old and an
upsert of the worker's row), ``retire`` and ``listed``.
Imports: announcements, naming, steps, operations.

A row is written with the worker's own wall-clock times, as the file
storage writes them (nobroker.announcements), so both storages say "gone" by
the same rule. Kinds are kept as a JSON array (NULL: every kind).
"""

from __future__ import annotations

import json
import time
from ..announcements import MAX_WORKERS_LISTED, PRUNE_AFTER, WorkerInfo, from_dict
from .operations import Target
from .naming import quote_schema
from .steps import Steps, every, run

_COLUMNS = ("id", "name", "host", "pid", "kinds", "concurrency", "started_at", "running", "heartbeat_at")


class RosterStatements:
    """The statements on one schema's workers table, by name."""

    def __init__(self, schema: str) -> None:
        table = f"{quote_schema(schema)}.workers"
        cols = ", ".join(_COLUMNS)
        values = ", ".join(f"%({c})s" for c in _COLUMNS).replace("%(kinds)s", "%(kinds)s::json")
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _COLUMNS[1:])
        self.text = {
            "upsert": f"WITH pruned AS (DELETE FROM {table} WHERE queue = %(q)s AND heartbeat_at <= %(before)s "
                      f"AND id <> %(id)s) INSERT INTO {table} (queue, {cols}) VALUES (%(q)s, {values}) "
                      f"ON CONFLICT (queue, id) DO UPDATE SET {updates}",
            "delete": f"DELETE FROM {table} WHERE queue = %(q)s AND id = %(id)s",
            "all": f"SELECT {cols.replace('kinds', 'kinds::text', 1)} FROM {table} WHERE queue = %(q)s "
                   f"ORDER BY started_at, id LIMIT {MAX_WORKERS_LISTED}",
        }  # fmt: skip


def announce(t: Target, sql: RosterStatements, info: WorkerInfo) -> Steps[None]:
    row = info.to_dict()
    row["kinds"] = None if info.kinds is None else json.dumps(list(info.kinds))
    yield run(sql.text["upsert"], t.params(before=time.time() - PRUNE_AFTER, **row))


def retire(t: Target, sql: RosterStatements, worker_id: str) -> Steps[None]:
    yield run(sql.text["delete"], t.params(id=worker_id))


def listed(t: Target, sql: RosterStatements) -> Steps[list[WorkerInfo]]:
    out = []
    for row in (yield every(sql.text["all"], t.params())):
        fields = dict(zip(_COLUMNS, row))
        fields["kinds"] = None if fields["kinds"] is None else json.loads(fields["kinds"])
        out.append(from_dict(fields))
    return out
