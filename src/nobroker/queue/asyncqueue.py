"""The Queue with ``await``: AsyncQueue, for code that runs on an asyncio event loop.

Owns: AsyncQueue (the Queue's API, each call a coroutine, its arguments
checked by calls.py exactly as Queue checks them) and OffLoop (a storage
whose calls run in a thread, awaited). Imports: checks, jobs, schedules,
limits, explain, addresses, storage, announcements, calls, base, explaining, postgres.asyncstorage (only for a DSN: it needs psycopg).

On PostgreSQL the work and the reads are native async: the same statements
the Queue sends (postgres/operations.py), awaited on psycopg's
AsyncConnection (postgres/asyncstorage.py), so no thread is held while the
server works; ``enqueue(conn=AsyncConnection)`` joins the caller's open
transaction. On the file storage each call's storage work (the file
storage's own method, as a Queue calls it once the arguments are checked)
runs in a thread of the loop's default executor (asyncio.to_thread), so the loop never
blocks on the file lock or an fsync, and code written for AsyncQueue runs on
both storages. A call cancelled while it awaits (a timeout, a cancelled
task) raises CancelledError in the caller; what it had sent finishes or not
as one whole statement (PostgreSQL: the connection it used is replaced) or
one whole write (files: the thread runs the call to its end).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self

from .. import checks
from ..checks import JobRef
from ..announcements import WorkerInfo, checked
from ..jobs import DEFAULT_KIND, CompactionResult, Counters, Job, JobState, QueueStats
from .. import schedules as _schedules
from ..schedules import DEFAULT_CATCH_UP, Schedule
from ..limits import Limit
from ..explain import Reason, explain
from ..addresses import storage_kind
from ..storage import FINISH_RECHECK, Storage, StorageOptions, queue_closed, seconds_to_block
from . import calls, explaining
from .base import Opening, open_storage


class OffLoop:
    """A synchronous storage whose every call runs in a thread (asyncio.to_thread), awaited."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.durable = storage.durable
        self.visibility_timeout = storage.visibility_timeout

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.storage, name)

        async def off_the_loop(*args: Any) -> Any:
            return await asyncio.to_thread(method, *args)

        return off_the_loop

    async def wait_finished(self, job_id: str, timeout: float) -> Job:
        """The storage's wait in slices of FINISH_RECHECK, so a cancelled wait leaves its thread that long at most."""
        deadline = time.monotonic() + timeout
        while True:
            slice_ = max(0.0, min(deadline - time.monotonic(), FINISH_RECHECK))
            try:
                return await asyncio.to_thread(self.storage.wait_finished, job_id, slice_)
            except TimeoutError:
                job = await asyncio.to_thread(self.storage.get, job_id)
                if seconds_to_block(job, timeout, deadline) is None:  # TimeoutError at the deadline
                    return job

    @property
    def location(self) -> str:
        return self.storage.location


