"""The file engine beside the disk's own limit and beside a queue on sqlite3, row by row, in the same run.

Owns: the comparison table of ``python make.py bench`` (issue "The file
engine", its table): enqueue (1 process, 4 processes, 8 threads of one
process), lease_one + ack, enqueue_many of 1,000 per call. Each row has
three contenders, measured in the same round and in a rotating order
(interleaved rounds, medians): ``limit`` (120-byte append+fdatasync on the
same disk; four raw writers appending to one file for the 4-process row; two
fsyncs per job for lease + ack), the hand-written sqlite3 queue
(sqlite_queue.py) and nobroker; beside them the ratios nobroker/limit and
nobroker/sqlite3 (medians of each round's ratio), the CPU each operation
cost (process CPU time / operations; the sum over the processes of the
4-process row) and the bytes on disk per job (the folder's growth over the
measured jobs, after a close).
Imports: nobroker (Queue), nobroker.cli.bench (disk_limit, RECORD: the same
yardstick as ``nobroker bench``), plan, report, sqlite_queue.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nobroker import Queue
from nobroker.cli.bench import RECORD, disk_limit
from tools.bench.plan import Plan, fresh, progress
from tools.bench.report import fmt, table
from tools.bench.sqlite_queue import SqliteQueue

#: Every job of the table carries this payload (the issue's).
PAYLOAD = {"resize": "photo.jpg", "w": 640, "h": 480}
#: It as ``json.dumps`` writes it (what the sqlite3 queue stores), and its size.
PAYLOAD_TEXT = json.dumps(PAYLOAD)
PAYLOAD_BYTES = len(PAYLOAD_TEXT.encode())
#: Processes of the 4-process row (and raw writers of its limit); threads of the 8-thread row.
PROCESSES, THREADS = 4, 8
#: Jobs per enqueue_many call.
BATCH = 1000
#: Seconds each raw writer of the 4-writer limit appends (disk_limit's default, for one writer).
LIMIT_SECONDS = 0.4
#: Seconds a child of the 4-process rows may take to start or to finish (generous: the machine is shared).
CHILD_TIMEOUT = 600.0


@dataclass(frozen=True)
class Sample:
    """One contender's run: jobs per second, CPU per job (µs) and bytes on disk per job."""

    rate: float
    cpu_us: float
    bytes_per_job: float


@dataclass(frozen=True)
class Row:
    """What one row measures: its contenders, its limit, its targets."""

    name: str
    limit: str  # "1 writer", "4 writers", "2 fsyncs" or "" (no limit to stand beside)
    sqlite: Callable[[str, int], Sample]
    nobroker: Callable[[str, int], Sample]
    jobs: int
    vs_sqlite: float  # the target: nobroker >= this x sqlite3
    vs_writer: float | None  # the target: nobroker >= this x the 1-writer limit


@dataclass(frozen=True)
class Contest:
    """One row of the table: the medians of every round."""

    name: str
    limit: float | None
    limit_note: str
    sqlite: Sample
    nobroker: Sample
    vs_limit: float | None
    vs_sqlite: float
    target: str
    ok: bool


# ------------------------------------------------------------------ helpers
def folder_bytes(directory: str) -> int:
    """Bytes of every regular file in ``directory``."""
    with os.scandir(directory) as entries:
        return sum(e.stat().st_size for e in entries if e.is_file(follow_symlinks=False))


def _timed(directory: str, jobs: int, run: Callable[[], None], close: Callable[[], None], *,
           before: int = 0, stored: int = 0) -> Sample:
    """Time ``run`` (``jobs`` operations), then ``close`` the queue, measure its folder and remove it.

    The folder's growth over ``before`` bytes is shared among ``stored``
    jobs (``jobs`` when 0). Closing is not timed: it is not an operation.
    """
    cpu, start = time.process_time(), time.perf_counter()
    run()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    close()
    grown = folder_bytes(directory) - before
    shutil.rmtree(directory, ignore_errors=True)
    return Sample(jobs / elapsed, cpu / jobs * 1e6, grown / (stored or jobs))


def _open(kind: str, directory: str) -> Any:
    return SqliteQueue(directory) if kind == "sqlite" else Queue(directory)


def _prepared(root: str, kind: str) -> tuple[str, Any]:
    """A fresh queue of ``kind`` with one job already enqueued (the first write creates files), and its folder."""
    directory = fresh(root)
    q = _open(kind, directory)
    q.enqueue(PAYLOAD)
    return directory, q


# ------------------------------------------------------------------ the contenders
def enqueue_one(kind: str) -> Callable[[str, int], Sample]:
    def measure(root: str, n: int) -> Sample:
        directory, q = _prepared(root, kind)

        def run() -> None:
            for _ in range(n):
                q.enqueue(PAYLOAD)

        return _timed(directory, n, run, q.close, stored=n + 1)

    return measure


