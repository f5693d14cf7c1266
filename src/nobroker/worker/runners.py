"""Running the handler over leased jobs: on handler threads, or as tasks on the one event loop.

Owns: HandlerThreads (``concurrency`` threads, each running one job at a
time), LoopTasks (an ``async def`` handler: each job a task on the event
loop, no thread per job) and the SettlingThread both hand finished jobs
to: one thread that acks everything finished since its last write in one
``ack_many`` (one write, one fsync), so handler threads go on to their next
job at once and no storage call runs on the loop. A handler thread nacks a
failed job itself (nacks from many threads still share an fsync in the file
storage's group commit), and acks itself where there is no ``ack_many`` to
share it in. Runners take leased jobs with ``run(entries)``, call
``released(entry)`` when a job's handler is done and its ack handed over
(its slot is free: the next lease shares a write with that ack, and the next
job runs while the ack becomes durable, even with one slot), and
``finished(entry)`` once per job after it was settled (after an abort
nothing more is settled or counted); the Worker counts its free slots from
the first and waits for the second before it stops. Given a ``Chain`` (a
Worker with one slot), a handler thread whose job succeeded keeps its slot
and leases its next job itself, instead of freeing the slot for the
leasing thread to fill: two wake-ups of another thread fewer per job (on a
virtual machine of two processors, each cost about as much CPU as the
job's own lease). A handler past its time limit (timeouts.py):
an async one's task is cancelled; a handler thread is abandoned and a new one
takes its place.
Imports: outcome, asyncloop, heartbeat, settle, timeouts.
"""

from __future__ import annotations

import queue as queue_module
import threading
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from .asyncloop import EventLoopThread
from .heartbeat import Running
from .outcome import Handler, Outcome, call_async_handler, call_handler
from .settle import Settler
from .timeouts import TimeLimits

#: Called once per job, after it was settled (or given up on); and (as Released) once its handler is done.
Finished = Callable[[Running], None]
#: What stops the worker: an exception, and what was being done.
Fail = Callable[[BaseException, str], None]
#: A job whose handler is done: the job, its outcome, and what must stop the worker once it is settled.
Done = tuple[Running, Outcome, BaseException | None]


class Runner(Protocol):
    """What the Worker drives: start, hand over leased jobs, stop once all finished, or abort."""

    def start(self) -> None: ...

    def run(self, entries: list[Running]) -> None: ...

    def stop(self) -> None: ...

    def abort(self) -> None: ...


class SettlingThread:
    """The one thread that settles finished jobs, many in one write.

    While it waits for one write (an fsync, a statement), the jobs that
    finish pile up, and its next ``ack_many`` carries them all: batches form
    by themselves, with no timer.
    """

    def __init__(self, settler: Settler, name: str, finished: Finished, fail: Fail) -> None:
        self._settler = settler
        self._name = name
        self._finished = finished
        self._fail = fail
        self._done: queue_module.SimpleQueue[Done | None] = queue_module.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=f"{self._name}-settle", daemon=True)
        self._thread.start()

    def put(self, done: Done) -> None:
        self._done.put(done)

    def stop(self) -> None:
        """Every job has been settled: let the thread go, and wait for it."""
        self._done.put(None)
        if self._thread is not None:
            self._thread.join()

    def abort(self) -> None:
        """Settle nothing more (the leases of what still runs expire); wait for nothing."""
        self._done.put(None)

    def _main(self) -> None:
        while True:
            first = self._done.get()
            if first is None:
                return
            batch, last = [first], False
            while True:  # everything else that finished meanwhile goes in the same write
                try:
                    more = self._done.get_nowait()
                except queue_module.Empty:
                    break
                if more is None:
                    last = True
                    break
                batch.append(more)
            self._settle(batch)
            if last:
                return

    def _settle(self, batch: list[Done]) -> None:
        try:
            self._settler.settle_many([(entry, outcome) for entry, outcome, _ in batch])
            for entry, _, escaping in batch:
                if escaping is not None:
                    self._fail(escaping, f"handler of job {entry.job.id}")
        except BaseException as exc:  # a bug here must stop the worker, not vanish with the thread
            self._fail(exc, "settling jobs")
        finally:
            for entry, _, _ in batch:
                self._finished(entry)


