"""The PostgreSQL benchmark: nobroker's PostgreSQL storage beside a hand-written SKIP LOCKED loop.

Owns: ``main(argv)``, which measures single and batch enqueue, drains with 1
and with 4 worker processes (one job per claim and batch claims), the
Worker's drains one job at a time (in one process and a pool) and the idle
pickup latency, each for nobroker and for the hand-written loop of
pg_baseline.py on a plain table in the same database, in the same run, and
prints one table (pg_table.py: figure, value, baseline, ratio, the
statements and round trips each sends per operation, target, verdict), then
one heartbeat tick of 50 running jobs (pg_heartbeat.py) and what NOTIFY
costs single-job enqueues from 4 processes (pg_notify.py); with ``--full``
the 1,000,000-job figures of pg_scale.py after it; with ``--only`` just the
figures it names (``--only per-job``: those of one job at a time). Also the
nobroker contender (Nobroker), a peer (another nobroker source tree
measured in the same run, ``--peer``) and the run every contender goes
through (the timed runs that need processes: pg_measure.py). Imports:
nobroker (Queue, Worker), nobroker.postgres (DEFAULT_SCHEMA, migrate),
pg_baseline, pg_count, pg_measure, pg_table, pg_heartbeat, pg_notify,
pg_scale, psycopg. Reached by ``python make.py bench --pg`` (file.py hands
it the rest of the command line).

Everything lives in throwaway schemas that are dropped at the end. Printing
to stdout is this module's job (it is a command, not library code).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from nobroker import Queue, Worker
from nobroker.postgres import DEFAULT_SCHEMA, migrate
from tools.bench.pg_baseline import BASELINE_TABLE, Baseline, connect, quoted
from tools.bench.pg_count import counting, per_operation
from tools.bench.pg_measure import CHILD_TIMEOUT, measure_drain, measure_pickup, measure_worker_drain
from tools.bench.pg_table import TARGETS, figure_rows, render

DEFAULT_DSN = "postgresql:///test?host=/var/run/postgresql"
#: Jobs per throughput figure, batch size, worker processes, latency samples.
DEFAULT_JOBS = 4000
DEFAULT_BATCH = 100
DEFAULT_WORKERS = 4
DEFAULT_SAMPLES = 200
DEFAULT_ROUNDS = 3
#: Calls of each operation the statements and round trips are counted over.
COUNTED_CALLS = 50
#: What ``--only per-job`` measures: the figures of one job per call (issue 19's per-job targets).
PER_JOB = ("enqueue_single", "drain_1_one", "drain_{w}_one", "worker_1", "worker_{w}", "pickup")
#: The operations each figure's work is made of, as counted per call (see Nobroker.count).
OPERATIONS: dict[str, tuple[str, ...]] = {
    "enqueue_single": ("enqueue",), "enqueue_batch": ("enqueue_batch",), "drain_one": ("lease", "ack"),
    "drain_batch": ("lease_batch", "ack_batch"), "pickup": ("enqueue", "lease"),
}  # fmt: skip


# ---------------------------------------------------------------- nobroker, the contender
def _no_op(job: Any) -> None:
    """The Worker figures' handler: the job's own cost is the queue's."""


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

    def work(self, jobs: int, processes: int) -> float:
        """Seconds a Worker (one job at a time; a pool of ``processes`` if more than one) takes to drain ``jobs``."""
        with self.open() as q:
            pool = None if processes == 1 else processes
            worker = Worker(q, _no_op, concurrency=1, max_jobs=jobs, handle_signals=False, processes=pool)
            started = time.perf_counter()
            stats = worker.run()
            elapsed = time.perf_counter() - started
        if stats.succeeded != jobs:
            raise RuntimeError(f"{self.label}: the Worker drained {stats.succeeded} jobs of {jobs}")
        return elapsed

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

    def count(self, n: int, batch: int) -> dict[str, tuple[float, float]]:
        """(statements, round trips) per call of each operation the figures are made of."""
        with counting() as tally, self.open() as q:
            out = {"enqueue": per_operation(tally, lambda i: q.enqueue({"i": i}), n)}
            out["enqueue_batch"] = per_operation(tally, lambda i: q.enqueue_many([{"i": k} for k in range(batch)]), n)
            jobs: list[Any] = []
            out["lease"] = per_operation(tally, lambda i: jobs.append(q.lease_one()), n)
            out["ack"] = per_operation(tally, lambda i: q.ack(jobs[i]), n)
            batches: list[Any] = []
            out["lease_batch"] = per_operation(tally, lambda i: batches.append(q.lease(batch)), n)
            out["ack_batch"] = per_operation(tally, lambda i: q.ack_many(batches[i]), n)
        return out


