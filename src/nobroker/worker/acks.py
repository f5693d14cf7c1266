"""Acking a batch of finished jobs in one ``ack_many`` (one write, one fsync), each job its own outcome.

Owns: ``ack_batch``. Used by the one thread that settles a Worker's
finished jobs: everything that finished since its last write goes in one
call. Imports: jobs, protocol.
"""

from __future__ import annotations

from typing import Any

from ..jobs import Job
from .protocol import QueueAccess


def ack_batch(access: QueueAccess, jobs: list[Job], results: list[Any]) -> list[Exception | None]:
    """Ack these jobs in one call where the queue can; what acking each one raised (None: acked).

    If the one call fails (someone in the batch was refused, or the call
    itself failed), each job is acked on its own, so every job gets exactly
    its own outcome; those the call acked already are acked again harmlessly
    under the same lease.
    """
    assert len(jobs) == len(results), "one result per job"
    errors: list[Exception | None] = [None] * len(jobs)
    if not jobs:
        return errors
    if access.acks_many:
        try:
            access.ack_many(jobs, results)
            return errors
        except Exception:
            pass
    for index, (job, result) in enumerate(zip(jobs, results)):
        try:
            access.ack(job, result)
        except Exception as exc:
            errors[index] = exc
    return errors
