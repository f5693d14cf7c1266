"""The Queue's control of jobs already queued or running: cancel, snooze, pause, run_now, delete, wait.

Owns: ControlMethods. Imports: checks, jobs, calls, base.
"""

from __future__ import annotations

from ..checks import JobRef
from ..jobs import Job
from . import calls
from .base import QueueBase


class ControlMethods(QueueBase):
    """Control of queued and running jobs (see Queue)."""

    def cancel(self, job: JobRef, *, stopped: bool = False) -> Job:
        """Cancel a job; returns it as the cancel left it.

        A ready or delayed job is cancelled at once (``cancelled`` is final,
        kept as a done job is). A leased job is marked (``cancel_requested``):
        its handler keeps running until it notices (the Worker sets
        ``job.cancelled`` at its next heartbeat, and cancels an async
        handler's task), its ack and nack are refused with JobCancelledError,
        and the attempt ends cancelled when the holder of the lease says so
        (``stopped=True``, with the leased Job) or when the lease expires.
        ``stopped=True`` by id ends a leased job's attempt now, whoever runs it.
        A done, dead or cancelled job raises JobFinishedError naming its state.
        """
        return self._open_storage().cancel(*calls.cancel(job, stopped))

    def snooze(self, job: JobRef, seconds: float) -> Job:
        """Give a leased job back without spending an attempt: ready again after ``seconds``.

        Its attempts are what they were before this lease, its last error
        and traceback stay as they were; it is not a failure. Refused like a
        nack: NotLeasedError when ``job``'s token no longer holds the lease
        (a bare id: an operator, no token check), JobCancelledError when its
        cancel was asked for. A handler run by a Worker raises
        ``nobroker.Snooze(seconds)`` instead. ``seconds``: 0 to MAX_SECONDS.
        """
        return self._open_storage().snooze(*calls.snooze(job, seconds))

    def pause(self, kind: str | None = None) -> None:
        """Stop handing out jobs: of ``kind``, or (None) of the whole queue, until ``resume``.

        Stored in the queue, so every process sees it: once this returns, no
        lease in any process hands out a job of that kind (a lease already
        under way may still take one). Running jobs go on and can be acked,
        nacked, extended; enqueue still works. Pausing what is paused changes
        nothing.
        """
        self._open_storage().pause(calls.kind(kind), False)

    def resume(self, kind: str | None = None) -> None:
        """Lift the pause of ``kind`` (None: the pause of the whole queue); waiting workers wake.

        A kind paused by name stays paused when the whole queue is resumed,
        and the other way round: each pause is lifted by its own resume.
        Resuming what is not paused changes nothing.
        """
        self._open_storage().pause(calls.kind(kind), True)

    def paused(self) -> list[str | None]:
        """What is paused: None for the whole queue (first), then each paused kind by name; [] for nothing."""
        return self._open_storage().paused()

    def run_now(self, job: JobRef) -> Job:
        """Make a ready job that waits for its time (delayed, or backing off after a failure) runnable now.

        Returns the job; one that is runnable already is returned unchanged.
        A leased job raises JobStateError, a done, dead or cancelled one
        JobFinishedError (a JobStateError), each naming the state; an unknown
        id JobNotFoundError. Its attempts and priority stay as they are.
        """
        return self._open_storage().run_now(calls.ref_id(job))

    def delete(self, job: JobRef) -> Job:
        """Remove one job that is not leased; returns it as it was.

        Ready, delayed, done, dead and cancelled jobs can be deleted (its id
        and dedupe key are free again); a leased one raises JobStateError
        (cancel it first, or let it finish); an unknown id JobNotFoundError.
        """
        return self._open_storage().delete(calls.ref_id(job))

    def wait(self, job: JobRef, timeout: float) -> Job:
        """Block until the job is done, dead or cancelled, and return it; TimeoutError after ``timeout`` seconds.

        Wakes on the queue's own wake-up, not a tight poll: on the file
        storage a named pipe that every write finishing a job writes to; on
        PostgreSQL a LISTEN on a channel that a trigger notifies when a job
        being waited for finishes. Either way it also looks again every
        storage.FINISH_RECHECK seconds (1 s), the bound on a wake-up lost to
        a race and on a lease that expired with nobody writing. Where no
        wake-up exists (no named pipes; the listening connection cannot be
        had) it polls: the file storage the log's size, PostgreSQL every
        FINISH_RECHECK. JobNotFoundError if the job is not (or no longer) in
        the queue: deleted, purged, or compacted away after it finished.
        """
        return self._open_storage().wait_finished(*calls.wait(job, timeout))

