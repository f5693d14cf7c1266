"""Settling a finished job: ack or nack it, and count it in exactly one bucket.

Owns: Settler, which holds the run's WorkerStats. A job whose handler
returned is acked (``settle_many``: the acks of a batch in one write); one
whose handler raised, or whose result the queue refused, is
nacked (with its traceback where the queue keeps one); one whose handler
raised Snooze is snoozed (``q.snooze``: no attempt spent). A lease found lost,
on the way or by the heartbeat meanwhile, is counted as lost, never as
done. Each outcome is told to the Teller, when the Worker was given a
listener (joblines.py). Imports: errors, protocol, outcome, heartbeat,
acks, joblines.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable

from ..errors import JobCancelledError, JobFinishedError, SerializationError
from .acks import ack_batch
from .heartbeat import LOST_ERRORS, Heartbeat, Running
from .joblines import Teller
from .outcome import Outcome, WorkerStats, unstorable
from .protocol import QueueAccess

logger = logging.getLogger("nobroker.worker")


class Settler:
    """``settle(entry, outcome)`` from any handler thread; never raises.

    ``on_error(exc, what)``: an ack or nack failed for another reason than a
    lost lease (a storage error); the worker stops on it. After ``abort()``
    nothing more is sent: the caller may have closed the queue.
    """

    def __init__(
        self, access: QueueAccess, heartbeat: Heartbeat, on_error: Callable[[BaseException, str], None],
    ) -> None:  # fmt: skip
        self._access = access
        self._heartbeat = heartbeat
        self._on_error = on_error
        self._lock = threading.Lock()
        self._stats = WorkerStats()  # guarded by _lock
        self.aborted = False
        #: Told each job's outcome (Worker(on_job=...)); None: nothing is built.
        self.teller: Teller | None = None

    def stats(self) -> WorkerStats:
        """A snapshot of the counts so far."""
        with self._lock:
            return dataclasses.replace(self._stats)

    def add_leased(self, count: int) -> None:
        with self._lock:
            self._stats.leased += count

    def leased_so_far(self) -> int:
        with self._lock:
            return self._stats.leased

    def abort(self) -> None:
        self.aborted = True

    def count_timed_out(self, abandoned: bool) -> None:
        """A handler ran past its time limit (timeouts.py); ``abandoned``: on a thread left running."""
        with self._lock:
            self._stats.timed_out += 1
            self._stats.abandoned += abandoned

    def settle(self, entry: Running, outcome: Outcome) -> None:
        """One job, settled by the thread that ran it (a worker that runs one job at a time)."""
        # Unregistered first, so a renewal racing with this ack cannot
        # report a lost lease for a job that simply finished.
        self._heartbeat.discard(entry)
        if self.aborted:
            return
        if entry.cancelled:  # the heartbeat saw the cancel: whatever the handler did, the attempt ends cancelled
            self._end_cancelled(entry)
            return
        if outcome.snooze is not None:
            self._snooze(entry, outcome.snooze)
            return
        if outcome.error is not None:
            self._nack(entry, outcome)
            return
        try:
            self._access.ack(entry.job, outcome.result)
        except Exception as exc:
            self._after_ack(entry, exc)
        else:
            self._after_ack(entry, None)

    def settle_many(self, finished: list[tuple[Running, Outcome]]) -> None:
        """``settle`` for a batch one thread has already: its acks go in one ``ack_many``."""
        for entry, _ in finished:
            self._heartbeat.discard(entry)
        if self.aborted:
            return
        for entry, _ in finished:
            if entry.cancelled:
                self._end_cancelled(entry)
        for entry, outcome in finished:
            if outcome.snooze is not None and not entry.cancelled:
                self._snooze(entry, outcome.snooze)
        finished = [(entry, outcome) for entry, outcome in finished if not entry.cancelled and outcome.snooze is None]
        acked = [(entry, outcome) for entry, outcome in finished if outcome.error is None]
        errors = ack_batch(self._access, [entry.job for entry, _ in acked], [outcome.result for _, outcome in acked])
        for (entry, _), error in zip(acked, errors):
            self._after_ack(entry, error)
        for entry, outcome in finished:
            if outcome.error is not None:
                self._nack(entry, outcome)

    def _after_ack(self, entry: Running, error: Exception | None) -> None:
        """Count an ack that went through, or deal with what it raised."""
        if error is None:
            if self._recorded(entry):
                with self._lock:
                    self._stats.succeeded += 1
                if self.teller is not None:
                    self.teller.tell(entry.job, entry.leased_at, "succeeded")
        elif isinstance(error, JobCancelledError):  # cancelled after the last renewal: the ack is refused
            self._end_cancelled(entry)
        elif isinstance(error, LOST_ERRORS):
            self._count_lost(entry, error)
        elif isinstance(error, SerializationError):  # the queue refused what the check let through
            self._nack(entry, unstorable(error))
        else:
            self._on_error(error, f"ack of job {entry.job.id}")

    def _nack(self, entry: Running, outcome: Outcome) -> None:
        job = entry.job
        assert outcome.error is not None, "an outcome that is not acked carries its error"
        try:
            went_dead = self._access.nack(job, outcome.error, outcome.permanent, outcome.traceback())
        except JobCancelledError:
            self._end_cancelled(entry)
            return
        except LOST_ERRORS as exc:
            self._count_lost(entry, exc)
            return
        except Exception as exc:
            self._on_error(exc, f"nack of job {job.id}")
            return
        if not self._recorded(entry):
            return
        went_dead = went_dead or outcome.permanent
        with self._lock:
            if went_dead:
                self._stats.dead += 1
            else:
                self._stats.failed += 1
        if self.teller is not None:
            self.teller.tell(job, entry.leased_at, "dead" if went_dead else "failed", outcome.error)
        # The handler's traceback goes with the line (exc_info), as it is kept with the job.
        if went_dead:
            logger.warning("job %s moved to the dead-letter queue: %s", job.id, outcome.error, exc_info=outcome.exc)
        else:
            logger.warning("job %s failed, will retry: %s", job.id, outcome.error, exc_info=outcome.exc)

    def _snooze(self, entry: Running, seconds: float) -> None:
        """The handler raised Snooze: the job is ready again later, its attempt given back; not a failure."""
        job = entry.job
        try:
            self._access.snooze(job, seconds)
        except JobCancelledError:
            self._end_cancelled(entry)
            return
        except LOST_ERRORS as exc:
            self._count_lost(entry, exc)
            return
        except (TypeError, ValueError) as exc:  # Snooze(seconds) with seconds the queue refuses: a failure then
            outcome = Outcome()
            outcome.failed(exc)
            self._nack(entry, outcome)
            return
        except Exception as exc:
            self._on_error(exc, f"snooze of job {job.id}")
            return
        if not self._recorded(entry):
            return
        with self._lock:
            self._stats.snoozed += 1
        logger.info("job %s snoozed for %g s (no attempt spent)", job.id, seconds)

    def _end_cancelled(self, entry: Running) -> None:
        """The handler of a cancelled job returned: end its attempt cancelled (the lease's expiry would too)."""
        try:
            self._access.end_cancelled(entry.job)
        except JobFinishedError as exc:  # its lease expired meanwhile, and the reclaim ended it
            if exc.state != "cancelled":
                self._count_lost(entry, exc)
                return
        except LOST_ERRORS as exc:
            self._count_lost(entry, exc)
            return
        except Exception as exc:
            self._on_error(exc, f"cancel of job {entry.job.id}")
            return
        with self._lock:
            self._stats.cancelled += 1
        if self.teller is not None:
            self.teller.tell(entry.job, entry.leased_at, "cancelled")
        logger.info("job %s: cancelled; its attempt ended cancelled", entry.job.id)

    def _recorded(self, entry: Running) -> bool:
        """Was the outcome ours to record? Not when the heartbeat found the lease lost meanwhile (counted as lost)."""
        if entry.lost:
            self._count_lost(entry, None)
            return False
        return True

    def _count_lost(self, entry: Running, exc: BaseException | None) -> None:
        with self._lock:
            self._stats.lost_leases += 1
        if self.teller is not None:
            self.teller.tell(entry.job, entry.leased_at, "lost")
        reason = f"{exc}" if exc is not None else "its lease had already been lost"
        logger.warning(
            "job %s: lease lost before the outcome was recorded (%s); it may run again elsewhere", entry.job.id, reason
        )
