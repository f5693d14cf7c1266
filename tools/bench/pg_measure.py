"""The PostgreSQL benchmark's timed runs that need processes: drains by worker processes, and the idle pickup.

Owns: ``measure_drain`` (worker processes each draining prefilled jobs
with the contender's ``drain``), ``measure_worker_drain`` (nobroker's Worker,
in one process or a pool, against the contender's own), ``measure_pickup``
(an idle worker's latency from an enqueue to holding the job) and
CHILD_TIMEOUT. A contender is any object with ``fill``, ``drain``,
``listen`` and ``produce`` (pg.py's Nobroker, pg_baseline's Baseline).
Imports: nothing of nobroker.
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import time
from typing import Any

#: Longest wait for a worker process to report before the run is called failed.
CHILD_TIMEOUT = 120.0


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
    return _drain_rate(contender, jobs, workers, batch)


def measure_worker_drain(contender: Any, jobs: int, processes: int, fill_batch: int) -> float:
    """Jobs per second for the contender's worker, one job at a time per process, draining ``jobs`` prefilled jobs.

    nobroker's is its Worker (``work``: concurrency=1, in this process or a
    pool of ``processes``, timed from run() to its return, its start
    included); a contender without one (the hand-written loop) drains with
    its own loop, one job per claim, as in measure_drain but timed from
    before its processes start, so that each side's start counts.
    """
    contender.fill(jobs, fill_batch)
    work = getattr(contender, "work", None)
    if work is None:
        return _drain_rate(contender, jobs, processes, 1, from_start=True)
    return jobs / float(work(jobs, processes))


def _drain_rate(contender: Any, jobs: int, workers: int, batch: int, *, from_start: bool = False) -> float:
    """Jobs per second for ``workers`` processes draining ``jobs``: from the go, or ``from_start`` of the processes."""
    ctx = _ctx()
    before = time.perf_counter()
    go = ctx.Event()
    counts = ctx.Queue()
    readies = [ctx.Event() for _ in range(workers)]
    procs = [ctx.Process(target=_drain_child, args=(contender, batch, r, go, counts)) for r in readies]
    for p in procs:
        p.start()
    for r in readies:
        r.wait(60)
    started = before if from_start else time.perf_counter()
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
