"""The PostgreSQL benchmark: nobroker's PostgreSQL storage beside a hand-written SKIP LOCKED loop.

Owns: ``main(argv)``, which measures single and batch enqueue, drains with 1
and with 4 worker processes (one job per claim and batch claims) and the
idle pickup latency, each for nobroker and for the hand-written loop of
pg_baseline.py on a plain table in the same database, in the same run, and
prints one table (figure, value, baseline, ratio, target, verdict). Also the
nobroker contender (Nobroker) and the measurements both contenders go
through. Imports: nobroker (Queue), nobroker.postgres (DEFAULT_SCHEMA,
migrate), pg_baseline, report (markdown_table), psycopg. Reached by
``python make.py bench --pg`` (file.py hands it the rest of the command
line).

Everything lives in a throwaway schema that is dropped at the end. Printing
to stdout is this module's job (it is a command, not library code).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from nobroker import Queue
from nobroker.postgres import DEFAULT_SCHEMA, migrate
from tools.bench.pg_baseline import BASELINE_TABLE, Baseline, connect, quoted
from tools.bench.report import markdown_table

DEFAULT_DSN = "postgresql:///test?host=/var/run/postgresql"
#: Jobs per throughput figure, batch size, worker processes, latency samples.
DEFAULT_JOBS = 4000
DEFAULT_BATCH = 100
DEFAULT_WORKERS = 4
DEFAULT_SAMPLES = 200
DEFAULT_ROUNDS = 3
#: Longest wait for a worker process to report before the run is called failed.
CHILD_TIMEOUT = 120.0
#: Targets from issue 6 ("Speed"). (figure key, kind, value): kind "ratio" compares
#: with the baseline, "min" is an absolute floor, "max" an absolute ceiling.
TARGETS: dict[str, tuple[str, float]] = {
    "enqueue_single": ("ratio", 0.9),
    "drain_4_one": ("min", 3000.0),
    "drain_4_batch": ("ratio", 0.5),
    "pickup_median": ("max", 5.0),
}

# ---------------------------------------------------------------- nobroker, the contender
class Nobroker:
    """nobroker's PostgreSQL storage, through the public Queue: each method one figure's work."""

    label = "nobroker"

    def __init__(self, dsn: str, schema: str, name: str) -> None:
        self.dsn, self.schema, self.name = dsn, schema, name

    def open(self) -> Queue:
        return Queue(self.dsn, self.name, schema=self.schema, migrate=False)

    def fill(self, n: int, batch: int) -> None:
        with self.open() as q:
            for start in range(0, n, batch):
                q.enqueue_many([{"i": i} for i in range(start, min(start + batch, n))])

    def enqueue_single(self, n: int) -> float:
        with self.open() as q:
            started = time.perf_counter()
            for i in range(n):
                q.enqueue({"i": i})
            return time.perf_counter() - started

    def enqueue_batch(self, n: int, batch: int) -> float:
        with self.open() as q:
            started = time.perf_counter()
            for start in range(0, n, batch):
                q.enqueue_many([{"i": i} for i in range(start, min(start + batch, n))])
            return time.perf_counter() - started

    def drain(self, batch: int, ready: Any, go: Any) -> int:
        done = 0
        with self.open() as q:
            ready.set()
            go.wait()
            while True:
                jobs = q.lease(batch)
                if not jobs:
                    return done
                if len(jobs) > 1:
                    q.ack_many(jobs)
                else:
                    for job in jobs:
                        q.ack(job)
                done += len(jobs)

    def listen(self, ready: Any, results: Any, count: int) -> None:
        with self.open() as q:
            q.wait_for_jobs(0)  # LISTEN before the producer starts
            ready.set()
            got = 0
            while got < count:
                job = q.lease_one()
                if job is None:
                    q.wait_for_jobs(1.0)
                    continue
                results.put(time.monotonic() - job.payload["t"])
                q.ack(job)
                got += 1

    def produce(self) -> Callable[[dict[str, Any]], None]:
        q = self.open()
        def enqueue(payload: dict[str, Any]) -> None:
            q.enqueue(payload)

        return enqueue


# ---------------------------------------------------------------- measurements
def _ctx() -> Any:
    return multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")


def _drain_child(contender: Any, batch: int, ready: Any, go: Any, counts: Any) -> None:
    try:
        counts.put(contender.drain(batch, ready, go))
    except BaseException as exc:  # the parent must hear about it rather than wait
        ready.set()
        counts.put(f"{type(exc).__name__}: {exc}")
        raise


def measure_drain(contender: Any, jobs: int, workers: int, batch: int, fill_batch: int) -> float:
    """Jobs per second for ``workers`` processes draining ``jobs`` prefilled jobs."""
    contender.fill(jobs, fill_batch)
    ctx = _ctx()
    go = ctx.Event()
    counts = ctx.Queue()
    readies = [ctx.Event() for _ in range(workers)]
    procs = [ctx.Process(target=_drain_child, args=(contender, batch, r, go, counts)) for r in readies]
    for p in procs:
        p.start()
    for r in readies:
        r.wait(60)
    started = time.perf_counter()
    go.set()
    got = [counts.get(timeout=CHILD_TIMEOUT) for _ in procs]
    elapsed = time.perf_counter() - started
    failures = [g for g in got if isinstance(g, str)]
    if failures:
        raise RuntimeError(f"{contender.label}: a worker process failed: {failures[0]}")
    total = sum(got)
    for p in procs:
        p.join(60)
    if total != jobs:
        raise RuntimeError(f"{contender.label}: drained {total} jobs of {jobs}")
    return jobs / elapsed


def _listen_child(contender: Any, ready: Any, results: Any, count: int) -> None:
    try:
        contender.listen(ready, results, count)
    except BaseException as exc:
        ready.set()
        results.put(f"{type(exc).__name__}: {exc}")
        raise


def measure_pickup(contender: Any, samples: int) -> tuple[float, float]:
    """(median, p99) milliseconds from the start of an enqueue to an idle worker holding the job."""
    ctx = _ctx()
    ready = ctx.Event()
    results = ctx.Queue()
    proc = ctx.Process(target=_listen_child, args=(contender, ready, results, samples))
    proc.start()
    ready.wait(60)
    produce = contender.produce()
    latencies = []
    for _ in range(samples):
        time.sleep(0.01)  # the worker is idle, waiting, when the job arrives
        produce({"t": time.monotonic()})
        got = results.get(timeout=CHILD_TIMEOUT)
        if isinstance(got, str):
            raise RuntimeError(f"{contender.label}: the listening worker failed: {got}")
        latencies.append(got * 1000.0)
    proc.join(60)
    latencies.sort()
    return statistics.median(latencies), latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]


# ---------------------------------------------------------------- the run
def run(
    dsn: str, *, jobs: int, batch: int, workers: int, samples: int, rounds: int, progress: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Measure every figure ``rounds`` times, the two contenders taking turns; keep each one's best round.

    Taking turns and keeping the best round is what makes the ratio mean
    something on a machine whose load changes under the run.
    """
    from psycopg import sql

    schema = f"{DEFAULT_SCHEMA}_bench_{uuid.uuid4().hex[:8]}"
    migrate(dsn, schema=schema)
    with connect(dsn) as conn:
        conn.execute(BASELINE_TABLE.replace("{schema}", quoted(schema)))
    rows: list[dict[str, Any]] = []
    try:
        contenders = (Nobroker(dsn, schema, "bench"), Baseline(dsn, schema))

        def best(label: str, measure: Callable[[Any], Any], pick: Callable[[list[Any]], Any]) -> list[Any]:
            progress(f"measuring {label} ...")
            values: list[list[Any]] = [[], []]
            for _round in range(rounds):
                for i, contender in enumerate(contenders):
                    _clean(dsn, schema)
                    values[i].append(measure(contender))
            return [pick(v) for v in values]

        def figure(key: str, label: str, measure: Callable[[Any], float]) -> None:
            ours, theirs = best(label, measure, max)
            rows.append(_row(key, label, "jobs/s", ours, theirs))

        figure("enqueue_single", "enqueue, one job per call", lambda c: jobs / c.enqueue_single(jobs))
        figure("enqueue_batch", f"enqueue, {batch} jobs per call", lambda c: jobs * 5 / c.enqueue_batch(jobs * 5, batch))
        figure("drain_1_one", "drain, 1 worker, 1 job per claim", lambda c: measure_drain(c, jobs, 1, 1, batch))
        figure("drain_1_batch", f"drain, 1 worker, {batch} per claim", lambda c: measure_drain(c, jobs * 5, 1, batch, batch))
        figure(f"drain_{workers}_one", f"drain, {workers} workers, 1 job per claim", lambda c: measure_drain(c, jobs, workers, 1, batch))
        figure(f"drain_{workers}_batch", f"drain, {workers} workers, {batch} per claim", lambda c: measure_drain(c, jobs * 5, workers, batch, batch))
        ours, theirs = best("idle pickup latency", lambda c: measure_pickup(c, samples), lambda v: (min(m for m, _ in v), min(p for _, p in v)))
        rows.append(_row("pickup_median", "idle pickup latency, median", "ms", ours[0], theirs[0], lower_is_better=True))
        rows.append(_row("pickup_p99", "idle pickup latency, p99", "ms", ours[1], theirs[1], lower_is_better=True))
    finally:
        with connect(dsn) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return rows


