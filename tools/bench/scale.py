"""The file storage at size: memory per job, opening with and without a snapshot.

Owns: the figures of a queue of ``plan.pending`` jobs (200,000 by default;
the 1,000,000-job figures of ``--full`` are these at that size): memory per
job, stats() and the first lease after opening, opening a log and a
compacted queue with their snapshot and without one (the snapshot removed),
closing. Each measurement that opens a queue runs in a fresh process, so
memory freed by building it cannot hide the cost. What a compaction or an
opening costs the other processes is peers.py's. Imports: nobroker (Queue),
plan.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from nobroker import Queue
from tools.bench.plan import Figure, Plan, fresh, progress

#: Targets per 1,000,000 pending jobs, scaled to the run's size: seconds to open a log
#: after a clean close, and a compacted queue after a clean close.
OPEN_SECONDS_PER_MILLION, OPEN_COMPACTED_SECONDS_PER_MILLION = 4.0, 1.5
#: Targets whatever the size: bytes of memory per pending job, stats() and first lease_one() in ms.
BYTES_PER_JOB, STATS_MS, FIRST_LEASE_MS = 150, 1, 5


def figures(root: str, plan: Plan) -> list[Figure]:
    """The size and opening figures, in the table's order."""
    return size_table(root, plan.pending)


def size_table(root: str, pending: int) -> list[Figure]:
    """Memory, stats(), first lease, opening and closing, for a queue of ``pending`` jobs."""
    progress(f"{pending:,} pending jobs")
    size = size_figures(root, pending)
    label = f"{pending:,} pending"
    # The targets apply to opening after a clean close (its snapshot present); without
    # one (after a crash, or the first open after a compaction) the whole log is replayed.
    open_target = OPEN_SECONDS_PER_MILLION * pending / 1_000_000
    compact_target = OPEN_COMPACTED_SECONDS_PER_MILLION * pending / 1_000_000
    return [
        Figure(f"memory per job, {label}", size["per_job"], "bytes", f"<= {BYTES_PER_JOB}", size["per_job"] <= BYTES_PER_JOB),
        Figure(f"stats(), {label}", size["stats_ms"], "ms", f"<= {STATS_MS}", size["stats_ms"] <= STATS_MS),
        Figure(f"first lease_one() after open, {label}", size["first_ms"], "ms", f"<= {FIRST_LEASE_MS}",
               size["first_ms"] <= FIRST_LEASE_MS),
        Figure(f"open a log of {pending:,} records, after a clean close", size["open_snapshot"], "s",
               f"<= {open_target:g}", size["open_snapshot"] <= open_target),
        # Built with fsync off, so no checkpoint was written: every record is replayed. A crash
        # of a durable writer replays only what follows its last checkpoint (peers.py measures it).
        Figure(f"open a log of {pending:,} records, every record replayed (no snapshot, no checkpoint)",
               size["open_replay"], "s", "", None),
        Figure(f"close writing the snapshot, {label}", size["close"], "s", "", None),
        Figure(f"open a compacted queue of {pending:,} jobs, after a clean close", size["compacted_snapshot"], "s",
               f"<= {compact_target:g}", size["compacted_snapshot"] <= compact_target),
        Figure(f"open a compacted queue of {pending:,} jobs, no snapshot", size["compacted_replay"], "s", "", None),
    ]  # fmt: skip


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _build(directory: str, n: int) -> None:
    with Queue(directory, fsync=False, auto_compact=None) as q:
        for start_at in range(0, n, 10_000):
            q.enqueue_many([{"i": i} for i in range(start_at, min(n, start_at + 10_000))])
    if hasattr(os, "sync"):
        os.sync()  # the build above skipped fsync; its dirty pages must not bill the first lease


def _size_figures(directory: str, n: int, out: Any) -> None:
    # A process that did not build the queue: memory the build freed but the
    # allocator kept would otherwise be reused by the open and hide its cost.
    # No snapshot exists yet (the build was not durable): this open replays the log.
    before = _rss()
    start = time.perf_counter()
    q = Queue(directory, auto_compact=None)
    opened = time.perf_counter() - start
    per_job = (_rss() - before) / n
    start = time.perf_counter()
    q.stats()
    stats_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    q.lease_one()
    first_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    q.close()  # a clean close: writes the snapshot
    closed = time.perf_counter() - start
    out.put({"open_replay": opened, "per_job": per_job, "stats_ms": stats_ms, "first_ms": first_ms, "close": closed})


def _open_once(directory: str, then: str, out: Any) -> None:
    """Time one open in a fresh process; ``then``: "close", "compact" (then close) or "drop-snapshot"."""
    start = time.perf_counter()
    q = Queue(directory, auto_compact=None)
    opened = time.perf_counter() - start
    used = q.storage._snap_loaded  # type: ignore[attr-defined]
    if then == "compact":
        q.compact()
    q.close()
    if then == "drop-snapshot":
        for name in os.listdir(directory):
            if name.endswith(".snap"):
                os.unlink(os.path.join(directory, name))
    out.put({"open": opened, "snapshot": used})


def size_figures(root: str, n: int, runs: int = 3) -> dict[str, float]:
    """Open figures with a snapshot (after a clean close) and without one (as after a crash)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    directory = fresh(root)

    def child(target: Callable[..., None], *args: Any) -> dict[str, Any]:
        p = ctx.Process(target=target, args=(directory, *args, out))
        p.start()
        result: dict[str, Any] = out.get(timeout=3600)
        p.join()
        return result

    build = ctx.Process(target=_build, args=(directory, n))
    build.start()
    build.join()
    result = child(_size_figures, n)

    def opens(expect_snapshot: bool, last: str) -> float:
        times = []
        for i in range(runs):
            got = child(_open_once, last if i == runs - 1 else "close")
            assert got["snapshot"] == expect_snapshot, "the bench expected the snapshot (not) to be used"
            times.append(got["open"])
        return statistics.median(times)

    result["open_snapshot"] = opens(True, "compact")  # the last one compacts, leaving no snapshot
    # The compacted generation: replayed once (its close writes the snapshot), then opened with it.
    result["compacted_replay"] = child(_open_once, "close")["open"]
    result["compacted_snapshot"] = opens(True, "close")
    return result


__all__ = ["figures"]