class Chain(NamedTuple):
    """How a handler thread leases its own next job (leasing.Leasing's ``keep_slot`` and ``lease_next``).

    ``keep_slot(done)``, before the finished job's ack is handed over: may
    this thread lease its next job itself, in the same slot? Then
    ``lease_next()``: that job, or None (the slot is free then).
    """

    keep_slot: Callable[[Running], bool]
    lease_next: Callable[[], Running | None]


class HandlerThreads:
    """``concurrency`` handler threads; a plain handler that returns an awaitable has it run on the loop."""

    def __init__(
        self, handler: Handler, settler: Settler, loop: EventLoopThread, concurrency: int, batch_acks: bool,
        name: str, released: Finished, finished: Finished, fail: Fail, limits: TimeLimits, chain: Chain | None,
    ) -> None:  # fmt: skip
        self._handler = handler
        self._settler = settler
        self._loop = loop
        self._concurrency = concurrency
        self._chain = chain if batch_acks else None
        self._name = name
        self._released = released
        self._finished = finished
        self._fail = fail
        self._limits = limits
        # Even one thread hands its acks over: its slot is free at once, so the next lease
        # shares a write with this ack, and the next job runs while the ack becomes durable.
        self._settling = SettlingThread(settler, name, finished, fail) if batch_acks else None
        self._work: queue_module.SimpleQueue[Running | None] = queue_module.SimpleQueue()
        self._threads: list[threading.Thread] = []  # the live ones: an abandoned thread leaves this list
        self._threads_lock = threading.Lock()
        self._started = 0

    def start(self) -> None:
        if self._settling is not None:
            self._settling.start()
        for _ in range(self._concurrency):
            self._start_thread()

    def _start_thread(self) -> None:
        with self._threads_lock:
            thread = threading.Thread(target=self._main, name=f"{self._name}-handler-{self._started}", daemon=True)
            self._started += 1
            self._threads.append(thread)
        thread.start()

    def _expire(self, entry: Running) -> None:
        """On the watchdog's thread, at the limit of a job it claimed: fail the attempt, abandon its thread."""
        self._settler.settle(entry, self._limits.outcome(entry))
        with self._threads_lock:
            stuck = [thread for thread in self._threads if getattr(thread, "nobroker_running", None) is entry]
            for thread in stuck:
                self._threads.remove(thread)
        self._start_thread()  # before the slot is free: the drain then knows every live thread
        self._limits.counted(entry, abandoned=True)
        too_many = self._limits.too_many_abandoned()
        if too_many is not None:
            self._fail(too_many, "time limits")
        self._finished(entry)

    def run(self, entries: list[Running]) -> None:
        for entry in entries:
            self._work.put(entry)

    def stop(self) -> None:
        """Every job has finished: let the threads go, and wait for them (not for abandoned ones)."""
        with self._threads_lock:
            threads = list(self._threads)
        for _ in threads:
            self._work.put(None)
        for thread in threads:
            thread.join()
        self._limits.stop()
        if self._settling is not None:
            self._settling.stop()
        self._loop.stop()

    def abort(self) -> None:
        """Let go at once: running handlers finish in the background, nothing new starts or is settled."""
        with self._threads_lock:
            threads = list(self._threads)
        for _ in threads:
            self._work.put(None)
        self._limits.stop()
        if self._settling is not None:
            self._settling.abort()
        self._loop.abort()

    def _main(self) -> None:
        me: Any = threading.current_thread()
        while True:
            entry: Running | None = self._work.get()
            if entry is None:
                return
            while entry is not None:  # the job, then each next one this thread leased itself
                entry, abandoned = self._run_one(me, entry)
                if abandoned:
                    return  # past its limit: a new thread took this one's place

    def _run_one(self, me: Any, entry: Running) -> tuple[Running | None, bool]:
        """Run one job and hand its outcome on; the next job this thread leased (or None), and whether it was abandoned."""
        handed_over = False
        chained = None
        try:
            if not self._settler.aborted:  # after a second Ctrl-C nothing new starts
                me.nobroker_running = entry
                limited = self._limits.watch(entry, self._expire)
                outcome, escaping = call_handler(self._handler, entry.job, self._loop.run)
                if limited and not entry.claim():  # past its limit: the watchdog settled it
                    handed_over = True
                    return None, True
                me.nobroker_running = None
                if self._settling is not None and outcome.error is None:
                    keep = escaping is None and self._chain is not None and self._chain.keep_slot(entry)
                    self._settling.put((entry, outcome, None))  # its ack shares the next write
                    handed_over = True
                    if keep:
                        assert self._chain is not None
                        chained = self._chain.lease_next()
                    else:
                        self._released(entry)
                else:
                    self._settler.settle(entry, outcome)
                if escaping is not None:
                    self._fail(escaping, f"handler of job {entry.job.id}")
        except BaseException as exc:  # a bug here must stop the worker, not vanish with the thread
            self._fail(exc, f"handling job {entry.job.id}")
        finally:
            if not handed_over:
                self._finished(entry)
        return chained, False


