"""The file storage's throughput: a Worker's drains (threads, processes, both, and CPU-bound jobs).

Owns: those measurements and their figures, each beside ``limit``, the rate of
120-byte append+fdatasync on the same disk, measured before each repetition
(the machine is shared and noisy: the ratio is what means something).
Enqueue, lease + ack and enqueue_many are engine.py's, beside sqlite3.
Imports: nobroker (Queue, Worker), nobroker.cli.bench (disk_limit, the same
yardstick as ``nobroker bench``), plan.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from nobroker import Queue, Worker
from nobroker.cli.bench import disk_limit
from tools.bench.plan import Figure, Plan, fresh, progress

#: The share of the disk's append+fsync rate each figure aims at (a batch of appends shares one fsync).
TARGET_RATIOS = {"shared": 2.0}
#: The Worker's drains of no-op jobs: (label, processes, concurrency per process). Threads of one
#: process share one fsync per batch of acks; processes each write their own.
DRAINS = (
    ("Worker(concurrency=8)", None, 8),
    ("Worker(processes=4)", 4, 1),
    ("Worker(processes=4, concurrency=8)", 4, 8),
)
#: The drain that processes are for: jobs whose handler burns this much CPU (at most CPU_JOBS of them),
#: by a pool beside 8 threads of one process (which share one core through the GIL).
CPU_JOBS, CPU_SECONDS = 400, 0.002
CPU_TARGET = 1.5


def figures(root: str, plan: Plan) -> list[Figure]:
    """Every throughput figure, in the table's order."""
    out: list[Figure] = []

    def against_limit(name: str, fn: Callable[[], float], target_ratio: float) -> None:
        values, ratios, limits = [], [], []
        for i in range(plan.runs):
            progress(f"{name} ({i + 1}/{plan.runs})")
            limit = disk_limit(root)
            value = fn()
            limits.append(limit)
            values.append(value)
            ratios.append(value / limit)
        ratio = statistics.median(ratios)
        out.append(
            Figure(name, statistics.median(values), "jobs/s", f">= {target_ratio:g} x limit", ratio >= target_ratio,
                   statistics.median(limits), ratio)
        )  # fmt: skip

    shared = TARGET_RATIOS["shared"]
    drain = plan.drain_jobs
    for label, processes, concurrency in DRAINS:
        run = functools.partial(worker_drain, root, drain, concurrency, processes)
        against_limit(f"{label} drains {drain:,}", run, shared)
    out.append(cpu_bound_drain(root, plan))

    return out


def _no_op(job: Any) -> None:
    return None


def _burn_cpu(job: Any) -> None:
    until = time.thread_time() + CPU_SECONDS  # this thread's own CPU, whatever the others do
    while time.thread_time() < until:
        pass


def worker_drain(
    root: str, n: int, concurrency: int = 8, processes: int | None = None, handler: Callable[[Any], Any] = _no_op
) -> float:
    """Jobs per second a Worker drains ``n`` jobs at; with ``processes``, from fork to the last child's exit."""
    with Queue(fresh(root)) as q:
        for start_at in range(0, n, 10_000):
            q.enqueue_many([{"i": i} for i in range(start_at, min(n, start_at + 10_000))])
        worker = Worker(q, handler, concurrency=concurrency, max_jobs=n, handle_signals=False, processes=processes)
        start = time.perf_counter()
        stats = worker.run()
        elapsed = time.perf_counter() - start
        assert stats.succeeded == n, stats
        return n / elapsed


def cpu_bound_drain(root: str, plan: Plan) -> Figure:
    """A pool of one process per core (2 to 4) beside 8 threads, on jobs that burn CPU_SECONDS each, interleaved."""
    n, processes = min(CPU_JOBS, plan.drain_jobs), max(2, min(4, os.cpu_count() or 2))
    threads, pool = [], []
    for i in range(plan.runs):
        progress(f"CPU-bound drain ({i + 1}/{plan.runs})")
        threads.append(worker_drain(root, n, 8, None, _burn_cpu))
        pool.append(worker_drain(root, n, 1, processes, _burn_cpu))
    ratio = statistics.median(p / t for p, t in zip(pool, threads))
    return Figure(
        f"Worker(processes={processes}) drains {n} jobs of {CPU_SECONDS * 1000:g} ms CPU "
        f"(8 threads: {statistics.median(threads):,.0f}/s; {ratio:.2f} x)",
        statistics.median(pool), "jobs/s", f">= {CPU_TARGET:g} x 8 threads", ratio >= CPU_TARGET,
    )  # fmt: skip


__all__ = ["figures"]
