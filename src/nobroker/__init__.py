"""nobroker: a durable, crash-safe job queue with nobody in the middle.

    from nobroker import Queue, Worker

    q = Queue("./jobs")
    q.enqueue({"send_email_to": "ada@example.com"})
    Worker(q, handle).run()

The default storage is a folder on local disk (standard library only); give
a ``postgresql://`` DSN instead to run the same API on PostgreSQL.

Owns: the public names, which the modules below define (README's
"Development" section draws the tree). Imports: errors, jobs, limits, schedules,
locations, queue, queue.asyncqueue (on first use of AsyncQueue), worker (on first use of
Worker: a producer never needs it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .errors import (
    CompactionError,
    CorruptLogError,
    JobCancelledError,
    JobFinishedError,
    JobNotFoundError,
    JobStateError,
    LockTimeoutError,
    NobrokerError,
    NotLeasedError,
    PermanentError,
    QueueClosedError,
    QueueNotFoundError,
    SerializationError,
    Snooze,
    StorageError,
    UnknownStorageError,
    UnsafeQueueError,
)
from .jobs import BackoffPolicy, CompactionResult, Job, JobState, QueueStats, RecoveryReport
from .locations import list_queues
from .queue import Queue
from .limits import Limit
from .schedules import Schedule

if TYPE_CHECKING:
    from .queue.asyncqueue import AsyncQueue
    from .worker import Worker, WorkerStats, WorkQueue

    def _a_queue_is_a_work_queue(queue: Queue) -> WorkQueue:
        return queue  # mypy proves here that a Worker takes a Queue

__version__ = "0.2.0"

logging.getLogger("nobroker").addHandler(logging.NullHandler())


def __getattr__(name: str) -> Any:
    # The Worker pulls in threading/asyncio machinery a producer never needs.
    if name in ("Worker", "WorkerStats"):
        from . import worker

        return getattr(worker, name)
    if name == "AsyncQueue":  # asyncio, too, only for those who use it
        from .queue import asyncqueue

        return asyncqueue.AsyncQueue
    raise AttributeError(f"module 'nobroker' has no attribute {name!r}")


__all__ = [
    "Queue",
    "AsyncQueue",
    "list_queues",
    "Worker",
    "WorkerStats",
    "Job",
    "Limit",
    "Schedule",
    "JobState",
    "QueueStats",
    "BackoffPolicy",
    "RecoveryReport",
    "CompactionResult",
    "NobrokerError",
    "NotLeasedError",
    "JobNotFoundError",
    "LockTimeoutError",
    "CorruptLogError",
    "CompactionError",
    "QueueClosedError",
    "SerializationError",
    "StorageError",
    "UnsafeQueueError",
    "UnknownStorageError",
    "QueueNotFoundError",
    "PermanentError",
    "JobCancelledError",
    "JobFinishedError",
    "JobStateError",
    "Snooze",
    "__version__",
]
