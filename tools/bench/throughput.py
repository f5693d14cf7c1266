"""The file storage's throughput: a Worker's drain.

Owns: that measurement and its figure, beside ``limit``, the rate of
120-byte append+fdatasync on the same disk, measured before each repetition
(the machine is shared and noisy: the ratio is what means something).
Enqueue, lease + ack and enqueue_many are engine.py's, beside sqlite3.
Imports: nobroker (Queue, Worker), nobroker.cli.bench (disk_limit, the same
yardstick as ``nobroker bench``), plan.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from nobroker import Queue, Worker
from nobroker.cli.bench import disk_limit
from tools.bench.plan import Figure, Plan, fresh, progress

#: The share of the disk's append+fsync rate each figure aims at (a batch of appends shares one fsync).
TARGET_RATIOS = {"shared": 2.0}


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
    against_limit(f"Worker(concurrency=8) drains {drain:,}", lambda: worker_drain(root, drain), shared)

    return out


def worker_drain(root: str, n: int, concurrency: int = 8) -> float:
    with Queue(fresh(root)) as q:
        for start_at in range(0, n, 10_000):
            q.enqueue_many([{"i": i} for i in range(start_at, min(n, start_at + 10_000))])
        worker = Worker(q, lambda job: None, concurrency=concurrency, max_jobs=n, handle_signals=False)
        start = time.perf_counter()
        stats = worker.run()
        elapsed = time.perf_counter() - start
        assert stats.succeeded == n, stats
        return n / elapsed


__all__ = ["figures"]
