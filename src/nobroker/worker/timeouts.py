"""Time limits of running handlers: a job's own (``enqueue(..., timeout=)``) or the Worker's.

Owns: check_timeout (the Worker's option), TimeLimits (which limit a job
has, the error an attempt past it fails with, the counts and the log line)
and the Watchdog thread that ends handler threads' attempts at their limit.
Imports: jobs, protocol, outcome, heartbeat, settle.

How a handler past its limit is stopped depends on where it runs:

* an ``async def`` handler (a task on the event loop): the task is
  cancelled at the limit (``asyncio.timeout``), and the attempt fails;
* a handler thread cannot be stopped from outside (Python has no way to):
  at the limit the Watchdog takes the job from it (``Running.claim``),
  nacks it with the timeout's error (backoff, or the dead-letter queue, as
  any failure), starts a new thread in its place and frees the slot. The
  old thread is abandoned: it finishes in the background, and whatever its
  handler returns is ignored; an ack it sends itself is refused, for the job
  was nacked under its token;
* in a worker process of a pool, the process that abandoned a thread stops
  leasing, lets its other jobs finish and exits (the stuck thread ends with
  it); the pool starts another in its place (``replace_me``).

The clock starts when the handler starts, and a limit is independent of the
visibility timeout: the heartbeat renews the lease of a job that runs long,
and the limit is what ends it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..jobs import MAX_SECONDS, Job, shown
from .heartbeat import Running
from .outcome import Outcome
from .protocol import is_positive_number
from .settle import Settler

logger = logging.getLogger("nobroker.worker")

#: Most handler threads one Worker abandons: past it, it stops (run() raises), for each one
#: left holds a thread and whatever its handler holds until the process ends.
MAX_ABANDONED_THREADS = 256
#: Longest a Watchdog sleeps between looks at its deadlines (a safety net: a new
#: earlier deadline wakes it at once).
WATCHDOG_SLICE = 1.0


def check_timeout(timeout: object) -> float | None:
    """The Worker's ``timeout`` option as a float, or None; refused unless a number of seconds > 0."""
    if timeout is None:
        return None
    if not is_positive_number(timeout) or float(timeout) > MAX_SECONDS:  # type: ignore[arg-type]
        raise ValueError(f"timeout must be None or a number of seconds > 0 and at most {MAX_SECONDS:g}, got {shown(timeout)}")
    return float(timeout)  # type: ignore[arg-type]


def timed_out_error(limit: float) -> str:
    """The error an attempt past its limit fails with (its ``last_error``)."""
    return f"timed out after {limit:g} s"


class Watchdog:
    """One thread that calls ``expire(entry)`` at each watched job's deadline, if the job was not claimed first."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # Guarded by _lock: (monotonic deadline, tie-breaker, entry, expire).
        self._heap: list[tuple[float, int, Running, Callable[[Running], None]]] = []
        self._order = itertools.count()
        self._stop = False
        self._thread: threading.Thread | None = None

    def watch(self, entry: Running, limit: float, expire: Callable[[Running], None]) -> None:
        """From now on, ``entry``'s handler has ``limit`` seconds; the thread starts on first use."""
        with self._lock:
            if self._stop:
                return
            heapq.heappush(self._heap, (time.monotonic() + limit, next(self._order), entry, expire))
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name=f"{self._name}-timeouts", daemon=True)
                self._thread.start()
            self._wake.notify()

    def stop(self) -> None:
        """Watch nothing more; the thread ends (not waited for: an expiry may be settling a job)."""
        with self._lock:
            self._stop = True
            self._heap.clear()
            self._wake.notify()

    def _next_expired(self) -> tuple[Running, Callable[[Running], None]] | None:
        """The next job past its limit (with what ends it), once its time comes; None once stopped."""
        with self._lock:
            while not self._stop:
                while self._heap and self._heap[0][2].claimed:  # settled by its handler in time
                    heapq.heappop(self._heap)
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    _, _, entry, expire = heapq.heappop(self._heap)
                    return entry, expire
                self._wake.wait(WATCHDOG_SLICE if not self._heap else min(WATCHDOG_SLICE, self._heap[0][0] - now))
        return None

    def _main(self) -> None:
        while (due := self._next_expired()) is not None:
            entry, expire = due
            if entry.claim():
                try:
                    expire(entry)
                except BaseException as exc:  # a bug here must be seen, not vanish with the thread
                    logger.error("%s: ending the timed-out job %s failed: %s", self._name, entry.job.id, exc, exc_info=exc)


class TimeLimits:
    """The limits of one Worker's jobs: which limit a job has, and what happens at it.

    ``on_abandon()``: called once a thread was abandoned (a worker process of a
    pool then retires: see the module's header).
    """

    def __init__(self, default: float | None, settler: Settler, name: str, on_abandon: Callable[[], None]) -> None:
        self.default = default
        self._settler = settler
        self._name = name
        self._on_abandon = on_abandon
        self._watchdog = Watchdog(name)
        self.abandoned = 0  # only the watchdog's thread counts them

    def of(self, job: Job) -> float | None:
        """The job's own limit if it has one (``job.timeout``), else the Worker's; None: no limit."""
        own = getattr(job, "timeout", None)  # a queue other than nobroker's may not have the field
        return float(own) if own is not None and is_positive_number(own) else self.default

    def watch(self, entry: Running, expire: Callable[[Running], None]) -> bool:
        """A handler thread starts ``entry``: True if it has a limit (the watchdog then expires it there)."""
        limit = entry.limit = self.of(entry.job)
        if limit is None:
            return False
        self._watchdog.watch(entry, limit, expire)
        return True

    def outcome(self, entry: Running) -> Outcome:
        """The failed attempt of a job past its limit."""
        assert entry.limit is not None, "only a job with a limit times out"
        return Outcome(error=timed_out_error(entry.limit))

    def counted(self, entry: Running, *, abandoned: bool) -> None:
        """Count a job that timed out (after it was settled), log it, and tell the Worker of an abandoned thread."""
        self._settler.count_timed_out(abandoned)
        how = "its thread is abandoned (it cannot be stopped) and a new one takes its place" if abandoned else "cancelled"
        logger.warning("job %s: its handler ran past its time limit (%g s); %s", entry.job.id, entry.limit, how)
        if abandoned:
            self.abandoned += 1
            self._on_abandon()

    def too_many_abandoned(self) -> BaseException | None:
        """The error that stops the Worker once MAX_ABANDONED_THREADS threads were abandoned (None before)."""
        if self.abandoned < MAX_ABANDONED_THREADS:
            return None
        return RuntimeError(
            f"{self.abandoned} handler threads were abandoned past their time limits and may still run; "
            "stopping: restart the process to free them (or use async handlers, or processes=, which can be stopped)"
        )

    async def run_task(self, entry: Running, handler_call: Awaitable[Any]) -> tuple[Any, bool]:
        """Await an async handler's call within its limit: (what it returned, whether it ran past the limit)."""
        import asyncio  # loaded already: this runs on the event loop

        limit = entry.limit = self.of(entry.job)
        if limit is None:
            return await handler_call, False
        async with asyncio.timeout(limit) as scope:
            returned = await handler_call  # it turns the cancel at the limit into a failure: see below
        return returned, scope.expired()

    def stop(self) -> None:
        self._watchdog.stop()
