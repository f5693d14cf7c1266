#!/usr/bin/env python3
"""The tour: every promise nobroker makes, shown on a real queue in a few seconds.

Owns: the demo scenes (also replayed, paced, by video_demo.py). Imports: the
standard library, nobroker and examples/handlers.py.

    python make.py demo               # in a temp folder, removed afterwards
    python make.py demo --dir ./q     # keep the queue to poke at: nobroker --dir ./q inspect

Each scene stands alone (video_demo.py --scenes 4 runs one) and leaves no
ready or leased job behind except the one it says it leaves, so the next
scene starts from a queue it can predict. Every claim printed is also checked:
if the queue ever misbehaves, the demo stops with an error instead of
narrating something false.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
if (SRC / "nobroker" / "__init__.py").is_file() and str(SRC) not in sys.path:
    # From a clone, the clone's own source is the nobroker to show, installed or not.
    sys.path.insert(0, str(SRC))

from nobroker import BackoffPolicy, Job, NotLeasedError, Queue, Worker  # noqa: E402

try:
    from examples import handlers  # noqa: E402
except ImportError:  # run as a script: its own folder is on sys.path
    import handlers  # type: ignore[no-redef]  # noqa: E402

QUEUE_NAME = "demo"
#: The queue's default lease: long enough that the paced video (pauses, typing)
#: never loses a lease between lease and ack by accident.
VISIBILITY_TIMEOUT = 30.0
#: The crashed worker's lease: short, so its job comes back without a long wait.
CRASH_VISIBILITY_TIMEOUT = 1.0
#: Retries a fraction of a second apart, so the backoff is visible but quick.
DEMO_BACKOFF = BackoffPolicy(base=0.2, factor=2.0, max_delay=2.0, jitter=0.0)
#: The longest the demo waits for something the queue promised to happen.
PATIENCE_SECONDS = 10.0
#: The crash victim: leases a job, says which, then "works" until it is killed.
CHILD_WORKER = r"""
import sys, time
from nobroker import Queue
q = Queue(sys.argv[1], name=sys.argv[2], visibility_timeout=float(sys.argv[3]))
job = q.lease_one()
print(job.id if job else "-", job.lease_token if job else "-", flush=True)
time.sleep(600)  # mid-job, as far as anyone can tell, until the kill lands
"""


class DemoFailed(Exception):
    """The queue did something the demo did not promise. Never expected."""


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise DemoFailed(what)


class Narrator:
    """Prints the tour. The plain demo never waits; video_demo.py subclasses it to pace itself."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def title(self, number: int, text: str) -> None:
        print(f"\n== {number}. {text}")

    def say(self, text: str) -> None:
        print(f"   {text}")

    def code(self, text: str) -> None:
        for line in text.splitlines():
            print(f"   >>> {line}")

    def show(self, text: str) -> None:
        print(f"       {text}")

    def pause(self, seconds: float = 1.0) -> None:
        """A beat for the viewer; the plain demo has none."""

    def wait(self, seconds: float) -> None:
        """A wait the story needs (a delay or a timeout passing): always real."""
        time.sleep(seconds)


@dataclass
class Tour:
    directory: str
    out: Narrator

    def open(self, **options: Any) -> Queue:
        options.setdefault("visibility_timeout", VISIBILITY_TIMEOUT)
        options.setdefault("backoff", DEMO_BACKOFF)
        return Queue(self.directory, name=QUEUE_NAME, **options)


def brief(job: Job) -> str:
    return f"{job.id[:12]:<12} priority={job.priority:<3} attempts={job.attempts} state={job.state.value} payload={job.payload}"


def lease_when_ready(q: Queue, **kwargs: Any) -> tuple[Job, float]:
    """Lease the next job, waiting for one to become available; returns it and the wait."""
    start = time.monotonic()
    while time.monotonic() - start < PATIENCE_SECONDS:
        job = q.lease_one(**kwargs)
        if job is not None:
            return job, time.monotonic() - start
        time.sleep(0.05)
    raise DemoFailed("no job became available in time")


