"""The Queue's reads and the operator's writes: get, stats, listings, the DLQ, purge, compact.

Owns: LookMethods. Imports: jobs, calls, base.
"""

from __future__ import annotations

from ..jobs import CompactionResult, Job, JobState, QueueStats
from . import calls
from .base import QueueBase


class LookMethods(QueueBase):
    """Looking at jobs, and the operator's bulk writes (see Queue)."""

    # ------------------------------------------------------------ looking
    def get(self, job_id: str) -> Job:
        """The job with this id, in its current state (JobNotFoundError if unknown)."""
        return self._open_storage().get(calls.job_id(job_id))

    def stats(self) -> QueueStats:
        """Counts by state: ready (runnable now), delayed, leased, done, dead, cancelled, total."""
        return self._open_storage().stats()

    def list_jobs(
        self, state: JobState | str | None = None, *, limit: int | None = None, offset: int = 0, kind: str | None = None
    ) -> list[Job]:
        """Jobs oldest first, optionally only one state (or "runnable", "delayed") or kind, paged by ``offset``/``limit``.

        ``state``: a JobState, or one of LISTINGS: ``"ready"`` lists every
        ready job (as in nobroker 0.1.2), ``"runnable"`` and ``"delayed"``
        the two halves of it that stats() counts as ready and as delayed.
        """
        listing, limit, offset, kind = calls.listing(state, limit, offset, kind)
        if limit == 0:
            return []
        return self._open_storage().list_jobs(listing, limit, offset, kind)

    def dlq(self, *, limit: int | None = None) -> list[Job]:
        """The dead-letter queue: jobs that failed for good, oldest first."""
        return self.list_jobs(JobState.DEAD, limit=limit)

    def requeue_dead(self, job_id: str | None = None) -> int:
        """Make dead jobs ready again with attempts reset; None revives the whole DLQ."""
        if job_id is not None:
            job_id = calls.job_id(job_id)
        return self._open_storage().requeue_dead(job_id)

    def purge(self) -> int:
        """Remove every job, in every state. Returns how many there were."""
        return self._open_storage().purge()

    def compact(self) -> CompactionResult:
        """Drop done jobs for good and rewrite the rest compactly.

        Other processes keep working meanwhile (the file storage holds its
        lock only for moments; ``lock_held`` in the result says how long at
        most). If another compaction of the queue is running, this one waits
        for it and then compacts, so every job done before the call is gone
        on return. Threads sharing this Queue object wait for it.
        """
        return self._open_storage().compact()
