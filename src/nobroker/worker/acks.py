"""Acks from many handler threads, gathered into one ``ack_many`` (one write, one fsync).

Owns: AckGatherer. The first handler thread to finish becomes the flusher:
it waits up to ACK_GATHER_SECONDS for the jobs still running to finish too,
then acks them all in one call; the others wait for their own item, and each
gets exactly its own outcome. ``ack_batch`` is that one call, for a caller
that has its batch already (the one thread that settles async handlers'
jobs). Imports: jobs, protocol.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..jobs import Job
from .protocol import QueueAccess

#: The thread that flushes acks waits up to this long for the acks of jobs
#: still running, so that one ack_many (one write, one fsync) carries them all.
ACK_GATHER_SECONDS = 0.002


class _PendingAck:
    """One finished job waiting for the shared ack_many."""

    __slots__ = ("job", "result", "done", "error")

    def __init__(self, job: Job, result: Any) -> None:
        self.job = job
        self.result = result
        self.done = False
        self.error: BaseException | None = None


class AckGatherer:
    """``ack(job, result)`` for any handler thread; raises what acking this one job raised.

    ``running()``: how many jobs the worker runs now (an ack is coming for
    each that succeeds); only a hint for how long to wait, so it is read
    without the worker's lock.
    """

    def __init__(self, access: QueueAccess, concurrency: int, running: Callable[[], int]) -> None:
        self._access = access
        # One job at a time has nobody to share a write with.
        self._shared = access.acks_many and concurrency > 1
        self._running = running
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        # Guarded by _lock.
        self._pending: list[_PendingAck] = []
        self._flushing = False

    def ack(self, job: Job, result: Any) -> None:
        if not self._shared:
            self._access.ack(job, result)
            return
        item = _PendingAck(job, result)
        with self._lock:
            self._pending.append(item)
            self._ready.notify_all()
            if self._flushing:
                while not item.done:
                    self._ready.wait()
                if item.error is not None:
                    raise item.error
                return
            self._flushing = True
            deadline = time.monotonic() + ACK_GATHER_SECONDS
            # Everyone still running will want an ack soon: wait a moment for them.
            while len(self._pending) < self._running() and (left := deadline - time.monotonic()) > 0:
                self._ready.wait(left)
        try:
            while True:
                with self._lock:
                    batch, self._pending = self._pending, []
                if not batch:
                    break
                self._flush(batch)
        finally:
            with self._lock:
                self._flushing = False
                self._ready.notify_all()
        if item.error is not None:
            raise item.error

    def ack_batch(self, jobs: list[Job], results: list[Any]) -> list[Exception | None]:
        """Ack these jobs in one call where the queue can; what acking each one raised (None: acked)."""
        assert len(jobs) == len(results), "one result per job"
        errors: list[Exception | None] = [None] * len(jobs)
        if self._access.acks_many:
            try:
                self._access.ack_many(jobs, results)
                return errors
            except Exception:
                # Someone in the batch was refused (or the call failed): ack each on
                # its own, so every job gets exactly its own outcome. Those already
                # acked are acked again harmlessly under the same lease.
                pass
        for index, (job, result) in enumerate(zip(jobs, results)):
            try:
                self._access.ack(job, result)
            except Exception as exc:
                errors[index] = exc
        return errors

    def _flush(self, batch: list[_PendingAck]) -> None:
        try:
            errors = self.ack_batch([i.job for i in batch], [i.result for i in batch])
            for i, error in zip(batch, errors):
                i.error = error
        except BaseException as exc:  # Ctrl-C and the like: nobody may think this batch was acked
            for i in batch:
                i.error = i.error or exc
            raise
        finally:
            with self._lock:
                for i in batch:
                    i.done = True
                self._ready.notify_all()
