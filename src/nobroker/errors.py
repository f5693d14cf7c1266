"""Every error nobroker raises on purpose.

Owns: the exception hierarchy. Imports: nothing from nobroker (bottom layer).

Every class derives from NobrokerError, so ``except NobrokerError`` catches
anything the library means to tell you. Each message says what happened and,
where there is one, what to do next.
"""

from __future__ import annotations


class NobrokerError(Exception):
    """Base class of every error nobroker raises on purpose."""


class NotLeasedError(NobrokerError):
    """The job is not leased under the token you hold.

    Your lease expired and the job was delivered again (or finished) elsewhere.
    Whatever you did for it may run twice: handlers must be idempotent.
    """


class JobNotFoundError(NobrokerError, KeyError):
    """No job with that id is held by the queue (never enqueued, compacted or purged)."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0]) if self.args else "job not found"


class LockTimeoutError(NobrokerError):
    """Another process held the queue's file lock for longer than ``lock_timeout``."""


class CorruptLogError(NobrokerError):
    """A queue file is damaged or is not a nobroker file at all.

    ``path`` names the file and ``offset`` the first damaged byte (or None when
    the whole file is unusable). Nothing is changed on disk; ``nobroker repair``
    keeps the damaged file aside and rebuilds from the valid records.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


class CompactionError(NobrokerError):
    """Compaction could not finish; the previous generation is still the truth."""


class QueueClosedError(NobrokerError):
    """The queue was closed (or a fatal I/O error poisoned it); open a new Queue."""


class SerializationError(NobrokerError, ValueError):
    """A payload, result or error text cannot be stored as JSON within the limits."""


class StorageError(NobrokerError, OSError):
    """The disk (or the database) failed under an operation.

    The operation was not reported done. After a failed fsync the queue object
    refuses further writes: the kernel may have dropped the unsynced pages, so
    only a reopen (which re-reads what is really on disk) is safe.
    """

    def __init__(self, message: str, *, errno: int | None = None, path: str | None = None) -> None:
        Exception.__init__(self, message)
        self.errno = errno
        self.filename = path
        self.strerror = message

    def __str__(self) -> str:
        return str(self.strerror)


class UnsafeQueueError(NobrokerError):
    """The queue folder or a file in it is not safe to use (symlink, foreign owner, open permissions, network filesystem)."""


class UnknownStorageError(NobrokerError, ValueError):
    """The location is neither a folder path nor a PostgreSQL DSN (say ``mysql://...``).

    Nothing was opened or created. A folder is any path without a URL scheme;
    PostgreSQL is a ``postgresql://`` (or ``postgres://``) URL or a libpq
    keyword string such as ``"host=localhost dbname=app"``.
    """


class QueueNotFoundError(NobrokerError):
    """The queue is not there, and the caller asked not to create it (``Queue(..., create=False)``).

    ``missing`` says what is absent: ``"folder"`` (no such folder, or the path
    is a file), ``"queue"`` (the folder holds no queue of that name; ``found``
    lists the ones it holds) or ``"schema"`` (PostgreSQL: no nobroker schema
    there yet). Nothing was created.
    """

    def __init__(self, message: str, *, missing: str, location: str, name: str, found: list[str] | None = None) -> None:
        super().__init__(message)
        self.missing = missing
        self.location = location
        self.name = name
        self.found = list(found or [])


class JobCancelledError(NotLeasedError):
    """The job was cancelled: its ack or nack is refused, and the attempt ends cancelled.

    A NotLeasedError (the outcome is not the caller's to record), so code that
    handles a lost lease handles this too.
    """


class JobStateError(NobrokerError):
    """The job's state does not allow that operation (``run_now`` of a leased job, ``delete`` of one).

    ``state`` is the state it is in. Nothing changed.
    """

    def __init__(self, message: str, *, state: str) -> None:
        super().__init__(message)
        self.state = state


class JobFinishedError(JobStateError):
    """The job is finished (done, dead or cancelled), so it cannot be changed that way.

    ``state`` is the state it is in.
    """


class PermanentError(NobrokerError):
    """Raise this from a handler to send the job straight to the dead-letter queue.

    Use it for failures that no retry can fix (bad input, a deleted record).
    """


class Snooze(NobrokerError):
    """Raise ``Snooze(seconds)`` from a handler: the job is ready again after ``seconds``, no attempt spent.

    Not a failure: the Worker gives the job back with ``Queue.snooze`` (its
    attempts are what they were before this lease, its last error is kept)
    and counts it in ``WorkerStats.snoozed``. ``seconds`` is checked when the
    Worker snoozes the job (a number from 0 to MAX_SECONDS).
    """

    def __init__(self, seconds: float) -> None:
        super().__init__(f"snooze for {seconds!r} s")
        self.seconds = seconds


__all__ = [
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
]
