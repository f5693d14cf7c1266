"""The file storage at size: memory per job, opening with and without a snapshot, compaction beside a busy peer.

Owns: the figures of a queue of ``plan.pending`` jobs (200,000 by default;
the 1,000,000-job figures of ``--full`` are these at that size): memory per
job, stats() and the first lease after opening, opening a log and a
compacted queue with their snapshot and without one (as after a crash),
closing, and one compaction while another process enqueues without pause.
Each measurement that opens a queue runs in a fresh process, so memory
freed by building it cannot hide the cost. Imports: nobroker (Queue), plan,
report (fmt).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import statistics
import time
from collections.abc import Callable
from typing import Any

from nobroker import Queue
from tools.bench.plan import Figure, Plan, fresh, progress
from tools.bench.report import fmt

#: Longest single enqueue a peer may see while another process compacts ("a few ms").
STALL_TARGET_MS = 10.0
#: Targets per 1,000,000 pending jobs, scaled to the run's size: seconds to open a log
#: after a clean close, and a compacted queue after a clean close.
OPEN_SECONDS_PER_MILLION, OPEN_COMPACTED_SECONDS_PER_MILLION = 4.0, 1.5
#: Targets whatever the size: bytes of memory per pending job, stats() and first lease_one() in ms.
BYTES_PER_JOB, STATS_MS, FIRST_LEASE_MS = 150, 1, 5
#: Compactions beside an enqueuer, at most (each is slow at size; the median is reported).
STALL_ROUNDS = 3


def figures(root: str, plan: Plan) -> list[Figure]:
    """The size, opening and compaction figures, in the table's order."""
    return size_table(root, plan.pending) + stall_table(root, plan.pending, min(plan.runs, STALL_ROUNDS))


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
        Figure(f"open a log of {pending:,} records, no snapshot (after a crash)", size["open_replay"], "s", "", None),
        Figure(f"close writing the snapshot, {label}", size["close"], "s", "", None),
        Figure(f"open a compacted queue of {pending:,} jobs, after a clean close", size["compacted_snapshot"], "s",
               f"<= {compact_target:g}", size["compacted_snapshot"] <= compact_target),
        Figure(f"open a compacted queue of {pending:,} jobs, no snapshot", size["compacted_replay"], "s", "", None),
    ]  # fmt: skip


def stall_table(root: str, pending: int, rounds: int) -> list[Figure]:
    """A compaction of ``pending`` jobs beside an enqueuing peer, ``rounds`` times: the medians."""
    stalls = []
    for i in range(rounds):
        progress(f"compaction of {pending:,} jobs beside an enqueuer ({i + 1}/{rounds})")
        stalls.append(compaction_stall(root, pending))

    def med(key: str) -> float:
        return statistics.median(s[key] for s in stalls)

    held, stall = med("held_ms"), med("stall_ms")
    return [
        Figure(f"longest file-lock hold while compacting {pending:,} jobs", held, "ms",
               f"<= {STALL_TARGET_MS:g}", held <= STALL_TARGET_MS),
        Figure(f"a peer's longest enqueue meanwhile (alone: {fmt(med('alone_ms'))} ms, "
               f"median {fmt(med('median_ms'))} ms)", stall, "ms", f"<= {STALL_TARGET_MS:g}", stall <= STALL_TARGET_MS),
        Figure(f"compaction of {pending:,} jobs (half done), a peer enqueuing", med("compaction"), "s", "", None),
        Figure("the peer's first enqueue after the flip (re-reads the new generation)", med("flip_ms"), "ms", "", None),
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


def _stall_compactor(directory: str, ready: Any, go: Any, out: Any) -> None:
    with Queue(directory, auto_compact=None, lock_timeout=3600) as q:
        # One operation first: the first write after opening a queue with many
        # acked jobs prunes the lease index once, a cost of opening, not of compacting.
        q.requeue_dead()
        ready.release()
        go.wait()
        start = time.perf_counter()
        result = q.compact()
        out.put({"compaction": time.perf_counter() - start, "held": result.lock_held})


def _stall_enqueuer(directory: str, ready: Any, stop: Any, out: Any) -> None:
    with Queue(directory, auto_compact=None, lock_timeout=3600) as q:
        storage: Any = q.storage
        q.enqueue({"t": 0})  # the first write after opening has a one-off cost (see _stall_compactor)
        ready.release()
        marks: list[tuple[float, float, bool]] = []  # (started, seconds, followed the flip)
        while not stop.is_set():
            generation = storage.generation
            start = time.perf_counter()
            q.enqueue({"t": start})
            marks.append((time.time(), time.perf_counter() - start, storage.generation != generation))
        out.put(marks)


def compaction_stall(root: str, n: int) -> dict[str, float]:
    """One process compacts a queue of ``n`` jobs (half of them done) while another enqueues without pause.

    Returns the compaction time, the longest hold of the file lock by the
    compactor (what it can make a peer wait), the longest enqueue of the
    other process while it ran (that wait plus the enqueue's own work and
    fsync, on a disk the compactor is writing to), that process's longest
    enqueue during a second alone before it and its median, for scale, and
    the one enqueue that followed the flip (it re-reads the new generation).
    """
    directory = fresh(root)
    with Queue(directory, fsync=False, auto_compact=None) as q:
        for start_at in range(0, n, 10_000):
            jobs = q.enqueue_many([{"i": i} for i in range(start_at, min(n, start_at + 10_000))])
            q.ack_many(q.lease(len(jobs) // 2))
    if hasattr(os, "sync"):
        os.sync()
    ctx = multiprocessing.get_context("spawn")
    ready, go, stop = ctx.Semaphore(0), ctx.Event(), ctx.Event()
    out, marks_out = ctx.Queue(), ctx.Queue()
    compactor = ctx.Process(target=_stall_compactor, args=(directory, ready, go, out))
    enqueuer = ctx.Process(target=_stall_enqueuer, args=(directory, ready, stop, marks_out))
    compactor.start()
    enqueuer.start()
    ready.acquire()
    ready.acquire()
    quiet = time.time()
    time.sleep(1.0)  # the enqueuer alone first: its longest enqueue without a compaction, for scale
    started = time.time()
    go.set()
    result = out.get(timeout=3600)
    ended = time.time()
    time.sleep(0.3)
    stop.set()
    marks = marks_out.get(timeout=600)
    compactor.join()
    enqueuer.join()
    shutil.rmtree(directory, ignore_errors=True)
    # Every enqueue that overlapped the compaction, except the one that followed
    # the flip (reported apart: it re-reads the new generation, whatever held the lock).
    during = [seconds for at, seconds, flip in marks if at < ended and at + seconds > started and not flip]
    alone = [seconds for at, seconds, _flip in marks if quiet <= at and at + seconds <= started]
    flips = [seconds for _at, seconds, flip in marks if flip]
    return {
        "compaction": result["compaction"],
        "held_ms": result["held"] * 1000,
        "stall_ms": max(during) * 1000 if during else float("nan"),
        "median_ms": statistics.median(during) * 1000 if during else float("nan"),
        "alone_ms": max(alone) * 1000 if alone else float("nan"),
        "enqueues": len(during),
        "flip_ms": max(flips) * 1000 if flips else float("nan"),
    }


__all__ = ["figures"]
