"""Helpers shared by the Worker's test modules: a file queue per test, and checks run on both storages.

Owns: the bounds the Worker tests wait by (PATIENCE, LONG_POLL), NO_BACKOFF,
SRC_DIR for the processes they start; ``QueueTestCase`` (a fresh file queue
per test, fsync off); ``check_tracebacks`` and ``check_unstorable_results``,
run on the file storage by tests/test_worker_outcomes.py and on PostgreSQL by
tests/test_worker_postgres.py. Imports: the standard library, the public
``nobroker`` API and tests.support.
"""

from __future__ import annotations

import os
import unittest
from typing import Any

from nobroker import BackoffPolicy, JobState, Queue, Worker
from tests.support import TempDirTestCase

SRC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
#: Generous bound for anything that should happen "soon" on a busy shared machine.
PATIENCE = 60.0
#: A poll interval no test waits out: what happens sooner came from a wake-up.
LONG_POLL = 600.0
NO_BACKOFF = BackoffPolicy(base=0, jitter=0)


class QueueTestCase(TempDirTestCase):
    """A fresh file queue per test (fsync off: these tests are about the Worker)."""

    def open_queue(self, **options: Any) -> Queue:
        options.setdefault("fsync", False)
        queue = Queue(os.path.join(self.dir, "q"), **options)
        self.addCleanup(queue.close)
        return queue


def failing_handler(job: Any) -> None:
    parse(job.payload)


def parse(text: str) -> None:
    raise ValueError(f"cannot parse {text!r}")


def check_tracebacks(test: unittest.TestCase, queue: Queue) -> None:
    """A failing handler's traceback is kept with the job (and logged at WARNING with its id); last_error stays one line."""
    retried = queue.enqueue("retried")
    with test.assertLogs("nobroker.worker", "WARNING") as logs:
        Worker(queue, failing_handler, max_jobs=1, handle_signals=False).run()
    stored = queue.get(retried.id)
    test.assertEqual((stored.state, stored.last_error), (JobState.READY, "ValueError: cannot parse 'retried'"))
    assert stored.traceback is not None
    test.assertTrue(stored.traceback.startswith("Traceback (most recent call last):"), stored.traceback)
    test.assertIn("in failing_handler", stored.traceback)
    test.assertIn("in parse", stored.traceback)
    test.assertTrue(stored.traceback.endswith("ValueError: cannot parse 'retried'\n"), stored.traceback)
    [record] = [r for r in logs.records if retried.id in r.getMessage()]
    test.assertEqual(record.levelname, "WARNING")
    test.assertIsNotNone(record.exc_info, "the log line carries the traceback")
    test.assertIn("in parse", logs.output[logs.records.index(record)])


def check_unstorable_results(test: unittest.TestCase, queue: Queue, concurrency: int) -> None:
    """Handlers that did their work but return what cannot be stored: each runs once, its job ends dead."""
    unstorable = {"object": {"when": object()}, "collide": {1: "a", "1": "b"}, "nan": float("nan")}
    jobs = {name: queue.enqueue(name) for name in unstorable}
    ok = queue.enqueue("ok")
    runs: list[str] = []

    def handler(job: Any) -> Any:
        runs.append(job.payload)
        return unstorable.get(job.payload, "fine")

    stats = Worker(queue, handler, concurrency=concurrency, idle_timeout=0.5, poll_interval=0.05, handle_signals=False).run()
    test.assertEqual(sorted(runs), sorted([*unstorable, "ok"]), "a handler ran again")
    test.assertEqual((stats.succeeded, stats.failed, stats.dead), (1, 0, 3))
    for job in jobs.values():
        stored = queue.get(job.id)
        test.assertEqual((stored.state, stored.attempts), (JobState.DEAD, 1))
        test.assertTrue(stored.last_error.startswith("the handler's result cannot be stored"), stored.last_error)
        test.assertIn("JSON", stored.last_error)
    test.assertEqual(queue.get(ok.id).result, "fine")
