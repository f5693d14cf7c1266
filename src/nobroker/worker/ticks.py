"""The Worker's part in periodic jobs: a thread that enqueues the queue's due ticks.

Owns: TickThread (started and stopped by the Worker) and how often it looks.
Imports: jobs.

Every running Worker runs one, so there is no separate "beat" process to
keep alive, and any number of them may run: each tick is enqueued once
(``Queue.enqueue_due`` makes its job id from the schedule and the due time,
and moves the schedule's cursor in the same atomic write). The thread is its
own, not the leasing loop, so ticks come due on time while every handler slot
is busy with long jobs. A queue without schedules costs no thread: the thread
starts once the queue holds one (the leasing loop looks every LOOK_SECONDS;
a Worker whose slots are all busy notices a first schedule when one frees).

A failed look (the disk full, the database gone for a moment) is logged and
tried again at the next look; it never stops the Worker, whose own lease
reports such an error anyway. A queue object without ``enqueue_due`` (a
hand-made WorkQueue) gets no thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..jobs import finite_float

logger = logging.getLogger("nobroker.worker")

#: Longest gap between two looks for due ticks (a schedule defined by another process is seen within it).
LOOK_SECONDS = 1.0
#: Shortest gap, so a tick that is due again at once (catch_up="all" past its cap) never spins the thread.
MIN_LOOK_SECONDS = 0.005


class TickThread:
    """Looks for due ticks every LOOK_SECONDS (sooner when the next tick is due sooner) until ``stop``."""

    def __init__(self, queue: Any, name: str) -> None:
        self._queue = queue
        self._name = name
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_check = 0.0  # monotonic time of the next look for a first schedule
        self.enqueued = 0  # ticks this Worker enqueued (the rest were other processes')

    @staticmethod
    def wanted(queue: Any) -> bool:
        return callable(getattr(queue, "enqueue_due", None)) and callable(getattr(queue, "schedules", None))

    def maybe_start(self) -> None:
        """Start the thread once the queue holds a schedule (the leasing loop calls this; it looks every LOOK_SECONDS)."""
        if self._thread is not None or self._stopped.is_set():
            return
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + LOOK_SECONDS
        try:
            has_schedules = bool(self._queue.schedules())
        except Exception:  # the lease reports a storage error; this look just waits for the next
            return
        if has_schedules:
            self.start()

    def start(self) -> None:
        assert self._thread is None, "a TickThread starts once"
        self._thread = threading.Thread(target=self._run, name=f"{self._name}-ticks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.enqueued += len(self._queue.enqueue_due())
                wait = self._until_next(self._queue.schedules())
            except Exception as exc:  # the queue closed, a storage error: look again later
                if self._stopped.is_set():
                    return
                logger.warning("%s could not enqueue due ticks (%s); trying again in %g s", self._name, exc, LOOK_SECONDS)
                wait = LOOK_SECONDS
            self._stopped.wait(wait)

    @staticmethod
    def _until_next(schedules: list[Any]) -> float:
        """Seconds until the earliest next run (by this host's clock: the look after it finds it due), capped."""
        runs = [finite_float(s.next_run) for s in schedules]
        due = min((r for r in runs if r is not None), default=None)
        if due is None:
            return LOOK_SECONDS
        return min(LOOK_SECONDS, max(MIN_LOOK_SECONDS, due - time.time()))
