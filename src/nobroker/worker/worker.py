"""The Worker: runs a handler over leased jobs, concurrently and safely.

Owns: Worker: the run() thread's loop (leasing as many jobs as there are
free slots, idling when there is none, handing them to its runner: handler
threads, or tasks on the event loop for an async handler; leasing.py's
Leasing makes each lease, and a handler thread's own next one when the
Worker runs one job at a time), and stopping: on stop(), a stop signal, max_jobs,
idle_timeout, a storage error, or a second Ctrl-C. It wires the helpers
that come before it in the package and owns none of their state.
With ``processes=N`` it runs none of that itself: run() hands over to a
ProcessPool (pool.py), whose forked children each run a Worker made here
with the same options. Imports: jobs, protocol, options, signals,
interrupt, outcome, madewith, asyncloop, heartbeat, settle, timeouts, runners, slots, idling,
budget, leasing, pool, ticks (which enqueues the queue's due periodic jobs), joblines (the
reports to an ``on_job`` listener), announce (the worker's announcement).

Idling (how long one wait lasts, and what ends it early) is idling.py's.

Nothing here may die silently. A storage error (disk full, I/O error, a closed
queue) in lease/ack/nack/extend is logged, stops the leasing, lets the running
handlers finish, and is raised again from ``run()``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable

from ..jobs import Job
from .asyncloop import EventLoopThread
from .announce import Announcer
from .budget import LeaseBudget
from .heartbeat import Heartbeat, Running
from .idling import idle_wait
from .interrupt import InterruptPipe
from .joblines import Listener, Teller
from .leasing import Leasing
from .madewith import MadeWith
from .outcome import Handler, WorkerStats, is_async_handler
from .options import check_options
from .pool import ProcessPool
from .protocol import QueueAccess, WorkQueue
from .runners import Chain, runner_for
from .settle import Settler
from .signals import StopSignals
from .slots import Slots
from .ticks import TickThread
from .timeouts import TimeLimits, check_timeout

logger = logging.getLogger("nobroker.worker")

#: Longest the run() thread blocks in one wait on a lock condition. A stop
#: signal is recorded at once but acted on from another thread; the loop
#: checks the record too, so it leases nothing more within this slice even
#: before that thread has run.
WAIT_SLICE = 0.1
#: While jobs are still running, the leasing thread waits up to this long
#: for the rest of the slots to free before it leases. Short handlers finish
#: in bursts (their acks share one fsync and return together), so the wait
#: turns several small lease calls, each a write and an fsync of its own,
#: into one; long handlers lose at most this much per lease call.
LEASE_GATHER_SECONDS = 0.002


class Worker(MadeWith):
    """Runs ``handler(job)`` for every job it leases from ``queue``.

    The handler's return value is stored as the job's result (when it is not
    None); a result that cannot be stored sends the job to the dead-letter
    queue (the handler is not run again for it). An exception sends the job
    back for a retry with backoff (or to the dead-letter queue once its
    attempts are used up), and ``nobroker.PermanentError`` sends it to the
    dead-letter queue at once.
    ``async def`` handlers run as tasks on one event loop, with no thread
    per job (their storage calls run on other threads, never on the loop);
    a plain handler that returns an awaitable has it run on that loop.
    Delivery is at-least-once: handlers must be idempotent.

    ``concurrency``: jobs run at once. ``poll_interval``: longest idle wait
    before looking for work again where the queue cannot wake the worker
    itself (PostgreSQL, no named pipes) or with ``kinds``; on the file
    storage an idle worker is woken when work arrives and otherwise looks
    again only every idling.IDLE_RECHECK seconds (or ``poll_interval``, if longer).
    ``max_jobs``: return after that many jobs finished.
    ``idle_timeout``: return once nothing has run and nothing could be leased
    for that many seconds. ``handle_signals``: in the main thread, the first
    SIGINT/SIGTERM stops leasing and lets running jobs finish; a second SIGINT
    raises KeyboardInterrupt at once (those leases then expire normally).
    ``kinds``: lease only jobs of these kinds. ``name``: used in logs and
    thread names. ``timeout``: the time limit in seconds of every job that
    has none of its own (``enqueue(..., timeout=)``); see timeouts.py.
    ``on_job``: called with a JobReport (time, id, kind,
    outcome, duration, attempts, error) for each job once its outcome was
    recorded, on the thread that recorded it (keep it quick; what it raises
    is logged and ignored). With ``processes`` each child calls it in its
    own process. A running Worker announces itself to its queue (host, pid,
    kinds, jobs running; ``queue.workers()``) and takes that back at a clean stop.

    ``processes``: run in that many pre-forked worker processes instead, each
    with ``concurrency`` jobs at once (for CPU-bound handlers; POSIX only: it
    needs ``os.fork``). Each child inherits the queue object and the handler
    (nothing is pickled; the queue opens its own files or connection in the
    child) and runs the normal leasing loop. The parent runs no job: it
    replaces a child that dies (``processes_replaced`` counts them), passes
    a stop on (the first stop signal or ``stop()``: every child finishes its
    running jobs; a second Ctrl-C kills them, and their leases expire), and
    returns the children's counts added up. ``max_jobs`` then counts the
    leases of every child together; ``idle_timeout`` applies to each child,
    and run() returns once all have stopped. The process that calls run()
    must not use the queue from other threads meanwhile.
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
        processes: int | None = None,
        timeout: float | None = None,
        on_job: Listener | None = None,
        _heartbeat: bool = True,
        _budget: LeaseBudget | None = None,
        _child: bool = False,
    ) -> None:
        check_options(handler, concurrency, poll_interval, max_jobs, idle_timeout, processes)
        self._timeout = check_timeout(timeout)
        #: A worker process of a pool that abandoned a thread: it stops, and the pool replaces it.
        self.replace_me = False
        self._child = _child
        if isinstance(kinds, str):
            kinds = [kinds]
        self._queue = queue
        self._access = QueueAccess(queue)
        self._handler = handler
        self._concurrency = concurrency
        self._poll_interval = float(poll_interval)
        self._max_jobs = max_jobs
        self._idle_timeout = None if idle_timeout is None else float(idle_timeout)
        self._handle_signals = handle_signals
        self._kinds: list[str] | None = None if kinds is None else list(kinds)
        self.name: str = name if name is not None else f"worker-{os.getpid()}"
        self._named = name is not None
        self._processes = processes
        self._use_heartbeat = _heartbeat
        self._pool: ProcessPool | None = None

        # One lock guards the worker's own shared state below; each helper
        # (heartbeat, acks, event loop, pipe) guards its own with another.
        self._slots = Slots()
        self._lock = self._slots.lock
        self._slot_freed = self._slots.freed
        self._fatal: BaseException | None = None
        self._started = False
        self._stopping = threading.Event()

        self._heartbeat = Heartbeat(self._access, self._fail, f"{self.name}-heartbeat")
        self._settler = Settler(self._access, self._heartbeat, self._fail)
        self._on_job = on_job
        if on_job is not None:
            self._settler.teller = Teller(on_job)
        self._loop = EventLoopThread(f"{self.name}-asyncio")
        self._pipe = InterruptPipe()
        self._signals = StopSignals(self._stop_on_signal, name=f"{self.name}-signals")
        #: The signal handler run() installs (with handle_signals, in the main thread).
        self._on_signal = self._signals.handle
        self._leases = Leasing(
            self._access, self._kinds, self.name, max_jobs, _budget, self._settler, self._heartbeat, self._slots,
            self.stop, self._fail, self._asked_to_stop,
        )  # fmt: skip
        limits = TimeLimits(self._timeout, self._settler, self.name, self._abandoned_a_thread)
        self._runner = runner_for(
            handler, is_async_handler(handler), self._settler, self._loop, concurrency, self._access.acks_many,
            self.name, self._slots.release, self._job_finished, self._fail, limits,
            Chain(self._leases.keep_slot, self._leases.lease_next) if concurrency == 1 else None,
        )  # fmt: skip
        self._ticks = TickThread(queue, self.name) if TickThread.wanted(queue) else None
        running = lambda: self._slots.inflight  # noqa: E731 - for the announcement only: a glance, no lock needed
        self._announcer = Announcer(queue, self.name, self._kinds, concurrency, running) if Announcer.wanted(queue) else None

    # ------------------------------------------------------------ public
    def __repr__(self) -> str:
        processes = "" if self._processes is None else f" processes={self._processes}"
        return f"<Worker {self.name!r} concurrency={self._concurrency}{processes}>"

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the counts so far (safe to read from any thread).

        With ``processes``: every child's, as each last reported them (a
        running child reports every half second or so).
        """
        pool = self._pool
        return self._settler.stats() if pool is None else pool.stats()

    @property
    def processes(self) -> int | None:
        """How many worker processes run() forks (None: it runs the jobs itself)."""
        return self._processes

    @property
    def processes_replaced(self) -> int:
        """With ``processes``: how many children died (killed, crashed) and were replaced."""
        pool = self._pool
        return 0 if pool is None else pool.replaced

    def stop(self) -> None:
        """Stop leasing; ``run()`` returns once the running jobs finished. Any thread.

        Safe to call more than once, and before ``run()`` (which then returns at once).
        """
        self._stopping.set()
        with self._lock:
            self._slot_freed.notify_all()
            pool = self._pool
        self._pipe.interrupt()
        if pool is not None:
            pool.stop()

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
        if self._processes is not None:
            return self._run_pool(self._processes)
        if self._access.can_interrupt:
            self._pipe.open()
            if self._stopping.is_set():  # stop() came before the pipe was there to write to
                self._pipe.interrupt()
        if self._handle_signals:
            self._signals.install()
        finished = False
        try:
            kinds = "all" if self._kinds is None else ",".join(self._kinds)
            logger.info("%s started: concurrency %d, kinds %s", self.name, self._concurrency, kinds)
            self._start_threads()
            if self._announcer is not None:
                self._announcer.start()
            if self._ticks is not None:
                self._ticks.maybe_start()
            self._lease_loop()
            self._drain()
            finished = True
        finally:
            if self._announcer is not None:
                self._announcer.stop(retire=finished)
            if self._ticks is not None:
                self._ticks.stop()
            if not finished:
                self._abort()
            self._signals.restore()
            self._pipe.close()
        stats = self.stats
        if self._fatal is not None:
            logger.error("%s stopped after an error: %s", self.name, stats.to_dict())
            raise self._fatal
        logger.info("%s stopped: %s", self.name, stats.to_dict())
        return stats

    def _run_pool(self, processes: int) -> WorkerStats:
        """run() with ``processes``: fork the children and supervise them until they all stopped."""
        pool = ProcessPool(self._child_worker, processes, self._max_jobs, self.name)
        with self._lock:
            self._pool = pool
        if self._stopping.is_set():  # stop() came before the pool was there to tell
            pool.stop()
        if self._handle_signals:
            self._signals.install()
        try:
            return pool.run()
        finally:
            self._signals.restore()

    def _child_worker(self, budget: LeaseBudget | None, slot: int) -> Worker:
        """In a forked child: the Worker it runs, made with this one's options (and the pool's budget)."""
        return Worker(
            self._queue, self._handler, concurrency=self._concurrency, poll_interval=self._poll_interval,
            idle_timeout=self._idle_timeout, handle_signals=True, kinds=self._kinds,
            name=f"{self.name}-{slot}" if self._named else None, _heartbeat=self._use_heartbeat, _budget=budget,
            timeout=self._timeout, on_job=self._on_job, _child=True,
        )  # fmt: skip

    # ------------------------------------------------------------ leasing (the run() thread)
    def _asked_to_stop(self) -> bool:
        return self._stopping.is_set() or self._signals.first is not None

    def _lease_loop(self) -> None:
        while not self._stopping.is_set():
            if self._ticks is not None:
                self._ticks.maybe_start()
            with self._lock:
                slots = self._slots
                while slots.inflight >= self._concurrency and not self._asked_to_stop():
                    self._slot_freed.wait(WAIT_SLICE)
                if 0 < slots.inflight < self._concurrency:
                    gather_until = time.monotonic() + LEASE_GATHER_SECONDS
                    while slots.inflight > 0 and not self._stopping.is_set():
                        left = gather_until - time.monotonic()
                        if left <= 0:
                            break
                        self._slot_freed.wait(left)
                free = self._concurrency - slots.inflight
            if self._asked_to_stop() or free <= 0:
                self._wait_for_stop()  # a signal came: its watcher calls stop() in a moment
                continue
            with self._leases.lock:
                allowed = self._leases.allowed(free)
                leased_at_wall, leased_at = time.time(), time.monotonic()
                jobs = self._leases.lease(allowed) if allowed else []
            if allowed is None:
                self.stop()
                return
            if allowed == 0:  # none for now: the pool's parent is refilling the shared budget
                continue
            if jobs is None:
                return
            if jobs:
                self._dispatch(jobs, leased_at_wall, leased_at)
                continue
            self._idle(self._idle_wait_time())

    def _wait_for_stop(self) -> None:
        with self._lock:
            if not self._stopping.is_set():
                self._slot_freed.wait(WAIT_SLICE)

    def _idle_wait_time(self) -> float:
        """How long to idle now (idling.idle_wait); 0, and stop(), once idle_timeout has run out."""
        with self._lock:
            busy = self._slots.inflight > 0
            idle_for = time.monotonic() - self._slots.idle_since
        woken = not busy and self._kinds is None and self._access.wakes_waiters()
        wait = idle_wait(self._poll_interval, busy=busy, woken=woken, idle_for=idle_for, idle_timeout=self._idle_timeout)
        if wait is None:
            logger.info("%s idle for %.1f s; finishing", self.name, idle_for)
            self.stop()
            return 0.0
        return wait

    def _idle(self, timeout: float) -> None:
        if timeout <= 0 or self._stopping.is_set():
            return
        try:
            # stop() after the check above writes to the pipe, so the wait cannot miss it.
            if not self._access.wait(timeout, self._pipe.fd, self._kinds):
                self._stopping.wait(timeout)
        except Exception as exc:
            self._fail(exc, "wait_for_jobs")

    def _dispatch(self, jobs: list[Job], leased_at_wall: float, leased_at: float) -> None:
        self._slots.taken(len(jobs))
        self._runner.run(self._leases.entries(jobs, leased_at_wall, leased_at))

    def _drain(self) -> None:
        """Stop leasing, wait for running jobs to finish, then stop every thread."""
        self.stop()
        self._slots.wait_settled(WAIT_SLICE)
        self._runner.stop()
        self._heartbeat.stop()

    def _abort(self) -> None:
        """run() is leaving on an exception (a second Ctrl-C): let go at once.

        Running handlers are not waited for: a thread finishes its handler in
        the background, an async handler is cancelled; no outcome is sent
        (the caller may have closed the queue), and the heartbeat stops, so
        their leases expire normally.
        """
        self._settler.abort()
        self._stopping.set()
        self._heartbeat.abort()
        self._runner.abort()
        logger.warning("%s interrupted; running jobs' leases will expire and they will be delivered again", self.name)

    # ------------------------------------------------------------ running jobs
    def _start_threads(self) -> None:
        self._runner.start()
        if self._use_heartbeat:
            self._heartbeat.start()

    def _job_finished(self, entry: Running) -> None:
        """A job was settled (on a handler thread, or the settling thread): no more to do for it."""
        self._heartbeat.discard(entry)
        self._slots.finish(entry)

    def _abandoned_a_thread(self) -> None:
        """A handler thread ran past its limit and was left running: a pool's process retires (timeouts.py)."""
        if self._child:
            self.replace_me = True
            self.stop()

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

    def _stop_on_signal(self, signum: int) -> None:
        """The first SIGINT/SIGTERM (on the signals' watcher thread): finish what runs, then stop."""
        with self._lock:
            running = f"{self._slots.inflight} running job(s)" if self._pool is None else "the worker processes' running jobs"
        logger.warning(
            "%s: stop signal received (%s); finishing %s, then stopping (Ctrl-C again to quit at once)",
            self.name, self._signals.first_name, running,
        )  # fmt: skip
        self.stop()
