"""The Queue's work: enqueue, lease, ack, nack, extend, and the wait for work.

Owns: WorkMethods (every argument checked through checks.py, ``Job | id`` →
``(id, token)``, payloads and results encoded once before a storage sees them).
Imports: checks, jobs, codec, storage, base.

Everything a caller can get wrong is caught here, before any storage sees it,
so both storages refuse bad input identically and nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .. import checks
from ..jobs import (
    DEFAULT_KIND,
    MAX_BATCH_JOBS,
    MAX_ERROR_CHARS,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_PRIORITY,
    MAX_RESULT_BYTES,
    MAX_TRACEBACK_CHARS,
    MIN_PRIORITY,
    Job,
)
from ..codec import stored_json, stored_json_many
from ..storage import EnqueueSpec
from ..checks import JobRef
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
    ) -> Job:
        """Add one job and return it once it is durable.

        ``job_id`` makes the call idempotent: while the queue still holds a job
        with that id (in any state, until a compaction drops it once done, or
        a purge), the existing job is returned and nothing is scheduled.
        ``dedupe_key`` allows one ready-or-leased job per (kind, key).
        """
        spec = self._spec(stored_json(payload), priority, delay, max_attempts, job_id, kind, dedupe_key)
        return self._open_storage().enqueue([spec], conn)[0]

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
    ) -> list[Job]:
        """Add many jobs in one durable write (one fsync for the whole batch)."""
        payloads = list(payloads)
        if len(payloads) > MAX_BATCH_JOBS:
            raise ValueError(f"enqueue_many takes at most {MAX_BATCH_JOBS:,} jobs per call, got {len(payloads):,}")
        job_ids = checks.per_job(job_ids, len(payloads), "job_ids")
        dedupe_keys = checks.per_job(dedupe_keys, len(payloads), "dedupe_keys")
        if not payloads:
            return []
        texts, stored = stored_json_many(payloads)
        # What every job of the batch shares is checked once, not once per job.
        first = self._spec((texts[0], stored[0]), priority, delay, max_attempts, job_ids[0], kind, dedupe_keys[0])
        specs = [first]
        for payload, text, job_id, key in zip(stored[1:], texts[1:], job_ids[1:], dedupe_keys[1:]):
            specs.append(
                EnqueueSpec(
                    payload, text, first.priority, first.delay, first.max_attempts,
                    None if job_id is None else checks.text(job_id, "job_id", MAX_ID_CHARS), first.kind,
                    None if key is None else checks.text(key, "dedupe_key", MAX_NAME_CHARS),
                )  # fmt: skip
            )
        return self._open_storage().enqueue(specs, conn)

    def _spec(
        self, stored: tuple[str, Any], priority: int, delay: float, max_attempts: int | None, job_id: str | None,
        kind: str, dedupe_key: str | None,
    ) -> EnqueueSpec:  # fmt: skip
        """One job to add; ``stored``: its payload as stored_json gives it (the text, the value read back)."""
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise TypeError(f"priority must be an int, got {type(priority).__name__}")
        if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            raise ValueError(f"priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}, got {priority}")
        return EnqueueSpec(
            payload=stored[1],
            payload_json=stored[0],
            priority=priority,
            delay=checks.seconds(delay, "delay"),
            max_attempts=self.max_attempts if max_attempts is None else checks.attempts(max_attempts),
            job_id=None if job_id is None else checks.text(job_id, "job_id", MAX_ID_CHARS),
            kind=checks.text(kind, "kind", MAX_NAME_CHARS),
            dedupe_key=None if dedupe_key is None else checks.text(dedupe_key, "dedupe_key", MAX_NAME_CHARS),
        )

    # ------------------------------------------------------------ consuming
    def lease(
        self, count: int = 1, *, visibility_timeout: float | None = None, kinds: Iterable[str] | None = None
    ) -> list[Job]:
        """Lease up to ``count`` runnable jobs (highest priority, then oldest). Never blocks.

        Each leased job is invisible to others until its deadline (now +
        visibility timeout); ack, nack or extend it before then. With the
        file storage the lease itself becomes durable with the next fsync of
        the log (your ack's, at the latest): a power cut before that makes
        the job ready again, which at-least-once delivery allows.
        """
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"count must be a non-negative int, got {count!r}")
        count = min(count, MAX_BATCH_JOBS)
        timeout = self.visibility_timeout if visibility_timeout is None else checks.seconds(
            visibility_timeout, "visibility_timeout", allow_zero=False
        )
        kind_set = checks.kind_set(kinds)
        if count == 0:
            return []
        return self._open_storage().lease(count, timeout, kind_set)

    def lease_one(self, *, visibility_timeout: float | None = None, kinds: Iterable[str] | None = None) -> Job | None:
        """Lease one job, or return None if none is runnable now."""
        jobs = self.lease(1, visibility_timeout=visibility_timeout, kinds=kinds)
        return jobs[0] if jobs else None

    def ack(self, job: JobRef, *, result: Any = None) -> None:
        """Mark a leased job done, storing ``result`` (JSON) with it.

        Raises NotLeasedError if your lease is stale. Acking a job that is
        already done under the same lease (or by id) does nothing.
        """
        job_id, token = checks.job_ref(job)
        result_json = None
        if result is not None:
            result_json, result = stored_json(result, what="result", limit=MAX_RESULT_BYTES)
        self._open_storage().ack(job_id, token, result_json, result)

    def ack_many(self, jobs: Iterable[JobRef], *, results: Sequence[Any] | None = None) -> None:
        """Ack many leased jobs in one durable write (one fsync, or one statement).

        Every job whose lease still holds is done when this returns; if any
        could not be acked, NotLeasedError (or JobNotFoundError) names the
        first of them, after the others were acked.
        """
        refs = [checks.job_ref(job) for job in jobs]
        if len(refs) > MAX_BATCH_JOBS:
            raise ValueError(f"ack_many takes at most {MAX_BATCH_JOBS:,} jobs per call, got {len(refs):,}")
        results = checks.per_job(results, len(refs), "results")
        items = [
            (job_id, token, None if result is None else stored_json(result, what="result", limit=MAX_RESULT_BYTES)[0])
            for (job_id, token), result in zip(refs, results)
        ]
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
        job_id, token = checks.job_ref(job)
        if error is not None:
            error = checks.informational(str(error)[:MAX_ERROR_CHARS])
        if traceback is not None:
            traceback = checks.informational(str(traceback)[-MAX_TRACEBACK_CHARS:])
        if delay is not None:
            delay = checks.seconds(delay, "delay")
        return self._open_storage().nack(job_id, token, error, delay, bool(permanent), traceback)

    def extend(self, job: JobRef, seconds: float) -> Job:
        """Set a leased job's deadline to now + ``seconds`` (a heartbeat; never accumulates)."""
        job_id, token = checks.job_ref(job)
        return self._open_storage().extend(job_id, token, checks.seconds(seconds, "seconds", allow_zero=False))

    def set_stage(self, job: JobRef, stage: str | None) -> Job:
        """Record what a running handler is doing now (visible in get/list/CLI/dashboard)."""
        job_id, token = checks.job_ref(job)
        if stage is not None:
            stage = checks.text(stage, "stage", MAX_NAME_CHARS)
        return self._open_storage().set_stage(job_id, token, stage)

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