# ------------------------------------------------------------------ scenes
def scene_enqueue(t: Tour) -> None:
    """Enqueue: higher priority first, ties in order, delays wait."""
    out = t.out
    with t.open() as q:
        out.code('q.enqueue({"email": "ada"})                  # priority 0')
        low = q.enqueue({"email": "ada"})
        out.code('q.enqueue({"email": "grace"}, priority=10)')
        high = q.enqueue({"email": "grace"}, priority=10)
        out.code('q.enqueue({"email": "alan"}, priority=5)')
        mid = q.enqueue({"email": "alan"}, priority=5)
        out.code('q.enqueue({"report": "yearly"}, priority=99, delay=3600)')
        later = q.enqueue({"report": "yearly"}, priority=99, delay=3600)
        out.show(f"stats: {q.stats().to_dict()}")
        out.pause()
        out.code("q.lease(10)")
        got = q.lease(10)
        for job in got:
            out.show(brief(job))
        expect([j.id for j in got] == [high.id, mid.id, low.id], "lease order is priority, then FIFO")
        out.say("The priority-99 job is delayed an hour: it never blocks work that is ready now.")
        out.code('soon = q.enqueue({"email": "edsger"}, delay=0.5); q.lease(10)')
        soon = q.enqueue({"email": "edsger"}, delay=0.5)
        too_early = q.lease(10)
        out.show(f"{too_early}   (not yet)")
        expect(too_early == [], "a delayed job waits for its time")
        out.wait(0.6)
        out.code("q.lease(10)                                     # half a second later")
        got_later = q.lease(10)
        for job in got_later:
            out.show(brief(job))
        expect([j.id for j in got_later] == [soon.id], "a delayed job becomes ready after its delay")
        for job in got + got_later:
            q.ack(job)
        expect(q.get(later.id).state.value == "ready", "the hour-delayed job stays ready-but-delayed")
        out.say(f"Acked all four. The yearly report stays behind, delayed: {q.stats().to_dict()}")


def scene_lease_ack(t: Tour) -> None:
    """Lease and ack: a job is invisible to others while you hold it."""
    out = t.out
    with t.open() as q:
        q.enqueue({"resize": "photo.jpg"})
        out.code('q.enqueue({"resize": "photo.jpg"}); job = q.lease_one()')
        job = q.lease_one()
        expect(job is not None, "a ready job can be leased")
        assert job is not None
        out.show(brief(job))
        out.show(f"lease deadline in {job.lease_deadline - time.time():.1f} s, fencing token {job.lease_token}")
        out.code("q.lease_one()        # anyone else asking now")
        other = q.lease_one()
        out.show(repr(other))
        expect(other is None, "a leased job is not handed out twice")
        out.pause()
        out.code('q.ack(job, result={"thumbnail": "photo-small.jpg"})')
        q.ack(job, result={"thumbnail": "photo-small.jpg"})
        done = q.get(job.id)
        out.show(f"state={done.state.value} result={done.result}")
        expect(done.state.value == "done", "an acked job is done")


def scene_retry(t: Tour) -> None:
    """A failing handler is retried with backoff until it succeeds."""
    out = t.out
    with t.open() as q:
        out.say(f"Backoff for this tour: {DEMO_BACKOFF} (the default starts at 1 s, doubles, caps at 5 min)")
        q.enqueue({"charge": "order-7", "fail_times": 2})
        out.code('q.enqueue({"charge": "order-7", "fail_times": 2})   # examples.handlers.flaky fails twice')
        start = time.monotonic()
        while True:
            job, waited = lease_when_ready(q)
            try:
                result = handlers.flaky(job)
            except Exception as exc:
                retry = q.nack(job, error=str(exc))
                out.show(
                    f"t={time.monotonic() - start:4.2f}s attempt {job.attempts}: failed ({exc}); "
                    f"retry in {retry.available_at - time.time():.2f} s"
                )
                continue
            q.ack(job, result=result)
            out.show(f"t={time.monotonic() - start:4.2f}s attempt {job.attempts}: succeeded -> {result}")
            break
        expect(job.attempts == 3, "flaky succeeds on its third attempt")
        out.say("Each failure waited longer than the last, and its error was kept as the job's last_error.")


