"""The Queue's work: enqueue, lease, ack, nack, extend, and the wait for work.

Owns: WorkMethods (every argument checked by calls.py, shared with
AsyncQueue, then passed to the storage). Imports: checks, jobs, calls, base.

Everything a caller can get wrong is caught there, before any storage sees
it, so both storages refuse bad input identically and nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .. import checks
from ..checks import JobRef
from ..jobs import DEFAULT_KIND, Job
from . import calls
from .base import QueueBase


class WorkMethods(QueueBase):
    """Producing and consuming (see Queue)."""

    # ------------------------------------------------------------ producing
    def enqueue(
        self,
        payload: Any,
        *,
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int | None = None,
        job_id: str | None = None,
        kind: str = DEFAULT_KIND,
        dedupe_key: str | None = None,
        conn: Any = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> Job:
        """Add one job and return it once it is durable.

        ``job_id`` makes the call idempotent: while the queue still holds a job
        with that id (in any state, until a compaction drops it once done, or
        a purge), the existing job is returned and nothing is scheduled.
        ``dedupe_key`` allows one ready-or-leased job per (kind, key).
        ``timeout``: the job's time limit in seconds, stored with it: a Worker
        fails an attempt that runs longer ("timed out after S s"), as it does
        with its own ``timeout`` for jobs without one. ``group``: the job's
        group (a tenant, a customer), which a kind's ``group_concurrency`` and
        fair share count by (see set_limit).
        """
        specs = calls.enqueue_one(
            self.max_attempts, payload, priority, delay, max_attempts, job_id, kind, dedupe_key, timeout, group
        )  # fmt: skip
        return self._open_storage().enqueue(specs, conn)[0]

    def enqueue_many(
        self,
        payloads: Iterable[Any],
        *,
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int | None = None,
        job_ids: Sequence[str | None] | None = None,
        kind: str = DEFAULT_KIND,
        dedupe_keys: Sequence[str | None] | None = None,
        conn: Any = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> list[Job]:
        """Add many jobs in one durable write (one fsync for the whole batch); ``timeout`` and ``group`` as in enqueue, for each."""
        specs = calls.enqueue_many(
            self.max_attempts, payloads, priority, delay, max_attempts, job_ids, kind, dedupe_keys, timeout, group
        )  # fmt: skip
        return self._open_storage().enqueue(specs, conn) if specs else []

    # ------------------------------------------------------------ consuming
    def lease(
        self, count: int = 1, *, visibility_timeout: float | None = None, kinds: Iterable[str] | None = None
    ) -> list[Job]:
        """Lease up to ``count`` runnable jobs (highest priority, then oldest). Never blocks.

        Each leased job is invisible to others until its deadline (now +
        visibility timeout); ack, nack or extend it before then. The lease
        itself becomes durable with the next fsync of the log (file storage)
        or the next flush of the server's WAL (PostgreSQL): your ack's, at
        the latest. A power cut or a server crash before that makes the job
        ready again, which at-least-once delivery allows.
        """
        count, timeout, kind_set = calls.lease(self.visibility_timeout, count, visibility_timeout, kinds)
        return self._open_storage().lease(count, timeout, kind_set) if count else []

    def lease_one(self, *, visibility_timeout: float | None = None, kinds: Iterable[str] | None = None) -> Job | None:
        """Lease one job, or return None if none is runnable now."""
        jobs = self.lease(1, visibility_timeout=visibility_timeout, kinds=kinds)
        return jobs[0] if jobs else None

    def ack(self, job: JobRef, *, result: Any = None) -> None:
        """Mark a leased job done, storing ``result`` (JSON) with it.

        Raises NotLeasedError if your lease is stale. Acking a job that is
        already done under the same lease (or by id) does nothing.
        """
        self._open_storage().ack(*calls.ack(job, result))

    def ack_many(self, jobs: Iterable[JobRef], *, results: Sequence[Any] | None = None) -> None:
        """Ack many leased jobs in one durable write (one fsync, or one statement).

        Every job whose lease still holds is done when this returns; if any
        could not be acked, NotLeasedError (or JobNotFoundError) names the
        first of them, after the others were acked.
        """
        items = calls.ack_many(jobs, results)
        if items:
            self._open_storage().ack_many(items)

    def nack(
        self, job: JobRef, *, error: str | None = None, delay: float | None = None, permanent: bool = False,
        traceback: str | None = None,
    ) -> Job:  # fmt: skip
        """Give a leased job back: ready again after ``delay`` (default: the backoff policy),
        or dead once it has used ``max_attempts`` or when ``permanent`` is true.

        ``error`` (one line, say) becomes ``last_error``; ``traceback``, kept
        beside it, only its last MAX_TRACEBACK_CHARS characters.
        """
        return self._open_storage().nack(*calls.nack(job, error, delay, permanent, traceback))

    def extend(self, job: JobRef, seconds: float) -> Job:
        """Set a leased job's deadline to now + ``seconds`` (a heartbeat; never accumulates)."""
        return self._open_storage().extend(*calls.extend(job, seconds))

    def extend_many(self, jobs: Iterable[JobRef], seconds: float) -> list[Job]:
        """Renew many leases at once (a Worker's heartbeat): one durable write, or one statement.

        Each deadline becomes now + ``seconds``. Returns the jobs as renewed,
        in the order given. Every lease that still holds is renewed when this
        returns; if any could not be, NotLeasedError (or JobNotFoundError)
        names the first of them, after the others were renewed.
        """
        items, seconds = calls.extend_many(jobs, seconds)
        return self._open_storage().extend_many(items, seconds) if items else []

    def set_stage(self, job: JobRef, stage: str | None) -> Job:
        """Record what a running handler is doing now (visible in get/list/CLI/dashboard)."""
        return self._open_storage().set_stage(*calls.stage(job, stage))

    def wait_for_jobs(
        self, timeout: float, *, kinds: Iterable[str] | None = None, interrupt: int | None = None
    ) -> bool:
        """Block up to ``timeout`` seconds until work may have arrived (a hint for idle workers).

        ``kinds``: the caller leases only jobs of these kinds (as in
        ``lease``), so it must not take the wake-up of a worker that takes
        every kind. ``interrupt``: a file descriptor (say the read end of
        ``os.pipe()``); the wait returns False as soon as it is readable, so
        another thread or a signal handler can end it by writing a byte. It
        is never read.
        """
        kind_set = checks.kind_set(kinds)
        if interrupt is not None:
            if isinstance(interrupt, bool) or not isinstance(interrupt, int):
                raise TypeError(f"interrupt must be None or a file descriptor, got {type(interrupt).__name__}")
            if interrupt < 0:
                raise ValueError(f"interrupt must be a file descriptor (an int >= 0), got {interrupt!r}")
        if self._closed:
            return False
        return self._storage.wait_for_jobs(checks.seconds(timeout, "timeout"), interrupt, kind_set)

    def wakes_waiters(self) -> bool:
        """Is ``wait_for_jobs`` woken by every change that can make a job leasable?

        True where runnable work from any process wakes it and it watches
        delayed jobs and leases come due itself (the file storage, where named
        pipes work): an idle worker may then wait long between looks. False
        means "poll": the PostgreSQL storage (whose NOTIFY does not cover
        delayed jobs or expired leases), or no named pipes here.
        """
        return not self._closed and self._storage.wakes_waiters()
