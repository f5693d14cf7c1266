"""The soak run: minutes of mixed load; memory and disk use must stay bounded.

Owns: the soak (``python make.py soak`` or ``python -m tests.soak --minutes N``):
producer processes enqueueing at a steady rate, Worker processes whose
handler sometimes fails (retry) or fails for good (dead letter), an operator
that revives the DLQ, and SIGKILLs of workers now and then. It samples the
resident memory of each long-lived process and the bytes in the queue
folder, prints them over time, and asserts both stay bounded: memory flat,
disk held down by automatic compaction (Queue(auto_compact=0.5) rewrites a
log over 8 MiB once half of it is superseded). Not part of the unit suite.
Imports: the standard library and nobroker's public API.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Jobs each producer enqueues per second (the workers can keep up with all of them).
PRODUCER_RATE = 150
PRODUCERS = 2
WORKERS = 2
#: Payload padding: big enough that the log passes the 8 MiB auto-compaction floor within seconds.
PAYLOAD_BYTES = 1_000
#: Seconds between samples, and between worker kills.
SAMPLE_EVERY = 5.0
KILL_EVERY = 7.0
#: Disk use may never pass this (auto-compaction starts at 8 MiB; the backlog stays small).
DISK_BOUND = 64 * 1024 * 1024
#: A long-lived process may grow this much after its warm-up third, and no more.
MEMORY_GROWTH_BOUND = 24 * 1024 * 1024


# ====================================================================== children
def child(role: str, directory: str, seed: int) -> None:
    from nobroker import BackoffPolicy, PermanentError, Queue, Worker

    rng = random.Random(seed)
    q = Queue(directory, visibility_timeout=5.0, backoff=BackoffPolicy(base=0.2, max_delay=2.0), auto_compact=0.5)
    if role == "producer":
        n = 0
        started = time.monotonic()
        while True:
            n += 1
            q.enqueue({"n": n, "seed": seed, "pad": "p" * rng.randint(PAYLOAD_BYTES // 2, PAYLOAD_BYTES)})
            ahead = started + n / PRODUCER_RATE - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    elif role == "worker":

        def handle(job: Any) -> Any:
            roll = rng.random()
            if roll < 0.05:
                raise RuntimeError("a transient failure")
            if roll < 0.06:
                raise PermanentError("a permanent failure")
            return {"ok": job.payload["n"]} if roll < 0.5 else None

        Worker(q, handle, concurrency=4, poll_interval=0.05, handle_signals=False).run()
    elif role == "operator":
        while True:
            time.sleep(2.0)
            q.requeue_dead()
            q.stats()


# ====================================================================== the soak
def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def folder_bytes(path: str) -> int:
    total = 0
    for name in os.listdir(path):
        try:
            total += os.lstat(os.path.join(path, name)).st_size
        except FileNotFoundError:
            pass
    return total


def generation(path: str) -> int:
    try:
        with open(os.path.join(path, "default.current")) as f:
            return int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


class Soak:
    def __init__(self, minutes: float, seed: int) -> None:
        self.seconds = minutes * 60.0
        self.rng = random.Random(seed)
        self.base = tempfile.mkdtemp(prefix="nobroker-soak-")
        self.queue = os.path.join(self.base, "queue")
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.kills = 0
        self.crashes: list[str] = []
        self.samples: list[dict[str, Any]] = []

    def start(self, name: str, role: str) -> None:
        log = open(os.path.join(self.base, f"{name}.stderr"), "ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "tests.soak", "child", role, self.queue, str(self.rng.getrandbits(32))],
            cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        log.close()

    def check_alive(self) -> None:
        """A child that exits on its own crashed: record it, start a replacement, fail at the end."""
        for name, proc in list(self.procs.items()):
            if proc.poll() is not None:
                with open(os.path.join(self.base, f"{name}.stderr"), "rb") as f:
                    tail = f.read()[-1500:].decode(errors="replace")
                self.crashes.append(f"{name} exited with {proc.returncode}:\n{tail}")
                print(f"soak: {name} CRASHED (exit {proc.returncode}); restarting it", flush=True)
                open(os.path.join(self.base, f"{name}.stderr"), "wb").close()
                role = "worker" if "worker" in name else name.rstrip("0123456789")
                self.start(name, role)

    def run(self) -> int:
        from nobroker import Queue

        Queue(self.queue).close()
        for i in range(PRODUCERS):
            self.start(f"producer{i}", "producer")
        self.start("steady-worker", "worker")
        for i in range(1, WORKERS):
            self.start(f"worker{i}", "worker")
        self.start("operator", "operator")
        started = time.monotonic()
        next_sample = started + 1.0
        next_kill = started + KILL_EVERY
        print(f"soak: {self.seconds / 60:g} min in {self.queue}")
        print(f"{'t':>6} {'folder':>10} {'gen':>4} {'ready':>6} {'leased':>6} {'done':>7} {'dead':>5} "
              f"{'kills':>5}  rss by process (MiB)")  # fmt: skip
        try:
            while time.monotonic() - started < self.seconds:
                time.sleep(0.2)
                self.check_alive()
                now = time.monotonic()
                if now >= next_kill:
                    victim = self.rng.choice([n for n in self.procs if n.startswith("worker")] or ["steady-worker"])
                    if victim != "steady-worker":
                        self.procs[victim].send_signal(signal.SIGKILL)
                        self.procs[victim].wait()
                        self.kills += 1
                        self.start(victim, "worker")
                    next_kill = now + KILL_EVERY
                if now >= next_sample:
                    self.sample(now - started)
                    next_sample = now + SAMPLE_EVERY
            self.sample(time.monotonic() - started)
        finally:
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
        return self.judge()

    def sample(self, t: float) -> None:
        from nobroker import Queue

        with Queue(self.queue, auto_compact=None) as q:
            stats = q.stats()
        rss = {name: rss_bytes(p.pid) for name, p in self.procs.items() if not name.startswith("worker")}
        row = {"t": t, "folder": folder_bytes(self.queue), "gen": generation(self.queue), "rss": rss, **stats.to_dict()}
        self.samples.append(row)
        mib = " ".join(f"{n}={(v or 0) / 2**20:.0f}" for n, v in sorted(rss.items()))
        print(f"{t:6.0f} {row['folder'] / 2**20:9.1f}M {row['gen']:4d} {stats.ready + stats.delayed:6d} "
              f"{stats.leased:6d} {stats.done:7d} {stats.dead:5d} {self.kills:5d}  {mib}", flush=True)  # fmt: skip

    def judge(self) -> int:
        problems = list(self.crashes)
        peak_disk = max(s["folder"] for s in self.samples)
        if peak_disk > DISK_BOUND:
            problems.append(f"the queue folder reached {peak_disk:,} bytes (bound {DISK_BOUND:,})")
        if self.seconds >= 60 and self.samples[-1]["gen"] == 0:
            problems.append("no automatic compaction happened in a minute or more of load")
        warm = [s for s in self.samples if s["t"] >= self.seconds / 3] or self.samples
        for name in self.samples[0]["rss"]:
            values = [s["rss"].get(name) for s in warm if s["rss"].get(name)]
            if len(values) >= 2 and max(values) - values[0] > MEMORY_GROWTH_BOUND:
                problems.append(f"{name} grew from {values[0]:,} to {max(values):,} bytes of memory")
        print(f"soak: peak folder {peak_disk / 2**20:.1f} MiB, final generation {self.samples[-1]['gen']}, "
              f"{self.kills} worker kills survived")  # fmt: skip
        for p in problems:
            print("soak: FAIL " + p)
        if not problems:
            print("soak: OK (memory flat, disk bounded)")
        return 1 if problems else 0

    def cleanup(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child":
        child(argv[1], argv[2], int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long to run (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the queue folder afterwards")
    args = parser.parse_args(argv)
    soak = Soak(args.minutes, args.seed)
    try:
        return soak.run()
    finally:
        if not args.keep:
            soak.cleanup()


if __name__ == "__main__":
    sys.exit(main())
