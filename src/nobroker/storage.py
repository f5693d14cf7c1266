"""The small interface every storage implements, and the choice between them.

Owns: Storage (the protocol the Queue facade calls), EnqueueSpec (one job to
add, already validated and encoded; SharedSpecs: many that share all but the
payload), and what both storages share beyond that (which storage a
location names is addresses.py's): new job
ids and fencing tokens, the worker label a lease records (``worker_label``), what a
refused ack/nack/extend says (``refusal``), and the loop of ``Queue.wait``
(``wait_until_finished``). Imports: errors, jobs, limits, schedules, announcements.

The Queue facade validates arguments and turns ``Job | id`` into
``(id, token)``; a storage only stores. Two siblings implement it:
filestore.FileStorage (the default, one folder on local disk) and
postgres.PostgresStorage (optional, many hosts). The Worker, the CLI and the
dashboard only ever see the Queue facade, so they run on both.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from .errors import JobCancelledError, JobFinishedError, JobNotFoundError, NotLeasedError, QueueClosedError
from .announcements import WorkerInfo
from .jobs import (
    FINISHED_STATES, MAX_WORKER_CHARS, BackoffPolicy, CompactionResult, Counters, Job, JobState, QueueStats,
    RecoveryReport,
)  # fmt: skip
from .limits import Limit
from .schedules import Schedule, ScheduleSpec


@dataclass(frozen=True)
class StorageOptions:
    """What every storage is opened with, checked once by the Queue facade.

    The storages take these as one value, so an option both honour is named,
    defaulted and validated in one place (queue.Queue), never once per storage.
    """

    name: str
    fsync: bool = True
    visibility_timeout: float = 30.0
    max_attempts: int = 5
    backoff: BackoffPolicy = BackoffPolicy()
    lock_timeout: float = 10.0
    clock: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        assert self.visibility_timeout > 0 and self.max_attempts >= 1 and self.lock_timeout >= 0, "checked by Queue"


class EnqueueSpec(NamedTuple):
    """One job to enqueue. ``payload_json`` is ``payload`` already encoded once.

    A NamedTuple rather than a frozen dataclass: enqueue_many builds one per
    job, and a frozen dataclass's __init__ costs several times more.
    """

    payload: Any
    payload_json: str
    priority: int
    delay: float
    max_attempts: int
    job_id: str | None
    kind: str
    dedupe_key: str | None
    #: The job's time limit in seconds (None: the Worker's), stored with the job.
    timeout: float | None = None
    #: The job's group (a tenant, a customer), or None.
    group: str | None = None


class SharedSpecs(Sequence[EnqueueSpec]):
    """Jobs that differ only in their payload (enqueue_many without ids or dedupe keys), as columns.

    ``shared``: every other field; ``payloads``, ``texts``: each job's. A
    storage may read the columns (filestore/plain_jobs.py); to anything else
    this is a sequence of EnqueueSpecs, made on first read.
    """

    def __init__(self, shared: EnqueueSpec, payloads: list[Any], texts: list[str]) -> None:
        self.shared, self.payloads, self.texts = shared, payloads, texts
        self._specs: list[EnqueueSpec] | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: Any) -> Any:  # an EnqueueSpec, or a list of them for a slice
        return self.specs()[index]

    def specs(self) -> list[EnqueueSpec]:
        if self._specs is None:
            rest = self.shared[2:]
            self._specs = [EnqueueSpec(payload, text, *rest) for payload, text in zip(self.payloads, self.texts)]
        return self._specs


class Storage(Protocol):
    """What a storage must do. Tokens: None means "operator, skip the check"."""

    durable: bool
    visibility_timeout: float

    def enqueue(self, specs: Sequence[EnqueueSpec], conn: Any = None) -> list[Job]: ...

    def lease(self, count: int, visibility_timeout: float, kinds: frozenset[str] | None) -> list[Job]: ...

    def ack(self, job_id: str, token: str | None, result_json: str | None, result: Any) -> None: ...

    def ack_many(self, items: list[tuple[str, str | None, str | None]]) -> None: ...

    def nack(
        self, job_id: str, token: str | None, error: str | None, delay: float | None, permanent: bool,
        traceback: str | None,
    ) -> Job: ...  # fmt: skip

    def extend(self, job_id: str, token: str | None, seconds: float) -> Job: ...

    def extend_many(self, items: list[tuple[str, str | None]], seconds: float) -> list[Job]: ...

    def set_stage(self, job_id: str, token: str | None, stage: str | None) -> Job: ...

    def get(self, job_id: str) -> Job: ...

    def stats(self) -> QueueStats: ...

    def counters(self) -> Counters: ...

    def announce_worker(self, info: WorkerInfo) -> None: ...

    def retire_worker(self, worker_id: str) -> None: ...

    def workers(self) -> list[WorkerInfo]: ...

    def list_jobs(self, listing: str | None, limit: int | None, offset: int, kind: str | None) -> list[Job]: ...

    def requeue_dead(self, job_id: str | None) -> int: ...

    def purge(self) -> int: ...

    def compact(self) -> CompactionResult: ...

    def count(self) -> int: ...

    def wait_for_jobs(
        self, timeout: float, interrupt: int | None = None, kinds: frozenset[str] | None = None
    ) -> bool: ...

    def wakes_waiters(self) -> bool: ...

    # Periodic jobs (schedules.py): defined, removed, listed; and fire_schedules, which
    # enqueues every due tick and moves each schedule's cursor in one atomic write.
    def put_schedule(self, spec: ScheduleSpec) -> Schedule: ...

    def remove_schedule(self, name: str) -> bool: ...

    def list_schedules(self) -> list[Schedule]: ...

    def fire_schedules(self) -> list[Job]: ...

    def close(self) -> None: ...

    # Limits per kind (limits.py), enforced inside lease: set (or changed), removed,
    # listed; and when a ready job of a rate-limited kind may be leased (an idle wait's end).
    def put_limit(self, limit: Limit) -> Limit: ...

    def remove_limit(self, kind: str) -> bool: ...

    def list_limits(self) -> list[Limit]: ...

    def seconds_to_slot(self, kinds: frozenset[str] | None) -> float | None: ...

    def limit_holding(self, kind: str, group: str | None = None) -> str | None: ...  # the limit holding a ready job of the kind (and group) back (explain)

    # ---- control of jobs (issue 15): each a record of the log / a change of a row
    def cancel(self, job_id: str, token: str | None, stopped: bool) -> Job: ...

    def snooze(self, job_id: str, token: str | None, seconds: float) -> Job: ...

    def pause(self, kind: str | None, resume: bool) -> None: ...

    def paused(self) -> list[str | None]: ...

    def run_now(self, job_id: str) -> Job: ...

    def delete(self, job_id: str) -> Job: ...

    def wait_finished(self, job_id: str, timeout: float) -> Job: ...

    # ---- explain (issue 15): the storage's own clock, which its reads are "as of"
    def now(self) -> float: ...

    @property
    def location(self) -> str: ...

    @property
    def recovery(self) -> RecoveryReport: ...


# ---------------------------------------------------------------- shared by both storages
def new_job_id() -> str:
    """16 hex digits of randomness: unique without coordination between processes."""
    return os.urandom(8).hex()


_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


#: (pid, label) of the process that made it last: every lease asks, and a forked child makes its own.
_label: tuple[int, str] = (-1, "")


def worker_label() -> str:
    """This process as a lease records it: ``host:pid``, ASCII only, at most MAX_WORKER_CHARS (a long host cut).

    Made once per process (the host name as it was then), not at every lease.
    """
    global _label
    pid, label = _label
    if pid != os.getpid():
        pid = os.getpid()
        host = _LABEL_UNSAFE.sub("_", socket.gethostname())[: MAX_WORKER_CHARS - len(str(pid)) - 1] or "host"
        label = f"{host}:{pid}"
        _label = (pid, label)
    return label


def new_token() -> str:
    """A fencing token: any later lease of the same job gets a different one."""
    return os.urandom(8).hex()


def job_not_found(job_id: str, queue: str) -> JobNotFoundError:
    """The error for an id the queue does not hold (never enqueued, compacted away, or purged)."""
    return JobNotFoundError(f"job {job_id!r} is not in queue {queue!r}")


def queue_closed(queue: str, where: str) -> QueueClosedError:
    """The error for a call on a closed queue object."""
    return QueueClosedError(f"queue {queue!r} at {where} is closed; open a new Queue")


def refusal(action: str, job_id: str, state: str, token: Any, held_token: Any) -> NotLeasedError:
    """Why ``action`` on a job that ``token`` does not hold is refused, saying what really happened.

    ``state`` is the job's state now and ``held_token`` the token of its lease,
    or, for a done job, the token of the lease that finished it. ``token`` None is an
    operator acting by id. A caller whose own ack finished the job is told it
    is done, not that a lease expired.
    """
    if state == JobState.CANCELLED.value:
        return JobCancelledError(f"cannot {action} job {job_id}: it was cancelled; nothing changed")
    if state == JobState.LEASED.value:
        return NotLeasedError(
            f"cannot {action} job {job_id}: your lease is stale (it expired and the job was leased again). "
            "The work may run twice; handlers must be idempotent."
        )
    if token is None:
        return NotLeasedError(f"cannot {action} job {job_id}: it is {state}, not leased")
    if state == JobState.DONE.value and held_token in (token, None):
        how = " (acked under this lease)" if held_token == token else ""
        return NotLeasedError(f"cannot {action} job {job_id}: it is already done{how}; nothing changed")
    if state == JobState.DONE.value:
        return NotLeasedError(
            f"cannot {action} job {job_id}: it is done, finished under a later lease after yours ended "
            "(the work may have run twice; handlers must be idempotent)"
        )
    return NotLeasedError(
        f"cannot {action} job {job_id}: it is {state}, not leased (your lease ended: it expired, or the job was nacked)"
    )



def cancel_refusal(action: str, job_id: str) -> JobCancelledError:
    """Why ``action`` on a leased job whose cancel was asked for is refused."""
    return JobCancelledError(
        f"cannot {action} job {job_id}: it was cancelled while its handler ran; end the attempt with "
        "cancel(job, stopped=True) (the Worker does), or let the lease expire: either way it ends cancelled"
    )


def finished_refusal(action: str, job_id: str, state: str) -> JobFinishedError:
    """Why ``action`` on a finished job (done, dead, cancelled) is refused, naming its state."""
    return JobFinishedError(f"cannot {action} job {job_id}: it is already {state}; nothing changed", state=state)


#: Longest one wait for a job to finish blocks before it looks again: the bound on a
#: wake-up lost to a race with another waiter, and on noticing a lease that expired
#: with nobody writing (reads show it as its reclaim will leave it).
FINISH_RECHECK = 1.0


def wait_until_finished(
    job_id: str, timeout: float, look: Callable[[], Job], block: Callable[[float], object]
) -> Job:
    """``Queue.wait``'s loop: ``look()`` until the job is finished, ``block(seconds)`` between looks.

    ``block`` returns when the storage's wake-up says a job may have finished,
    or after ``seconds`` (at most FINISH_RECHECK). TimeoutError once
    ``timeout`` seconds passed with the job still unfinished.
    """
    deadline = time.monotonic() + timeout
    while True:
        job = look()
        pause = seconds_to_block(job, timeout, deadline)
        if pause is None:
            return job
        block(pause)


def seconds_to_block(job: Job, timeout: float, deadline: float) -> float | None:
    """One step of a wait's loop (the AsyncQueue's awaits the same): None once ``job`` is finished,
    else how long to block before the next look; TimeoutError at ``deadline`` (time.monotonic)."""
    if job.state in FINISHED_STATES:
        return None
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError(f"job {job.id} is still {job.state.value} after {timeout:g} s of waiting")
    return min(remaining, FINISH_RECHECK)
