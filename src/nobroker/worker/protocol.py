"""What a Worker needs of its queue, and what it uses when the queue offers more.

Owns: WorkQueue (the four calls every queue a Worker runs on has: lease, ack,
nack, extend), the optional parts, each a protocol of its own (AcksMany,
ExtendsMany, WaitsForJobs, WakesWaiters, HasVisibilityTimeout), and QueueAccess: the one
place that learns, once, which parts a queue has and calls each with exactly
the arguments that part declares. Imports: jobs, queue.

``nobroker.Queue`` (either storage) has every part; mypy proves it below
(queue is imported for that proof only, never at run time). Any other object
with lease, ack, nack and extend works too, and the Worker does without what
it lacks: acks one at a time, idle waits that end on their own, the lease
length read from the job.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..jobs import MAX_SECONDS, Job, JobState, finite_float

#: Visibility timeout assumed when neither the queue nor the job tells it.
DEFAULT_VISIBILITY_TIMEOUT = 30.0


class WorkQueue(Protocol):
    """What a Worker needs of its queue: ``nobroker.Queue`` (either storage), or any object with these.

    Used when the object has them too: ``ack_many(jobs, results=)``, to share
    one write among acks (AcksMany); ``extend_many(jobs, seconds)``, to renew
    every running lease with one call (ExtendsMany); ``wait_for_jobs(timeout)``, to idle
    without polling (WaitsForJobs), and with ``wakes_waiters()`` also
    ``wait_for_jobs(timeout, interrupt=, kinds=)`` (WakesWaiters);
    ``visibility_timeout``, the lease length to renew with
    (HasVisibilityTimeout); and a ``traceback=`` keyword of ``nack``, to keep
    a failing handler's traceback.
    """

    def lease(self, count: int = 1, *, kinds: Iterable[str] | None = None) -> Sequence[Job]: ...

    def ack(self, job: Job, *, result: Any = None) -> None: ...

    def nack(self, job: Job, *, error: str | None = None, permanent: bool = False) -> Job: ...

    def extend(self, job: Job, seconds: float) -> Job: ...


@runtime_checkable
class AcksMany(Protocol):
    """A queue that acks many jobs in one durable write."""

    def ack_many(self, jobs: Sequence[Job], *, results: Sequence[Any] | None = None) -> None: ...


@runtime_checkable
class ExtendsMany(Protocol):
    """A queue that renews many leases with one call (one write, one statement)."""

    def extend_many(self, jobs: Sequence[Job], seconds: float) -> Sequence[Job]: ...


@runtime_checkable
class WaitsForJobs(Protocol):
    """A queue an idle worker can block on until work may have arrived."""

    def wait_for_jobs(self, timeout: float) -> object: ...


@runtime_checkable
class WakesWaiters(WaitsForJobs, Protocol):
    """A queue whose idle wait can be ended by a file descriptor and told the worker's kinds."""

    def wait_for_jobs(
        self, timeout: float, *, kinds: Iterable[str] | None = None, interrupt: int | None = None
    ) -> bool: ...

    def wakes_waiters(self) -> bool: ...


@runtime_checkable
class HasVisibilityTimeout(Protocol):
    """A queue that says how long its leases last."""

    visibility_timeout: float


if TYPE_CHECKING:
    from ..queue import Queue

    def _a_queue_has_every_part(
        queue: Queue,
    ) -> tuple[WorkQueue, AcksMany, ExtendsMany, WakesWaiters, HasVisibilityTimeout]:
        return queue, queue, queue, queue, queue  # mypy proves here that a Queue offers the Worker everything


def is_positive_number(value: object) -> bool:
    number = finite_float(value)  # never raises, not even for 10**400
    return number is not None and number > 0


def _takes_keyword(method: Callable[..., Any], name: str) -> bool:
    """Can ``method`` be called with the keyword ``name`` (by name, or through ``**kwargs``)?

    The one part a protocol cannot check (isinstance sees names, not
    parameters), so the signature is read, once per Worker.
    """
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): assume not
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == name and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))
        for p in parameters
    )


