"""What one process's compaction or opening costs the other processes of the queue, measured from outside.

Owns: the figures of the issue's target 5 ("cost flat in the queue's size"),
at 20,000 jobs by default and 1,000,000 with ``--full``: a compaction while a
peer enqueues without pause (the compactor's own longest lock hold, and the
peer's enqueue latencies meanwhile, longest and median: what the lock hold
costs a peer, seen from outside; the peer's one enqueue that followed the
flip, which the peer marks by the generation it writes to, is a figure of
its own), a
process's first operation after another process compacted, and a third
process's longest enqueue while that first operation ran; opening after a
crash (the builder killed, so no clean close left a snapshot; its last
checkpoint CRASH_TAIL records before the end, at --full size) and opening
with a snapshot, each while a peer enqueues (its longest enqueue meanwhile:
the open's lock hold, seen from outside). Each longest enqueue is shown with
the part of it the peer spent in its own fsync (timed inside the peer, around
LogFile.sync_through), which tells a wait for the lock from a slow disk.
Imports: nobroker (Queue, CHECKPOINT_EVERY, LogFile), plan (PENDING_FULL tells a --full run).

Every queue process is a child of its own (spawn), as separate programs
would be; times are time.monotonic() (one clock for every process), and
every peer waits as long as it has to (lock_timeout of an hour): the bench
measures the wait, where a default Queue would raise LockTimeoutError.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import statistics
import time
from collections.abc import Callable
from typing import Any

from nobroker import Queue
from nobroker.filestore.checkpoint import CHECKPOINT_EVERY
from tools.bench.plan import PENDING_FULL, Figure, Plan, fresh, progress

#: Jobs of these figures: by default (just over what makes a close leave a snapshot), and with --full.
PEER_JOBS, PEER_JOBS_FULL = 20_000, 1_000_000
#: Rounds (medians reported), at most: by default, and at --full size (each round builds the queue anew).
PEER_ROUNDS, PEER_ROUNDS_FULL = 3, 1
#: Targets (issue 14, target 5): ms for a process's first operation after another's compaction and for the
#: compactor's longest lock hold; a peer's longest enqueue while another process compacts or opens, as a
#: multiple of its median meanwhile; seconds to open after a crash.
FIRST_AFTER_COMPACTION_MS, LOCK_HOLD_MS, PEER_LONGEST_X_MEDIAN, CRASH_OPEN_S = 50.0, 10.0, 3.0, 2.0
#: Jobs per enqueue_many of the builds (CHECKPOINT_EVERY is a multiple of it).
BUILD_BATCH = 10_000
#: Records a crash leaves after the builder's last checkpoint: half the distance between two.
CRASH_TAIL = CHECKPOINT_EVERY // 2
#: Seconds the peer enqueues alone first (its latencies without the other process, for scale).
ALONE_SECONDS = 1.0
#: The peer's enqueues after the compaction before the follower's first operation (the peer has followed the flip).
SETTLE_ENQUEUES = 20
#: Seconds any one step may take before the bench gives up (the 1,000,000-job steps take minutes).
STEP_TIMEOUT = 3600.0
#: Generous options every process of these figures opens the queue with.
OPTIONS: dict[str, Any] = {"auto_compact": None, "lock_timeout": STEP_TIMEOUT}

#: (started, ended, seconds in its own fsync, did it move to a new generation) of each of the peer's enqueues.
Marks = list[tuple[float, float, float, bool]]


def figures(root: str, plan: Plan) -> list[Figure]:
    """The target-5 figures, in the table's order."""
    full = plan.pending >= PENDING_FULL
    n, rounds = (PEER_JOBS_FULL, PEER_ROUNDS_FULL) if full else (PEER_JOBS, PEER_ROUNDS)
    rounds = min(rounds, plan.runs)
    compactions, opens = [], []
    for i in range(rounds):
        progress(f"a compaction of {n:,} jobs beside two processes ({i + 1}/{rounds})")
        compactions.append(compaction_beside_peers(root, n))
        progress(f"opening {n:,} records beside a peer ({i + 1}/{rounds})")
        opens.append(opening_beside_a_peer(root, n))
    return compaction_figures(n, compactions) + opening_figures(n, opens)


