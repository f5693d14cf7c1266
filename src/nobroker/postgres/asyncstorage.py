"""The PostgreSQL storage for an AsyncQueue: the Queue's own statements, awaited on AsyncConnections.

Owns: AsyncPostgresStorage (the Storage protocol with ``await``) and
``carry_async`` (a storage Plan awaited run by run). Imports: jobs,
schedules, limits, storage, driver, steps, asynclink, operations, enqueueing, queue_ops,
schedule_ops, limit_ops, roster, announcements, control_ops.

Opening is the Queue's (the options checked, the schema brought up to date),
run in a thread once; the PostgresStorage it opened keeps the queue's
settings, its NOTIFY gate and its pruning, and this wraps it. Then the work (enqueue, lease,
ack, ack_many, nack, extend, extend_many, set_stage, cancel) is awaited on
one AsyncConnection (a spare one takes a call that finds it busy:
AsyncLanes), the reads (get, stats, count, counters, workers, list_jobs), the
worker announcements (announce_worker, retire_worker) and the
operator's writes (requeue_dead, purge, compact) on a second, opened on
first use, so a heartbeat never waits behind them; the schedules as the
Queue places them, and the limits per kind likewise (a lease of a queue
with limits is the Queue's limit_ops.claim). Every one sends exactly the
steps the Queue sends (operations.py, queue_ops.py, schedule_ops.py, limit_ops.py,
control_ops.py: the holder's snooze on the first connection, the operator's
pause, resume, run_now and delete on the second). Only the idle wait
(wait_for_jobs: LISTEN, then a long sleep) runs the Queue's own call in a
thread (asyncio.to_thread), on its listening connection; a job's wait
(wait_finished) awaits its looks natively and sleeps on the finished
channel's listener in a thread between them.

``enqueue(conn=AsyncConnection)`` runs the INSERT inside the caller's open
transaction on that connection and never commits: the job is visible to
others at the caller's commit, and gone with the caller's rollback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, TypeVar

from ..announcements import WorkerInfo
from ..jobs import CompactionResult, Counters, Job, QueueStats, RecoveryReport
from ..limits import Limit
from ..schedules import Schedule, ScheduleSpec
from ..storage import EnqueueSpec, seconds_to_block
from . import enqueueing
from . import operations as ops
from . import queue_ops as whole
from . import control_ops, limit_ops, roster, schedule_ops
from .asynclink import AsyncLanes, AsyncLink, AsyncSession
from .driver import psycopg
from .steps import advance, drive_async
from .storage import Plan, PostgresStorage

T = TypeVar("T")


async def carry_async(link: AsyncLink | AsyncLanes, plan: Plan[T]) -> T:
    """storage.carry, awaited: each run of ``plan`` on ``link``."""
    done, run = advance(plan, None, None)
    while not done:
        what, steps, retry = run
        done, run = advance(plan, await link.run(what, steps, retry=retry), None)
    result: T = run
    return result


class AsyncPostgresStorage:
    """One named queue in PostgreSQL, for an AsyncQueue (see the module's docstring)."""

    def __init__(self, sync: PostgresStorage) -> None:
        self.sync = sync
        self._target = sync._target
        self._work = AsyncLanes(AsyncLink(sync._link), AsyncLink(sync._spare))
        self._side = AsyncLink(sync._side)
        self.durable = sync.durable
        self.visibility_timeout = sync.visibility_timeout
        sync.release_connections()  # its connections open again only for what runs in a thread

    @property
    def clock_offset(self) -> float:
        """Seconds added to the database clock in every statement (tests move time with it)."""
        return self.sync.clock_offset

    @clock_offset.setter
    def clock_offset(self, seconds: float) -> None:
        self.sync.clock_offset = seconds

    # ================================================================ the work, awaited
    async def enqueue(self, specs: Sequence[EnqueueSpec], conn: Any = None) -> list[Job]:
        if conn is None:
            return await carry_async(self._work, self.sync.enqueue_plan(specs))
        if not isinstance(conn, psycopg.AsyncConnection):
            raise ValueError(
                "conn must be a psycopg 3 AsyncConnection with an open transaction (a Connection goes to Queue), "
                f"got {type(conn).__name__}"
            )
        try:
            return await drive_async(AsyncSession(conn), enqueueing.in_transaction(self._target, specs))
        except psycopg.Error as exc:
            raise enqueueing.transaction_error(exc) from None

    async def lease(self, count: int, visibility_timeout: float, kinds: frozenset[str] | None) -> list[Job]:
        t, sql = self._target, self.sync.limit_sql
        self.sync.upkeep_due()
        return await self._work.run("lease", lambda: limit_ops.claim(t, sql, count, visibility_timeout, kinds), retry=True)

    async def ack(self, job_id: str, token: str | None, result_json: str | None, result: Any) -> None:
        await self._work.run("ack", lambda: ops.ack(self._target, job_id, token, result_json), retry=True)

    async def ack_many(self, items: list[tuple[str, str | None, str | None]]) -> None:
        await self._work.run("ack_many", lambda: ops.ack_many(self._target, items), retry=True)

    async def nack(
        self, job_id: str, token: str | None, error: str | None, delay: float | None, permanent: bool,
        traceback: str | None = None,
    ) -> Job:  # fmt: skip
        return await carry_async(self._work, self.sync.nack_plan(job_id, token, error, delay, permanent, traceback))

    async def extend(self, job_id: str, token: str | None, seconds: float) -> Job:
        return await self._work.run("extend", lambda: ops.extend(self._target, job_id, token, seconds), retry=True)

    async def extend_many(self, items: list[tuple[str, str | None]], seconds: float) -> list[Job]:
        return await self._work.run("extend_many", lambda: ops.extend_many(self._target, items, seconds), retry=True)

    async def set_stage(self, job_id: str, token: str | None, stage: str | None) -> Job:
        t = self._target
        return await self._work.run(ops.SET_STAGE, lambda: ops.set_stage(t, job_id, token, stage), retry=True)

    async def cancel(self, job_id: str, token: str | None, stopped: bool) -> Job:
        return await self._work.run("cancel", lambda: ops.cancel(self._target, job_id, token, stopped), retry=True)

    # ================================================================ reads, awaited on the second connection
    async def get(self, job_id: str) -> Job:
        return await self._side.run("get", lambda: whole.get(self._target, job_id), retry=True)

    async def stats(self) -> QueueStats:
        return await self._side.run("stats", lambda: whole.stats(self._target), retry=True)

    async def count(self) -> int:
        return await self._side.run("count", lambda: whole.count(self._target), retry=True)

    async def counters(self) -> Counters:
        return await self._side.run("counters", lambda: whole.counters(self._target), retry=True)

    async def announce_worker(self, info: WorkerInfo) -> None:
        t, sql = self._target, self.sync.roster_sql
        await self._side.run("announce worker", lambda: roster.announce(t, sql, info), retry=True)

    async def retire_worker(self, worker_id: str) -> None:
        t, sql = self._target, self.sync.roster_sql
        await self._side.run("retire worker", lambda: roster.retire(t, sql, worker_id), retry=True)

    async def workers(self) -> list[WorkerInfo]:
        t, sql = self._target, self.sync.roster_sql
        return await self._side.run("list workers", lambda: roster.listed(t, sql), retry=True)

    async def list_jobs(self, listing: str | None, limit: int | None, offset: int, kind: str | None) -> list[Job]:
        t = self._target
        return await self._side.run("list_jobs", lambda: whole.list_jobs(t, listing, limit, offset, kind), retry=True)

    # ================================================================ the operator's writes, on the second connection
    async def requeue_dead(self, job_id: str | None) -> int:
        return await carry_async(self._side, self.sync.requeue_plan(job_id))

    async def purge(self) -> int:
        return await self._side.run("purge", lambda: whole.purge(self._target), retry=False)

    async def compact(self) -> CompactionResult:
        return await carry_async(self._side, self.sync.compact_plan())

    # ================================================================ schedules (each one statement or one transaction)
    async def put_schedule(self, spec: ScheduleSpec) -> Schedule:
        t, sql = self._target, self.sync.schedule_sql
        return await self._work.run("schedule", lambda: schedule_ops.put(t, sql, spec), retry=True)

    async def remove_schedule(self, name: str) -> bool:
        t, sql = self._target, self.sync.schedule_sql
        return await self._work.run("unschedule", lambda: schedule_ops.remove(t, sql, name), retry=True)

    async def list_schedules(self) -> list[Schedule]:
        t, sql = self._target, self.sync.schedule_sql
        return await self._side.run("list schedules", lambda: schedule_ops.listed(t, sql), retry=True)

    async def fire_schedules(self) -> list[Job]:
        t, sql, most = self._target, self.sync.schedule_sql, self.sync.max_attempts
        return await self._work.run("enqueue due ticks", lambda: schedule_ops.fire(t, sql, most), retry=True)

    # ================================================================ limits per kind (as the Queue places them)
    async def put_limit(self, limit: Limit) -> Limit:
        t, sql = self._target, self.sync.limit_sql
        return await self._work.run("set a limit", lambda: limit_ops.put(t, sql, limit), retry=True)

    async def remove_limit(self, kind: str) -> bool:
        t, sql = self._target, self.sync.limit_sql
        return await self._work.run("clear a limit", lambda: limit_ops.remove(t, sql, kind), retry=True)

    async def list_limits(self) -> list[Limit]:
        t, sql = self._target, self.sync.limit_sql
        return await self._side.run("list limits", lambda: limit_ops.listed(t, sql), retry=True)

    async def seconds_to_slot(self, kinds: frozenset[str] | None) -> float | None:
        t, sql = self._target, self.sync.limit_sql
        return await self._side.run("next slot", lambda: limit_ops.seconds_to_slot(t, sql, kinds), retry=True)

    async def now(self) -> float:
        return self.sync.now()

    async def limit_holding(self, kind: str, group: str | None = None) -> str | None:
        t, sql = self._target, self.sync.limit_sql
        return await self._side.run("limit holding", lambda: limit_ops.holding(t, sql, kind, group), retry=True)

    # ================================================================ control of jobs (as the Queue places them)
    async def snooze(self, job_id: str, token: str | None, seconds: float) -> Job:
        # Not retried, as the Queue's: a snooze that went through would be refused the second time.
        t, sql = self._target, self.sync.control_sql()
        return await self._work.run("snooze", lambda: control_ops.snooze(t, sql, job_id, token, seconds), retry=False)

    async def pause(self, kind: str | None, resume: bool) -> None:
        t, sql = self._target, self.sync.control_sql()
        what = "resume" if resume else "pause"
        await self._side.run(what, lambda: control_ops.pause(t, sql, kind, resume), retry=True)

    async def paused(self) -> list[str | None]:
        t, sql = self._target, self.sync.control_sql()
        return await self._side.run("paused", lambda: control_ops.paused(t, sql), retry=True)

    async def run_now(self, job_id: str) -> Job:
        t, sql = self._target, self.sync.control_sql()
        return await self._side.run("run_now", lambda: control_ops.run_now(t, sql, job_id), retry=True)

    async def delete(self, job_id: str) -> Job:
        t, sql = self._target, self.sync.control_sql()
        return await self._side.run("delete", lambda: control_ops.delete(t, sql, job_id), retry=False)

    async def wait_finished(self, job_id: str, timeout: float) -> Job:
        """As PostgresStorage.wait_finished: LISTEN, mark the job waited for, then look and sleep until it finishes."""
        t, sql = self._target, self.sync.control_sql()
        listener = self.sync._finished_listener
        deadline = time.monotonic() + timeout
        await asyncio.to_thread(listener.listen)  # before the first look: a finish after it is heard
        await self._side.run("wait", lambda: control_ops.mark_waited(t, sql, job_id), retry=True)
        while True:
            job = await self.get(job_id)
            pause = seconds_to_block(job, timeout, deadline)
            if pause is None:
                return job
            await asyncio.to_thread(listener.wait, pause, None)

    # ================================================================ the idle wait: long, in a thread
    async def wait_for_jobs(self, timeout: float, interrupt: int | None = None, kinds: frozenset[str] | None = None) -> bool:
        return await asyncio.to_thread(self.sync.wait_for_jobs, timeout, interrupt, kinds)

    async def close(self) -> None:
        await self._work.close()
        await self._side.close()
        await asyncio.to_thread(self.sync.close)

    @property
    def location(self) -> str:
        return self.sync.location

    @property
    def recovery(self) -> RecoveryReport:
        return self.sync.recovery
