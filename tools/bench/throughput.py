"""The file storage's throughput: a Worker's drains (threads, processes, both).

Owns: those measurements and their figures, each beside ``limit``, the rate of
120-byte append+fdatasync on the same disk, measured before each repetition
(the machine is shared and noisy: the ratio is what means something).
Enqueue, lease + ack and enqueue_many are engine.py's, beside sqlite3.
Imports: nobroker (Queue, Worker), nobroker.cli.bench (disk_limit, the same
yardstick as ``nobroker bench``), plan.
"""

from __future__ import annotations

import functools
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

    return out


def _no_op(job: Any) -> None:
    return None


def worker_drain(root: str, n: int, concurrency: int = 8, processes: int | None = None) -> float:
    """Jobs per second a Worker drains ``n`` no-op jobs at; with ``processes``, from fork to the last child's exit."""
    with Queue(fresh(root)) as q:
        for start_at in range(0, n, 10_000):
            q.enqueue_many([{"i": i} for i in range(start_at, min(n, start_at + 10_000))])
        worker = Worker(q, _no_op, concurrency=concurrency, max_jobs=n, handle_signals=False, processes=processes)
        start = time.perf_counter()
        stats = worker.run()
        elapsed = time.perf_counter() - start
        assert stats.succeeded == n, stats
        return n / elapsed


__all__ = ["figures"]
