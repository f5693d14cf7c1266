"""The Queue's control of jobs already queued or running: cancel.

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