def _clean(dsn: str, schema: str) -> None:
    from psycopg import sql

    with connect(dsn) as conn:
        ident = sql.Identifier(schema)
        conn.execute(sql.SQL("TRUNCATE {}.jobs, {}.baseline").format(ident, ident))
        conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(ident))
        conn.execute(sql.SQL("VACUUM ANALYZE {}.baseline").format(ident))


def _row(key: str, label: str, unit: str, value: float, baseline: float, *, lower_is_better: bool = False) -> dict[str, Any]:
    ratio = (baseline / value if lower_is_better else value / baseline) if value and baseline else float("nan")
    target_text, verdict = "", ""
    if key in TARGETS:
        kind, goal = TARGETS[key]
        if kind == "ratio":
            target_text, ok = f">= {goal:g} x baseline", ratio >= goal
        elif kind == "min":
            target_text, ok = f">= {goal:,.0f} {unit}", value >= goal
        else:
            target_text, ok = f"<= {goal:g} {unit}", value <= goal
        verdict = "met" if ok else "MISSED"
    return {
        "key": key, "figure": label, "unit": unit, "value": value, "baseline": baseline,
        "ratio": ratio, "target": target_text, "verdict": verdict,
    }  # fmt: skip


def _fmt(value: float, unit: str) -> str:
    return f"{value:,.2f} {unit}" if unit == "ms" else f"{value:,.0f} {unit}"


