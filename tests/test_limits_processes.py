"""Limits across real worker processes, on both storages: concurrency and group concurrency (with SIGKILLs), and rate.

Owns: the worker child (run as ``python -m tests.test_limits_processes
child LOCATION SCHEMA NAME LOG MODE``: a Worker with CONCURRENCY threads whose
handler writes when each attempt starts and ends to its own log file), the
file and PostgreSQL cases, and the checks, which read only those logs.
Imports: the standard library, nobroker's public API and tests.support /
tests.pgsupport.

What is proven, from the recorded times (never from work done in a fixed
time):

- WORKERS processes of CONCURRENCY threads each, under a concurrency limit
  of LIMIT, never run more than LIMIT handlers of the kind at once, also
  when workers are SIGKILLed mid-job (an attempt whose process was killed
  holds its slot until its lease's deadline, which its start line records;
  the lease is reclaimed after that deadline, and only then is the slot
  free again);
- the same with a group concurrency limit of GROUP_LIMIT: never more than
  GROUP_LIMIT handlers of one group of the kind at once, kills included;
- a rate limit of RATE per second (burst BURST) lets through at most 10 %
  more than RATE * 10 leases in any 10 seconds of lease times (the token
  bucket's own bound is BURST + RATE * 10).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Any

from nobroker import Job, Queue, Worker
from tests.pgsupport import drop_schema, fresh_name, require_postgres
from tests.support import slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS, CONCURRENCY, LIMIT = 4, 8, 3
#: Jobs of the limited kind in the concurrency case, and how long each handler runs (seconds).
JOBS = 150
HANDLER_SECONDS = (0.05, 0.2)
#: Lease length: long beside a handler, so the Worker's heartbeat (a third of it) never renews one,
#: and the deadline a start line records is the lease's last.
LEASE_SECONDS = 6.0
#: SIGKILLs in the concurrency case, each of a worker that is running a handler at the time.
KILLS = 3
#: The group case: GROUPS groups of the kind, GROUP_JOBS jobs each, at most GROUP_LIMIT of a group at once.
GROUPS, GROUP_JOBS, GROUP_LIMIT = 4, 30, 2
RATE, BURST, WINDOW = 50, 5, 10.0
#: Jobs of the rate case: enough for more than WINDOW seconds at RATE.
RATE_JOBS = int(RATE * (WINDOW + 3))
#: Generous bound for the workers to finish the jobs (never a claim about speed).
FINISH_SECONDS = 240.0
START_SECONDS = 60.0


# ====================================================================== the child
def child(location: str, schema: str, name: str, log: str, mode: str) -> None:
    options: dict[str, Any] = {"name": name, "visibility_timeout": LEASE_SECONDS, "max_attempts": 1000}
    if schema != "-":
        options["schema"] = schema
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    rng = random.Random()

    def handle(job: Job) -> None:
        # One write per line on an O_APPEND file: a line is whole or absent after a SIGKILL.
        assert job.lease_deadline is not None
        started = f"S {job.id} {job.attempts} {time.time():.6f} {job.lease_deadline:.6f} {job.kind} {job.group or '-'}"
        os.write(fd, (started + "\n").encode())
        if mode == "overlap":
            time.sleep(rng.uniform(*HANDLER_SECONDS))
            os.write(fd, f"E {job.id} {job.attempts} {time.time():.6f}\n".encode())

    with Queue(location, **options) as q:
        Worker(q, handle, concurrency=CONCURRENCY, handle_signals=False).run()


# ====================================================================== reading the logs
def read_logs(
    paths: list[str], kind: str | None = None, groups: dict[tuple[str, int], str] | None = None
) -> tuple[dict[tuple[str, int], list[float]], dict[tuple[str, int], float]]:
    """(attempt -> [start, deadline], attempt -> end) from every log, of one ``kind`` or all; ``groups`` gets each one's group."""
    starts: dict[tuple[str, int], list[float]] = {}
    ends: dict[tuple[str, int], float] = {}
    for path in paths:
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] == "S" and len(parts) == 7 and kind in (None, parts[5]):
                    starts[(parts[1], int(parts[2]))] = [float(parts[3]), float(parts[4])]
                    if groups is not None:
                        groups[(parts[1], int(parts[2]))] = parts[6]
                elif parts and parts[0] == "E" and len(parts) == 4:
                    ends[(parts[1], int(parts[2]))] = float(parts[3])
    return starts, ends


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at one moment (an end at t comes before a start at t)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def most_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


