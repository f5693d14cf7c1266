"""Periodic jobs across processes: four Workers, one schedule, every tick enqueued exactly once.

Owns: the multi-process tests of issue 15 on both storages: four ``Worker``
processes on one queue with one ``every=`` schedule (catch_up="all"), until
at least TICKS ticks exist, then: the tick jobs are exactly ticks 1..K of the
schedule (none missed, none extra), no two enqueue_due calls (in any
process) reported the same tick, and on the file storage the log holds one
ENQUEUE record per tick; once with clean stops, once with SIGKILLs among the
processes (KILLS of them, each after progress; a replacement started for each). Also the Worker's own look.
Imports: the standard library, the public ``nobroker`` API, nobroker.filestore.admin
(to count ENQUEUE records), tests.support and tests.pgsupport.

The child is this module run as ``python -m tests.test_schedule_ticks child
LOCATION NAME SCHEMA OUT``: a Worker whose queue's enqueue_due writes every
tick it added to OUT (one id a line, unbuffered) and whose handler acks.
Waits are for progress (the number of tick jobs), with generous bounds;
nothing is timed.
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
from collections import Counter
from typing import Any

from nobroker import Queue, Worker
from tests.support import TempDirTestCase

#: Ticks every test waits for; the schedule's interval (seconds); processes at once.
TICKS = 100
EVERY = 0.05
PROCESSES = 4
#: Generous bound on the wait for progress (the machine is shared and may be slow).
PROGRESS_BOUND = 300.0
#: SIGKILLs the kill test makes (each after some progress, of a Worker that runs), and a replacement for each.
KILLS = 8
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tick(name: str, due: float) -> str:
    return f"tick:{name}@{round(due * 1000)}"


def child(location: str, name: str, schema: str, out: str) -> None:
    options: dict[str, Any] = {"schema": schema} if schema != "-" else {}
    q = Queue(location, name, **options)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    enqueue_due = q.enqueue_due

    def recording() -> list[Any]:
        if not os.path.exists(out + ".running"):  # the Worker's tick thread runs: its signal handlers are in
            open(out + ".running", "w").close()
        jobs = enqueue_due()
        if jobs:
            os.write(fd, "".join(job.id + "\n" for job in jobs).encode())
        return jobs

    q.enqueue_due = recording  # type: ignore[method-assign]
    Worker(q, lambda job: None, concurrency=2, poll_interval=0.05).run()
    q.close()


class TickProcesses:
    """The tests; a storage mixes it in with ``location()``, ``options()`` and ``enqueues_in_log``."""

    if False:  # pragma: no cover - for type checkers only
        assertEqual: Any
        assertAlmostEqual: Any
        assertGreaterEqual: Any
        fail: Any
        addCleanup: Any

    def location(self) -> str:
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        return {}

    def enqueues_in_log(self, q: Queue) -> Counter[str] | None:
        return None

    def start(self, name: str, out: str) -> subprocess.Popen[bytes]:
        schema = self.options().get("schema", "-")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.test_schedule_ticks", "child", self.location(), name, schema, out],
            cwd=ROOT, env=env, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.addCleanup(lambda: (proc.poll() is None and proc.kill(), proc.wait()))
        return proc

    def wait_for(self, condition: Any, what: str) -> None:
        deadline = time.monotonic() + PROGRESS_BOUND
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"waited {PROGRESS_BOUND:g} s for {what}")
            time.sleep(0.02)

    def tick_ids(self, q: Queue) -> list[str]:
        return [job.id for job in q.list_jobs() if job.id.startswith("tick:")]

    def run_ticks(self, kills: bool) -> None:
        name = f"beat{random.randrange(10**6)}"
        q = Queue(self.location(), name, **self.options())
        self.addCleanup(q.close)
        sched = q.schedule("s", {"n": 1}, every=EVERY, catch_up="all")
        outs = tempfile.mkdtemp(prefix="nobroker-ticks-")
        self.addCleanup(shutil.rmtree, outs, ignore_errors=True)
        outs_of = [os.path.join(outs, f"{i}.out") for i in range(PROCESSES)]
        procs = [self.start(name, out) for out in outs_of]
        killed, started, last_kill = 0, PROCESSES, 0
        deadline = time.monotonic() + PROGRESS_BOUND
        while True:
            count = len(self.tick_ids(q))
            if count >= TICKS and (not kills or killed >= KILLS):
                break
            if time.monotonic() > deadline:
                self.fail(f"only {count} ticks after {PROGRESS_BOUND:g} s")
            victim = random.randrange(len(procs))
            if kills and count > last_kill and os.path.exists(outs_of[victim] + ".running"):
                procs[victim].send_signal(signal.SIGKILL)
                procs[victim].wait()
                outs_of[victim] = os.path.join(outs, f"{started}.out")
                procs[victim] = self.start(name, outs_of[victim])
                killed, started, last_kill = killed + 1, started + 1, count
            time.sleep(0.05)
        for proc, out in zip(procs, outs_of):
            self.wait_for(lambda: os.path.exists(out + ".running"), "a Worker to run")
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            self.assertEqual(proc.wait(60), 0, "a Worker stops cleanly on SIGTERM")
        if kills:
            self.assertGreaterEqual(killed, KILLS, "the kills happened")
        found = sorted(self.tick_ids(q), key=lambda i: int(i.rsplit("@", 1)[1]))
        expected = [tick("s", sched.anchor + k * EVERY) for k in range(1, len(found) + 1)]
        self.assertEqual(found, expected, "ticks 1..K of the schedule: none missed, none extra")
        (after,) = q.schedules()
        self.assertAlmostEqual(after.next_run, sched.anchor + (len(found) + 1) * EVERY, delta=1e-6,
                               msg="the cursor stands right after the last tick enqueued")  # fmt: skip
        reported: Counter[str] = Counter()
        for out in os.listdir(outs):
            if not out.endswith(".out"):
                continue
            with open(os.path.join(outs, out), encoding="ascii") as f:
                reported.update(line.strip() for line in f if line.strip())
        self.assertEqual([i for i, n in reported.items() if n > 1], [], "no tick was added by two calls")
        if not kills:  # a process killed between its write and its report loses the report, nothing else
            self.assertEqual(sorted(reported), sorted(found), "every tick was added by exactly one call")
        in_log = self.enqueues_in_log(q)
        if in_log is not None:
            self.assertEqual({i: n for i, n in in_log.items() if n != 1}, {}, "one ENQUEUE record per tick")
            self.assertEqual(sorted(in_log), sorted(found))

    def test_four_workers_enqueue_each_tick_exactly_once(self) -> None:
        self.run_ticks(kills=False)

    def test_sigkills_among_the_workers_lose_and_repeat_no_tick(self) -> None:
        self.run_ticks(kills=True)


class FileTickProcesses(TickProcesses, TempDirTestCase):
    def location(self) -> str:
        return self.dir

    def enqueues_in_log(self, q: Queue) -> Counter[str] | None:
        from nobroker.filestore.admin import inspect_log

        counts: Counter[str] = Counter()
        for view in inspect_log(self.dir, q.name):
            if view.type_name == "ENQUEUE" and view.body and str(view.body.get("id", "")).startswith("tick:"):
                counts[view.body["id"]] += 1
        return counts


try:
    from tests.pgsupport import PostgresTestCase
except ImportError:  # pragma: no cover
    PostgresTestCase = None  # type: ignore[assignment,misc]

if PostgresTestCase is not None:

    class PostgresTickProcesses(TickProcesses, PostgresTestCase):
        def location(self) -> str:
            return self.dsn

        def options(self) -> dict[str, Any]:
            return {"schema": self.schema}


class WorkerLooksForTicks(TempDirTestCase):
    def test_a_running_worker_enqueues_and_runs_due_ticks(self) -> None:
        q = Queue(self.dir)
        self.addCleanup(q.close)
        q.schedule("fast", "hello", every=EVERY, catch_up="all")
        ran: list[str] = []
        worker = Worker(q, lambda job: ran.append(job.id), max_jobs=3, poll_interval=0.05, handle_signals=False)
        worker.run()  # returns once three ticks ran: the worker enqueued them itself
        self.assertEqual(len(ran), 3)
        self.assertTrue(all(i.startswith("tick:fast@") for i in ran))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "child":
        child(*sys.argv[2:])
    else:
        unittest.main()