def render(rows: list[dict[str, Any]], *, markdown: bool = False) -> str:
    header = ["figure", "nobroker", "hand-written", "ratio", "target", "verdict"]
    table = [
        [r["figure"], _fmt(r["value"], r["unit"]), _fmt(r["baseline"], r["unit"]), f"{r['ratio']:.2f}", r["target"], r["verdict"]]
        for r in rows
    ]
    if markdown:
        return markdown_table(header, table)
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
    out = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(header)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells)) for cells in table]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nobroker.bench_pg", description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("NOBROKER_PG_DSN") or os.environ.get("NOBROKER_DSN") or DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="jobs per figure (batch figures use 5x)")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="idle pickups to time")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="turns per figure; the best is kept")
    parser.add_argument("--quick", action="store_true", help="a short run (fewer jobs, samples and rounds)")
    parser.add_argument("--md", action="store_true", help="print the table as Markdown")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.samples, args.rounds = min(args.jobs, 500), min(args.samples, 50), 1
    if args.workers != DEFAULT_WORKERS:
        TARGETS[f"drain_{args.workers}_one"] = TARGETS.pop("drain_4_one")
        TARGETS[f"drain_{args.workers}_batch"] = TARGETS.pop("drain_4_batch")
    rows = run(
        args.dsn, jobs=args.jobs, batch=args.batch, workers=args.workers, samples=args.samples, rounds=args.rounds,
        progress=lambda text: print(text, file=sys.stderr, flush=True),
    )  # fmt: skip
    print(
        f"PostgreSQL storage vs a hand-written SKIP LOCKED loop: best of {args.rounds} round(s), "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, synchronous_commit on"
    )
    print(render(rows, markdown=args.md))
    return 0 if all(r["verdict"] != "MISSED" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
