"""The pre-forked worker processes behind ``Worker(..., processes=N)`` and ``nobroker work --processes N``.

Owns: ProcessPool: forking the children (each runs a Worker of its own over
the queue object it inherits; nobroker's storages open their own files or
connection in a child on first use), supervising them (a child that dies is
replaced and counted; one whose Worker raised stops the pool, which raises
that error), passing a stop on (SIGTERM to each child: it finishes its
running jobs; a hard stop: SIGKILL, and their leases expire), the shared
``max_jobs`` budget, and the counts of every child added up.
Imports: waiting, outcome, options, budget, child.

The parent never touches the queue while it forks: it runs no handler and
leases nothing, so no lock or connection of the queue is in use at a fork.
Its one loop (the thread that called ``run()``) waits in poll() on the
children's report pipes, a wake-up pipe that ``stop()`` writes to and, while
tokens of the budget are still to be handed out, the budget pipe; a child's
report pipe reads end-of-file when the child exits, and the loop also looks
for exited children every SUPERVISE_SLICE.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

from ..waiting import readable, ready
from .budget import BudgetFeed
from .child import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REPLACE,
    STOP_SIGNALS,
    ChildSpec,
    MakeWorker,
    ReportReader,
    error_of,
    run_child,
    stats_of,
)
from .options import MAX_PROCESSES
from .outcome import WorkerStats

logger = logging.getLogger("nobroker.worker")

#: Longest the parent's loop waits before it looks for exited children again.
SUPERVISE_SLICE = 0.5
#: A child that lived less than this is replaced only this long after it started, so a
#: child that dies at once (a handler that crashes the interpreter on every job) cannot fork-bomb.
RESPAWN_PAUSE = 1.0
#: Bytes read from a report pipe at a time.
READ_CHUNK = 65536
#: Once a child's pipe has ended, how long the parent waits for it to exit before it looks again
#: in the next slice, and how often it looks meanwhile.
EXIT_GRACE, REAP_POLL = 0.2, 0.001


@dataclass
class _Child:
    """One running child, as the parent sees it."""

    slot: int
    pid: int
    report_fd: int  # read end
    lifeline_fd: int  # write end: closing it (or the parent's death) tells the child the parent is gone
    started: float
    reader: ReportReader = field(default_factory=ReportReader)
    latest: WorkerStats = field(default_factory=WorkerStats)
    error: BaseException | None = None
    final: bool = False  # its last counts came: it finished its run
    eof: bool = False  # its pipe has ended: it has exited, or is exiting

    def descriptors(self) -> list[int]:
        return [self.report_fd, self.lifeline_fd]


def _add(total: WorkerStats, more: WorkerStats) -> None:
    for bucket in dataclasses.fields(WorkerStats):  # every bucket (cancelled, snoozed too)
        setattr(total, bucket.name, getattr(total, bucket.name) + getattr(more, bucket.name))


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(signum).name}"
        except ValueError:
            return f"killed by signal {signum}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


class ProcessPool:
    """``processes`` children, each running ``make_worker(budget, slot).run()``; ``run()`` returns their counts added up."""

    def __init__(self, make_worker: MakeWorker, processes: int, max_jobs: int | None, name: str) -> None:
        assert 1 <= processes <= MAX_PROCESSES, "checked by the Worker"
        self._make_worker = make_worker
        self._processes = processes
        self._max_jobs = max_jobs
        self._name = name
        self._lock = threading.Lock()
        # Guarded by _lock: what stats() and replaced read from other threads.
        self._children: dict[int, _Child] = {}
        self._finished = WorkerStats()
        self._replaced = 0
        self._stop_asked = threading.Event()
        self._stop_sent = False
        self._fatal: BaseException | None = None
        self._respawn: list[tuple[float, int]] = []  # (when, slot)
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)
        self._budget = None if max_jobs is None else BudgetFeed(max_jobs)

    # ------------------------------------------------------------ any thread
    def stop(self) -> None:
        """Ask every child to finish its running jobs and exit; run() returns once they have."""
        self._stop_asked.set()
        with self._lock:  # never a write to a descriptor number closed and reused
            if self._wake_w < 0:
                return
            try:
                os.write(self._wake_w, b"\0")
            except OSError:  # full: a wake-up is waiting already
                pass

    def stats(self) -> WorkerStats:
        """The counts so far: every child that exited, and the last report of each that runs."""
        with self._lock:
            total = WorkerStats()
            _add(total, self._finished)
            for child in self._children.values():
                _add(total, child.latest)
            return total

    @property
    def replaced(self) -> int:
        """How many children died and were replaced."""
        with self._lock:
            return self._replaced

    # ------------------------------------------------------------ the run() thread
    def run(self) -> WorkerStats:
        """Fork the children, supervise them until all have exited, return their counts added up.

        Raises the error a child's Worker stopped on, after the others
        finished their running jobs. On an exception here (a second
        Ctrl-C: KeyboardInterrupt) every child is killed at once and the
        exception goes on.
        """
        logger.info("%s started: %d worker processes", self._name, self._processes)
        try:
            if self._budget is not None:
                self._budget.feed()
            if not self._stop_asked.is_set():
                for slot in range(self._processes):
                    self._spawn(slot)
            self._supervise()
        except BaseException:
            self._kill_all()
            raise
        finally:
            self._close()
        stats = self.stats()
        if self._fatal is not None:
            logger.error("%s stopped after an error: %s", self._name, stats.to_dict())
            raise self._fatal
        logger.info("%s stopped: %s, %d worker process(es) replaced", self._name, stats.to_dict(), self._replaced)
        return stats

    def _supervise(self) -> None:
        while self._children or self._respawn:
            if self._stop_asked.is_set() and not self._stop_sent:
                self._send_stop()
            readers = [self._wake_r, *(child.report_fd for child in self._children.values() if not child.eof)]
            writers = [] if self._budget is None or self._budget.write_fd is None else [self._budget.write_fd]
            timeout = SUPERVISE_SLICE
            if self._respawn:
                timeout = max(0.0, min(timeout, min(when for when, _ in self._respawn) - time.monotonic()))
            can_read, can_write = ready(readers, writers, timeout)
            if self._wake_r in can_read:
                self._drain_wake_ups()
            if can_write and self._budget is not None:
                self._budget.feed()
            for child in list(self._children.values()):
                if child.report_fd in can_read and not self._read_reports(child):
                    child.eof = True  # it has exited, or is exiting: a moment to reap it
                    self._reap(child, wait=EXIT_GRACE)
                else:
                    self._reap(child)
            self._respawn_due()

    def _drain_wake_ups(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _read_reports(self, child: _Child) -> bool:
        """Take in what the child sent; False at end-of-file (the child has exited, or is exiting)."""
        try:
            data = os.read(child.report_fd, READ_CHUNK)
        except BlockingIOError:
            return True
        if not data:
            return False
        for message in child.reader.feed(data):
            stats = stats_of(message)
            if stats is not None:
                with self._lock:
                    child.latest = stats
                child.final = child.final or message.get("final") is True
            error = error_of(message, child.pid)
            if error is not None and child.error is None:
                child.error = error
        return True

    def _reap(self, child: _Child, *, wait: float = 0.0) -> None:
        """If the child has exited (waiting up to ``wait`` for it): count it, and replace it if it died."""
        deadline = time.monotonic() + wait
        while True:
            try:
                pid, status = os.waitpid(child.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (an application that ignores SIGCHLD)
                if not child.eof:
                    return
                pid, status = child.pid, None  # gone: its pipe says how it ended
            if pid != 0:
                break
            if time.monotonic() >= deadline:
                return
            time.sleep(REAP_POLL)
        while self._read_reports(child):  # what it wrote before it went
            if not readable([child.report_fd], 0):
                break
        with self._lock:
            del self._children[child.pid]
            _add(self._finished, child.latest)
        for fd in child.descriptors():
            os.close(fd)
        if status is None:
            code, how = (EXIT_OK if child.final else None), "status unknown"
        else:
            code, how = os.waitstatus_to_exitcode(status), _how_it_ended(status)
        self._ended(child, code, how)

    def _ended(self, child: _Child, code: int | None, how: str) -> None:
        """A child exited with ``code`` (None: not known): stop on its error, or replace it if it died."""
        if child.error is not None or code == EXIT_FAILED:
            if self._fatal is None:
                self._fatal = child.error or RuntimeError(f"worker process {child.pid} failed ({how})")
            logger.error("%s: worker process %d stopped on an error; stopping the others", self._name, child.pid)
            self._stop_asked.set()
        elif code == EXIT_OK:
            logger.info("%s: worker process %d finished", self._name, child.pid)
        elif self._stop_asked.is_set():
            logger.info("%s: worker process %d ended while stopping (%s)", self._name, child.pid, how)
        elif code == EXIT_REPLACE:  # it left a handler thread past its time limit running: a new process
            with self._lock:
                self._replaced += 1
            logger.warning("%s: worker process %d retired after a handler timed out; starting another", self._name, child.pid)
            self._respawn.append((max(time.monotonic(), child.started + RESPAWN_PAUSE), child.slot))
        else:
            with self._lock:
                self._replaced += 1
            now = time.monotonic()
            when = max(now, child.started + RESPAWN_PAUSE)
            logger.warning(
                "%s: worker process %d died (%s); starting another%s; the jobs it ran come back once their leases expire",
                self._name, child.pid, how, "" if when <= now else f" in {when - now:.1f} s",
            )  # fmt: skip
            self._respawn.append((when, child.slot))

    def _respawn_due(self) -> None:
        if self._stop_asked.is_set():
            self._respawn.clear()
            return
        now = time.monotonic()
        due = [slot for when, slot in self._respawn if when <= now]
        self._respawn = [(when, slot) for when, slot in self._respawn if when > now]
        for slot in due:
            self._spawn(slot)

    # ------------------------------------------------------------ forking and signalling
    def _spawn(self, slot: int) -> None:
        report_r, report_w = os.pipe()
        lifeline_r, lifeline_w = os.pipe()
        os.set_blocking(report_r, False)
        close = [self._wake_r, self._wake_w, report_r, lifeline_w]
        if self._budget is not None:
            close += self._budget.parent_only()
        for other in self._children.values():
            close += other.descriptors()
        for stream in (sys.stdout, sys.stderr):  # or the child would write out what the parent had buffered
            try:
                stream.flush()
            except Exception:  # a closed or broken stream is the caller's business
                pass
        spec = ChildSpec(
            self._make_worker, slot, report_w, lifeline_r,
            None if self._budget is None else self._budget.read_fd, tuple(close),
        )  # fmt: skip
        # Blocked across the fork: a stop that reaches the child before it is
        # ready waits until it can take it (the child unblocks them itself).
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        pid = 0
        try:
            pid = os.fork()
            if pid == 0:
                run_child(spec)  # never returns
            with self._lock:
                self._children[pid] = _Child(slot, pid, report_r, lifeline_w, time.monotonic())
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            os.close(report_w)
            os.close(lifeline_r)
            if pid not in self._children:  # no child, or one we lost hold of: closing its lifeline stops it
                os.close(report_r)
                os.close(lifeline_w)

    def _send_stop(self) -> None:
        self._stop_sent = True
        self._respawn.clear()
        logger.info("%s: stopping %d worker process(es): each finishes its running jobs", self._name, len(self._children))
        for child in list(self._children.values()):
            try:
                os.kill(child.pid, signal.SIGTERM)
            except ProcessLookupError:  # exited already; the loop reaps it
                pass

    def _kill_all(self) -> None:
        """A hard stop: kill every child now and wait for each (their running jobs' leases then expire)."""
        children = list(self._children.values())
        if children:
            logger.warning(
                "%s interrupted: killing %d worker process(es); their running jobs come back once their leases expire",
                self._name, len(children),
            )  # fmt: skip
        for child in children:
            try:
                os.kill(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for child in children:
            try:
                os.waitpid(child.pid, 0)
            except ChildProcessError:
                pass
            with self._lock:
                self._children.pop(child.pid, None)
                _add(self._finished, child.latest)
            for fd in child.descriptors():
                os.close(fd)

    def _close(self) -> None:
        with self._lock:
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            self._wake_r = self._wake_w = -1
        if self._budget is not None:
            self._budget.close()
