"""The PostgreSQL storage at 1,000,000 jobs: claims, counts, listings and the table's size (``bench --pg --full``).

Owns: ``run(dsn, progress)``, which builds a queue of TABLE_JOBS jobs in a
throwaway schema through the public API (mostly done; AHEAD delayed or
retrying jobs ahead of the runnable ones; AHEAD runnable jobs of another
kind ahead of the kind a worker asks for), then times ``lease(1)`` with and
without a kinds filter, and with the other kind paused or limited,
``stats()``, ``len()`` and a page of each listing,
and measures the table and its indexes before and after CHURN more jobs
pass through a second queue of the same table (enqueued, leased, acked and
pruned by the storage itself), then times a heartbeat's ``extend`` while
other threads of the process read the counts and listings and compact the
queue (``extend_beside_operators``); and ``render(rows)``, the table. Imports:
nobroker (Queue), nobroker.postgres (DEFAULT_SCHEMA, migrate), pg_baseline
(connect), report (markdown_table), psycopg.

Times are medians and 99th percentiles of single calls on a shared machine:
read them beside the targets of issue 19, not as a promise. Sizes are
``pg_total_relation_size`` of the jobs and counts tables (heap, indexes,
TOAST), the steady evidence.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from nobroker import Queue
from nobroker.postgres import DEFAULT_SCHEMA, migrate
from tools.bench.pg_baseline import connect
from tools.bench.report import markdown_table

#: Jobs in the table the claims, counts and listings are timed on.
TABLE_JOBS = 1_000_000
#: Delayed or retrying jobs ahead of the runnable ones, and runnable jobs of another kind ahead of the kind asked for.
AHEAD = 100_000
#: Of the AHEAD delayed jobs, how many are retries (leased once, nacked for an hour) rather than enqueued delayed.
RETRYING = 20_000
#: Runnable jobs of the kind the filtered claims ask for (the last ones enqueued).
WANTED = 2_000
#: Jobs churned through the table after the first size is taken.
CHURN = 1_000_000
#: Jobs per enqueue_many and per lease while filling and churning.
FILL_BATCH = 1000
CHURN_LEASE = 100
#: Timed calls per lease figure, and per count or listing figure.
LEASES = 200
READS = 30
#: Seconds: jobs and retries "ahead" wait this long, far past the run.
LATER = 3600.0
#: Heartbeat renewals timed while the operator reads and a compaction run, at least; seconds between two.
EXTENDS, EXTEND_GAP = 200, 0.01
#: (key, kind, goal) of issue 19's targets: "max" a ceiling in the figure's unit.
TARGETS = {
    "lease_p50": 2.0, "lease_p99": 10.0, "lease_kinds_p50": 2.0, "lease_kinds_p99": 10.0,
    "stats": 20.0, "len": 20.0, "list": 5.0, "size_ratio": 2.0, "extend_p99": 10.0,
}  # fmt: skip
#: The listings timed, as list_jobs takes them.
LISTINGS = ("ready", "delayed", "leased", "done", "dead", None)


def _fill(q: Queue, n: int, *, progress: Callable[[str], None], what: str, **options: Any) -> None:
    for start in range(0, n, FILL_BATCH):
        q.enqueue_many([{"n": i} for i in range(start, min(start + FILL_BATCH, n))], **options)
        if start % 100_000 == 0:
            progress(f"{what}: {start:,} of {n:,}")


def build(q: Queue, *, size: int, ahead: int, retrying: int, wanted: int, progress: Callable[[str], None]) -> None:
    """The queue the figures are timed on: done jobs, then what waits ahead, then the kinds asked for."""
    done = size - 2 * ahead - wanted
    assert done >= 0 and retrying <= ahead, "a table big enough for what waits in it"
    for start in range(0, done, FILL_BATCH):
        count = min(FILL_BATCH, done - start)
        q.enqueue_many([{"n": i} for i in range(count)], kind="finished")
        q.ack_many(q.lease(count, kinds=["finished"]))
        if start % 100_000 == 0:
            progress(f"done jobs: {start:,} of {done:,}")
    _fill(q, ahead - retrying, progress=progress, what="delayed jobs", delay=LATER)
    _fill(q, retrying, progress=progress, what="retrying jobs", kind="retried")
    while True:
        jobs = q.lease(FILL_BATCH, kinds=["retried"])
        if not jobs:
            break
        for job in jobs:
            q.nack(job, delay=LATER)
    _fill(q, ahead, progress=progress, what="jobs of another kind", kind="other")
    _fill(q, wanted, progress=progress, what="jobs of the kind asked for", kind="email")


def _lease_times(q: Queue, n: int, kinds: list[str] | None) -> list[float]:
    """Milliseconds of ``n`` single-job leases (each job acked, untimed, before the next)."""
    out = []
    for _ in range(n):
        started = time.perf_counter()
        jobs = q.lease(1, kinds=kinds)
        out.append((time.perf_counter() - started) * 1000.0)
        assert len(jobs) == 1, "a job to lease every time"
        q.ack(jobs[0])
    return out


def _held_back_leases(q: Queue, n: int, *, pause: bool) -> list[float]:
    """``_lease_times`` of any kind while the other kind's ready jobs ahead are paused, or limited to one running job."""
    if pause:
        q.pause("other")
    else:
        q.set_limit("other", concurrency=1)
        running = q.lease(1, kinds=["other"])
    try:
        return _lease_times(q, n, None)
    finally:
        if pause:
            q.resume("other")
        else:
            q.clear_limit("other")
            q.ack_many(running)