def _med(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def compaction_figures(n: int, rounds: list[dict[str, float]]) -> list[Figure]:
    def med(key: str) -> float:
        return _med(rounds, key)

    held, longest, median = med("held_ms"), med("longest_ms"), med("median_ms")
    first, third, third_median = med("first_ms"), med("third_ms"), med("alone_median_ms")
    return [
        Figure(f"compaction of {n:,} jobs (half done), two other processes open", med("seconds"), "s", "", None),
        Figure(f"longest lock hold while compacting {n:,} jobs, as the compactor reports it", held, "ms",
               f"<= {LOCK_HOLD_MS:g}", held <= LOCK_HOLD_MS),
        Figure(f"a peer's longest enqueue while it compacts (median {_ms(median)}; alone: longest "
               f"{_ms(med('alone_longest_ms'))}, median {_ms(third_median)}; {_fsync(med('longest_fsync_ms'))})",
               longest, "ms",
               f"<= {PEER_LONGEST_X_MEDIAN:g} x its median", longest <= PEER_LONGEST_X_MEDIAN * median),
        Figure("the peer's enqueue that followed the flip (its first in the new generation)", med("following_ms"),
               "ms", f"<= {FIRST_AFTER_COMPACTION_MS:g}", med("following_ms") <= FIRST_AFTER_COMPACTION_MS),
        Figure(f"an idle process's first operation after another compacted {n:,} jobs", first, "ms",
               f"<= {FIRST_AFTER_COMPACTION_MS:g}", first <= FIRST_AFTER_COMPACTION_MS),
        Figure(f"the peer's longest enqueue while that first operation ran ({_fsync(med('third_fsync_ms'))})", third,
               "ms",
               f"<= {PEER_LONGEST_X_MEDIAN:g} x its median alone", third <= PEER_LONGEST_X_MEDIAN * third_median),
    ]  # fmt: skip


def opening_figures(n: int, rounds: list[dict[str, float]]) -> list[Figure]:
    def med(key: str) -> float:
        return _med(rounds, key)

    crash, crash_peer, crash_median = med("crash_open_s"), med("crash_longest_ms"), med("crash_median_ms")
    snap_peer, snap_median = med("snap_longest_ms"), med("snap_median_ms")
    return [
        Figure(f"open {n:,} records after a crash (no snapshot)", crash, "s", f"<= {CRASH_OPEN_S:g}",
               crash <= CRASH_OPEN_S),
        Figure(f"a peer's longest enqueue while it opens after the crash (median {_ms(crash_median)}; "
               f"{_fsync(med('crash_longest_fsync_ms'))})", crash_peer, "ms",
               f"<= {PEER_LONGEST_X_MEDIAN:g} x its median", crash_peer <= PEER_LONGEST_X_MEDIAN * crash_median),
        Figure(f"open {n:,} records with a snapshot (after a clean close)", med("snap_open_s"), "s", "", None),
        Figure(f"a peer's longest enqueue while it opens with the snapshot (median {_ms(snap_median)}; "
               f"{_fsync(med('snap_longest_fsync_ms'))})", snap_peer, "ms",
               f"<= {PEER_LONGEST_X_MEDIAN:g} x its median", snap_peer <= PEER_LONGEST_X_MEDIAN * snap_median),
    ]  # fmt: skip


def _ms(value: float) -> str:
    return f"{value:.2f} ms" if value < 10 else f"{value:,.0f} ms"


def _fsync(value: float) -> str:
    """How much of the longest enqueue was the peer's own fsync (the rest: the lock, the CPU, following a flip)."""
    return f"{_ms(value)} of it its own fsync"


# ------------------------------------------------------------------ the processes
def _build(directory: str, n: int, ack_half: bool) -> None:
    """``n`` jobs (half of them acked if ``ack_half``), quickly: not durable, the caller syncs."""
    with Queue(directory, fsync=False, **OPTIONS) as q:
        for start in range(0, n, BUILD_BATCH):
            jobs = q.enqueue_many([{"i": i} for i in range(start, min(n, start + BUILD_BATCH))])
            if ack_half:
                q.ack_many(q.lease(len(jobs) // 2))


def _build_then_hang(directory: str, n: int, built: Any) -> None:
    """Build, say so, and wait to be killed: the queue is left as a crash leaves it (no clean close).

    The writer's last checkpoint (one every CHECKPOINT_EVERY records) falls
    CRASH_TAIL records before the end, as at a crash at a random moment: the
    first batch is sized so that checkpoints fall due at the end of a batch.
    Durable: a queue opened with fsync=False writes no checkpoints.
    """
    q = Queue(directory, **OPTIONS)
    head = n - CRASH_TAIL
    bounds = [0, head % CHECKPOINT_EVERY + CHECKPOINT_EVERY] if head >= CHECKPOINT_EVERY else [0]
    bounds += range(bounds[-1] + BUILD_BATCH, n, BUILD_BATCH)
    for start, end in zip(bounds, [*bounds[1:], n]):
        q.enqueue_many([{"i": i} for i in range(start, end)])
    running = getattr(q.storage, "_checkpointing", None)  # the last checkpoint's thread: let it finish
    if running is not None:
        running.join()
    os.sync()
    built.set()
    time.sleep(STEP_TIMEOUT)


def _reopen(directory: str) -> None:
    """One durable open and clean close: replays the log once and leaves a snapshot for the openers after it."""
    Queue(directory, **OPTIONS).close()


def _time_fsyncs() -> list[float]:
    """In this (the peer's) process: a running sum of the seconds spent in LogFile.sync_through."""
    from nobroker.filestore.log import LogFile

    total = [0.0]
    sync_through = LogFile.sync_through

    def timed(log: LogFile, end: int) -> None:
        started = time.monotonic()
        try:
            sync_through(log, end)
        finally:
            total[0] += time.monotonic() - started

    LogFile.sync_through = timed  # type: ignore[method-assign]
    return total


def _peer(directory: str, ready: Any, stop: Any, count: Any, out: Any) -> None:
    """Enqueue without pause until ``stop``; hands back every enqueue's Marks (one of them followed a flip, if any)."""
    synced = _time_fsyncs()
    with Queue(directory, **OPTIONS) as q:
        q.enqueue({"peer": 0})  # the first write after opening has one-off costs
        ready.release()
        marks: Marks = []
        generation = _generation(q)
        while not stop.is_set():
            start, before = time.monotonic(), synced[0]
            q.enqueue({"peer": start})
            ended, was = time.monotonic(), generation
            generation = _generation(q)
            marks.append((start, ended, synced[0] - before, generation != was))
            with count.get_lock():
                count.value += 1
        out.put(marks)


def _generation(q: Queue) -> int | None:
    """The generation of the log the file storage ``q`` writes to (the bench reads it: a peer's following of a flip)."""
    return getattr(getattr(q.storage, "_log", None), "generation", None)


def _compactor(directory: str, ready: Any, go: Any, stop: Any, out: Any) -> None:
    with Queue(directory, **OPTIONS) as q:
        q.requeue_dead()  # one write first: its one-off costs after opening are not the compaction's
        ready.release()
        go.wait()
        start = time.monotonic()
        result = q.compact()
        out.put({"start": start, "end": time.monotonic(), "held": result.lock_held})
        stop.wait()  # closes with the others: a close takes the lock too


def _follower(directory: str, ready: Any, go: Any, stop: Any, out: Any) -> None:
    with Queue(directory, **OPTIONS) as q:
        q.enqueue({"follower": 0})  # caught up with the generation before the compaction
        ready.release()
        go.wait()
        start = time.monotonic()
        q.enqueue({"follower": 1})
        out.put({"start": start, "end": time.monotonic()})
        stop.wait()


def _opener(directory: str, out: Any) -> None:
    start = time.monotonic()
    q = Queue(directory, **OPTIONS)
    end = time.monotonic()
    q.close()  # a clean close: leaves the snapshot the next opener uses
    out.put({"start": start, "end": end})


# ------------------------------------------------------------------ the runs
class _Peers:
    """The spawned children of one measurement, and the peer that enqueues without pause beside them."""

    def __init__(self, directory: str) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.directory = directory
        self.ready, self.stop, self.out = self.ctx.Semaphore(0), self.ctx.Event(), self.ctx.Queue()
        self.count = self.ctx.Value("q", 0)
        self.procs: list[Any] = []
        self.marks_out = self.ctx.Queue()
        self.spawn(_peer, self.ready, self.stop, self.count, self.marks_out)

    def spawn(self, target: Callable[..., None], *args: Any) -> Any:
        p = self.ctx.Process(target=target, args=(self.directory, *args))
        p.start()
        self.procs.append(p)
        return p

    def await_ready(self, processes: int) -> None:
        for _ in range(processes):
            assert self.ready.acquire(timeout=STEP_TIMEOUT), "a process of the benchmark did not start"

    def wait_for_enqueues(self, more: int) -> None:
        """Until the peer has enqueued ``more`` jobs more than it has now."""
        target, deadline = self.count.value + more, time.monotonic() + STEP_TIMEOUT
        while self.count.value < target:
            assert time.monotonic() < deadline, "the peer stopped enqueueing"
            time.sleep(0.01)

    def finish(self) -> Marks:
        """Stop every child; the peer's marks."""
        self.stop.set()
        marks: Marks = self.marks_out.get(timeout=STEP_TIMEOUT)
        for p in self.procs:
            p.join(STEP_TIMEOUT)
            assert p.exitcode == 0, f"a process of the benchmark failed ({p.exitcode})"
        return marks


def _run(target: Callable[..., None], *args: Any) -> None:
    p = multiprocessing.get_context("spawn").Process(target=target, args=args)
    p.start()
    p.join(STEP_TIMEOUT)
    assert p.exitcode == 0, f"a process of the benchmark failed ({p.exitcode})"


def _chosen(marks: Marks, start: float, end: float, *, within: bool) -> Marks:
    """The enqueues that started and ended inside [start, end] (``within``), or ran at any time during it."""
    if within:
        return [m for m in marks if m[0] >= start and m[1] <= end]
    return [m for m in marks if m[0] <= end and m[1] >= start]


def _within(marks: Marks, start: float, end: float) -> list[float]:
    """Milliseconds of the enqueues that started and ended inside [start, end]."""
    return [(e - s) * 1000 for s, e, *_ in _chosen(marks, start, end, within=True)]


def _overlapping(marks: Marks, start: float, end: float) -> list[float]:
    """Milliseconds of the enqueues that ran at any time during [start, end]."""
    return [(e - s) * 1000 for s, e, *_ in _chosen(marks, start, end, within=False)]


def _following(marks: Marks, after: float) -> tuple[Marks, float]:
    """The marks but the peer's first enqueue in a new generation after ``after``, and that enqueue's milliseconds."""
    followed = next((m for m in marks if m[3] and m[0] >= after), None)
    assert followed is not None, "the peer never followed the flip"
    return [m for m in marks if m is not followed], (followed[1] - followed[0]) * 1000


def _longest_fsync(marks: Marks, start: float, end: float, *, within: bool) -> float:
    """Milliseconds the longest enqueue of those (``_within`` or ``_overlapping``) spent in its own fsync."""
    chosen = _chosen(marks, start, end, within=within)
    assert chosen, "no enqueue in the window"
    return max(chosen, key=lambda m: m[1] - m[0])[2] * 1000


def compaction_beside_peers(root: str, n: int) -> dict[str, float]:
    """A compaction of ``n`` jobs (half done), a peer enqueuing, an idle process's first operation after it."""
    directory = fresh(root)
    _run(_build, directory, n, True)
    os.sync()  # the build skipped fsync; its dirty pages must not bill the compaction
    _run(_reopen, directory)
    peers = _Peers(directory)
    go_compact, go_follow = peers.ctx.Event(), peers.ctx.Event()
    compacted, followed = peers.ctx.Queue(), peers.ctx.Queue()
    peers.spawn(_compactor, peers.ready, go_compact, peers.stop, compacted)
    peers.spawn(_follower, peers.ready, go_follow, peers.stop, followed)
    peers.await_ready(3)
    quiet = time.monotonic()
    time.sleep(ALONE_SECONDS)
    go_compact.set()
    c = compacted.get(timeout=STEP_TIMEOUT)
    peers.wait_for_enqueues(SETTLE_ENQUEUES)  # the peer has followed the flip: what it waits for next is the follower
    go_follow.set()
    f = followed.get(timeout=STEP_TIMEOUT)
    peers.wait_for_enqueues(SETTLE_ENQUEUES)
    marks, following_ms = _following(peers.finish(), c["start"])
    shutil.rmtree(directory, ignore_errors=True)
    alone, during = _within(marks, quiet, c["start"]), _within(marks, c["start"], c["end"])
    assert alone and during, "the peer enqueued nothing alone or during the compaction"
    return {
        "seconds": c["end"] - c["start"],
        "held_ms": c["held"] * 1000,
        "longest_ms": max(during),
        "longest_fsync_ms": _longest_fsync(marks, c["start"], c["end"], within=True),
        "median_ms": statistics.median(during),
        "alone_longest_ms": max(alone),
        "alone_median_ms": statistics.median(alone),
        "following_ms": following_ms,
        "first_ms": (f["end"] - f["start"]) * 1000,
        "third_ms": max(_overlapping(marks, f["start"], f["end"])),
        "third_fsync_ms": _longest_fsync(marks, f["start"], f["end"], within=False),
    }


def opening_beside_a_peer(root: str, n: int) -> dict[str, float]:
    """Open ``n`` records after a crash, then with the snapshot that open's clean close left, a peer enqueuing."""
    directory = fresh(root)
    ctx = multiprocessing.get_context("spawn")
    built = ctx.Event()
    builder = ctx.Process(target=_build_then_hang, args=(directory, n, built))
    builder.start()
    assert built.wait(STEP_TIMEOUT) and builder.pid is not None, "the builder did not finish"
    os.kill(builder.pid, signal.SIGKILL)  # the crash: no clean close, so no snapshot of it
    builder.join()
    peers = _Peers(directory)
    peers.await_ready(1)  # the peer's own open replayed the log after the crash (before any timing)
    time.sleep(ALONE_SECONDS / 2)
    opened = peers.ctx.Queue()
    windows: dict[str, tuple[float, float]] = {}
    for key in ("crash", "snap"):
        if key == "snap":
            assert any(name.endswith(".snap") for name in os.listdir(directory)), "the clean close left no snapshot"
        peers.spawn(_opener, opened)
        o = opened.get(timeout=STEP_TIMEOUT)
        windows[key] = (o["start"], o["end"])
        peers.wait_for_enqueues(SETTLE_ENQUEUES)
    marks = peers.finish()
    shutil.rmtree(directory, ignore_errors=True)
    result: dict[str, float] = {}
    for key, (start, end) in windows.items():
        during = _overlapping(marks, start, end)
        assert during, "the peer enqueued nothing while a queue opened"
        result[f"{key}_open_s"] = end - start
        result[f"{key}_longest_ms"], result[f"{key}_median_ms"] = max(during), statistics.median(during)
        result[f"{key}_longest_fsync_ms"] = _longest_fsync(marks, start, end, within=False)
    return result


__all__ = ["figures"]