def enqueue_threads(kind: str) -> Callable[[str, int], Sample]:
    """``THREADS`` threads of one process: nobroker's share one Queue; sqlite3's each open their own connection."""

    def measure(root: str, n: int) -> Sample:
        directory, shared = _prepared(root, kind)
        per = n // THREADS
        start, done = (threading.Barrier(THREADS + 1, timeout=CHILD_TIMEOUT) for _ in range(2))
        failed: list[BaseException] = []

        def work() -> None:
            # A sqlite3 connection belongs to the thread that made it (and must be closed there).
            q = shared if kind == "nobroker" else _open(kind, directory)
            try:
                start.wait()
                for _ in range(per):
                    q.enqueue(PAYLOAD)
            except BaseException as exc:
                failed.append(exc)
                start.abort()  # the others (and the clock) stop waiting for this one
                raise
            finally:
                done.wait()
                if q is not shared:
                    q.close()

        pool = [threading.Thread(target=work) for _ in range(THREADS)]
        for t in pool:
            t.start()

        def run() -> None:
            start.wait()
            done.wait()

        def close() -> None:
            for t in pool:
                t.join()
            shared.close()
            assert not failed, failed

        return _timed(directory, per * THREADS, run, close, stored=per * THREADS + 1)

    return measure


def _enqueuer(kind: str, directory: str, n: int, ready: Any, go: Any, out: Any) -> None:
    q = _open(kind, directory)
    q.enqueue(PAYLOAD)  # its first write: opening costs, not enqueueing
    ready.release()
    go.wait()
    cpu = time.process_time()
    for _ in range(n):
        q.enqueue(PAYLOAD)
    out.put((time.monotonic(), time.process_time() - cpu))
    q.close()


def _raw_writer(path: str, ready: Any, go: Any, out: Any) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    ready.release()
    go.wait()
    count, cpu, deadline = 0, time.process_time(), time.monotonic() + LIMIT_SECONDS
    while time.monotonic() < deadline:
        os.write(fd, RECORD)
        os.fdatasync(fd)
        count += 1
    out.put((time.monotonic(), time.process_time() - cpu, count))
    os.close(fd)


def in_processes(
    target: Callable[..., None], args: tuple[Any, ...], processes: int = PROCESSES
) -> tuple[float, list[tuple[Any, ...]]]:
    """``processes`` children run ``target(*args, ready, go, out)`` from one start: seconds to the last one's end, their reports.

    Each child puts one report, a tuple whose first item is its time.monotonic()
    at the end, or a text saying why it failed (raised here at once).
    """
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, ready, go, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    for _ in procs:
        assert ready.acquire(timeout=CHILD_TIMEOUT), "a child of the benchmark did not start"
    start = time.monotonic()
    go.set()
    reports = [out.get(timeout=CHILD_TIMEOUT) for _ in procs]
    failed = [r for r in reports if isinstance(r, str)]
    if failed:
        raise RuntimeError(f"a child of the benchmark failed: {failed[0]}")
    for p in procs:
        p.join(CHILD_TIMEOUT)
        assert p.exitcode == 0, f"a child of the benchmark failed ({p.exitcode})"
    return max(r[0] for r in reports) - start, reports


def enqueue_processes(kind: str) -> Callable[[str, int], Sample]:
    def measure(root: str, n: int) -> Sample:
        directory, q = _prepared(root, kind)
        q.close()
        per = n // PROCESSES
        elapsed, reports = in_processes(_enqueuer, (kind, directory, per))
        total = per * PROCESSES
        # Each child enqueued one job before the start too: the folder holds total + PROCESSES + 1 jobs.
        grown = folder_bytes(directory) / (total + PROCESSES + 1)
        shutil.rmtree(directory, ignore_errors=True)
        return Sample(total / elapsed, sum(r[1] for r in reports) / total * 1e6, grown)

    return measure


def lease_ack(kind: str) -> Callable[[str, int], Sample]:
    def measure(root: str, n: int) -> Sample:
        directory = fresh(root)
        with _open(kind, directory) as q:
            for start in range(0, n, BATCH):
                q.enqueue_many([PAYLOAD] * min(BATCH, n - start))
        before = folder_bytes(directory)
        q = _open(kind, directory)

        def run() -> None:
            for _ in range(n):
                job = q.lease_one()
                assert job is not None
                q.ack(job)

        return _timed(directory, n, run, q.close, before=before)

    return measure


