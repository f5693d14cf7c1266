"""Pause and wait across real processes, on both storages (issue 15).

Owns: ControlAcrossProcesses (the tests, over a storage's hooks) and its
file and PostgreSQL classes. A Worker runs in another process
(tests/controlchild.py); this process pauses, resumes and waits through a
Queue of its own. Imports: the standard library, nobroker's public API,
nobroker.storage (FINISH_RECHECK, made long so that only a wake-up can end a
wait early), tests.support and tests.pgsupport.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import unittest
from typing import Any
from unittest import mock

from nobroker import JobState, Queue
from tests.pgsupport import PostgresTestCase, fresh_name
from tests.support import TempDirTestCase

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + ROOT)
#: Generous bound for the other process to get somewhere (never a timing claim).
PATIENCE = 60.0
#: With this as the recheck, a wait of PATIENCE ends early only if a wake-up ends it.
NO_RECHECK = 10 * PATIENCE


class ControlAcrossProcesses:
    """The tests; a subclass says where the queue is (``queue``, ``child_args``)."""

    def queue(self) -> Queue:  # pragma: no cover - the storage's class has it
        raise NotImplementedError

    def child_args(self) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def start_worker(self) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.controlchild", *self.child_args()],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT, text=True,
        )  # fmt: skip
        test: Any = self
        test.addCleanup(self.stop_worker, child)
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if line != "ready":
            child.kill()
            test.fail(f"the worker process did not start: {child.communicate()[1]}")
        return child

    def stop_worker(self, child: subprocess.Popen[str]) -> None:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()

    def test_a_worker_in_another_process_stops_leasing_a_paused_kind(self) -> None:
        test: Any = self
        q = self.queue()
        self.start_worker()
        warm = q.enqueue("warm", kind="a")
        test.assertIs(q.wait(warm.id, PATIENCE).state, JobState.DONE, "the other process works")
        q.pause("a")
        held = [q.enqueue(i, kind="a") for i in range(5)]
        probe = q.enqueue("probe", kind="b")
        test.assertIs(q.wait(probe.id, PATIENCE).state, JobState.DONE, "it leases after the pause")
        for job in held:  # enqueued after pause returned, before the probe: any lease that saw them skipped them
            got = q.get(job.id)
            test.assertEqual((got.state, got.attempts), (JobState.READY, 0), "a job of the paused kind was leased")
        q.resume("a")
        for job in held:
            test.assertIs(q.wait(job.id, PATIENCE).state, JobState.DONE)

    def test_a_job_finished_in_another_process_wakes_the_wait(self) -> None:
        test: Any = self
        q = self.queue()
        self.start_worker()
        warm = q.enqueue("warm")
        q.wait(warm.id, PATIENCE)
        for payload in ("one", "two"):
            job = q.enqueue(payload, delay=0.5)  # finished once the wait below is (very likely) asleep
            started = time.monotonic()
            with mock.patch("nobroker.storage.FINISH_RECHECK", NO_RECHECK):
                finished = q.wait(job.id, PATIENCE)
            took = time.monotonic() - started
            test.assertEqual((finished.state, finished.result), (JobState.DONE, payload))
            # Without a wake-up the wait would sleep its whole PATIENCE before looking again.
            test.assertLess(took, PATIENCE * 0.9, "the wait was not woken by the finish")


class FileControlAcrossProcesses(ControlAcrossProcesses, TempDirTestCase):
    def queue(self) -> Queue:
        q = Queue(self.dir, name="control")
        self.addCleanup(q.close)
        return q

    def child_args(self) -> list[str]:
        return [self.dir, "control"]


class PostgresControlAcrossProcesses(ControlAcrossProcesses, PostgresTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.name = fresh_name("ctl")

    def queue(self) -> Queue:
        q = Queue(self.dsn, name=self.name, schema=self.schema)
        self.addCleanup(q.close)
        return q

    def child_args(self) -> list[str]:
        return [self.dsn, self.name, self.schema]


if __name__ == "__main__":
    unittest.main()
