"""The Worker: runs a handler over leased jobs, concurrently and safely.

Owns: Worker and WorkerStats. Imports: errors, jobs, codec.

The Worker speaks only the public Queue API (``lease``, ``ack``, ``nack``,
``extend`` and, when the object has them, ``wait_for_jobs`` and
``wakes_waiters``), so it runs unchanged on the file storage, on the
PostgreSQL storage and on any object that offers those methods.

Idling: with nothing to lease, the run() thread blocks in
``queue.wait_for_jobs``. When the queue says writers wake its waiters
(``wakes_waiters()``: the file storage with its named pipe) one wait lasts up
to IDLE_RECHECK, a safety net for a lost wake-up; otherwise (PostgreSQL, no
named pipes, a worker limited to some kinds, jobs still running) it lasts
``poll_interval``. An object with ``wakes_waiters`` also takes
``wait_for_jobs(timeout, interrupt=fd, kinds=...)``: the worker passes the
read end of a private pipe that stop() and the signal handler write to, so a
long wait ends at once when asked, and its kinds, so a worker limited to some
kinds does not swallow the wake-up meant for one that takes them all.

Threads inside one running Worker:

* the thread that called ``run()`` leases jobs, as many at once as there are
  free handler slots, and idles in ``queue.wait_for_jobs`` when there is no
  work. It is the only thread that leases, so a busy worker makes few lease
  calls;
* ``concurrency`` handler threads each run one job at a time and ack or nack
  it themselves, so acks from many threads reach the queue together and the
  file storage can share one fsync between them (group commit);
* one heartbeat thread renews the lease of every running job once a third of
  its visibility timeout has passed since the last renewal;
* one event-loop thread, only when the handler is ``async``: the handler
  threads hand coroutines to it and wait, so at most ``concurrency``
  coroutines run at a time and acks still come from many threads.

Nothing here may die silently. A storage error (disk full, I/O error, a closed
queue) in lease/ack/nack/extend is logged, stops the leasing, lets the running
handlers finish, and is raised again from ``run()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import logging
import os
import queue as queue_module
import signal
import threading
import time
import traceback as traceback_module
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

from ..errors import JobNotFoundError, NotLeasedError, PermanentError, SerializationError
from ..jobs import MAX_ERROR_CHARS, MAX_RESULT_BYTES, MAX_SECONDS, MAX_TRACEBACK_CHARS, Job, finite_float, shown
from ..codec import stored_json

__all__ = ["Worker", "WorkerStats", "WorkQueue"]

logger = logging.getLogger("nobroker.worker")

#: Longest the run() thread blocks in one wait on a lock condition: a signal
#: only sets a flag there (taking a lock inside a signal handler can
#: deadlock), so those waits are sliced to notice it promptly.
WAIT_SLICE = 0.1
#: Longest idle wait when the queue wakes its waiters itself (``wakes_waiters``):
#: writers of runnable work wake the worker at once and the queue shortens the
#: wait for delayed jobs and leases coming due, so this only bounds how long a
#: lost wake-up, or a lease another process took during the wait and let
#: expire, could leave work unnoticed.
IDLE_RECHECK = 2.0
#: A lease is renewed once this fraction of its visibility timeout has passed,
#: which leaves two renewals' worth of slack before it would expire.
RENEW_FRACTION = 1.0 / 3.0
#: Shortest gap between two renewals of one lease, so a tiny visibility
#: timeout cannot turn the heartbeat into a busy loop.
MIN_RENEW_INTERVAL = 0.05
#: Visibility timeout assumed when neither the queue nor the job tells it.
DEFAULT_VISIBILITY_TIMEOUT = 30.0
#: While jobs are still running, the leasing thread waits up to this long
#: for the rest of the slots to free before it leases. Short handlers finish
#: in bursts (their acks share one fsync and return together), so the wait
#: turns several small lease calls, each a write and an fsync of its own,
#: into one; long handlers lose at most this much per lease call.
LEASE_GATHER_SECONDS = 0.002
#: Most handler threads one Worker starts.
MAX_CONCURRENCY = 1024
#: The thread that flushes acks waits up to this long for the acks of jobs
#: still running, so that one ack_many (one write, one fsync) carries them all.
ACK_GATHER_SECONDS = 0.002

#: Errors that mean "this job is no longer ours": another worker (or an
#: operator) took it over, finished it or removed it. Never fatal.
_LOST_ERRORS: tuple[type[BaseException], ...] = (NotLeasedError, JobNotFoundError)

Handler = Callable[[Any], Any]


class WorkQueue(Protocol):
    """What a Worker needs of its queue: ``nobroker.Queue`` (either storage), or any object with these.

    Used when the object has them (looked up at run time): ``ack_many(jobs,
    results=)``, to share one write among acks; ``wait_for_jobs(timeout,
    interrupt=, kinds=)`` and ``wakes_waiters()``, to idle without polling;
    ``visibility_timeout``, the lease length to renew with; and a
    ``traceback=`` keyword of ``nack``, to keep a failing handler's traceback.
    """

    def lease(self, count: int = 1, *, kinds: Iterable[str] | None = None) -> Sequence[Job]: ...

    def ack(self, job: Job, *, result: Any = None) -> None: ...

    def nack(self, job: Job, *, error: str | None = None, permanent: bool = False) -> Job: ...

    def extend(self, job: Job, seconds: float) -> Job: ...


class _PendingAck:
    """One finished job waiting for the shared ack_many (see Worker._ack)."""

    __slots__ = ("job", "result", "done", "error")

    def __init__(self, job: Any, result: Any) -> None:
        self.job = job
        self.result = result
        self.done = False
        self.error: BaseException | None = None


@dataclass
class WorkerStats:
    """What one ``Worker.run()`` did. Every leased job ends in exactly one bucket.

    ``succeeded``: handler returned and the ack was recorded. ``failed``: the
    handler raised and the job went back for a retry. ``dead``: the job went
    to the dead-letter queue: the handler raised (retries exhausted, or
    PermanentError), or it returned a result that cannot be stored (not JSON,
    over the limit), which is never retried: the work is done. ``lost_leases``: the lease was no longer ours when the
    worker came to ack or nack (it expired and was delivered elsewhere, or an
    operator finished the job), so the outcome was not recorded by us.
    """

    leased: int = 0
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    lost_leases: int = 0

    def to_dict(self) -> dict[str, int]:
        """The counts as a JSON-ready dict."""
        return dataclasses.asdict(self)


class _Running:
    """One leased job between lease and ack/nack: what the heartbeat renews."""

    __slots__ = ("job", "timeout", "interval", "renew_at", "lost")

    def __init__(self, job: Any, timeout: float, leased_at: float) -> None:
        self.job = job
        self.timeout = timeout
        self.interval = max(timeout * RENEW_FRACTION, MIN_RENEW_INTERVAL)
        self.renew_at = leased_at + self.interval  # monotonic clock
        self.lost = False


@dataclass
class _Outcome:
    """What the handler produced: a result to ack, or an error text to nack with."""

    result: Any = None
    error: str | None = None
    permanent: bool = False
    #: What the handler raised, if it did (its traceback is kept with the job and logged).
    exc: BaseException | None = None

    def failed(self, exc: BaseException, *, permanent: bool = False) -> None:
        self.error, self.permanent, self.exc = _error_text(exc), permanent, exc

    def traceback(self) -> str | None:
        if self.exc is None:
            return None
        return "".join(traceback_module.format_exception(self.exc))[-MAX_TRACEBACK_CHARS:]


def _is_positive_number(value: object) -> bool:
    number = finite_float(value)  # never raises, not even for 10**400
    return number is not None and number > 0


def _error_text(exc: BaseException) -> str:
    """``"<ExcType>: <message>"``, cut to the length the queue keeps."""
    message = str(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    return text


def _unstorable(exc: SerializationError) -> _Outcome:
    """The handler did its work but its result cannot be stored: dead, for running it again would repeat the work."""
    text = f"the handler's result cannot be stored, so the job is not run again: {exc}"
    return _Outcome(error=text[:MAX_ERROR_CHARS], permanent=True)


def _takes_keyword(method: Callable[..., Any], name: str) -> bool:
    """Can ``method`` be called with the keyword ``name`` (by name, or through ``**kwargs``)?"""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): assume not
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == name and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))
        for p in parameters
    )


def _job_id(job: Any) -> str:
    return str(getattr(job, "id", job))


async def _await_any(awaitable: Awaitable[Any]) -> Any:
    # run_coroutine_threadsafe takes only coroutines; this wraps futures and
    # other awaitables a handler may return.
    return await awaitable


class Worker:
    """Runs ``handler(job)`` for every job it leases from ``queue``.

    The handler's return value is stored as the job's result (when it is not
    None); a result that cannot be stored sends the job to the dead-letter
    queue (the handler is not run again for it). An exception sends the job
    back for a retry with backoff (or to the dead-letter queue once its
    attempts are used up), and ``nobroker.PermanentError`` sends it to the
    dead-letter queue at once.
    ``async def`` handlers (and handlers that return an awaitable) run on one
    event loop. Delivery is at-least-once: handlers must be idempotent.

    ``concurrency``: jobs run at once. ``poll_interval``: longest idle wait
    before looking for work again where the queue cannot wake the worker
    itself (PostgreSQL, no named pipes) or with ``kinds``; on the file
    storage an idle worker is woken when work arrives and otherwise looks
    again only every IDLE_RECHECK seconds (or ``poll_interval``, if longer).
    ``max_jobs``: return after that many jobs finished.
    ``idle_timeout``: return once nothing has run and nothing could be leased
    for that many seconds. ``handle_signals``: in the main thread, the first
    SIGINT/SIGTERM stops leasing and lets running jobs finish; a second SIGINT
    raises KeyboardInterrupt at once (those leases then expire normally).
    ``kinds``: lease only jobs of these kinds. ``name``: used in logs and
    thread names.
    """

    def __init__(
        self,
        queue: WorkQueue,
        handler: Handler,
        *,
        concurrency: int = 1,
        poll_interval: float = 0.1,
        max_jobs: int | None = None,
        idle_timeout: float | None = None,
        handle_signals: bool = True,
        kinds: Iterable[str] | str | None = None,
        name: str | None = None,
        _heartbeat: bool = True,
    ) -> None:
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be an integer from 1 to {MAX_CONCURRENCY}, got {concurrency!r}")
        if not _is_positive_number(poll_interval) or poll_interval > MAX_SECONDS:
            raise ValueError(f"poll_interval must be a finite number of seconds > 0 and at most {MAX_SECONDS:g}, got {shown(poll_interval)}")
        if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1):
            raise ValueError(f"max_jobs must be None or an integer >= 1, got {max_jobs!r}")
        if idle_timeout is not None and not (
            idle_timeout == 0 or _is_positive_number(idle_timeout)
        ):
            raise ValueError(f"idle_timeout must be None or a number of seconds >= 0, got {shown(idle_timeout)}")
        if isinstance(kinds, str):
            kinds = [kinds]
        self._queue = queue
        self._handler = handler
        self._concurrency = concurrency
        self._poll_interval = float(poll_interval)
        self._max_jobs = max_jobs
        self._idle_timeout = None if idle_timeout is None else float(idle_timeout)
        self._handle_signals = handle_signals
        self._kinds: list[str] | None = None if kinds is None else list(kinds)
        self.name: str = name if name is not None else f"worker-{os.getpid()}"
        self._use_heartbeat = _heartbeat

        # One lock guards every piece of shared state below; the two
        # conditions share it so a state change and its wake-up are atomic.
        self._lock = threading.Lock()
        self._slot_freed = threading.Condition(self._lock)
        self._heartbeat_wake = threading.Condition(self._lock)
        self._stats = WorkerStats()
        self._running: set[_Running] = set()
        self._inflight = 0
        self._idle_since = time.monotonic()
        self._fatal: BaseException | None = None
        self._started = False
        self._heartbeat_stop = False
        # Monotonic time the heartbeat thread sleeps until (None: until woken).
        self._heartbeat_sleeps_until: float | None = None

        # Acks waiting to be sent together (see _ack); guarded by _lock.
        self._acks_ready = threading.Condition(self._lock)
        self._pending_acks: list[_PendingAck] = []
        self._flushing = False
        self._ack_many = getattr(queue, "ack_many", None)
        self._nack_keeps_tracebacks = _takes_keyword(queue.nack, "traceback")

        self._stopping = threading.Event()
        # A private pipe whose read end idle waits watch: stop() and the
        # signal handler write to it so a long wait ends at once. Open only
        # during run(), and only for a queue with wakes_waiters.
        self._interrupt_r: int | None = None
        self._interrupt_w: int | None = None
        self._interrupt_sent = False
        self._aborted = False
        self._signals_seen = 0
        self._first_signal = 0
        self._signal_noted = False

        self._work: queue_module.SimpleQueue[_Running | None] = queue_module.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._heartbeat_thread: threading.Thread | None = None

        self._loop_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._futures: set[concurrent.futures.Future[Any]] = set()

    # ------------------------------------------------------------ public
    def __repr__(self) -> str:
        return f"<Worker {self.name!r} concurrency={self._concurrency}>"

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the counts so far (safe to read from any thread)."""
        with self._lock:
            return dataclasses.replace(self._stats)

    @property
    def concurrency(self) -> int:
        """How many jobs this worker runs at once."""
        return self._concurrency

    # What it was made with, read-only (nobroker 0.1.2's Worker had them as attributes).
    @property
    def queue(self) -> WorkQueue:
        return self._queue

    @property
    def handler(self) -> Handler:
        return self._handler

    @property
    def poll_interval(self) -> float:
        return self._poll_interval

    @property
    def max_jobs(self) -> int | None:
        return self._max_jobs

    @property
    def idle_timeout(self) -> float | None:
        return self._idle_timeout

    @property
    def handle_signals(self) -> bool:
        return self._handle_signals

    def stop(self) -> None:
        """Stop leasing; ``run()`` returns once the running jobs finished. Any thread.

        Safe to call more than once, and before ``run()`` (which then returns at once).
        """
        self._stopping.set()
        with self._lock:
            self._slot_freed.notify_all()
            self._interrupt_idle()

    def run(self) -> WorkerStats:
        """Lease and run jobs until stopped; return what was done.

        Returns after ``stop()``, a first SIGINT/SIGTERM, ``max_jobs`` or
        ``idle_timeout``, always after the running jobs finished and were
        acked or nacked. Raises the storage error that stopped it, if any,
        also only after the running jobs finished. Signals are handled only
        when ``run()`` is called from the main thread; the previous signal
        handlers are back in place when it returns.
        """
        with self._lock:
            if self._started:
                raise RuntimeError("a Worker runs once; create a new Worker to run again")
            self._started = True
        self._open_interrupt()
        previous_handlers = self._install_signal_handlers()
        finished = False
        try:
            logger.info(
                "%s started: concurrency %d, kinds %s",
                self.name,
                self._concurrency,
                "all" if self._kinds is None else ",".join(self._kinds),
            )
            self._start_threads()
            self._lease_loop()
            self._drain()
            finished = True
        finally:
            if not finished:
                self._abort()
            self._restore_signal_handlers(previous_handlers)
            self._close_interrupt()
        stats = self.stats
        if self._fatal is not None:
            logger.error("%s stopped after an error: %s", self.name, stats.to_dict())
            raise self._fatal
        logger.info("%s stopped: %s", self.name, stats.to_dict())
        return stats

    # ------------------------------------------------------------ leasing (the run() thread)
    def _lease_loop(self) -> None:
        while True:
            self._notice_signal()
            if self._stopping.is_set():
                return
            with self._lock:
                while self._inflight >= self._concurrency and not self._stopping.is_set() and not self._signals_seen:
                    self._slot_freed.wait(WAIT_SLICE)
                if 0 < self._inflight < self._concurrency:
                    gather_until = time.monotonic() + LEASE_GATHER_SECONDS
                    while self._inflight > 0 and not self._stopping.is_set():
                        left = gather_until - time.monotonic()
                        if left <= 0:
                            break
                        self._slot_freed.wait(left)
                free = self._concurrency - self._inflight
                leased_so_far = self._stats.leased
            if self._stopping.is_set() or self._signals_seen or free <= 0:
                continue
            if self._max_jobs is not None:
                remaining = self._max_jobs - leased_so_far
                if remaining <= 0:
                    logger.info("%s leased its max_jobs (%d); finishing", self.name, self._max_jobs)
                    self.stop()
                    return
                free = min(free, remaining)
            leased_at_wall = time.time()
            leased_at = time.monotonic()
            try:
                jobs = self._lease(free)
            except Exception as exc:
                self._fail(exc, "lease")
                return
            if jobs:
                self._dispatch(jobs, leased_at_wall, leased_at)
                continue
            self._idle(self._idle_wait_time())

    def _lease(self, count: int) -> list[Any]:
        if self._kinds is None:
            jobs = self._queue.lease(count)
        else:
            jobs = self._queue.lease(count, kinds=self._kinds)
        return list(jobs or ())

    def _idle_wait_time(self) -> float:
        """How long to idle now; 0 (and stop()) once idle_timeout has run out.

        Long only when no job runs: a job that finishes does not end the wait,
        and idle_timeout counts from then.
        """
        with self._lock:
            busy = self._inflight > 0
            idle_for = time.monotonic() - self._idle_since
        wait = self._poll_interval
        if busy:
            return wait
        if self._kinds is None and self._queue_wakes_waiters():
            wait = max(wait, IDLE_RECHECK)
        if self._idle_timeout is None:
            return wait
        if idle_for >= self._idle_timeout:
            logger.info("%s idle for %.1f s; finishing", self.name, idle_for)
            self.stop()
            return 0.0
        return min(wait, self._idle_timeout - idle_for)

    def _queue_wakes_waiters(self) -> bool:
        """Will the queue wake us when work arrives, so a long idle wait is safe?"""
        wakes_waiters = getattr(self._queue, "wakes_waiters", None)
        if not callable(wakes_waiters):
            return False
        try:
            return bool(wakes_waiters())
        except Exception:  # a closed queue and the like: the lease will tell
            return False

    def _idle(self, timeout: float) -> None:
        if timeout <= 0 or self._stopping.is_set():
            return
        wait_for_jobs = getattr(self._queue, "wait_for_jobs", None)
        if not callable(wait_for_jobs):
            self._stopping.wait(timeout)
            return
        try:
            if self._interrupt_r is None:
                wait_for_jobs(timeout)
            else:
                # stop() or a signal after the check above writes to the pipe,
                # so the wait cannot miss it.
                wait_for_jobs(timeout, interrupt=self._interrupt_r, kinds=self._kinds)
        except Exception as exc:
            self._fail(exc, "wait_for_jobs")

    def _open_interrupt(self) -> None:
        if not callable(getattr(self._queue, "wakes_waiters", None)):
            return
        try:
            read_end, write_end = os.pipe()
        except OSError:  # out of descriptors: idle waits then end on their own
            return
        set_blocking = getattr(os, "set_blocking", None)  # Windows has it from Python 3.12 on
        for fd in (read_end, write_end):
            try:
                if set_blocking is not None:
                    set_blocking(fd, False)
            except OSError:  # one byte into an empty pipe never blocks anyway
                pass
        with self._lock:
            self._interrupt_r, self._interrupt_w = read_end, write_end
            if self._stopping.is_set():
                self._interrupt_idle()

    def _interrupt_idle(self) -> None:
        """End an idle wait at once. Takes no lock: the signal handler calls it too."""
        fd = self._interrupt_w
        if fd is not None and not self._interrupt_sent:
            try:
                os.write(fd, b"\0")  # never read: every later wait ends at once too
                self._interrupt_sent = True
            except OSError:  # a closing descriptor: nobody waits on it any more
                pass

    def _close_interrupt(self) -> None:
        if not self._lock.acquire(timeout=1.0):  # pragma: no cover - a Ctrl-C inside our own lock
            return  # leave the two descriptors open rather than hang
        try:
            read_end, write_end = self._interrupt_r, self._interrupt_w
            # Forget them before closing: a signal handler that runs in between
            # must not write to a descriptor number the process may reuse.
            self._interrupt_r = self._interrupt_w = None
        finally:
            self._lock.release()
        for fd in (read_end, write_end):
            if fd is not None:
                os.close(fd)

    def _dispatch(self, jobs: list[Any], leased_at_wall: float, leased_at: float) -> None:
        entries = [_Running(job, self._visibility_timeout(job, leased_at_wall), leased_at) for job in jobs]
        with self._lock:
            self._running.update(entries)
            self._inflight += len(entries)
            self._stats.leased += len(entries)
            self._idle_since = time.monotonic()
            # Wake the heartbeat only when it sleeps past the new leases'
            # first renewal: a wake-up per lease call would cost a thread
            # switch per batch for nothing.
            first_renewal = min(entry.renew_at for entry in entries)
            if self._heartbeat_sleeps_until is None or first_renewal < self._heartbeat_sleeps_until:
                self._heartbeat_wake.notify()
        for entry in entries:
            self._work.put(entry)

    def _visibility_timeout(self, job: Any, leased_at_wall: float) -> float:
        """The lease length to renew with: the queue's setting, else what the job shows."""
        configured = getattr(self._queue, "visibility_timeout", None)
        if _is_positive_number(configured):
            return float(configured)  # type: ignore[arg-type]
        deadline = getattr(job, "lease_deadline", None)
        if _is_positive_number(deadline):
            derived = float(deadline) - leased_at_wall  # type: ignore[arg-type]
            if 0 < derived <= MAX_SECONDS:
                return derived
        return DEFAULT_VISIBILITY_TIMEOUT

    def _drain(self) -> None:
        """Stop leasing, wait for running jobs to finish, then stop every thread."""
        self.stop()
        while True:
            self._notice_signal()
            with self._lock:
                if self._inflight == 0:
                    break
                self._slot_freed.wait(WAIT_SLICE)
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join()
        with self._lock:
            self._heartbeat_stop = True
            self._heartbeat_wake.notify_all()
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join()
        self._stop_loop()

    def _abort(self) -> None:
        """run() is leaving on an exception (a second Ctrl-C): let go at once.

        Running handlers cannot be interrupted; they finish in the background
        but their outcome is not sent (the caller may have closed the queue),
        and the heartbeat stops, so their leases expire normally.
        """
        self._aborted = True
        self._stopping.set()
        self._heartbeat_stop = True
        for _ in self._threads:
            self._work.put(None)
        if self._lock.acquire(timeout=1.0):
            try:
                futures = list(self._futures)
                self._heartbeat_wake.notify_all()
                self._slot_freed.notify_all()
            finally:
                self._lock.release()
        else:  # pragma: no cover - only if the interrupt landed inside our own lock
            futures = []
        for future in futures:
            future.cancel()
        with self._loop_lock:
            loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        logger.warning("%s interrupted; running jobs' leases will expire and they will be delivered again", self.name)

    # ------------------------------------------------------------ threads
    def _start_threads(self) -> None:
        if inspect.iscoroutinefunction(self._handler):
            self._ensure_loop()
        for index in range(self._concurrency):
            thread = threading.Thread(target=self._handler_thread, name=f"{self.name}-handler-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if self._use_heartbeat:
            self._heartbeat_thread = threading.Thread(
                target=self._heartbeat_main, name=f"{self.name}-heartbeat", daemon=True
            )
            self._heartbeat_thread.start()

    def _handler_thread(self) -> None:
        while True:
            entry = self._work.get()
            if entry is None:
                return
            try:
                if not self._aborted:  # after a second Ctrl-C nothing new starts
                    self._process(entry)
            except BaseException as exc:  # a bug here must stop the worker, not vanish with the thread
                self._fail(exc, f"handling job {_job_id(entry.job)}")
            finally:
                with self._lock:
                    self._running.discard(entry)
                    self._inflight -= 1
                    if self._inflight == 0:
                        self._idle_since = time.monotonic()
                    self._slot_freed.notify_all()

    def _process(self, entry: _Running) -> None:
        job = entry.job
        outcome = _Outcome()
        escaping: BaseException | None = None
        try:
            result = self._handler(job)
            if inspect.isawaitable(result):
                result = self._run_awaitable(result)
            outcome.result = result
        except PermanentError as exc:
            outcome.failed(exc, permanent=True)
        except Exception as exc:
            outcome.failed(exc)
        except BaseException as exc:  # SystemExit and the like: retry the job, then stop the worker
            outcome.failed(exc)
            escaping = exc
        if outcome.error is None and outcome.result is not None:
            try:
                stored_json(outcome.result, what="result", limit=MAX_RESULT_BYTES)
            except SerializationError as exc:
                outcome = _unstorable(exc)
        self._settle(entry, outcome)
        if escaping is not None:
            self._fail(escaping, f"handler of job {_job_id(job)}")

    def _settle(self, entry: _Running, outcome: _Outcome) -> None:
        """Ack or nack the job and count the outcome. Never raises."""
        with self._lock:
            # Unregistered first, so a renewal racing with this ack cannot
            # report a lost lease for a job that simply finished.
            self._running.discard(entry)
        if self._aborted:
            return
        job = entry.job
        if outcome.error is None:
            try:
                self._ack(job, outcome.result)
            except _LOST_ERRORS as exc:
                self._count_lost(entry, exc)
                return
            except SerializationError as exc:  # the queue refused what the check above let through
                outcome = _unstorable(exc)
            except Exception as exc:
                self._fail(exc, f"ack of job {_job_id(job)}")
                return
            else:
                if entry.lost:
                    self._count_lost(entry, None)
                else:
                    with self._lock:
                        self._stats.succeeded += 1
                return
        assert outcome.error is not None
        # Only what is needed, so a queue whose nack lacks a keyword still works without it.
        optional: dict[str, Any] = {}
        if outcome.permanent:
            optional["permanent"] = True
        traceback = outcome.traceback() if self._nack_keeps_tracebacks else None
        if traceback is not None:
            optional["traceback"] = traceback
        try:
            returned = self._queue.nack(job, error=outcome.error, **optional)
        except _LOST_ERRORS as exc:
            self._count_lost(entry, exc)
            return
        except Exception as exc:
            self._fail(exc, f"nack of job {_job_id(job)}")
            return
        if entry.lost:
            self._count_lost(entry, None)
            return
        went_dead = outcome.permanent or getattr(returned, "state", None) == "dead"
        with self._lock:
            if went_dead:
                self._stats.dead += 1
            else:
                self._stats.failed += 1
        # The handler's traceback goes with the line (exc_info), as it is kept with the job.
        if went_dead:
            logger.warning("job %s moved to the dead-letter queue: %s", _job_id(job), outcome.error, exc_info=outcome.exc)
        else:
            logger.warning("job %s failed, will retry: %s", _job_id(job), outcome.error, exc_info=outcome.exc)

    def _ack(self, job: Any, result: Any) -> None:
        """Ack one job, sharing one ack_many with the other handler threads when possible.

        The first thread to arrive flushes: it waits up to ACK_GATHER_SECONDS
        for the jobs still running to finish too, then acks them all in one
        call; the others wait for their item. Raises what acking this job
        raised, as queue.ack would.
        """
        if self._ack_many is None or self._concurrency == 1:
            self._ack_one(job, result)
            return
        item = _PendingAck(job, result)
        with self._lock:
            self._pending_acks.append(item)
            self._acks_ready.notify_all()
            if self._flushing:
                while not item.done:
                    self._acks_ready.wait()
                if item.error is not None:
                    raise item.error
                return
            self._flushing = True
            deadline = time.monotonic() + ACK_GATHER_SECONDS
            # Everyone still running will want an ack soon: wait a moment for them.
            while len(self._pending_acks) < self._inflight and (left := deadline - time.monotonic()) > 0:
                self._acks_ready.wait(left)
        try:
            while True:
                with self._lock:
                    batch, self._pending_acks = self._pending_acks, []
                if not batch:
                    break
                self._flush_acks(batch)
        finally:
            with self._lock:
                self._flushing = False
                self._acks_ready.notify_all()
        if item.error is not None:
            raise item.error

    def _flush_acks(self, batch: list[_PendingAck]) -> None:
        try:
            assert self._ack_many is not None
            results = [i.result for i in batch]
            if any(r is not None for r in results):
                self._ack_many([i.job for i in batch], results=results)
            else:
                self._ack_many([i.job for i in batch])
        except Exception:
            # Someone in the batch was refused (or the call failed): ack each on
            # its own, so every job gets exactly its own outcome. Those already
            # acked are acked again harmlessly under the same lease.
            for i in batch:
                try:
                    self._ack_one(i.job, i.result)
                except Exception as exc:
                    i.error = exc
        except BaseException as exc:  # Ctrl-C and the like: nobody may think this batch was acked
            for i in batch:
                i.error = i.error or exc
            raise
        finally:
            with self._lock:
                for i in batch:
                    i.done = True
                self._acks_ready.notify_all()

    def _ack_one(self, job: Any, result: Any) -> None:
        if result is None:
            self._queue.ack(job)
        else:
            self._queue.ack(job, result=result)

    def _count_lost(self, entry: _Running, exc: BaseException | None) -> None:
        with self._lock:
            self._stats.lost_leases += 1
        reason = f"{exc}" if exc is not None else "its lease had already been lost"
        logger.warning(
            "job %s: lease lost before the outcome was recorded (%s); it may run again elsewhere",
            _job_id(entry.job),
            reason,
        )

    # ------------------------------------------------------------ async handlers
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._loop_main, args=(loop,), name=f"{self.name}-asyncio", daemon=True
                )
                self._loop, self._loop_thread = loop, thread
                thread.start()
            return self._loop

    @staticmethod
    def _loop_main(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            # Tasks a handler started and left behind: cancel them so closing
            # the loop does not warn about pending tasks.
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def _run_awaitable(self, awaitable: Awaitable[Any]) -> Any:
        loop = self._ensure_loop()
        coroutine: Coroutine[Any, Any, Any]
        coroutine = awaitable if inspect.iscoroutine(awaitable) else _await_any(awaitable)
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        with self._lock:
            self._futures.add(future)
        try:
            return future.result()
        finally:
            with self._lock:
                self._futures.discard(future)

    def _stop_loop(self) -> None:
        with self._loop_lock:
            loop, thread = self._loop, self._loop_thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()

    # ------------------------------------------------------------ heartbeat
    def _heartbeat_main(self) -> None:
        while True:
            with self._lock:
                while True:
                    if self._heartbeat_stop:
                        return
                    now = time.monotonic()
                    live = [entry for entry in self._running if not entry.lost]
                    due = [entry for entry in live if entry.renew_at <= now]
                    if due:
                        break
                    next_at = min((entry.renew_at for entry in live), default=None)
                    self._heartbeat_sleeps_until = next_at
                    self._heartbeat_wake.wait(None if next_at is None else next_at - now)
                    self._heartbeat_sleeps_until = now  # awake: the next dispatch need not wake it
            for entry in due:
                if self._heartbeat_stop:
                    return
                self._renew(entry)

    def _renew(self, entry: _Running) -> None:
        started = time.monotonic()
        try:
            self._queue.extend(entry.job, entry.timeout)
        except _LOST_ERRORS as exc:
            with self._lock:
                still_running = entry in self._running
                if still_running:
                    entry.lost = True
            if still_running:
                logger.warning(
                    "job %s: lease lost while its handler runs (%s); another worker may run it too",
                    _job_id(entry.job),
                    exc,
                )
            return
        except Exception as exc:
            with self._lock:
                entry.renew_at = started + entry.interval
            self._fail(exc, f"lease renewal of job {_job_id(entry.job)}")
            return
        with self._lock:
            entry.renew_at = started + entry.interval

    # ------------------------------------------------------------ errors and signals
    def _fail(self, exc: BaseException, what: str) -> None:
        """A storage error (or a bug): remember the first, log it, stop leasing."""
        with self._lock:
            first = self._fatal is None
            if first:
                self._fatal = exc
        if first:
            logger.error("%s: %s failed, stopping: %s", self.name, what, exc, exc_info=exc)
        else:
            logger.error("%s: %s failed too: %s", self.name, what, exc)
        self.stop()

    def _install_signal_handlers(self) -> dict[int, Any]:
        if not self._handle_signals or threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                previous[signum] = signal.signal(signum, self._on_signal)
            except (ValueError, OSError):  # not allowed here (embedded interpreter)
                continue
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Runs in the main thread between two bytecodes of whatever it was
        # doing, possibly inside one of our locks: so only plain attribute
        # writes here, and one byte to the idle wait's pipe (no lock); the
        # run() loop notices the flag within WAIT_SLICE, or at once when idle.
        if self._signals_seen and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not self._signals_seen:
            self._first_signal = signum
        self._signals_seen += 1
        self._interrupt_idle()

    def _notice_signal(self) -> None:
        if self._signals_seen and not self._signal_noted:
            self._signal_noted = True
            with self._lock:
                running = self._inflight
            try:
                signal_name = signal.Signals(self._first_signal).name
            except ValueError:
                signal_name = str(self._first_signal)
            logger.warning(
                "%s: stop signal received (%s); finishing %d running job(s), then stopping "
                "(Ctrl-C again to quit at once)",
                self.name,
                signal_name,
                running,
            )
            self.stop()