class LoopTasks:
    """An async handler: every job a task on the one loop, settled by the settling thread.

    The leasing thread never hands over more jobs than there are free slots,
    so at most ``concurrency`` tasks run at once.
    """

    def __init__(self, handler: Handler, settler: Settler, loop: EventLoopThread, name: str,
                 released: Finished, finished: Finished, fail: Fail, limits: TimeLimits) -> None:  # fmt: skip
        self._handler = handler
        self._settler = settler
        self._loop = loop
        self._limits = limits
        self._released = released
        self._settling = SettlingThread(settler, name, finished, fail)

    def start(self) -> None:
        self._loop.ensure()
        self._settling.start()

    def run(self, entries: list[Running]) -> None:
        for entry in entries:
            entry.attach(self._loop.submit(self._task(entry)))  # a cancelled job's task is cancelled

    def stop(self) -> None:
        self._settling.stop()
        self._loop.stop()

    def abort(self) -> None:
        """Cancel every running handler; nothing more is settled (the leases expire)."""
        self._settling.abort()
        self._loop.abort()

    async def _task(self, entry: Running) -> None:
        if self._settler.aborted:
            return
        try:
            returned, timed_out = await self._limits.run_task(entry, call_async_handler(self._handler, entry.job))
            done: Done = (entry, self._limits.outcome(entry), None) if timed_out else (entry, *returned)
        except BaseException as exc:  # a bug here (or a cancel at the first step): still settled, and it stops the worker
            outcome = Outcome()
            outcome.failed(exc)
            done = (entry, outcome, exc)
            timed_out = False
        self._settling.put(done)
        self._released(entry)
        if timed_out:
            self._limits.counted(entry, abandoned=False)


def runner_for(
    handler: Handler, is_async: bool, settler: Settler, loop: EventLoopThread, concurrency: int, batch_acks: bool,
    name: str, released: Finished, finished: Finished, fail: Fail, limits: TimeLimits, chain: Chain | None = None,
) -> Runner:  # fmt: skip
    """The runner a handler needs: tasks on the loop for an async one, else threads.

    ``batch_acks``: the queue has ``ack_many``, so acks are worth sharing a write.
    ``released``: a job's handler is done and its ack handed to the settling thread (its slot is free).
    ``chain``: how a handler thread leases its next job itself (handler threads with ``batch_acks``).
    """
    if is_async:
        return LoopTasks(handler, settler, loop, name, released, finished, fail, limits)
    return HandlerThreads(handler, settler, loop, concurrency, batch_acks, name, released, finished, fail, limits, chain)
