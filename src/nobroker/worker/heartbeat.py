"""Keeping the leases of running jobs alive: one thread renews them all.

Owns: Running (one leased job between lease and ack/nack, with when to
renew it, and whether it was cancelled) and Heartbeat (the thread that
renews every running job's lease once RENEW_FRACTION of its visibility
timeout has passed since the last renewal, marks a lease lost when the
queue refuses the renewal, and tells the handler when the renewal says the
job was cancelled: ``job.cancelled`` set, an async handler's task cancelled).
A tick renews every lease due then, and those due within COALESCE_FRACTION of
an interval after, with one ``extend_many`` where the queue has it (one
write, one statement); when that reports a lost lease, each job of the tick
is renewed on its own, so exactly the jobs that lost theirs are marked.
Imports: errors, jobs, protocol.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import JobNotFoundError, NotLeasedError
from ..jobs import Job
from .protocol import QueueAccess

logger = logging.getLogger("nobroker.worker")

#: A lease is renewed once this fraction of its visibility timeout has passed,
#: which leaves two renewals' worth of slack before it would expire.
RENEW_FRACTION = 1.0 / 3.0
#: Shortest gap between two renewals of one lease, so a tiny visibility
#: timeout cannot turn the heartbeat into a busy loop.
MIN_RENEW_INTERVAL = 0.05
#: Leases due within this fraction of their renewal interval after a tick are
#: renewed early with it (renewing early is harmless: a deadline is now + the
#: lease length), so the leases of a Worker fall into step and each tick
#: renews them all with one call.
COALESCE_FRACTION = 0.5
#: Longest ``abort()`` waits for the heartbeat's lock: an interrupt may have
#: landed while another thread held it.
ABORT_LOCK_SECONDS = 1.0

#: Errors that mean "this job is no longer ours": another worker (or an
#: operator) took it over, finished it or removed it. Never fatal.
LOST_ERRORS: tuple[type[BaseException], ...] = (NotLeasedError, JobNotFoundError)


class Running:
    """One leased job between lease and ack/nack: what the heartbeat renews."""

    __slots__ = (
        "job", "timeout", "interval", "leased_at", "renew_at", "lost", "cancelled", "limit", "claimed", "released",
        "_task", "_task_lock",
    )  # fmt: skip

    def __init__(self, job: Job, timeout: float, leased_at: float) -> None:
        assert timeout > 0, "a lease length is positive"
        self.job = job
        self.timeout = timeout
        self.interval = max(timeout * RENEW_FRACTION, MIN_RENEW_INTERVAL)
        self.leased_at = leased_at  # monotonic clock: a finished job's duration counts from here
        self.renew_at = leased_at + self.interval  # monotonic clock
        #: Set (under the heartbeat's lock) when a renewal found the lease gone.
        self.lost = False
        #: Set when a renewal found the job's cancel asked for: the attempt ends cancelled.
        self.cancelled = False
        #: The handler's time limit in seconds (timeouts.py), once it started; None: no limit.
        self.limit: float | None = None
        #: Taken by whoever settles a job with a limit first: its handler, or the watchdog at the limit.
        self.claimed = False
        #: Its handler is done and its slot free (the Worker's, under the Worker's lock); its outcome may be still unwritten.
        self.released = False
        self._task: Any = None  # the concurrent future of an async handler's task, once it runs
        self._task_lock = threading.Lock()

    def attach(self, task: Any) -> None:
        """The async handler's task now runs (a concurrent.futures.Future): cancel it if the job was cancelled."""
        with self._task_lock:
            self._task = task
            cancel = self.cancelled
        if cancel:
            task.cancel()

    def claim(self) -> bool:
        """Take the right to settle this job; False if the other side (handler or watchdog) took it first."""
        with self._task_lock:
            taken, self.claimed = self.claimed, True
        return not taken

    def cancel(self) -> None:
        """Tell the handler: ``job.cancelled`` set (where the Job has one), its async task cancelled."""
        with self._task_lock:
            self.cancelled = True
            task = self._task
        flag: Any = getattr(self.job, "cancelled", None)
        if flag is not None and hasattr(flag, "set"):
            flag.set()
        if task is not None:
            task.cancel()