class AsyncQueue(Opening):
    """A durable job queue for asyncio code: Queue's API, each call awaited.

    ``AsyncQueue("./jobs")`` or ``AsyncQueue("postgresql://...")`` takes the
    Queue's arguments. It opens at ``async with``, at ``await q.open()``, or
    at its first call; ``await q.close()`` (or leaving the ``async with``)
    closes it. ``await q.count()`` is ``len(queue)``.
    """

    def _open(
        self, path: str | os.PathLike[str], options: StorageOptions, auto_compact: float | None, create: bool,
        storage_options: dict[str, Any],
    ) -> None:  # fmt: skip
        # Only kept: opening blocks (it reads the log, or connects), so the first await does it.
        self._path = path
        self._options = options
        self._opening = (auto_compact, create, dict(storage_options))
        self._storage: Any = None  # OffLoop, or postgres.asyncstorage.AsyncPostgresStorage, once open
        self._open_lock: asyncio.Lock | None = None

    # ------------------------------------------------------------ lifetime
    async def open(self) -> Self:
        """Open the storage (once; later calls return at once). Returns the queue."""
        await self._open_storage()
        return self

    async def _open_storage(self) -> Any:
        if self._closed:
            raise queue_closed(self._options.name, str(self._path))
        if self._storage is not None:
            return self._storage
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._storage is None:
                auto_compact, create, options = self._opening
                opened = await asyncio.to_thread(open_storage, self._path, self._options, auto_compact, create, options)
                storage = _async_storage(self._path, opened)
                if self._closed:  # closed while it opened
                    await storage.close()
                    raise queue_closed(self._options.name, str(self._path))
                self._storage = storage
        return self._storage

    async def close(self) -> None:
        """Release files (or connections). Further calls raise QueueClosedError."""
        if self._closed:
            return
        self._closed = True
        storage, self._storage = self._storage, None
        if storage is not None:
            await storage.close()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<nobroker.AsyncQueue {self._options.name!r} ({'closed' if self._closed else 'open'})>"

    @property
    def storage(self) -> Any:
        """The storage behind this queue once it is open (for tools; not a stable API)."""
        return self._storage

    # ------------------------------------------------------------ producing
    async def enqueue(
        self, payload: Any, *, priority: int = 0, delay: float = 0.0, max_attempts: int | None = None,
        job_id: str | None = None, kind: str = DEFAULT_KIND, dedupe_key: str | None = None, conn: Any = None,
        timeout: float | None = None, group: str | None = None,
    ) -> Job:  # fmt: skip
        """As Queue.enqueue; ``conn``: a psycopg AsyncConnection whose open transaction the job joins."""
        specs = calls.enqueue_one(
            self.max_attempts, payload, priority, delay, max_attempts, job_id, kind, dedupe_key, timeout, group
        )  # fmt: skip
        jobs = await (await self._open_storage()).enqueue(specs, conn)
        return jobs[0]  # type: ignore[no-any-return]

    async def enqueue_many(
        self, payloads: Iterable[Any], *, priority: int = 0, delay: float = 0.0, max_attempts: int | None = None,
        job_ids: Sequence[str | None] | None = None, kind: str = DEFAULT_KIND,
        dedupe_keys: Sequence[str | None] | None = None, conn: Any = None, timeout: float | None = None,
        group: str | None = None,
    ) -> list[Job]:  # fmt: skip
        """As Queue.enqueue_many: one durable write (one fsync, or one statement) for the batch."""
        specs = calls.enqueue_many(
            self.max_attempts, payloads, priority, delay, max_attempts, job_ids, kind, dedupe_keys, timeout, group
        )  # fmt: skip
        return await (await self._open_storage()).enqueue(specs, conn) if specs else []

    # ------------------------------------------------------------ consuming
    async def lease(
        self, count: int = 1, *, visibility_timeout: float | None = None, kinds: Iterable[str] | None = None
    ) -> list[Job]:
        """As Queue.lease: up to ``count`` runnable jobs, never waiting for more."""
        count, timeout, kind_set = calls.lease(self.visibility_timeout, count, visibility_timeout, kinds)
        return await (await self._open_storage()).lease(count, timeout, kind_set) if count else []

    async def lease_one(self, *, visibility_timeout: float | None = None, kinds: Iterable[str] | None = None) -> Job | None:
        jobs = await self.lease(1, visibility_timeout=visibility_timeout, kinds=kinds)
        return jobs[0] if jobs else None

    async def ack(self, job: JobRef, *, result: Any = None) -> None:
        await (await self._open_storage()).ack(*calls.ack(job, result))

    async def ack_many(self, jobs: Iterable[JobRef], *, results: Sequence[Any] | None = None) -> None:
        items = calls.ack_many(jobs, results)
        if items:
            await (await self._open_storage()).ack_many(items)

    async def nack(
        self, job: JobRef, *, error: str | None = None, delay: float | None = None, permanent: bool = False,
        traceback: str | None = None,
    ) -> Job:  # fmt: skip
        return await (await self._open_storage()).nack(*calls.nack(job, error, delay, permanent, traceback))  # type: ignore[no-any-return]

    async def extend(self, job: JobRef, seconds: float) -> Job:
        return await (await self._open_storage()).extend(*calls.extend(job, seconds))  # type: ignore[no-any-return]

    async def extend_many(self, jobs: Iterable[JobRef], seconds: float) -> list[Job]:
        """As Queue.extend_many: every lease renewed by one write or one statement."""
        items, seconds = calls.extend_many(jobs, seconds)
        return await (await self._open_storage()).extend_many(items, seconds) if items else []

    async def set_stage(self, job: JobRef, stage: str | None) -> Job:
        return await (await self._open_storage()).set_stage(*calls.stage(job, stage))  # type: ignore[no-any-return]

    async def wait_for_jobs(self, timeout: float, *, kinds: Iterable[str] | None = None) -> bool:
        """As Queue.wait_for_jobs (in a thread: the idle wait blocks)."""
        kind_set = checks.kind_set(kinds)
        seconds = checks.seconds(timeout, "timeout")
        return bool(await (await self._open_storage()).wait_for_jobs(seconds, None, kind_set))

    # ------------------------------------------------------------ looking
    async def get(self, job_id: str) -> Job:
        return await (await self._open_storage()).get(calls.job_id(job_id))  # type: ignore[no-any-return]

    async def stats(self) -> QueueStats:
        return await (await self._open_storage()).stats()  # type: ignore[no-any-return]

    async def count(self) -> int:
        """Every job the queue holds (``len(queue)`` of a Queue)."""
        return await (await self._open_storage()).count()  # type: ignore[no-any-return]

    async def counters(self) -> Counters:
        """``Queue.counters()``: per kind, jobs enqueued, succeeded, failed (retried), dead, cancelled."""
        return await (await self._open_storage()).counters()  # type: ignore[no-any-return]

    async def announce_worker(self, info: WorkerInfo) -> None:
        """As Queue.announce_worker: bad fields refused with SerializationError before anything is written."""
        info = checked(info)
        await (await self._open_storage()).announce_worker(info)

    async def retire_worker(self, worker_id: str) -> None:
        """As Queue.retire_worker: nothing if there is no such announcement."""
        worker_id = calls.worker_id(worker_id)
        await (await self._open_storage()).retire_worker(worker_id)

    async def workers(self) -> list[WorkerInfo]:
        """``Queue.workers()``: the workers that announced themselves, oldest first."""
        return await (await self._open_storage()).workers()  # type: ignore[no-any-return]

    async def list_jobs(
        self, state: JobState | str | None = None, *, limit: int | None = None, offset: int = 0, kind: str | None = None
    ) -> list[Job]:
        listing, limit, offset, kind = calls.listing(state, limit, offset, kind)
        if limit == 0:
            return []
        return await (await self._open_storage()).list_jobs(listing, limit, offset, kind)  # type: ignore[no-any-return]

    async def dlq(self, *, limit: int | None = None) -> list[Job]:
        return await self.list_jobs(JobState.DEAD, limit=limit)

    async def requeue_dead(self, job_id: str | None = None) -> int:
        return await (await self._open_storage()).requeue_dead(None if job_id is None else calls.job_id(job_id))  # type: ignore[no-any-return]

    async def purge(self) -> int:
        return await (await self._open_storage()).purge()  # type: ignore[no-any-return]

    async def compact(self) -> CompactionResult:
        return await (await self._open_storage()).compact()  # type: ignore[no-any-return]

    async def explain(self, job: JobRef) -> list[Reason]:
        """As Queue.explain: the same facts, each read awaited."""
        found = await self.get(checks.job_ref(job)[0])
        storage = await self._open_storage()
        now = float(await storage.now())
        listed, holding, paused = None, None, []
        if explaining.runnable(found, now):
            listed = await self.list_jobs("runnable", kind=found.kind, limit=explaining.MAX_AHEAD_SCANNED)
            holding = await storage.limit_holding(found.kind, found.group)
            paused = await storage.paused()
        return explain(found, explaining.facts_of(found, now, listed, holding, self.visibility_timeout, paused))

    # ------------------------------------------------------------ control and periodic jobs
    async def cancel(self, job: JobRef, *, stopped: bool = False) -> Job:
        """As Queue.cancel."""
        return await (await self._open_storage()).cancel(*calls.cancel(job, stopped))  # type: ignore[no-any-return]

    async def snooze(self, job: JobRef, seconds: float) -> Job:
        """As Queue.snooze."""
        return await (await self._open_storage()).snooze(*calls.snooze(job, seconds))  # type: ignore[no-any-return]

    async def pause(self, kind: str | None = None) -> None:
        """As Queue.pause."""
        await (await self._open_storage()).pause(calls.kind(kind), False)

    async def resume(self, kind: str | None = None) -> None:
        """As Queue.resume."""
        await (await self._open_storage()).pause(calls.kind(kind), True)

    async def paused(self) -> list[str | None]:
        """As Queue.paused."""
        return await (await self._open_storage()).paused()  # type: ignore[no-any-return]

    async def run_now(self, job: JobRef) -> Job:
        """As Queue.run_now."""
        return await (await self._open_storage()).run_now(calls.ref_id(job))  # type: ignore[no-any-return]

    async def delete(self, job: JobRef) -> Job:
        """As Queue.delete."""
        return await (await self._open_storage()).delete(calls.ref_id(job))  # type: ignore[no-any-return]

    async def wait(self, job: JobRef, timeout: float) -> Job:
        """As Queue.wait: the job once it is done, dead or cancelled; TimeoutError after ``timeout`` seconds.

        PostgreSQL: its looks awaited, the sleep between them on the finished
        channel's LISTEN in a thread; files: the Queue's wait in a thread.
        """
        return await (await self._open_storage()).wait_finished(*calls.wait(job, timeout))  # type: ignore[no-any-return]

    async def schedule(
        self, name: str, payload: Any = None, *, every: float | None = None, cron: str | None = None,
        kind: str = DEFAULT_KIND, priority: int = 0, tz: str | None = None, catch_up: str = DEFAULT_CATCH_UP,
    ) -> Schedule:  # fmt: skip
        """As Queue.schedule."""
        spec = _schedules.define(name, payload, every=every, cron=cron, kind=kind, priority=priority, tz=tz,
                                 catch_up=catch_up)  # fmt: skip
        return await (await self._open_storage()).put_schedule(spec)  # type: ignore[no-any-return]

    async def unschedule(self, name: str) -> bool:
        name = checks.text(name, "schedule name", _schedules.MAX_SCHEDULE_NAME_CHARS)
        return await (await self._open_storage()).remove_schedule(name)  # type: ignore[no-any-return]

    async def schedules(self) -> list[Schedule]:
        return await (await self._open_storage()).list_schedules()  # type: ignore[no-any-return]

    async def enqueue_due(self) -> list[Job]:
        return await (await self._open_storage()).fire_schedules()  # type: ignore[no-any-return]

    # ------------------------------------------------------------ limits per kind
    async def set_limit(
        self, kind: str, *, concurrency: int | None = None, rate: int | None = None, per: float = 1.0,
        burst: int | None = None, group_concurrency: int | None = None, weights: dict[str, int] | None = None,
    ) -> Limit | None:  # fmt: skip
        """As Queue.set_limit (None: the kind's limit cleared)."""
        kind, limit = calls.limit(kind, concurrency, rate, per, burst, group_concurrency, weights)
        if limit is None:
            await (await self._open_storage()).remove_limit(kind)
            return None
        return await (await self._open_storage()).put_limit(limit)  # type: ignore[no-any-return]

    async def clear_limit(self, kind: str) -> bool:
        """As Queue.clear_limit."""
        return await (await self._open_storage()).remove_limit(calls.limit_kind(kind))  # type: ignore[no-any-return]

    async def limits(self) -> list[Limit]:
        return await (await self._open_storage()).list_limits()  # type: ignore[no-any-return]

    async def seconds_to_slot(self, kinds: Iterable[str] | None = None) -> float | None:
        """As Queue.seconds_to_slot."""
        return await (await self._open_storage()).seconds_to_slot(checks.kind_set(kinds))  # type: ignore[no-any-return]


def _async_storage(path: object, storage: Storage) -> Any:
    """An opened storage as AsyncQueue calls it: PostgreSQL's native async twin, else OffLoop."""
    if storage_kind(path) == "postgresql":
        from ..postgres.asyncstorage import AsyncPostgresStorage  # optional: needs psycopg

        return AsyncPostgresStorage(storage)  # type: ignore[arg-type]
    return OffLoop(storage)
