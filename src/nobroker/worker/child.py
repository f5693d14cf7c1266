"""One process of a pool, from fork to exit, and the lines it sends its parent.

Owns: ChildSpec (what a forked child is given), ``run_child`` (what it does:
signals back to their defaults, a process group of its own, the pool's other
descriptors closed, its Worker made and run, its counts reported, then
``os._exit``: never a return into the parent's code), the Reporter thread
(the counts now and then; the Worker stopped when the parent is gone) and
the report lines (``report_line``, ReportReader). Imports: waiting, outcome, budget.

The process group: a Ctrl-C at a terminal signals the whole foreground
group. The children leave it, so only the parent hears it and passes it on,
once (a child that heard it too would count the parent's as a second
Ctrl-C and quit at once). A child whose parent died (even by SIGKILL) sees
end-of-file on its lifeline pipe, stops leasing, finishes what it runs and
exits: no orphan works on forever.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import pickle
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from ..waiting import readable
from .budget import LeaseBudget
from .outcome import WorkerStats

logger = logging.getLogger("nobroker.worker")

#: A child's exit codes. OK: its Worker returned (stopped, idle_timeout, the
#: budget spent). FAILED: its Worker raised (a storage error, SystemExit in a
#: handler), said on the pipe first. INTERRUPTED: a second SIGINT reached it.
#: BROKEN: the child failed outside its Worker (a bug).
EXIT_OK, EXIT_FAILED, EXIT_BROKEN, EXIT_INTERRUPTED = 0, 70, 71, 130
#: REPLACE: its Worker abandoned a handler thread past its time limit and stopped (the stuck
#: thread ends with the process): the pool starts another in its place.
EXIT_REPLACE = 72
#: How often a running child sends its counts (only when they changed).
REPORT_SECONDS = 0.5
#: The signals a child takes back to their defaults until its Worker installs its own.
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


class RunsJobs(Protocol):
    """What a child runs: a Worker."""

    def run(self) -> WorkerStats: ...

    def stop(self) -> None: ...

    @property
    def stats(self) -> WorkerStats: ...


MakeWorker = Callable[[LeaseBudget | None, int], RunsJobs]


@dataclass(frozen=True)
class ChildSpec:
    """What the parent hands a child: how to make its Worker, its pipes, and what to close."""

    make_worker: MakeWorker
    slot: int
    report_fd: int  # write end: the child's counts, then its last word
    lifeline_fd: int  # read end: end-of-file once the parent is gone
    budget_fd: int | None  # read end of the shared max_jobs, if any
    close: tuple[int, ...]  # the parent's descriptors, and the other children's


def report_line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def stats_message(stats: WorkerStats, *, final: bool) -> dict[str, Any]:
    return {"stats": stats.to_dict(), "final": final}


def error_message(exc: BaseException) -> dict[str, Any]:
    """The error that stopped a child's Worker: pickled when it can be (the parent raises it again), and as text."""
    try:
        pickled: str | None = base64.b64encode(pickle.dumps(exc)).decode("ascii")
    except Exception:  # an exception that does not pickle: the parent gets its text
        pickled = None
    return {"error": pickled, "text": f"{type(exc).__name__}: {exc}"}


class ReportReader:
    """The parent's side of one child's pipe: bytes in, whole messages out."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        messages = []
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:  # not ours (a handler wrote to a stray descriptor): nothing to count
                continue
            if isinstance(message, dict):
                messages.append(message)
        return messages


def stats_of(message: dict[str, Any]) -> WorkerStats | None:
    counts = message.get("stats")
    if not isinstance(counts, dict):
        return None
    fields = {f.name for f in dataclasses.fields(WorkerStats)}
    return WorkerStats(**{k: int(v) for k, v in counts.items() if k in fields and isinstance(v, int)})


def error_of(message: dict[str, Any], pid: int) -> BaseException | None:
    """The error a child reported, raised again as it was where it pickles; else a RuntimeError with its text."""
    if "text" not in message:
        return None
    pickled = message.get("error")
    if isinstance(pickled, str):
        try:
            exc = pickle.loads(base64.b64decode(pickled))
            if isinstance(exc, BaseException):
                return exc
        except Exception:  # an exception class that does not unpickle: its text says what happened
            pass
    return RuntimeError(f"worker process {pid} stopped on {message['text']}")


class Reporter:
    """The child's thread: sends the Worker's counts when they change; stops it once the parent is gone."""

    def __init__(self, worker: RunsJobs, report_fd: int, lifeline_fd: int) -> None:
        self._worker = worker
        self._report_fd = report_fd
        self._lifeline_fd = lifeline_fd
        self._lock = threading.Lock()
        # Guarded by _lock.
        self._finished = False
        self._last: WorkerStats | None = None

    def start(self) -> None:
        threading.Thread(target=self._main, name="nobroker-child-reporter", daemon=True).start()

    def send(self, message: dict[str, Any], *, last: bool = False) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = last
            data = report_line(message)
            try:
                while data:
                    data = data[os.write(self._report_fd, data):]
            except OSError:  # the parent is gone: nobody to tell
                pass

    def _main(self) -> None:
        while True:
            woke = readable([self._lifeline_fd], REPORT_SECONDS)
            with self._lock:
                if self._finished:
                    return
            if woke and not os.read(self._lifeline_fd, 1):
                logger.warning("worker process %d: its parent is gone; finishing running jobs, then stopping", os.getpid())
                self._worker.stop()
                return
            stats = self._worker.stats
            if stats != self._last:
                self._last = stats
                self.send(stats_message(stats, final=False))


def run_child(spec: ChildSpec) -> NoReturn:
    """The whole life of a forked child. Never returns: whatever happens, the process ends here."""
    code = EXIT_BROKEN
    try:
        code = _child_main(spec)
    except BaseException as exc:
        try:
            logger.critical("worker process %d failed: %s", os.getpid(), exc, exc_info=exc)
        except BaseException:  # nothing more to be done; the exit code says it
            pass
    finally:
        os._exit(code)


def _child_main(spec: ChildSpec) -> int:
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)  # a stop before the Worker is ready ends a child that leased nothing
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by the parent around fork
    try:
        os.setpgid(0, 0)
    except OSError:  # a session leader cannot; the parent still passes every stop on
        pass
    for fd in spec.close:
        try:
            os.close(fd)
        except OSError:  # already closed: nothing of the parent's is left open here either way
            pass
    budget = None if spec.budget_fd is None else LeaseBudget(spec.budget_fd)
    worker = spec.make_worker(budget, spec.slot)
    reporter = Reporter(worker, spec.report_fd, spec.lifeline_fd)
    reporter.start()
    code = EXIT_OK
    try:
        worker.run()
        if getattr(worker, "replace_me", False) is True:
            code = EXIT_REPLACE
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except BaseException as exc:
        reporter.send(error_message(exc))
        code = EXIT_FAILED
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)  # done: a late stop must not cut the last report short
    reporter.send(stats_message(worker.stats, final=True), last=True)
    return code
