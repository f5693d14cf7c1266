"""One heartbeat tick of a Worker with 50 running jobs: extend_many beside one extend per job.

Owns: ``run(dsn)`` (a throwaway schema, 50 leased jobs, then TICKS ticks of
each way of renewing them: the statements, round trips and median time of
one tick) and ``render``. The Worker's heartbeat renews every due lease with
one ``extend_many`` per tick; before, it sent one ``extend`` per job. Reached
by ``python make.py bench --pg`` (pg.py prints it after its table).
Imports: nobroker (Queue), nobroker.postgres (migrate), pg_baseline
(connect), pg_count.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from nobroker import Queue
from nobroker.postgres import migrate
from tools.bench.pg_baseline import connect, quoted
from tools.bench.pg_count import counting

#: Running jobs whose leases one tick renews (issue 19's figure), and ticks timed of each way.
RUNNING, TICKS = 50, 20


def run(dsn: str) -> list[tuple[str, float, float, float]]:
    """(way, statements per tick, round trips per tick, median ms per tick), batched first."""
    schema = f"nb_hb_{uuid.uuid4().hex[:10]}"
    migrate(dsn, schema=schema)
    try:
        with Queue(dsn, "heartbeat", schema=schema, migrate=False) as q:
            q.enqueue_many(list(range(RUNNING)))
            jobs = q.lease(RUNNING)
            assert len(jobs) == RUNNING, "every job leased"
            ways: list[tuple[str, Callable[[], Any]]] = [
                ("extend_many (one call per tick)", lambda: q.extend_many(jobs, 60)),
                ("one extend per job (before)", lambda: [q.extend(job, 60) for job in jobs]),
            ]
            return [_tick(name, tick) for name, tick in ways]
    finally:
        with connect(dsn) as conn:
            conn.execute(f"DROP SCHEMA {quoted(schema)} CASCADE")


def _tick(name: str, tick: Callable[[], Any]) -> tuple[str, float, float, float]:
    tick()  # warm: statements prepared, connection open
    with counting() as tally:
        tick()
    times = []
    for _ in range(TICKS):
        started = time.perf_counter()
        tick()
        times.append((time.perf_counter() - started) * 1000.0)
    return name, tally.statements, tally.round_trips, statistics.median(times)


def render(rows: list[tuple[str, float, float, float]]) -> str:
    lines = [f"heartbeat, one tick with {RUNNING} running jobs (median of {TICKS} ticks):"]
    for name, statements, round_trips, ms in rows:
        lines.append(f"  {name:<34} {statements:>4g} statements {round_trips:>4g} round trips {ms:8.2f} ms")
    return "\n".join(lines)