class Peer(Nobroker):
    """Another nobroker source tree (``src`` of an older commit, say), measured in the same run.

    Its code cannot share this process with ours, so every measurement runs
    in a child process whose ``nobroker`` is the peer's (this module with
    PYTHONPATH set, ``--measure``), in a schema the peer's own migrate made.
    """

    def __init__(self, dsn: str, schema: str, name: str, src: str, sizes: list[str]) -> None:
        super().__init__(dsn, schema, name)
        self.src = os.path.abspath(src)
        self.sizes = sizes  # the command line flags of the figures' sizes, for its child processes
        self.label = f"peer ({self.src})"

    def child(self, *args: str) -> Any:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([self.src, root]))
        command = [sys.executable, "-m", "tools.bench.pg", "--dsn", self.dsn, "--schema", self.schema, *args]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT * 5)
        if done.returncode:
            raise RuntimeError(f"{self.label}: {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
        return json.loads(done.stdout)


def figures(jobs: int, batch: int, workers: int, samples: int) -> list[tuple[str, str, str, Callable[[Any], Any]]]:
    """(key, label, operations counted, measure(contender)) of every figure, in the table's order."""
    w = workers
    return [
        ("enqueue_single", "enqueue, one job per call", "enqueue_single", lambda c: jobs / c.enqueue_single(jobs)),
        ("enqueue_batch", f"enqueue, {batch} jobs per call", "enqueue_batch",
         lambda c: jobs * 5 / c.enqueue_batch(jobs * 5, batch)),
        ("drain_1_one", "drain, 1 worker, 1 job per claim", "drain_one", lambda c: measure_drain(c, jobs, 1, 1, batch)),
        ("drain_1_batch", f"drain, 1 worker, {batch} per claim", "drain_batch",
         lambda c: measure_drain(c, jobs * 5, 1, batch, batch)),
        (f"drain_{w}_one", f"drain, {w} workers, 1 job per claim", "drain_one",
         lambda c: measure_drain(c, jobs, w, 1, batch)),
        (f"drain_{w}_batch", f"drain, {w} workers, {batch} per claim", "drain_batch",
         lambda c: measure_drain(c, jobs * 5, w, batch, batch)),
        ("worker_1", "Worker(concurrency=1) drain (hand-written: its 1-job loop)", "drain_one",
         lambda c: measure_worker_drain(c, jobs, 1, batch)),
        (f"worker_{w}", f"Worker(processes={w}) drain (hand-written: {w} 1-job loops)", "drain_one",
         lambda c: measure_worker_drain(c, jobs, w, batch)),
        ("pickup", "idle pickup latency", "pickup", lambda c: measure_pickup(c, samples)),
    ]  # fmt: skip


# ---------------------------------------------------------------- the run
def run(
    dsn: str, *, jobs: int, batch: int, workers: int, samples: int, rounds: int, progress: Callable[[str], None],
    peer: str | None = None, count: bool = True, only: frozenset[str] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Measure every figure ``rounds`` times, the contenders taking turns; report each one's median.

    Taking turns (each round in the reverse order of the one before) is
    what makes the ratio mean something on a machine whose load changes
    under the run. ``peer``: another nobroker's ``src`` folder, measured too.
    ``count``: count each contender's statements and round trips per operation.
    ``only``: the keys of the figures to measure (None: every one).
    """
    from psycopg import sql

    schema = f"{DEFAULT_SCHEMA}_bench_{uuid.uuid4().hex[:8]}"
    migrate(dsn, schema=schema)
    schemas = [schema]
    with connect(dsn) as conn:
        conn.execute(BASELINE_TABLE.replace("{schema}", quoted(schema)))
    contenders: list[Any] = [Nobroker(dsn, schema, "bench")]
    rows: list[dict[str, Any]] = []
    try:
        if peer is not None:
            schemas.append(schema + "_peer")
            sizes = ["--jobs", str(jobs), "--batch", str(batch), "--workers", str(workers), "--samples", str(samples)]
            contenders.append(Peer(dsn, schemas[-1], "bench", peer, sizes))
            contenders[-1].child("--migrate")
        contenders.append(Baseline(dsn, schema))
        counts = [_count(c, dsn, schemas, batch) for c in contenders] if count else None
        table = [f for f in figures(jobs, batch, workers, samples) if only is None or f[0] in only]
        for key, label, operations, measure in table:
            progress(f"measuring {label} ...")
            values: list[list[Any]] = [[] for _ in contenders]
            for turn in range(rounds):
                order = list(range(len(contenders)))
                for i in order if turn % 2 == 0 else order[::-1]:
                    _clean(dsn, schemas)
                    values[i].append(_measure(contenders[i], key, measure))
            sent = None if counts is None else [_sent(c, OPERATIONS[operations]) for c in counts]
            rows += figure_rows(key, label, values, sent)
    finally:
        with connect(dsn) as conn:
            for name in schemas:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
    return rows


def _measure(contender: Any, key: str, measure: Callable[[Any], Any]) -> Any:
    if isinstance(contender, Peer):
        return contender.child("--measure", key, *contender.sizes)
    return measure(contender)


def _count(contender: Any, dsn: str, schemas: list[str], batch: int) -> dict[str, tuple[float, float]]:
    _clean(dsn, schemas)
    if isinstance(contender, Peer):
        return {k: tuple(v) for k, v in contender.child("--count", "--batch", str(batch)).items()}  # type: ignore[misc]
    return contender.count(COUNTED_CALLS, batch)  # type: ignore[no-any-return]


def _sent(counted: dict[str, tuple[float, float]], operations: tuple[str, ...]) -> tuple[float, float]:
    """The statements and round trips of one figure's unit of work: its operations' counts added up."""
    return sum(counted[o][0] for o in operations), sum(counted[o][1] for o in operations)


def _clean(dsn: str, schemas: list[str]) -> None:
    from psycopg import sql

    with connect(dsn) as conn:
        for name in schemas:
            ident = sql.Identifier(name)
            tables = ["jobs"] + (["baseline"] if name == schemas[0] else [])
            for table in tables:
                conn.execute(sql.SQL("TRUNCATE {}.{}").format(ident, sql.Identifier(table)))
                conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(ident, sql.Identifier(table)))



def _child(args: argparse.Namespace) -> int:
    """A peer's measurement in this process (its ``nobroker`` is the peer's): one JSON value on stdout."""
    contender = Nobroker(args.dsn, args.schema, "bench")
    if args.migrate:
        migrate(args.dsn, schema=args.schema)
        result: Any = []
    elif args.count:
        result = contender.count(COUNTED_CALLS, args.batch)
    else:
        measure = {k: m for k, _, _, m in figures(args.jobs, args.batch, args.workers, args.samples)}
        result = measure[args.measure](contender)
    print(json.dumps(result))
    return 0


def _only(only: str | None, workers: int) -> frozenset[str] | None:
    """The figure keys ``--only`` names (None: every figure); ValueError for a name no figure has."""
    if only is None:
        return None
    known = {key for key, _, _, _ in figures(1, 1, workers, 1)}
    keys: set[str] = set()
    for name in filter(None, (part.strip() for part in only.split(","))):
        if name == "per-job":
            keys.update(key.replace("{w}", str(workers)) for key in PER_JOB)
        elif name in known:
            keys.add(name)
        else:
            raise ValueError(f"--only: no figure {name!r} (figures: {', '.join(sorted(known))}, or per-job)")
    if not keys:
        raise ValueError("--only names no figure")
    return frozenset(keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nobroker.bench_pg", description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("NOBROKER_PG_DSN") or os.environ.get("NOBROKER_DSN") or DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="jobs per figure (batch figures use 5x)")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="idle pickups to time")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="turns per figure; the median is kept")
    parser.add_argument("--quick", action="store_true", help="a short run (fewer jobs, samples and rounds)")
    parser.add_argument("--full", action="store_true", help="also the 1,000,000-job figures (many minutes)")
    parser.add_argument("--peer", metavar="SRC", help="also measure the nobroker in this src/ folder, same run")
    parser.add_argument("--md", action="store_true", help="print the table as Markdown")
    parser.add_argument(
        "--only", metavar="FIGURES",
        help="measure just these figures (keys, comma-separated: enqueue_single, enqueue_batch, drain_1_one, "
             "drain_1_batch, drain_4_one, drain_4_batch, worker_1, worker_4, pickup; per-job: those of one job "
             "at a time); no heartbeat tick or NOTIFY figure then",
    )  # fmt: skip
    # A peer's child process (see Peer): one measurement, printed as JSON.
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--migrate", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.schema:
        return _child(args)
    if args.quick:
        args.jobs, args.samples, args.rounds = min(args.jobs, 500), min(args.samples, 50), 1
    if args.workers != DEFAULT_WORKERS:
        TARGETS[f"drain_{args.workers}_one"] = TARGETS.pop("drain_4_one")
        TARGETS[f"drain_{args.workers}_batch"] = TARGETS.pop("drain_4_batch")
        TARGETS[f"worker_{args.workers}"] = TARGETS.pop("worker_4")
    try:
        only = _only(args.only, args.workers)
    except ValueError as exc:
        parser.error(str(exc))
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    rows = run(
        args.dsn, jobs=args.jobs, batch=args.batch, workers=args.workers, samples=args.samples, rounds=args.rounds,
        progress=say, peer=args.peer, only=only,
    )  # fmt: skip
    order = "nobroker / peer / hand-written" if args.peer else "nobroker / hand-written"
    print(
        f"PostgreSQL storage vs a hand-written SKIP LOCKED loop: median of {args.rounds} round(s), "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
        "synchronous_commit on (nobroker's claims: off, durable with their ack); "
        f"statements and round trips per operation: {order}"
    )
    print(render(rows, markdown=args.md))
    missed = [r for r in rows if r["verdict"] == "MISSED"]
    if only is not None:
        return 0 if not missed else 1
    from tools.bench import pg_heartbeat, pg_notify

    print()
    print(pg_heartbeat.render(pg_heartbeat.run(args.dsn)))
    notify_rates = pg_notify.run(args.dsn, progress=say, rounds=args.rounds)
    print()
    print(pg_notify.render(notify_rates))
    if notify_rates["gate/none"] < pg_notify.TARGET:
        missed.append({"key": "notify"})
    if args.full:
        from tools.bench import pg_scale

        scale_rows = pg_scale.run(args.dsn, progress=say)
        print()
        print(pg_scale.render(scale_rows, markdown=args.md))
        missed += [r for r in scale_rows if r["verdict"] == "MISSED"]
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