def scene_crash(t: Tour) -> None:
    """A worker is killed mid-job; the job comes back."""
    out = t.out
    with t.open() as q:
        q.enqueue({"transcode": "talk.mp4"})
        out.code('q.enqueue({"transcode": "talk.mp4"})')
        out.say(f"A separate worker process leases it (visibility timeout {CRASH_VISIBILITY_TIMEOUT:g} s) and starts working...")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD_WORKER, t.directory, QUEUE_NAME, str(CRASH_VISIBILITY_TIMEOUT)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        try:
            assert child.stdout is not None
            job_id, token = (child.stdout.readline().split() + ["-", "-"])[:2]
        finally:
            child.kill()  # SIGKILL on POSIX: no cleanup, no goodbye, exactly like a crash
            child.wait()
        killed_at = time.monotonic()
        held = q.get(job_id) if job_id != "-" else None
        # Narrated after the fact: a paced narration must not outlast the 1 s lease it describes.
        expect(held is not None, "the child worker leased the job")
        assert held is not None
        out.show(f"pid {child.pid} holds {job_id[:12]} (token {token})")
        out.say(f"kill -9 {child.pid}")
        out.show(f"right after the kill: state={held.state.value}, and that worker will never ack it")
        expect(held.state.value == "leased", "the job is still leased by the dead worker")
        out.say("Another worker keeps asking. Once the lease deadline passes, the job is reclaimed:")
        job, _ = lease_when_ready(q)
        expect(job.id == job_id and job.attempts == 2, "the killed worker's job comes back")
        out.show(f"back {time.monotonic() - killed_at:.1f} s after the kill: {brief(job)}")
        q.ack(job, result={"transcoded": True})
        out.show(f"finished by the second worker: state={q.get(job_id).state.value}")
        out.say("Nothing was lost; the job ran twice. That is at-least-once: handlers must be idempotent.")


def scene_fencing(t: Tour) -> None:
    """Fencing: a late worker's ack is refused."""
    out = t.out
    with t.open() as q:
        q.enqueue({"invoice": "2026-11"})
        out.code('slow = q.lease_one(visibility_timeout=0.5)   # worker A, then it stalls')
        slow = q.lease_one(visibility_timeout=0.5)
        expect(slow is not None, "worker A got the job")
        assert slow is not None
        out.wait(0.7)
        out.code("fast = q.lease_one()                          # worker B, after A's lease expired")
        fast, _ = lease_when_ready(q)
        expect(fast.id == slow.id, "the expired job went to worker B")
        out.show(f"A's token {slow.lease_token}, B's token {fast.lease_token}")
        out.pause()
        out.code("q.ack(slow)                                   # A wakes up and reports success")
        try:
            q.ack(slow)
        except NotLeasedError as exc:
            out.show(f"NotLeasedError: {exc}")
        else:
            raise DemoFailed("a stale lease token was accepted")
        q.ack(fast)
        out.show(f"q.ack(fast) -> state={q.get(fast.id).state.value}: only the current holder finishes a job")


def scene_dlq(t: Tour) -> None:
    """Dead-letter queue: give up, look, fix, requeue."""
    out = t.out
    with t.open() as q:
        out.code('q.enqueue({"card": "4242"}, max_attempts=2)')
        job = q.enqueue({"card": "4242"}, max_attempts=2)
        for _ in range(2):
            leased, _ = lease_when_ready(q)
            after = q.nack(leased, error="card declined", delay=0)
            out.show(f"attempt {leased.attempts}: nack -> state={after.state.value}")
        out.code('q.enqueue({"user": "deleted"}) ... q.nack(job, error="no such user", permanent=True)')
        gone = q.enqueue({"user": "deleted"})
        leased, _ = lease_when_ready(q)
        q.nack(leased, error="no such user", permanent=True)
        out.code("q.dlq()")
        dead = q.dlq()
        for d in dead:
            out.show(f"{d.id[:12]} attempts={d.attempts} last_error={d.last_error!r}")
        expect({job.id, gone.id} <= {d.id for d in dead}, "both jobs are in the DLQ")
        out.pause()
        out.say("The bug is fixed. Revive the whole DLQ (attempts start again from 0):")
        out.code("q.requeue_dead()")
        revived = q.requeue_dead()
        out.show(f"{revived} jobs ready again: {q.stats().to_dict()}")
        expect(revived >= 2 and not q.dlq(), "requeue_dead empties the DLQ")
        for _ in range(revived):
            leased, _ = lease_when_ready(q)
            q.ack(leased)
        out.say(f"...and processed: {q.stats().to_dict()}")


def scene_idempotent(t: Tour) -> None:
    """Idempotent enqueue: a retried request schedules one job."""
    out = t.out
    with t.open() as q:
        before = len(q)
        out.code('q.enqueue({"ship": "order-42"}, job_id="order-42")')
        first = q.enqueue({"ship": "order-42"}, job_id="order-42")
        out.code('q.enqueue({"ship": "order-42"}, job_id="order-42")   # the client timed out and retried')
        again = q.enqueue({"ship": "order-42"}, job_id="order-42")
        out.show(f"same job: {first.id == again.id} (id {again.id}), jobs held {before} -> {len(q)}")
        expect(first.id == again.id == "order-42" and len(q) == before + 1, "one job for one id")
        job, _ = lease_when_ready(q)
        q.ack(job)
        late = q.enqueue({"ship": "order-42"}, job_id="order-42")
        out.show(f"after it ran, the same id still returns the done job: state={late.state.value}")
        out.say("That holds until compaction drops the done job (next scene), or a purge.")


