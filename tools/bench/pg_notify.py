"""What NOTIFY costs: single-row enqueues from several processes, with the NOTIFY gate as shipped, without any NOTIFY, and with one per enqueue.

Owns: ``run(dsn, progress)`` (a throwaway schema; PROCESSES processes each
enqueue JOBS single jobs at once, in each of the three ways, the ways taking
turns for ROUNDS rounds; the median rate of each, and of each round's own
ratio) and ``render``. Issue 19's
target: as shipped >= TARGET x the same enqueues without NOTIFY. Every
NOTIFY takes a database-wide lock at commit (postgres/wakeups.py), so one
per enqueue serialises the processes' commits; the gate sends at most one
per queue per window from each process. Reached by ``python make.py bench
--pg`` (pg.py prints it after its table).

The two ways the library does not ship are made by replacing the queue's
gate in the child process only (``NoNotify``, ``EveryNotify``): the same
statement, the same round trips, only whether it NOTIFYs differs.
Imports: nobroker (Queue), nobroker.postgres (migrate), engine
(in_processes), pg_baseline (connect, quoted).
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from nobroker import Queue
from nobroker.postgres import migrate
from tools.bench.engine import in_processes
from tools.bench.pg_baseline import connect, quoted

#: Processes enqueuing at once (issue 19 item 7), single jobs each, turns per way (the median is kept).
#: A turn of 1,000 jobs a process (under a second) gave 0.84 one run and 0.93 the next on a machine
#: that was not quiet; 2,000 make each turn about 1.5 s. ``bench --pg`` passes its --rounds (3 by default).
PROCESSES, JOBS, ROUNDS = 4, 2000, 3
#: Issue 19's target: enqueues as shipped, against the same enqueues without NOTIFY.
TARGET = 0.9
#: The ways measured, in the table's order: (key, label).
WAYS = (
    ("gate", "as shipped (at most one NOTIFY per queue per window)"),
    ("none", "no NOTIFY at all"),
    ("each", "one NOTIFY per enqueue"),
)


class NoNotify:
    """A gate that never lets a write NOTIFY, and owes nothing."""

    def take(self) -> bool:
        return False

    def owe(self) -> None:
        return None

    def close(self) -> None:
        return None


class EveryNotify(NoNotify):
    """A gate that makes every runnable write NOTIFY (before the gate existed)."""

    def take(self) -> bool:
        return True


def set_way(q: Queue, way: str) -> None:
    """Make the PostgreSQL queue ``q`` (of this process) NOTIFY in ``way``, one of WAYS' keys."""
    assert way in dict(WAYS), f"a way of notifying: {way!r}"
    if way != "gate":
        storage: Any = q.storage
        storage._gate.close()
        storage._gate = NoNotify() if way == "none" else EveryNotify()


def _enqueuer(dsn: str, schema: str, way: str, jobs: int, ready: Any, go: Any, out: Any) -> None:
    try:
        with Queue(dsn, "notify", schema=schema, migrate=False) as q:
            set_way(q, way)
            q.enqueue({"warm": True})  # the connection opened and the statement prepared before the start
            ready.release()
            go.wait()
            for i in range(jobs):
                q.enqueue({"i": i})
            out.put((time.monotonic(),))
    except BaseException as exc:  # the parent must hear about it rather than wait
        ready.release()
        out.put(f"{type(exc).__name__}: {exc}")
        raise


def _rate(dsn: str, schema: str, way: str, processes: int, jobs: int) -> float:
    """Jobs per second of ``processes`` processes enqueuing ``jobs`` single jobs each, from one start."""
    elapsed, _reports = in_processes(_enqueuer, (dsn, schema, way, jobs), processes)
    return processes * jobs / elapsed


def run(
    dsn: str, *, progress: Callable[[str], None], processes: int = PROCESSES, jobs: int = JOBS, rounds: int = ROUNDS
) -> dict[str, float]:
    """The median jobs per second of each way (WAYS' keys), the ways taking turns in each round; and, under
    ``<way>/none``, the median of each round's own ratio to the enqueues without NOTIFY (what the target reads)."""
    schema = f"nb_notify_{uuid.uuid4().hex[:10]}"
    migrate(dsn, schema=schema)
    rates: dict[str, list[float]] = {key: [] for key, _ in WAYS}
    try:
        for turn in range(rounds):
            order = [key for key, _ in WAYS]
            for way in order if turn % 2 == 0 else order[::-1]:
                progress(f"enqueues from {processes} processes, {way} ({turn + 1}/{rounds}) ...")
                with connect(dsn) as conn:
                    conn.execute(f"TRUNCATE {quoted(schema)}.jobs")
                rates[way].append(_rate(dsn, schema, way, processes, jobs))
    finally:
        with connect(dsn) as conn:
            conn.execute(f"DROP SCHEMA {quoted(schema)} CASCADE")
    medians = {way: statistics.median(values) for way, values in rates.items()}
    for way in ("gate", "each"):
        medians[f"{way}/none"] = statistics.median(a / b for a, b in zip(rates[way], rates["none"]))
    return medians


def render(rates: dict[str, float], *, processes: int = PROCESSES) -> str:
    ratio = rates["gate/none"]
    verdict = "met" if ratio >= TARGET else "MISSED"
    lines = [f"single-job enqueues from {processes} processes at once (medians of the turns, and of each turn's ratio):"]
    for key, label in WAYS:
        share = 1.0 if key == "none" else rates[f"{key}/none"]
        lines.append(f"  {label:<54} {rates[key]:>8,.0f} jobs/s  {share:.2f} x no NOTIFY")
    lines.append(f"  as shipped / no NOTIFY: {ratio:.3f} (target >= {TARGET:g}): {verdict}")
    return "\n".join(lines)


__all__ = ["run", "render", "set_way", "TARGET", "WAYS"]
