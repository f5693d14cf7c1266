"""The public Queue: one facade, two storages.

Owns: Queue (every argument checked through checks.py, ``Job | id`` →
``(id, token)``, payloads and results encoded once, the storage chosen).
Imports: checks, errors, jobs, codec, schedules, storage, locations,
filestore, postgres (only when a DSN is given: it needs psycopg).

Everything a caller can get wrong is caught here, before any storage sees it,
so both storages refuse bad input identically and nothing is written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import checks
from .errors import QueueClosedError
from .jobs import (
    DEFAULT_KIND,
    LISTINGS,
    MAX_BATCH_JOBS,
    MAX_ERROR_CHARS,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_PRIORITY,
    MAX_RESULT_BYTES,
    MAX_TRACEBACK_CHARS,
    MIN_PRIORITY,
    BackoffPolicy,
    CompactionResult,
    Job,
    JobState,
    QueueStats,
    RecoveryReport,
)
from .codec import stored_json, stored_json_many
from . import schedules as _schedules
from .schedules import DEFAULT_CATCH_UP, Schedule
from .storage import EnqueueSpec, Storage, StorageOptions, storage_kind
from .checks import JobRef
from .locations import require_queue



class Queue:
    """A durable job queue. Enqueue work, lease it, ack it.

    ``Queue("./jobs")`` keeps the queue in a folder on local disk (created if
    missing); ``Queue("postgresql://...")`` keeps it in PostgreSQL (needs the
    optional ``psycopg`` driver). Both behave the same.

    ``fsync=False`` skips fsync: faster, and NOT durable (a power cut can lose
    acknowledged work). ``auto_compact`` is the share of superseded bytes in
    the log at which the file storage compacts by itself (None: never).
    ``create=False`` opens only a queue that is already there and raises
    QueueNotFoundError instead of creating one: on the file storage the
    folder must hold this queue's files; on PostgreSQL the nobroker schema
    must exist (its queues are rows of one table, so opening one creates
    nothing else). A location that is neither a folder path nor a PostgreSQL
    DSN (``mysql://...``) raises UnknownStorageError, and nothing is created.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        name: str = "default",
        *,
        fsync: bool = True,
        visibility_timeout: float = 30.0,
        max_attempts: int = 5,
        backoff: BackoffPolicy | None = None,
        lock_timeout: float = 10.0,
        clock: Callable[[], float] | None = None,
        auto_compact: float | None = 0.5,
        create: bool = True,
        **storage_options: Any,
    ) -> None:
        visibility_timeout = checks.seconds(visibility_timeout, "visibility_timeout", allow_zero=False)
        max_attempts = checks.attempts(max_attempts)
        lock_timeout = checks.seconds(lock_timeout, "lock_timeout")
        if backoff is None:
            backoff = BackoffPolicy()
        elif not isinstance(backoff, BackoffPolicy):
            raise TypeError(f"backoff must be a BackoffPolicy, got {type(backoff).__name__}")
        if auto_compact is not None and not (isinstance(auto_compact, (int, float)) and 0 < auto_compact <= 1):
            raise ValueError(f"auto_compact is a share of the log between 0 and 1 (or None for never), got {auto_compact!r}")
        kind = storage_kind(path)
        if not create:
            require_queue(path, name, schema=storage_options.get("schema"),
                          connect_timeout=storage_options.get("reconnect_timeout"))
        options = StorageOptions(
            name, fsync=bool(fsync), visibility_timeout=visibility_timeout, max_attempts=max_attempts,
            backoff=backoff, lock_timeout=lock_timeout, clock=clock,
        )  # fmt: skip
        self._storage: Storage
        if kind == "postgresql":
            from .postgres import PostgresStorage  # optional: needs psycopg

            self._storage = PostgresStorage(str(path), options, **storage_options)
        else:
            from .filestore import FileStorage

            self._storage = FileStorage(path, options, auto_compact=auto_compact, **storage_options)
        self._name = name
        self.visibility_timeout = visibility_timeout
        self.max_attempts = max_attempts
        self.backoff = backoff
        self._closed = False

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
            error = str(error)[:MAX_ERROR_CHARS]
        if traceback is not None:
            traceback = str(traceback)[-MAX_TRACEBACK_CHARS:]
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

    # ------------------------------------------------------------ looking
    def get(self, job_id: str) -> Job:
        """The job with this id, in its current state (JobNotFoundError if unknown)."""
        return self._open_storage().get(checks.text(job_id, "job_id", MAX_ID_CHARS))

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
        listing = None
        if state is not None:
            listing = state.value if isinstance(state, JobState) else state
            if listing not in LISTINGS:
                raise ValueError(f"state must be one of {', '.join(LISTINGS)} (or None: every job); got {state!r}")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, got {offset!r}")
        if limit == 0:
            return []
        return self._open_storage().list_jobs(listing, limit, offset, kind)

    def dlq(self, *, limit: int | None = None) -> list[Job]:
        """The dead-letter queue: jobs that failed for good, oldest first."""
        return self.list_jobs(JobState.DEAD, limit=limit)

    def requeue_dead(self, job_id: str | None = None) -> int:
        """Make dead jobs ready again with attempts reset; None revives the whole DLQ."""
        if job_id is not None:
            job_id = checks.text(job_id, "job_id", MAX_ID_CHARS)
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

    # ------------------------------------------------------------ periodic jobs (schedules.py)
    def schedule(
        self, name: str, payload: Any = None, *, every: float | None = None, cron: str | None = None,
        kind: str = DEFAULT_KIND, priority: int = 0, tz: str | None = None, catch_up: str = DEFAULT_CATCH_UP,
    ) -> Schedule:  # fmt: skip
        """Enqueue ``payload`` every ``every`` seconds, or at the times of a five-field ``cron`` expression.

        Stored in the queue: every process sees it, and it survives restarts.
        Every running Worker enqueues the due ticks (no separate process),
        each exactly once: a tick's job id is ``tick:<name>@<due time in ms>``.
        ``tz``: the IANA zone whose wall clock a cron expression follows (UTC
        when None). ``catch_up`` says what becomes of ticks that came due
        while no worker ran: ``"all"`` enqueues every one, ``"last"`` only the
        most recent, ``"none"`` none that is more than a minute late.
        Defining a schedule again with the same fields changes nothing (call
        it at every start); different fields replace it, counting from now.
        Returns the schedule with its next run. Bad input raises TypeError or
        ValueError, and nothing is written.
        """
        spec = _schedules.define(name, payload, every=every, cron=cron, kind=kind, priority=priority, tz=tz,
                                 catch_up=catch_up)  # fmt: skip
        return self._open_storage().put_schedule(spec)

    def unschedule(self, name: str) -> bool:
        """Remove the schedule ``name`` (ticks already enqueued stay). False if there was none."""
        return self._open_storage().remove_schedule(checks.text(name, "schedule name", _schedules.MAX_SCHEDULE_NAME_CHARS))

    def schedules(self) -> list[Schedule]:
        """Every schedule of the queue, by name, each with its ``next_run`` (epoch seconds)."""
        return self._open_storage().list_schedules()

    def enqueue_due(self) -> list[Job]:
        """Enqueue every schedule's due ticks now; returns the jobs this call added (a Worker calls it).

        Safe from any number of processes at once: each tick is enqueued once.
        """
        return self._open_storage().fire_schedules()

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

    # ------------------------------------------------------------ control of jobs (issue 15)
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
        job_id, token = checks.job_ref(job)
        return self._open_storage().cancel(job_id, token, bool(stopped))

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Release files (or connections). Further calls raise QueueClosedError."""
        if not self._closed:
            self._closed = True
            self._storage.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._open_storage().count()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("durable" if self.durable else "NOT durable: fsync=False")
        return f"<nobroker.Queue {self._name!r} at {self.path!r} ({state})>"

    @property
    def path(self) -> str:
        """The folder (file storage) or the DSN without its password (PostgreSQL)."""
        return self._storage.location

    @property
    def name(self) -> str:
        return self._name

    @property
    def durable(self) -> bool:
        """False when opened with fsync=False: acknowledged work may be lost in a power cut."""
        return self._storage.durable

    @property
    def fsync(self) -> bool:
        """The ``fsync`` it was opened with (nobroker 0.1.2's name for ``durable``)."""
        return self._storage.durable

    @property
    def recovery(self) -> RecoveryReport:
        """What opening the queue found (torn tail cut, records replayed, time taken)."""
        return self._storage.recovery

    @property
    def storage(self) -> Storage:
        """The storage behind this facade (for tools; its interface is not a stable API)."""
        return self._storage

    def _open_storage(self) -> Storage:
        if self._closed:
            raise QueueClosedError(f"queue {self._name!r} is closed; open a new Queue")
        return self._storage