# ====================================================================== the cases
class LimitsAcrossProcesses:
    """The cases; the storage's class says where the queue is (``location``, ``schema``)."""

    location: str
    schema = "-"

    def setUp(self) -> None:
        self.logs = tempfile.mkdtemp(prefix="nobroker-limits-logs-")
        self.addCleanup(shutil.rmtree, self.logs, True)  # type: ignore[attr-defined]
        self.name = fresh_name("lim")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.paths: list[str] = []
        self.addCleanup(self._kill_all)  # type: ignore[attr-defined]

    def _kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()

    def open(self) -> Queue:
        options: dict[str, Any] = {"name": self.name, "visibility_timeout": LEASE_SECONDS}
        if self.schema != "-":
            options["schema"] = self.schema
        q = Queue(self.location, **options)
        self.addCleanup(q.close)  # type: ignore[attr-defined]
        return q

    def start_worker(self, mode: str) -> tuple[subprocess.Popen[bytes], str]:
        path = os.path.join(self.logs, f"worker-{len(self.paths)}.log")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.test_limits_processes", "child", self.location, self.schema, self.name, path, mode],
            cwd=ROOT, env=env,
        )  # fmt: skip
        self.procs.append(proc)
        self.paths.append(path)
        return proc, path

    def wait_for(self, predicate: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"gave up waiting for {what}")
            time.sleep(0.05)

    def test_a_concurrency_limit_holds_across_worker_processes_also_when_they_are_killed(self) -> None:
        q = self.open()
        q.set_limit("limited", concurrency=LIMIT)
        q.enqueue_many([{"n": i} for i in range(JOBS)], kind="limited")
        q.enqueue_many([{"n": i} for i in range(JOBS // 2)], kind="free")
        self.run_killing_workers(q, JOBS + JOBS // 2)
        intervals, killed = self.attempts()
        self.assertGreaterEqual(killed, KILLS, "each kill cut a limited job's attempt short")  # type: ignore[attr-defined]
        self.assertGreaterEqual(len(intervals), JOBS + killed)  # type: ignore[attr-defined]
        peak = most_at_once(intervals)
        self.assertLessEqual(peak, LIMIT, f"{peak} handlers of the limited kind ran at once")  # type: ignore[attr-defined]
        self.assertEqual(peak, LIMIT, "the limit was reached: the test could have failed")  # type: ignore[attr-defined]

    def test_a_group_concurrency_limit_holds_across_worker_processes_also_when_they_are_killed(self) -> None:
        q = self.open()
        q.set_limit("limited", group_concurrency=GROUP_LIMIT)
        for g in range(GROUPS):
            q.enqueue_many([{"n": i} for i in range(GROUP_JOBS)], kind="limited", group=f"tenant{g}")
        q.enqueue_many([{"n": i} for i in range(JOBS // 2)], kind="free")
        self.run_killing_workers(q, GROUPS * GROUP_JOBS + JOBS // 2)
        groups: dict[tuple[str, int], str] = {}
        intervals, killed = self.attempts(groups)
        self.assertGreaterEqual(killed, KILLS, "each kill cut a limited job's attempt short")  # type: ignore[attr-defined]
        self.assertGreaterEqual(len(intervals), GROUPS * GROUP_JOBS + killed)  # type: ignore[attr-defined]
        keys = list(groups)
        peaks = {}
        for g in range(GROUPS):
            name = f"tenant{g}"
            peaks[name] = most_at_once([interval for key, interval in zip(keys, intervals) if groups[key] == name])
        self.assertLessEqual(max(peaks.values()), GROUP_LIMIT, f"handlers of one group at once: {peaks}")  # type: ignore[attr-defined]
        self.assertEqual(max(peaks.values()), GROUP_LIMIT, "the limit was reached: the test could have failed")  # type: ignore[attr-defined]
        self.assertGreater(most_at_once(intervals), GROUP_LIMIT, "groups ran beside each other")  # type: ignore[attr-defined]

    def attempts(self, groups: dict[tuple[str, int], str] | None = None) -> tuple[list[tuple[float, float]], int]:
        """Every attempt of the limited kind as (start, end), in the order of ``groups``' keys; and how many were killed.

        A killed attempt (a start with no end) held its slot until its lease's deadline.
        """
        starts, ends = read_logs(self.paths, "limited", groups)
        intervals = []
        killed = 0
        for key, (start, deadline) in starts.items():
            end = ends.get(key)
            if end is None:  # its process was killed: the slot was held until the lease expired
                killed += 1
                end = deadline
            intervals.append((start, end))
        if groups is not None:
            assert list(groups) == list(starts), "one group per attempt, in the same order"
        return intervals, killed

    def run_killing_workers(self, q: Queue, total: int) -> None:
        """WORKERS workers until ``total`` jobs are done, KILLS of them SIGKILLed while a limited handler runs."""
        running = [self.start_worker("overlap") for _ in range(WORKERS)]
        for kill in range(KILLS):
            # A worker is killed only while one of its limited handlers runs (a start with no end yet).
            found: list[int] = []
            self.wait_for(lambda: self._mid_job(running, found), f"a worker in a limited job (kill {kill})", FINISH_SECONDS)
            proc, _path = running[found[0]]
            proc.kill()
            proc.wait()
            running[found[0]] = self.start_worker("overlap")
        self.wait_for(lambda: q.stats().done == total, "every job to be done", FINISH_SECONDS)

    def _mid_job(self, running: list[tuple[subprocess.Popen[bytes], str]], found: list[int]) -> bool:
        for i, (_proc, path) in enumerate(running):
            starts, ends = read_logs([path], "limited")
            if any(key not in ends for key in starts):
                found.append(i)
                return True
        return False

    def test_a_rate_limit_holds_across_worker_processes(self) -> None:
        q = self.open()
        q.set_limit("api", rate=RATE, per=1.0, burst=BURST)
        q.enqueue_many([{"n": i} for i in range(RATE_JOBS)], kind="api")
        for _ in range(WORKERS):
            self.start_worker("rate")
        self.wait_for(lambda: q.stats().done == RATE_JOBS, "every job to be done", FINISH_SECONDS)
        starts, _ends = read_logs(self.paths)
        self.assertEqual(len(starts), RATE_JOBS)  # type: ignore[attr-defined]
        # The lease's own time, by the storage's clock: its deadline less the lease's length.
        leased_at = sorted(deadline - LEASE_SECONDS for _start, deadline in starts.values())
        self.assertGreater(leased_at[-1] - leased_at[0], WINDOW, "the leases spread over more than the window")  # type: ignore[attr-defined]
        # The upper bound is the guarantee, asserted strictly: never more than 10 % over
        # RATE * WINDOW in any WINDOW seconds (the bucket's own bound is BURST more than
        # RATE * WINDOW; 10 % leaves room for PostgreSQL's lease time, which is its
        # transaction's start, a little before it held the limit's lock).
        peak = most_in_window(leased_at, WINDOW)
        self.assertLessEqual(peak, RATE * WINDOW * 1.1, f"{peak} leases in {WINDOW:g} s")  # type: ignore[attr-defined]
        # The lower bound only loosely: a loaded machine may lease slower than the limit
        # allows, which is no failure of the limit; the workers must not be starved for
        # the whole run either (idle waits end when a token is due).
        overall = (len(leased_at) - 1) / (leased_at[-1] - leased_at[0])
        self.assertGreater(overall, RATE / 5, f"{overall:.1f} leases a second")  # type: ignore[attr-defined]


@slow
class FileLimitsAcrossProcesses(LimitsAcrossProcesses, unittest.TestCase):
    def setUp(self) -> None:
        self.location = tempfile.mkdtemp(prefix="nobroker-limits-")
        self.addCleanup(shutil.rmtree, self.location, True)
        super().setUp()


@slow
class PostgresLimitsAcrossProcesses(LimitsAcrossProcesses, unittest.TestCase):
    def setUp(self) -> None:
        self.location = require_postgres(self)
        self.schema = fresh_name("nblimits")
        self.addCleanup(drop_schema, self.schema)
        super().setUp()


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "child":
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    child(*sys.argv[2:7])
