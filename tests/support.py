"""Shared test helpers: temp folders, a controllable clock, the slow marker.

Imports: the standard library and nobroker only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import unittest
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from nobroker import Worker, WorkerStats

T = TypeVar("T")

QUICK = os.environ.get("NOBROKER_QUICK") == "1"
LONG = os.environ.get("NOBROKER_LONG") == "1"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def slow(thing: T) -> T:
    """Mark a test (or class) as a slow sweep: ``python make.py test-quick`` skips it."""
    return unittest.skipIf(QUICK, "slow sweep: skipped by test-quick")(thing)  # type: ignore[return-value]


@contextlib.contextmanager
def temp_queue_dir(prefix: str = "nobroker-test-") -> Iterator[str]:
    """A fresh folder for a queue, removed afterwards."""
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def records_end(path: str) -> int:
    """Where the records of the log at ``path`` end: its size for format version 1; in version 2, where its room of zeros starts.

    No record ends in a zero byte (a body is a JSON object), so the room is
    exactly the zeros at the end; the header's own zeros stay.
    """
    with open(path, "rb") as f:
        data = f.read()
    return max(16, len(data.rstrip(b"\0")))


def file_bytes(path: str) -> bytes:
    """A file's whole content: what "nothing was written" compares (a version 2 log writes inside its size)."""
    with open(path, "rb") as f:
        return f.read()


class FakeClock:
    """A wall clock the test moves by hand. Thread-safe; starts at a fixed epoch."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now += seconds
            return self._now


class TempDirTestCase(unittest.TestCase):
    """A TestCase with ``self.dir``: a fresh temp folder per test."""

    def setUp(self) -> None:
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="nobroker-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)


#: How long a test waits for something a real process or thread will do, unless told otherwise:
#: generous, because a loaded machine (2 cores, shared) is slow, and slow is not wrong.
WAIT_SECONDS = 120.0


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT_SECONDS, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until true or ``timeout``; returns its last value."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


#: How long a test waits for a Worker's run() to return after it was told to stop.
RUN_RETURN_SECONDS = 60.0


class ThreadedRun:
    """Runs ``worker.run()`` in a thread (of the test process) and keeps its return value or exception."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.stats: WorkerStats | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self.stats = self.worker.run()
        except BaseException as exc:  # the test inspects it
            self.error = exc

    def join(self, testcase: unittest.TestCase, timeout: float = RUN_RETURN_SECONDS) -> None:
        self.thread.join(timeout)
        testcase.assertFalse(self.thread.is_alive(), "Worker.run() did not return in time")