class QueueAccess:
    """The Worker's one way to its queue: each call typed, each optional part used only where it exists.

    Which parts the queue has is learned once, here: an isinstance check of a
    runtime protocol costs several microseconds, too much for every job.
    Methods are still looked up on the queue at every call, never kept, so a
    queue whose methods are replaced after the Worker was made (tests do
    that) is called as it is now.
    """

    def __init__(self, queue: WorkQueue) -> None:
        self.queue = queue
        self._many: AcksMany | None = queue if isinstance(queue, AcksMany) else None
        self._extends: ExtendsMany | None = queue if isinstance(queue, ExtendsMany) else None
        self._waits: WaitsForJobs | None = queue if isinstance(queue, WaitsForJobs) else None
        self._wakes: WakesWaiters | None = queue if isinstance(queue, WakesWaiters) else None
        self._timed: HasVisibilityTimeout | None = queue if isinstance(queue, HasVisibilityTimeout) else None
        self._keeps_tracebacks = _takes_keyword(queue.nack, "traceback")

    @property
    def acks_many(self) -> bool:
        return self._many is not None

    @property
    def can_interrupt(self) -> bool:
        """Does the queue's idle wait take an interrupt descriptor (and the worker's kinds)?"""
        return self._wakes is not None

    def lease(self, count: int, kinds: list[str] | None) -> list[Job]:
        if kinds is None:
            jobs = self.queue.lease(count)
        else:
            jobs = self.queue.lease(count, kinds=kinds)
        return list(jobs or ())

    def ack(self, job: Job, result: Any) -> None:
        if result is None:
            self.queue.ack(job)
        else:
            self.queue.ack(job, result=result)

    def ack_many(self, jobs: list[Job], results: list[Any]) -> None:
        assert self._many is not None, "only called when acks_many"
        if any(result is not None for result in results):
            self._many.ack_many(jobs, results=results)
        else:
            self._many.ack_many(jobs)

    def nack(self, job: Job, error: str, permanent: bool, traceback: str | None) -> bool:
        """Give the job back; True when the queue says it went to the dead-letter queue."""
        # Only the keywords needed, so a queue whose nack lacks one still works without it.
        optional: dict[str, Any] = {}
        if permanent:
            optional["permanent"] = True
        if traceback is not None and self._keeps_tracebacks:
            optional["traceback"] = traceback
        returned = self.queue.nack(job, error=error, **optional)
        return isinstance(returned, Job) and returned.state is JobState.DEAD

    def extend(self, job: Job, seconds: float) -> bool:
        """Renew the lease; True when the queue says the job's cancel was asked for meanwhile."""
        renewed = self.queue.extend(job, seconds)
        return getattr(renewed, "cancel_requested", False) is True

    def snooze(self, job: Job, seconds: float) -> None:
        """Give the job back for later without spending an attempt (the handler raised Snooze)."""
        snooze = getattr(self.queue, "snooze", None)
        if snooze is None:
            raise TypeError(f"{type(self.queue).__name__} has no snooze(): a handler there cannot raise Snooze")
        snooze(job, seconds)

    @property
    def extends_many(self) -> bool:
        return self._extends is not None

    def extend_many(self, jobs: list[Job], seconds: float) -> list[bool]:
        """Renew every lease with one call; per job, whether the queue says its cancel was asked for."""
        assert self._extends is not None, "only called when extends_many"
        renewed = list(self._extends.extend_many(jobs, seconds))
        assert len(renewed) == len(jobs), "a job per lease renewed, in order"
        return [getattr(job, "cancel_requested", False) is True for job in renewed]

    def end_cancelled(self, job: Job) -> None:
        """End a cancelled job's attempt (the handler stopped): the job is cancelled for good."""
        cancel = getattr(self.queue, "cancel", None)
        if cancel is not None:  # a queue without cancel never marks a job: nothing to end
            cancel(job, stopped=True)

    def wakes_waiters(self) -> bool:
        """Will the queue wake us when work arrives, so a long idle wait is safe?"""
        if self._wakes is None:
            return False
        try:
            return bool(self._wakes.wakes_waiters())
        except Exception:  # a closed queue and the like: the lease will tell
            return False

    def wait(self, timeout: float, interrupt: int | None, kinds: list[str] | None) -> bool:
        """Block in the queue's idle wait; False when it has none (the caller waits on its own)."""
        if interrupt is not None and self._wakes is not None:
            self._wakes.wait_for_jobs(timeout, interrupt=interrupt, kinds=kinds)
        elif self._waits is not None:
            self._waits.wait_for_jobs(timeout)
        else:
            return False
        return True

    def lease_length(self) -> float | None:
        """The queue's visibility timeout, when it has a usable one."""
        if self._timed is not None and is_positive_number(self._timed.visibility_timeout):
            return float(self._timed.visibility_timeout)
        return None

    def lease_length_of(self, job: Job, leased_at_wall: float) -> float:
        """The lease length to renew ``job`` with: the queue's setting, else what the job shows."""
        configured = self.lease_length()
        if configured is not None:
            return configured
        # A job of a queue other than nobroker's may not carry a deadline at all.
        deadline = getattr(job, "lease_deadline", None)
        if is_positive_number(deadline):
            derived = float(deadline) - leased_at_wall  # type: ignore[arg-type]
            if 0 < derived <= MAX_SECONDS:
                return derived
        return DEFAULT_VISIBILITY_TIMEOUT
