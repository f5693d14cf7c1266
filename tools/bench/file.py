"""The benchmark: every figure beside the disk's own append+fsync rate.

Owns: ``python -m nobroker.bench`` (and ``python make.py bench``). Imports:
jobs, queue, worker, quickbench (disk_limit); bench_pg for ``--pg``.
``nobroker bench`` is the quick figure of quickbench.py, which ships in the
single-file app; this suite does not.

This machine is shared and noisy, so no figure is quoted alone: before each
repetition the bench measures ``limit``, the rate of 120-byte append+fdatasync
on the same filesystem, and reports the median value and the median ratio.
Benchmarks are never timed tests: the tests check behaviour, this checks speed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nobroker.cli.bench import disk_limit  # the same yardstick as `nobroker bench`

#: Longest single enqueue a peer may see while another process compacts ("a few ms").
STALL_TARGET_MS = 10.0


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    target: str
    ok: bool | None
    limit: float | None = None
    ratio: float | None = None


def _progress(text: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\033[Kbench: {text}")
        sys.stderr.flush()


def _fresh(root: str) -> str:
    return tempfile.mkdtemp(dir=root)


# ---------------------------------------------------------------- throughput figures
def enqueue_single(root: str, n: int) -> float:
    from nobroker.queue import Queue

    with Queue(_fresh(root)) as q:
        start = time.perf_counter()
        for i in range(n):
            q.enqueue({"i": i})
        return n / (time.perf_counter() - start)


def enqueue_threads(root: str, n: int, threads: int = 8) -> float:
    from nobroker.queue import Queue

    with Queue(_fresh(root)) as q:
        per = n // threads
        gate = threading.Barrier(threads + 1)

        def run() -> None:
            gate.wait()
            for i in range(per):
                q.enqueue({"i": i})

        pool = [threading.Thread(target=run) for _ in range(threads)]
        for t in pool:
            t.start()
        gate.wait()
        start = time.perf_counter()
        for t in pool:
            t.join()
        return per * threads / (time.perf_counter() - start)


def _producer(directory: str, n: int, ready: Any, go: Any) -> None:
    from nobroker.queue import Queue

    with Queue(directory) as q:
        ready.release()
        go.wait()
        for i in range(n):
            q.enqueue({"i": i})


def enqueue_processes(root: str, n: int, processes: int = 4) -> float:
    ctx = multiprocessing.get_context("spawn")
    directory = _fresh(root)
    ready, go = ctx.Semaphore(0), ctx.Event()
    per = n // processes
    procs = [ctx.Process(target=_producer, args=(directory, per, ready, go)) for _ in range(processes)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    start = time.perf_counter()
    go.set()
    for p in procs:
        p.join()
    return per * processes / (time.perf_counter() - start)


def lease_ack_single(root: str, n: int) -> float:
    from nobroker.queue import Queue

    with Queue(_fresh(root)) as q:
        q.enqueue_many([{"i": i} for i in range(n)])
        start = time.perf_counter()
        for _ in range(n):
            q.ack(q.lease_one())  # type: ignore[arg-type]
        return n / (time.perf_counter() - start)


def worker_drain(root: str, n: int, concurrency: int = 8) -> float:
    from nobroker.queue import Queue
    from nobroker.worker import Worker

    with Queue(_fresh(root)) as q:
        for start_at in range(0, n, 10_000):
            q.enqueue_many([{"i": i} for i in range(start_at, min(n, start_at + 10_000))])
        worker = Worker(q, lambda job: None, concurrency=concurrency, max_jobs=n, handle_signals=False)
        start = time.perf_counter()
        stats = worker.run()
        elapsed = time.perf_counter() - start
        assert stats.succeeded == n, stats
        return n / elapsed


def enqueue_many_rate(root: str, batch: int = 1000, rounds: int = 20) -> float:
    from nobroker.queue import Queue

    with Queue(_fresh(root)) as q:
        rates = []
        for r in range(rounds):
            payloads = [{"i": i, "r": r} for i in range(batch)]
            start = time.perf_counter()
            q.enqueue_many(payloads)
            rates.append(batch / (time.perf_counter() - start))
        return statistics.median(rates)


# ---------------------------------------------------------------- size figures (own process)
def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _build(directory: str, n: int) -> None:
    from nobroker.queue import Queue

    with Queue(directory, fsync=False, auto_compact=None) as q:
        for start_at in range(0, n, 10_000):
            q.enqueue_many([{"i": i} for i in range(start_at, min(n, start_at + 10_000))])
    if hasattr(os, "sync"):
        os.sync()  # the build above skipped fsync; its dirty pages must not bill the first lease


def _size_figures(directory: str, n: int, out: Any) -> None:
    # A process that did not build the queue: memory the build freed but the
    # allocator kept would otherwise be reused by the open and hide its cost.
    # No snapshot exists yet (the build was not durable): this open replays the log.
    from nobroker.queue import Queue

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
    from nobroker.queue import Queue

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
    directory = _fresh(root)

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


# ---------------------------------------------------------------- compaction beside an enqueuer
def _stall_compactor(directory: str, ready: Any, go: Any, out: Any) -> None:
    from nobroker.queue import Queue

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
    from nobroker.queue import Queue

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
    from nobroker.queue import Queue

    directory = _fresh(root)
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


# ---------------------------------------------------------------- pickup latency
def _idle_worker(directory: str, n: int, ready: Any, out: Any) -> None:
    from nobroker.queue import Queue
    from nobroker.worker import Worker

    latencies: list[float] = []
    with Queue(directory) as q:
        def handle(job: Any) -> None:
            latencies.append(time.time() - job.payload["t"])

        ready.release()
        cpu = time.process_time()
        Worker(q, handle, max_jobs=n, handle_signals=False).run()
        out.put({"latencies": latencies, "cpu": time.process_time() - cpu})


def _idle_cpu(directory: str, seconds: float, out: Any) -> None:
    from nobroker.queue import Queue
    from nobroker.worker import Worker

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
    from nobroker.queue import Queue

    ctx = multiprocessing.get_context("spawn")
    directory = _fresh(root)
    Queue(directory).close()
    ready, out = ctx.Semaphore(0), ctx.Queue()
    p = ctx.Process(target=_idle_worker, args=(directory, n, ready, out))
    p.start()
    ready.acquire()
    time.sleep(0.3)
    import random

    with Queue(directory) as q:
        for _ in range(n):
            time.sleep(random.uniform(0.03, 0.08))  # the worker is idle again when the job lands
            q.enqueue({"t": time.time()})
    result = out.get(timeout=300)
    p.join()
    lat = sorted(result["latencies"])
    cpu_out = ctx.Queue()
    c = ctx.Process(target=_idle_cpu, args=(_fresh(root), 2.0, cpu_out))
    c.start()
    cpu = cpu_out.get(timeout=60)
    c.join()
    return {
        "median_ms": statistics.median(lat) * 1000,
        "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
        "idle_cpu": cpu["ours"],
        "poll_cpu": cpu["poll"],
    }


# ---------------------------------------------------------------- the run
def run(root: str, *, quick: bool, full: bool, runs: int) -> list[Figure]:
    figures: list[Figure] = []
    scale = 0.4 if quick else 1.0

    def against_limit(name: str, fn: Callable[[], float], target_ratio: float) -> None:
        values, ratios, limits = [], [], []
        for i in range(runs):
            _progress(f"{name} ({i + 1}/{runs})")
            limit = disk_limit(root)
            value = fn()
            limits.append(limit)
            values.append(value)
            ratios.append(value / limit)
        ratio = statistics.median(ratios)
        figures.append(
            Figure(name, statistics.median(values), "jobs/s", f">= {target_ratio:g} x limit", ratio >= target_ratio,
                   statistics.median(limits), ratio)
        )  # fmt: skip

    n = int(2000 * scale)
    against_limit("enqueue, 1 thread", lambda: enqueue_single(root, n), 0.8)
    against_limit("enqueue, 8 threads", lambda: enqueue_threads(root, 2 * n), 2.0)
    against_limit("enqueue, 4 processes", lambda: enqueue_processes(root, 2 * n), 2.0)
    against_limit("lease_one + ack, 1 thread", lambda: lease_ack_single(root, n), 0.5)
    drain_n = 20_000 if full else int(8000 * scale)
    against_limit(f"Worker(concurrency=8) drains {drain_n:,}", lambda: worker_drain(root, drain_n), 2.0)

    _progress("enqueue_many")
    many = statistics.median(enqueue_many_rate(root) for _ in range(runs))
    figures.append(Figure("enqueue_many, 1,000 per call", many, "jobs/s", ">= 200,000", many >= 200_000))

    big = 1_000_000 if full else (50_000 if quick else 200_000)
    _progress(f"{big:,} pending jobs")
    size = size_figures(root, big)
    label = f"{big:,} pending"
    figures.append(Figure(f"memory per job, {label}", size["per_job"], "bytes", "<= 150", size["per_job"] <= 150))
    figures.append(Figure(f"stats(), {label}", size["stats_ms"], "ms", "<= 1", size["stats_ms"] <= 1))
    figures.append(Figure(f"first lease_one() after open, {label}", size["first_ms"], "ms", "<= 5", size["first_ms"] <= 5))
    # The targets apply to opening after a clean close (its snapshot present); without
    # one (after a crash, or the first open after a compaction) the whole log is replayed.
    open_target = 4.0 * big / 1_000_000
    figures.append(Figure(f"open a log of {big:,} records, after a clean close", size["open_snapshot"], "s",
                          f"<= {open_target:g}", size["open_snapshot"] <= open_target))  # fmt: skip
    figures.append(Figure(f"open a log of {big:,} records, no snapshot (after a crash)", size["open_replay"], "s", "", None))
    figures.append(Figure(f"close writing the snapshot, {label}", size["close"], "s", "", None))
    compact_target = 1.5 * big / 1_000_000
    figures.append(Figure(f"open a compacted queue of {big:,} jobs, after a clean close", size["compacted_snapshot"], "s",
                          f"<= {compact_target:g}", size["compacted_snapshot"] <= compact_target))  # fmt: skip
    figures.append(Figure(f"open a compacted queue of {big:,} jobs, no snapshot", size["compacted_replay"], "s", "", None))

    rounds = min(runs, 3)
    stalls = []
    for i in range(rounds):
        _progress(f"compaction of {big:,} jobs beside an enqueuer ({i + 1}/{rounds})")
        stalls.append(compaction_stall(root, big))

    def med(key: str) -> float:
        return statistics.median(s[key] for s in stalls)

    held = med("held_ms")
    figures.append(Figure(f"longest file-lock hold while compacting {big:,} jobs", held, "ms",
                          f"<= {STALL_TARGET_MS:g}", held <= STALL_TARGET_MS))  # fmt: skip
    stall = med("stall_ms")
    figures.append(Figure(f"a peer's longest enqueue meanwhile (alone: {_fmt(med('alone_ms'))} ms, "
                          f"median {_fmt(med('median_ms'))} ms)", stall, "ms", f"<= {STALL_TARGET_MS:g}",
                          stall <= STALL_TARGET_MS))  # fmt: skip
    figures.append(Figure(f"compaction of {big:,} jobs (half done), a peer enqueuing", med("compaction"), "s", "", None))
    figures.append(Figure("the peer's first enqueue after the flip (re-reads the new generation)", med("flip_ms"), "ms", "", None))

    _progress("pickup latency")
    p = pickup(root, 30 if quick else 80)
    figures.append(Figure("pickup by an idle worker, median", p["median_ms"], "ms", "<= 5", p["median_ms"] <= 5))
    figures.append(Figure("pickup by an idle worker, p99", p["p99_ms"], "ms", "<= 25", p["p99_ms"] <= 25))
    figures.append(
        Figure("idle worker CPU (100 ms poll costs %.2f%%)" % (100 * p["poll_cpu"]), 100 * p["idle_cpu"], "% of a core",
               "<= the 100 ms poll", p["idle_cpu"] <= max(p["poll_cpu"], 0.001))
    )  # fmt: skip
    _progress("done")
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    return figures


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def render(figures: list[Figure], *, markdown: bool) -> str:
    rows = [("figure", "value", "limit", "ratio", "target", "verdict")]
    for f in figures:
        rows.append((
            f.name, f"{_fmt(f.value)} {f.unit}", "" if f.limit is None else f"{_fmt(f.limit)}/s",
            "" if f.ratio is None else f"{f.ratio:.2f} x", f.target,
            "met" if f.ok else ("short" if f.ok is False else ""),
        ))  # fmt: skip
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nobroker bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs, under a minute")
    parser.add_argument("--full", action="store_true", help="the 1,000,000-job figures too (minutes)")
    parser.add_argument("--md", action="store_true", help="print a Markdown table for README.md")
    parser.add_argument("--runs", type=int, default=None, help="repetitions per figure (median reported)")
    parser.add_argument("--dir", default=None, help="where to put the scratch queues (default: a temp folder)")
    parser.add_argument("--pg", action="store_true", help="benchmark the PostgreSQL storage instead")
    args, rest = parser.parse_known_args(argv)
    if args.pg:
        try:
            from tools.bench import pg as bench_pg
        except ImportError:
            print("nobroker bench: the PostgreSQL benchmark is not in this build (the single-file app leaves it out); "
                  "run `python make.py bench --pg` from a clone with psycopg installed", file=sys.stderr)
            return 1
        return bench_pg.main(rest)
    if rest:
        parser.error(f"unknown arguments: {' '.join(rest)}")
    runs = args.runs or (3 if args.quick else 5)
    root = tempfile.mkdtemp(prefix="nobroker-bench-", dir=args.dir)
    try:
        figures = run(root, quick=args.quick, full=args.full, runs=runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mode = "--full" if args.full else ("--quick" if args.quick else "default")
    header = (
        f"nobroker bench ({mode}, median of {runs} runs) on {time.strftime('%Y-%m-%d')}: "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}; "
        "limit = 120-byte append+fdatasync on the same disk, measured before each run"
    )
    print(("_" + header + "_") if args.md else header)
    print()
    print(render(figures, markdown=args.md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