def scene_compaction(t: Tour) -> None:
    """Compaction: done jobs dropped, live ones kept, one atomic flip."""
    out = t.out
    with t.open() as q:
        batch = q.enqueue_many([{"n": i} for i in range(100)])
        out.code("q.enqueue_many([... 100 jobs ...]); lease and ack every one")
        for job in q.lease(len(batch)):
            q.ack(job)
        out.code("q.compact()")
        result = q.compact()
        out.show(
            f"generation {result.old_generation} -> {result.new_generation}: "
            f"{result.bytes_before:,} bytes -> {result.bytes_after:,} bytes, "
            f"{result.jobs_dropped} done jobs dropped, {result.jobs_kept} kept"
        )
        expect(result.bytes_after < result.bytes_before, "compaction shrinks a log full of done jobs")
        for name in sorted(os.listdir(t.directory)):
            if name.startswith(QUEUE_NAME + "."):
                out.show(f"  {name:<22} {os.path.getsize(os.path.join(t.directory, name)):>8,} bytes")


def dispatch(job: Job) -> Any:
    """The Worker's handler: the payload names which example handler runs."""
    handler: Callable[[Job], Any] = getattr(handlers, job.payload["handler"])
    return handler(job)


def scene_worker(t: Tour) -> None:
    """A Worker drains the queue."""
    out = t.out
    with t.open() as q:
        kinds = ["ok", "echo", "flaky", "ok", "echo", "permanent", "ok", "flaky", "ok", "echo", "ok", "ok"]
        q.enqueue_many([{"handler": name, "fail_times": 1, "n": i} for i, name in enumerate(kinds)])
        out.code("Worker(q, dispatch, concurrency=2, idle_timeout=1.0).run()   # ok, echo, flaky, permanent")
        stats = Worker(q, dispatch, concurrency=2, idle_timeout=1.0, handle_signals=False).run()
        out.show(f"WorkerStats: {stats.to_dict()}")
        expect(stats.succeeded == len(kinds) - 1, "every job but the permanent one succeeds")
        expect(stats.dead == 1, "the permanent failure goes straight to the DLQ")


def scene_stats(t: Tour) -> None:
    """Where it all lives."""
    out = t.out
    with t.open() as q:
        stats = q.stats()
        out.code("q.stats()")
        out.show(str(stats.to_dict()))
        out.show(f"len(q) = {len(q)}, durable (fsync on) = {q.durable}")
    out.say(f"One folder, a few files, no server: {t.directory}")
    for name in sorted(os.listdir(t.directory)):
        out.show(f"  {name:<22} {os.path.getsize(os.path.join(t.directory, name)):>8,} bytes")


def scene_title(scene: Callable[[Tour], None]) -> str:
    return (scene.__doc__ or scene.__name__).strip().rstrip(".")


SCENES: list[Callable[[Tour], None]] = [
    scene_enqueue,
    scene_lease_ack,
    scene_retry,
    scene_crash,
    scene_fencing,
    scene_dlq,
    scene_idempotent,
    scene_compaction,
    scene_worker,
    scene_stats,
]


def run_tour(directory: str | None, out: Narrator, scenes: list[int] | None = None) -> int:
    """Run the chosen scenes (1-based; all by default) in ``directory`` or a temp folder."""
    keep = directory is not None
    folder = directory or tempfile.mkdtemp(prefix="nobroker-demo-")
    try:
        tour = Tour(folder, out)
        for number in scenes or range(1, len(SCENES) + 1):
            scene = SCENES[number - 1]
            out.title(number, scene_title(scene))
            scene(tour)
        print(f"\nDone in {time.monotonic() - out.started:.1f} s." + (f" The queue is kept in {folder}." if keep else ""))
        return 0
    except DemoFailed as exc:
        print(f"\ndemo: the queue broke a promise: {exc}", file=sys.stderr)
        return 1
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A tour of nobroker on a real queue.")
    parser.add_argument("--dir", help="keep the queue in this folder (default: a temp folder, removed at the end)")
    opts = parser.parse_args(argv)
    print(f"nobroker {nobroker_version()}: the job queue with nobody in the middle")
    return run_tour(opts.dir, Narrator())


def nobroker_version() -> str:
    import nobroker

    return getattr(nobroker, "__version__", "?")


if __name__ == "__main__":
    sys.exit(main())