def enqueue_many(kind: str) -> Callable[[str, int], Sample]:
    def measure(root: str, n: int) -> Sample:
        directory, q = _prepared(root, kind)
        calls = max(2, n // 100)  # 20 calls of 1,000 at the default 2,000 jobs

        def run() -> None:
            for _ in range(calls):
                q.enqueue_many([PAYLOAD] * BATCH)

        return _timed(directory, calls * BATCH, run, q.close, stored=calls * BATCH + 1)

    return measure


# ------------------------------------------------------------------ the limits
def four_writers(root: str) -> float:
    """``PROCESSES`` processes appending 120 bytes + fdatasync to one file (O_APPEND), in total per second."""
    path = os.path.join(root, "limit4.probe")
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    try:
        elapsed, reports = in_processes(_raw_writer, (path,))
        return sum(r[2] for r in reports) / elapsed
    finally:
        os.unlink(path)


def rows(plan: Plan) -> list[Row]:
    """The table's rows, in its order (the issue's four, then 8 threads of one process)."""
    n = plan.jobs
    return [
        Row("enqueue, 1 process", "1 writer", enqueue_one("sqlite"), enqueue_one("nobroker"), n, 1.0, 0.8),
        Row(f"enqueue, {PROCESSES} processes", "4 writers", enqueue_processes("sqlite"), enqueue_processes("nobroker"),
            2 * n, 1.0, 2.0),
        Row("lease_one + ack, 1 process", "2 fsyncs", lease_ack("sqlite"), lease_ack("nobroker"), n, 1.0, 0.5),
        Row(f"enqueue_many, {BATCH:,} per call", "", enqueue_many("sqlite"), enqueue_many("nobroker"), n, 1.5, None),
        Row(f"enqueue, {THREADS} threads of 1 process", "1 writer", enqueue_threads("sqlite"),
            enqueue_threads("nobroker"), 2 * n, 1.0, 2.0),
    ]  # fmt: skip


def contest(root: str, row: Row, runs: int) -> Contest:
    """``runs`` rounds of ``row``: each measures the limit(s), sqlite3 and nobroker, in an order that rotates."""
    rounds: list[dict[str, Any]] = []
    for r in range(runs):
        progress(f"{row.name} ({r + 1}/{runs})")
        got: dict[str, Any] = {}
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("writer", lambda: disk_limit(root)),
            ("sqlite", lambda: row.sqlite(root, row.jobs)),
            ("nobroker", lambda: row.nobroker(root, row.jobs)),
        ]
        if row.limit == "4 writers":
            steps.append(("writers", lambda: four_writers(root)))
        for key, step in steps[r % len(steps):] + steps[: r % len(steps)]:
            got[key] = step()
        got["limit"] = {"1 writer": got["writer"], "4 writers": got.get("writers"), "2 fsyncs": got["writer"] / 2}.get(row.limit)
        rounds.append(got)
    return _medians(row, rounds)


def _medians(row: Row, rounds: list[dict[str, Any]]) -> Contest:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    def sample(key: str) -> Sample:
        return Sample(*(med([getattr(r[key], f) for r in rounds]) for f in ("rate", "cpu_us", "bytes_per_job")))

    vs_sqlite = med([r["nobroker"].rate / r["sqlite"].rate for r in rounds])
    vs_limit = med([r["nobroker"].rate / r["limit"] for r in rounds]) if row.limit else None
    ok, target = vs_sqlite >= row.vs_sqlite, f">= {row.vs_sqlite:g} x sqlite3"
    if row.vs_writer is not None:
        vs_writer = med([r["nobroker"].rate / r["writer"] for r in rounds])
        ok = ok and vs_writer >= row.vs_writer
        target += f", >= {row.vs_writer:g} x 1-writer limit (now {vs_writer:.2f} x)"
    limit = med([r["limit"] for r in rounds]) if row.limit else None
    return Contest(row.name, limit, row.limit, sample("sqlite"), sample("nobroker"), vs_limit, vs_sqlite, target, ok)


def contests(root: str, plan: Plan) -> list[Contest]:
    """Every row of the table, measured in scratch folders under ``root``."""
    return [contest(root, row, plan.runs) for row in rows(plan)]


#: What the table's columns count, printed under it.
NOTE = (
    "CPU: the process's CPU time over the operations (the sum over the processes of the 4-process row). "
    "bytes/job: the queue's folder after a clean close, over the jobs in it (for lease + ack, how much it grew); "
    "nobroker's close leaves a snapshot once 20,000 records went by, counted too (the enqueue_many row's 20,000 jobs)."
)


def render(results: list[Contest], *, markdown: bool) -> str:
    """The comparison table: the three contenders, the two ratios, CPU and bytes per job, the target."""
    header = ["figure", "limit", "sqlite3", "nobroker", "nobroker/limit", "nobroker/sqlite3",
              "CPU µs/job (sqlite3 / nobroker)", f"bytes/job on disk (payload {PAYLOAD_BYTES})", "target", "verdict"]
    cells = [
        [
            c.name,
            "-" if c.limit is None else f"{fmt(c.limit)}/s ({c.limit_note})",
            f"{fmt(c.sqlite.rate)}/s",
            f"{fmt(c.nobroker.rate)}/s",
            "-" if c.vs_limit is None else f"{c.vs_limit:.2f} x",
            f"{c.vs_sqlite:.2f} x",
            f"{fmt(c.sqlite.cpu_us)} / {fmt(c.nobroker.cpu_us)}",
            f"{fmt(c.sqlite.bytes_per_job)} / {fmt(c.nobroker.bytes_per_job)}",
            c.target,
            "met" if c.ok else "short",
        ]
        for c in results
    ]  # fmt: skip
    return table(header, cells, markdown=markdown)


__all__ = ["contests", "render", "Contest", "Sample", "PAYLOAD", "PAYLOAD_TEXT", "PAYLOAD_BYTES", "NOTE"]