def _times(call: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000.0)
    return out


def _size(dsn: str, schema: str) -> int:
    with connect(dsn) as conn:
        row = conn.execute(
            "SELECT pg_total_relation_size(%s::regclass) + pg_total_relation_size(%s::regclass)",
            (f'"{schema}".jobs', f'"{schema}".counts'),
        ).fetchone()
    return int(row[0])


def churn(dsn: str, schema: str, n: int, progress: Callable[[str], None]) -> None:
    """``n`` jobs through a second queue of the same table: enqueued, leased, acked, pruned as they finish."""
    with Queue(dsn, "churn", schema=schema, migrate=False, done_retention=0.0) as q:
        for start in range(0, n, FILL_BATCH):
            q.enqueue_many([{"n": i} for i in range(FILL_BATCH)])
            while jobs := q.lease(CHURN_LEASE):
                q.ack_many(jobs)
            if start % 100_000 == 0:
                progress(f"churning: {start:,} of {n:,}")


def extend_beside_operators(q: Queue, n: int) -> tuple[list[float], int, float]:
    """Milliseconds of at least ``n`` renewals of one lease, EXTEND_GAP apart, while other threads of
    this process read as an operator's dashboard does (stats, len, listings) and compact the queue.

    Also how many operator reads ran meanwhile and the compaction's seconds:
    the renewals overlapped both (issue 19: one connection behind one mutex
    once made a heartbeat wait 452 ms behind stats() and 1,449 ms behind compact()).
    """
    job = q.lease(1)[0]
    stop, reads, compaction = threading.Event(), [0], [0.0]
    failures: list[BaseException] = []

    def read() -> None:
        while not stop.is_set():
            q.stats()
            len(q)
            q.list_jobs("ready", limit=100)
            q.list_jobs("done", limit=100)
            reads[0] += 1

    def compact() -> None:
        started = time.perf_counter()
        q.compact()
        compaction[0] = time.perf_counter() - started

    def failing_loudly(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # told to the caller after the join: a dead reader is no figure
                failures.append(exc)
                stop.set()
        return run

    threads = [threading.Thread(target=failing_loudly(read)), threading.Thread(target=failing_loudly(compact))]
    for thread in threads:
        thread.start()
    times: list[float] = []
    try:
        while len(times) < n or threads[1].is_alive():
            started = time.perf_counter()
            q.extend(job, 60)
            times.append((time.perf_counter() - started) * 1000.0)
            time.sleep(EXTEND_GAP)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
    q.ack(job)
    return times, reads[0], compaction[0]


def _pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def run(
    dsn: str, *, progress: Callable[[str], None], size: int = TABLE_JOBS, ahead: int = AHEAD,
    retrying: int = RETRYING, wanted: int = WANTED, churned: int = CHURN, leases: int = LEASES, reads: int = READS,
) -> list[dict[str, Any]]:  # fmt: skip
    """Every figure of the table at ``size`` jobs (the defaults: issue 19's); smaller sizes for a toy run."""
    from psycopg import sql

    schema = f"{DEFAULT_SCHEMA}_scale_{uuid.uuid4().hex[:8]}"
    migrate(dsn, schema=schema)
    rows: list[dict[str, Any]] = []

    def row(key: str, label: str, value: float, unit: str, target: str | None = None) -> None:
        goal = TARGETS.get(target or key)
        verdict = "" if goal is None else ("met" if value <= goal else "MISSED")
        rows.append({"key": key, "figure": label, "value": value, "unit": unit,
                     "target": "" if goal is None else f"<= {goal:g} {unit}", "verdict": verdict})  # fmt: skip

    try:
        with Queue(dsn, "scale", schema=schema, migrate=False, done_retention=None) as q:
            build(q, size=size, ahead=ahead, retrying=retrying, wanted=wanted, progress=progress)
            with connect(dsn) as conn:
                conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(schema)))
            progress("timing leases, counts and listings ...")
            plain = _lease_times(q, leases, None)
            kinds = _lease_times(q, leases, ["email"])
            row("lease_p50", f"lease(1), {ahead:,} delayed/retrying ahead, {size:,} jobs: p50", statistics.median(plain), "ms")
            row("lease_p99", "  the same: p99", _pct(plain, 0.99), "ms")
            row("lease_kinds_p50", f"lease(1, kinds=['email']), {ahead:,} of another kind ahead: p50",
                statistics.median(kinds), "ms")  # fmt: skip
            row("lease_kinds_p99", "  the same: p99", _pct(kinds, 0.99), "ms")
            for way, times in (("paused", _held_back_leases(q, leases, pause=True)),
                               ("limited", _held_back_leases(q, leases, pause=False))):  # fmt: skip
                how = "paused" if way == "paused" else "limited to one running job"
                row(f"lease_{way}_p50", f"lease(1), {ahead:,} ready jobs of a kind {how} ahead: p50",
                    statistics.median(times), "ms", "lease_p50")  # fmt: skip
                row(f"lease_{way}_p99", "  the same: p99", _pct(times, 0.99), "ms", "lease_p99")
            row("stats", "stats(): p50", statistics.median(_times(q.stats, reads)), "ms")
            row("len", "len(): p50", statistics.median(_times(lambda: len(q), reads)), "ms")
            for listing in LISTINGS:
                times = _times(lambda: q.list_jobs(listing, limit=100), reads)  # noqa: B023 (called at once)
                row(f"list_{listing}", f"list_jobs({listing}, limit=100): p50", statistics.median(times), "ms", "list")
        before = _size(dsn, schema)
        churn(dsn, schema, churned, progress)
        after = _size(dsn, schema)
        row("size_start", f"table + indexes at {size:,} jobs", before / 2**20, "MiB")
        row("size_churned", f"  after {churned:,} more jobs churned", after / 2**20, "MiB")
        row("size_ratio", "  after / at the start", after / before, "x")
        progress("timing heartbeats beside operator reads and a compaction ...")
        with Queue(dsn, "scale", schema=schema, migrate=False, done_retention=None) as q:
            extends, reads_done, compacting = extend_beside_operators(q, leases)
        beside = f"beside {reads_done:,} rounds of stats/len/listings and a {compacting:.2f} s compaction"
        row("extend_p50", f"extend() of a running job {beside}: p50", statistics.median(extends), "ms")
        row("extend_p99", "  the same: p99", _pct(extends, 0.99), "ms")
    finally:
        with connect(dsn) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return rows


def render(rows: list[dict[str, Any]], *, markdown: bool = False) -> str:
    header = ["figure", "value", "target", "verdict"]
    table = [[r["figure"], f"{r['value']:,.2f} {r['unit']}", r["target"], r["verdict"]] for r in rows]
    if markdown:
        return markdown_table(header, table)
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *table])


__all__ = ["run", "render", "extend_beside_operators", "TABLE_JOBS", "CHURN"]
