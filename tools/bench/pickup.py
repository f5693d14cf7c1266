"""Pickup and idle CPU: how soon an idle Worker holds a job that another process enqueued, and what waiting costs.

Owns: the pickup latency (median and p99, each job enqueued while the worker
is idle) and the idle worker's CPU beside what a 100 ms poll of nobroker
0.1.2's kind costs. Imports: nobroker (Queue, Worker), plan.
"""

from __future__ import annotations

import multiprocessing
import random
import statistics
import time
from typing import Any

from nobroker import Queue, Worker
from tools.bench.plan import Figure, Plan, fresh, progress

#: Pickup targets, milliseconds: the median, and the 99th percentile.
PICKUP_MEDIAN_MS, PICKUP_P99_MS = 5, 25
#: Seconds the idle worker (and then the poll loop) are watched for their CPU.
IDLE_SECONDS = 2.0


def figures(root: str, plan: Plan) -> list[Figure]:
    """The pickup and idle CPU figures, in the table's order."""
    progress("pickup latency")
    p = pickup(root, plan.pickups)
    return [
        Figure("pickup by an idle worker, median", p["median_ms"], "ms", f"<= {PICKUP_MEDIAN_MS}", p["median_ms"] <= PICKUP_MEDIAN_MS),
        Figure("pickup by an idle worker, p99", p["p99_ms"], "ms", f"<= {PICKUP_P99_MS}", p["p99_ms"] <= PICKUP_P99_MS),
        Figure("idle worker CPU (100 ms poll costs %.2f%%)" % (100 * p["poll_cpu"]), 100 * p["idle_cpu"], "% of a core",
               "<= the 100 ms poll", p["idle_cpu"] <= max(p["poll_cpu"], 0.001)),
    ]  # fmt: skip


def _idle_worker(directory: str, n: int, ready: Any, out: Any) -> None:
    latencies: list[float] = []
    with Queue(directory) as q:
        def handle(job: Any) -> None:
            latencies.append(time.time() - job.payload["t"])

        ready.release()
        cpu = time.process_time()
        Worker(q, handle, max_jobs=n, handle_signals=False).run()
        out.put({"latencies": latencies, "cpu": time.process_time() - cpu})


def _idle_cpu(directory: str, seconds: float, out: Any) -> None:
    with Queue(directory) as q:
        cpu = time.process_time()
        Worker(q, lambda job: None, idle_timeout=seconds, handle_signals=False).run()
        ours = time.process_time() - cpu
        cpu = time.process_time()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:  # what a 100 ms poll of 0.1.2's kind costs
            q.lease_one()
            time.sleep(0.1)
        out.put({"ours": ours / seconds, "poll": (time.process_time() - cpu) / seconds})


def pickup(root: str, n: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    directory = fresh(root)
    Queue(directory).close()
    ready, out = ctx.Semaphore(0), ctx.Queue()
    p = ctx.Process(target=_idle_worker, args=(directory, n, ready, out))
    p.start()
    ready.acquire()
    time.sleep(0.3)
    with Queue(directory) as q:
        for _ in range(n):
            time.sleep(random.uniform(0.03, 0.08))  # the worker is idle again when the job lands
            q.enqueue({"t": time.time()})
    result = out.get(timeout=300)
    p.join()
    lat = sorted(result["latencies"])
    cpu_out = ctx.Queue()
    c = ctx.Process(target=_idle_cpu, args=(fresh(root), IDLE_SECONDS, cpu_out))
    c.start()
    cpu = cpu_out.get(timeout=60)
    c.join()
    return {
        "median_ms": statistics.median(lat) * 1000,
        "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
        "idle_cpu": cpu["ours"],
        "poll_cpu": cpu["poll"],
    }


__all__ = ["figures"]