class Heartbeat:
    """The renewing thread. ``add`` jobs when leased, ``discard`` them when settled.

    ``on_error(exc, what)``: a renewal failed for another reason than a lost
    lease (a storage error); the worker stops on it.
    """

    def __init__(self, access: QueueAccess, on_error: Callable[[BaseException, str], None], name: str) -> None:
        self._access = access
        self._on_error = on_error
        self._name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # Guarded by _lock.
        self._running: set[Running] = set()
        self._stop = False
        # Monotonic time the thread sleeps until (None: until woken).
        self._sleeps_until: float | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
        self._thread.start()

    def add(self, entries: Iterable[Running]) -> None:
        """Renew these from now on (before any handler starts them: a settled job must never come back)."""
        entries = list(entries)
        if not entries:
            return
        with self._lock:
            self._running.update(entries)
            # Wake the thread only when it sleeps past the new leases' first
            # renewal: a wake-up per lease call would cost a thread switch
            # per batch for nothing.
            first_renewal = min(entry.renew_at for entry in entries)
            if self._sleeps_until is None or first_renewal < self._sleeps_until:
                self._wake.notify()

    def discard(self, entry: Running) -> None:
        """Renew this one no more. After this returns, ``entry.lost`` no longer changes."""
        with self._lock:
            self._running.discard(entry)

    def stop(self) -> None:
        """Stop the thread and wait for it."""
        with self._lock:
            self._stop = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()

    def abort(self) -> None:
        """Stop renewing at once, waiting for nothing: the leases then expire normally."""
        self._stop = True
        if self._lock.acquire(timeout=ABORT_LOCK_SECONDS):
            try:
                self._wake.notify_all()
            finally:
                self._lock.release()

    def _main(self) -> None:
        while True:
            with self._lock:
                while True:
                    if self._stop:
                        return
                    now = time.monotonic()
                    live = [entry for entry in self._running if not entry.lost]
                    if any(entry.renew_at <= now for entry in live):
                        due = [entry for entry in live if entry.renew_at <= now + entry.interval * COALESCE_FRACTION]
                        break
                    next_at = min((entry.renew_at for entry in live), default=None)
                    self._sleeps_until = next_at
                    self._wake.wait(None if next_at is None else next_at - now)
                    self._sleeps_until = now  # awake: the next add need not wake it
            for group in self._groups(due):
                if self._stop:
                    return
                if len(group) > 1 and self._access.extends_many:
                    self._renew_many(group)
                    continue
                for entry in group:
                    if self._stop:
                        return
                    self._renew(entry)

    @staticmethod
    def _groups(due: list[Running]) -> list[list[Running]]:
        """The due leases by lease length (one call renews a group; a Worker's leases share one length)."""
        groups: dict[float, list[Running]] = {}
        for entry in due:
            groups.setdefault(entry.timeout, []).append(entry)
        return list(groups.values())

    def _renew_many(self, entries: list[Running]) -> None:
        """Renew a group in one call; if it reports a lost lease, each on its own to learn which."""
        started = time.monotonic()
        try:
            cancelled = self._access.extend_many([entry.job for entry in entries], entries[0].timeout)
        except LOST_ERRORS:
            for entry in entries:  # the renewals the batch made are made again: harmless
                if self._stop:
                    return
                self._renew(entry)
            return
        except Exception as exc:
            with self._lock:
                for entry in entries:
                    entry.renew_at = started + entry.interval
            self._on_error(exc, f"lease renewal of {len(entries)} jobs")
            return
        for entry, flag in zip(entries, cancelled):
            self._renewed(entry, started, flag)

    def _renew(self, entry: Running) -> None:
        started = time.monotonic()
        try:
            cancelled = self._access.extend(entry.job, entry.timeout)
        except LOST_ERRORS as exc:
            with self._lock:
                still_running = entry in self._running
                if still_running:
                    entry.lost = True
            if still_running:
                logger.warning(
                    "job %s: lease lost while its handler runs (%s); another worker may run it too", entry.job.id, exc
                )
            return
        except Exception as exc:
            with self._lock:
                entry.renew_at = started + entry.interval
            self._on_error(exc, f"lease renewal of job {entry.job.id}")
            return
        self._renewed(entry, started, cancelled)

    def _renewed(self, entry: Running, started: float, cancelled: bool) -> None:
        """The lease was renewed at ``started``; tell the handler if the job's cancel was asked for."""
        with self._lock:
            entry.renew_at = started + entry.interval
            still_running = entry in self._running
        if cancelled and still_running and not entry.cancelled:
            logger.info("job %s: cancelled while its handler runs; telling the handler", entry.job.id)
            entry.cancel()
