"""The PostgreSQL storage: the same queue, kept in one table that many hosts share.

Owns: PostgresStorage (the Storage protocol on PostgreSQL), wiring only: it
checks its options, brings the schema up to date on open, and runs each
operation (operations.py) on its connections (connection.Link; lanes.Lanes for the work), saying which
ones may run twice. Imports: jobs, storage, driver, fragments, statements,
steps, naming, connection, lanes, listener, schema, operations, enqueueing, wakeups, schedules, schedule_ops,
limits, limit_ops, queue_ops, roster, announcements, control_ops, control_storage,
options.

Its options (keyword arguments to ``Queue`` that the facade passes on),
their defaults and their checks: options.py.

A statement that fails because the connection died is retried once when
that is safe: reads, and writes that do the same thing twice (ack, extend,
set_stage, lease, compact, enqueue with job ids). Otherwise the caller gets
StorageError saying the outcome is unknown.

Transactional enqueue: ``Queue.enqueue(..., conn=connection)`` runs the INSERT in
the caller's open transaction and never commits: roll back and there is no job.

Pools like PgBouncer in transaction mode: pass ``prepare_threshold=None``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Generator, Sequence
from functools import cached_property
from typing import Any, TypeVar

from ..announcements import WorkerInfo
from ..jobs import CompactionResult, Counters, Job, QueueStats, RecoveryReport
from ..limits import Limit
from ..schedules import Schedule, ScheduleSpec
from ..storage import EnqueueSpec, StorageOptions
from . import control_ops, limit_ops, roster, schedule_ops
from . import enqueueing
from . import operations as ops
from . import queue_ops as whole
from .control_storage import ControlStorage
from .lanes import Lanes
from .listener import Listener
from .options import DEFAULT_DONE_RETENTION, check_options, check_seconds
from .connection import (
    DEFAULT_RECONNECT_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT, DEFAULT_TCP_USER_TIMEOUT, Link, connection_options,
)  # fmt: skip
from .naming import channel_name, check_identifier, connect_timeout_of, redact_dsn
from .driver import require_psycopg
from .fragments import PRUNE_BATCH
from .schema import DEFAULT_SCHEMA, ensure_schema
from .statements import Statements, backoff_parameters
from .steps import Steps, advance, drive
from .wakeups import NotifyGate

logger = logging.getLogger("nobroker.postgres")

T = TypeVar("T")

#: Seconds between two rounds of automatic pruning (started by a lease, run in a thread of its own).
PRUNE_INTERVAL = 30.0
#: Batches (fragments.PRUNE_BATCH jobs each) one round of pruning deletes at most, per retention
#: (done and cancelled jobs together, dead jobs).
PRUNE_BATCHES = 10
#: Seconds to the next round after one that found a backlog (it deleted at least half of the
#: PRUNE_BATCHES batches a retention may): jobs finishing faster than those every PRUNE_INTERVAL
#: are still kept up with, and a table with little to prune is read no more often than before.
PRUNE_CATCH_UP = 1.0
#: A storage operation of several runs on a connection, with decisions between them: it yields
#: (what, the steps of a run, may they run twice) and is sent each run's result (see carry).
Plan = Generator[tuple[str, Callable[[], Steps[Any]], bool], Any, T]


def carry(link: Link | Lanes, plan: Plan[T]) -> T:
    """Carry out each run of ``plan`` on ``link`` (asyncstorage awaits the same plans on an AsyncLink).

    Between two runs a thread waiting for the link goes first (a compaction's many batches).
    """
    done, run = advance(plan, None, None)
    while not done:
        what, steps, retry = run
        done, run = advance(plan, link.run(what, lambda c: drive(c, steps()), retry=retry), None)
        if not done:
            link.let_others_in()
    result: T = run
    return result


def twice(link: Link, what: str, steps: Callable[[], Steps[T]]) -> T:
    """Drive the steps ``steps()`` makes (afresh on each try) on ``link``: an operation safe to run twice."""
    return link.run(what, lambda c: drive(c, steps()), retry=True)


class PostgresStorage(ControlStorage):
    """One named queue in a PostgreSQL schema (``nobroker`` by default)."""

    def __init__(
        self,
        dsn: str,
        options: StorageOptions,
        *,
        schema: str = DEFAULT_SCHEMA,
        migrate: bool = True,
        worker_role: str | None = None,
        retention: float = 0.0,
        clock_offset: float = 0.0,
        reconnect_timeout: float | None = None,
        prepare_threshold: int | None = 5,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
        tcp_user_timeout: float = DEFAULT_TCP_USER_TIMEOUT,
        done_retention: float | None = DEFAULT_DONE_RETENTION,
        dead_retention: float | None = None,
    ) -> None:
        require_psycopg()
        if reconnect_timeout is None:
            reconnect_timeout = connect_timeout_of(dsn) or DEFAULT_RECONNECT_TIMEOUT
        check_options(options, retention, reconnect_timeout, clock_offset)
        check_seconds(statement_timeout=statement_timeout, tcp_user_timeout=tcp_user_timeout)
        for what, value in (("done_retention", done_retention), ("dead_retention", dead_retention)):
            if value is not None:
                check_seconds(**{what: value}, limit=float("inf"))
        self.dsn = dsn
        self.name = options.name
        self.schema = check_identifier(schema, "schema")
        self.durable = options.fsync
        self.visibility_timeout = options.visibility_timeout
        self.max_attempts = options.max_attempts
        self.backoff = options.backoff
        self.lock_timeout = options.lock_timeout
        self.retention = float(retention)
        #: Seconds a done (dead) job is kept before the automatic pruning deletes it; None: never.
        self.done_retention = None if done_retention is None else float(done_retention)
        self.dead_retention = None if dead_retention is None else float(dead_retention)
        self._prune_at = time.monotonic() + PRUNE_INTERVAL
        self._pruning: threading.Thread | None = None
        self.reconnect_timeout = float(reconnect_timeout)
        channel = channel_name(self.schema, self.name)
        self._target = ops.Target(
            Statements(self.schema), self.name, channel, backoff_parameters(self.backoff), float(clock_offset)
        )
        connect_options = connection_options(dsn, float(tcp_user_timeout))

        def link() -> Link:
            return Link(
                dsn, queue=self.name, schema=self.schema, reconnect_timeout=self.reconnect_timeout,
                lock_timeout=self.lock_timeout, durable=self.durable, prepare_threshold=prepare_threshold,
                statement_timeout=float(statement_timeout), options=connect_options,
            )  # fmt: skip

        # The work (enqueue, lease, ack, nack, extend, set_stage, cancel, snooze, the due ticks) runs
        # on its own connection, or on a spare one (opened then) when it finds that one busy: a Worker's ack
        # and its next lease overlap. Operator reads, compaction and the owed NOTIFYs share a second one
        # (opened on first use), so a heartbeat never waits behind them.
        self._link = link()
        self._side = link()
        self._spare = link()
        self._lanes = Lanes(self._link, self._spare)
        self._listener = Listener(dsn, channel, connect_options)
        # Queue.wait's: the finished channel, its own connection (opened the first time a wait LISTENs).
        self._finished_listener = Listener(dsn, control_ops.finished_channel(self.schema, self.name), connect_options)
        self._gate = NotifyGate(self._send_owed_notify)
        started = time.perf_counter()
        try:
            with self._link.held() as conn:  # connect now, so a wrong DSN fails here rather than at first use
                if migrate:
                    ensure_schema(conn, self.schema, worker_role, self.location)
        except BaseException:
            self.close()  # a refused open keeps no connection (as the file storage keeps no file)
            raise
        self._recovery = RecoveryReport(elapsed=time.perf_counter() - started)
        if not self.durable:
            logger.warning("queue %r at %s: synchronous_commit=off, NOT durable", self.name, self.location)

    @property
    def clock_offset(self) -> float:
        """Seconds added to the database clock in every statement (tests move time with it)."""
        return self._target.clock_offset

    @clock_offset.setter
    def clock_offset(self, seconds: float) -> None:
        self._target.clock_offset = float(seconds)

    # ================================================================ writes
    def enqueue(self, specs: Sequence[EnqueueSpec], conn: Any = None) -> list[Job]:
        if conn is not None:
            return enqueueing.enqueue_in_transaction(conn, self._target, specs)
        return carry(self._lanes, self.enqueue_plan(specs))

    def enqueue_plan(self, specs: Sequence[EnqueueSpec]) -> Plan[list[Job]]:
        """The runs of an enqueue on our connection, and the NOTIFY it sends or owes (see carry)."""
        t = self._target
        runnable = any(spec.delay <= 0 for spec in specs)
        notify = runnable and self._gate.take()
        jobs: list[Job] | None = None
        if len(specs) == 1 and specs[0].job_id is None and specs[0].dedupe_key is None:
            job = yield "enqueue", lambda: enqueueing.insert_one_fresh(t, specs[0], notify), False
            if job is not None:
                jobs = [job]
        if jobs is None:
            # Enqueue twice is harmless only when every job names its id.
            safe = all(spec.job_id is not None for spec in specs)
            jobs = yield "enqueue", lambda: enqueueing.enqueue_retrying(t, specs, notify=notify), safe
        if runnable and not notify:
            self._gate.owe()
        return jobs

    def upkeep_due(self) -> None:
        """Start a round of pruning when one is due (a lease starts it; it runs in a thread of its own)."""
        if time.monotonic() >= self._prune_at:
            self._start_pruning()

    def lease(self, count: int, visibility_timeout: float, kinds: frozenset[str] | None) -> list[Job]:
        # A retried claim is safe: a lease we never heard of just expires and comes back.
        t = self._target
        self.upkeep_due()
        sql = self.limit_sql
        return self._lanes.run(
            "lease", lambda c: drive(c, limit_ops.claim(t, sql, count, visibility_timeout, kinds)), retry=True
        )

    def ack(self, job_id: str, token: str | None, result_json: str | None, result: Any) -> None:
        # Twice is harmless: the second ack finds the job done under the same token.
        self._lanes.run("ack", lambda c: drive(c, ops.ack(self._target, job_id, token, result_json)), retry=True)

    def ack_many(self, items: list[tuple[str, str | None, str | None]]) -> None:
        """Ack many leased jobs in one statement (see operations.ack_many)."""
        if items:
            self._lanes.run("ack_many", lambda c: drive(c, ops.ack_many(self._target, items)), retry=True)

    def nack(
        self, job_id: str, token: str | None, error: str | None, delay: float | None, permanent: bool,
        traceback: str | None = None,
    ) -> Job:  # fmt: skip
        return carry(self._lanes, self.nack_plan(job_id, token, error, delay, permanent, traceback))

    def nack_plan(self, job_id: str, token: str | None, error: str | None, delay: float | None, permanent: bool,
                  traceback: str | None) -> Plan[Job]:  # fmt: skip
        """The run of a nack, and the NOTIFY it sends or owes (see carry)."""
        notify = (delay is None or delay <= 0) and not permanent and self._gate.take()

        def steps() -> Steps[tuple[Job, bool]]:
            t = self._target
            return ops.nack(t, job_id, token, error=error, traceback=traceback, delay=delay, permanent=permanent,
                            notify=notify)  # fmt: skip

        nacked: tuple[Job, bool] = yield "nack", steps, False
        job, owed = nacked
        if owed:
            self._gate.owe()
        return job

    def extend(self, job_id: str, token: str | None, seconds: float) -> Job:
        return self._lanes.run("extend", lambda c: drive(c, ops.extend(self._target, job_id, token, seconds)), retry=True)

    def extend_many(self, items: list[tuple[str, str | None]], seconds: float) -> list[Job]:
        """Renew many leases in one statement (see operations.extend_many)."""
        t = self._target
        return self._lanes.run("extend_many", lambda c: drive(c, ops.extend_many(t, items, seconds)), retry=True)

    def set_stage(self, job_id: str, token: str | None, stage: str | None) -> Job:
        return self._lanes.run(ops.SET_STAGE, lambda c: drive(c, ops.set_stage(self._target, job_id, token, stage)), retry=True)

    def now(self) -> float:
        """This host's clock plus the test-only offset (the database's clock is the truth; they agree closely)."""
        return time.time() + self._target.clock_offset

    # ---- control of jobs (issue 15)
    def cancel(self, job_id: str, token: str | None, stopped: bool) -> Job:
        return self._lanes.run("cancel", lambda c: drive(c, ops.cancel(self._target, job_id, token, stopped)), retry=True)

    def requeue_dead(self, job_id: str | None) -> int:
        return carry(self._side, self.requeue_plan(job_id))

    def requeue_plan(self, job_id: str | None) -> Plan[int]:
        """The run of requeue_dead (on the side connection), and the NOTIFY it sends or owes."""
        notify = self._gate.take()
        count: int = yield "requeue_dead", lambda: whole.requeue_dead(self._target, job_id, notify), False
        if count and not notify:
            self._gate.owe()
        return count

    def purge(self) -> int:
        return self._side.run("purge", lambda c: drive(c, whole.purge(self._target)), retry=False)

    def compact(self) -> CompactionResult:
        return carry(self._side, self.compact_plan())

    def compact_plan(self) -> Plan[CompactionResult]:
        started = time.perf_counter()
        dropped, kept = yield from whole.compaction(self._target, self.retention)
        return CompactionResult(jobs_kept=kept, jobs_dropped=dropped, elapsed=time.perf_counter() - started)

    # ================================================================ reads (each safe to run twice)
    def get(self, job_id: str) -> Job:
        return twice(self._side, "get", lambda: whole.get(self._target, job_id))

    def stats(self) -> QueueStats:
        return twice(self._side, "stats", lambda: whole.stats(self._target))

    def count(self) -> int:
        return twice(self._side, "count", lambda: whole.count(self._target))

    def counters(self) -> Counters:
        return twice(self._side, "counters", lambda: whole.counters(self._target))

    def list_jobs(self, listing: str | None, limit: int | None, offset: int, kind: str | None) -> list[Job]:
        return twice(self._side, "list_jobs", lambda: whole.list_jobs(self._target, listing, limit, offset, kind))

    # ================================================================ schedules (periodic jobs)
    def put_schedule(self, spec: ScheduleSpec) -> Schedule:
        return twice(self._link, "schedule", lambda: schedule_ops.put(self._target, self.schedule_sql, spec))

    def remove_schedule(self, name: str) -> bool:
        return twice(self._link, "unschedule", lambda: schedule_ops.remove(self._target, self.schedule_sql, name))

    def list_schedules(self) -> list[Schedule]:
        return twice(self._side, "list schedules", lambda: schedule_ops.listed(self._target, self.schedule_sql))

    def fire_schedules(self) -> list[Job]:
        # Safe twice: a transaction lost with its connection enqueued nothing and moved nothing.
        sql, t, most = self.schedule_sql, self._target, self.max_attempts
        return self._lanes.run("enqueue due ticks", lambda c: drive(c, schedule_ops.fire(t, sql, most)), retry=True)

    # ------------------------------------------------------------ worker announcements (roster.py)
    def announce_worker(self, info: WorkerInfo) -> None:
        twice(self._side, "announce worker", lambda: roster.announce(self._target, self.roster_sql, info))

    def retire_worker(self, worker_id: str) -> None:
        twice(self._side, "retire worker", lambda: roster.retire(self._target, self.roster_sql, worker_id))

    def workers(self) -> list[WorkerInfo]:
        return twice(self._side, "list workers", lambda: roster.listed(self._target, self.roster_sql))

    @cached_property
    def roster_sql(self) -> roster.RosterStatements:
        return roster.RosterStatements(self.schema)

    @cached_property
    def schedule_sql(self) -> schedule_ops.ScheduleStatements:
        return schedule_ops.ScheduleStatements(self.schema)

    # ================================================================ limits per kind
    def put_limit(self, limit: Limit) -> Limit:
        return twice(self._link, "set a limit", lambda: limit_ops.put(self._target, self.limit_sql, limit))

    def remove_limit(self, kind: str) -> bool:
        return twice(self._link, "clear a limit", lambda: limit_ops.remove(self._target, self.limit_sql, kind))

    def list_limits(self) -> list[Limit]:
        return twice(self._side, "list limits", lambda: limit_ops.listed(self._target, self.limit_sql))

    def seconds_to_slot(self, kinds: frozenset[str] | None) -> float | None:
        return twice(self._side, "next slot", lambda: limit_ops.seconds_to_slot(self._target, self.limit_sql, kinds))

    def limit_holding(self, kind: str, group: str | None = None) -> str | None:
        return twice(self._side, "limit holding", lambda: limit_ops.holding(self._target, self.limit_sql, kind, group))

    @cached_property
    def limit_sql(self) -> limit_ops.LimitStatements:
        return limit_ops.LimitStatements(self.schema)

    # ================================================================ waiting and closing
    def wakes_waiters(self) -> bool:
        """True: a job runnable at once wakes idle workers (NOTIFY), and an idle wait ends when the next comes due."""
        return True

    def wait_for_jobs(self, timeout: float, interrupt: int | None = None, kinds: frozenset[str] | None = None) -> bool:
        """Sleep until a NOTIFY says work arrived, the next delayed job or lease comes due, or ``timeout`` passes.

        A hint, not a promise. Enqueue, nack and requeue notify in their own
        transaction (at most once per window of 5-20 ms, see wakeups.py), so the
        wake-up comes when the job is visible. Delayed jobs send no NOTIFY:
        the wait asks the queue when its next scheduled job or lease comes
        due, or a spent rate limit (of ``kinds``) has a token again, and
        ends then, asking again every DUE_RECHECK seconds for those others
        add meanwhile, and whether a concurrency limit spent as the wait
        began has a free slot again (an ack sends no NOTIFY). If the listening connection cannot be had, this
        sleeps (polling fallback). ``interrupt``: a descriptor that ends the
        wait (returning False) as soon as it is readable; it is never read.
        Every listener hears every NOTIFY, whatever its ``kinds``.
        """
        t, sql = self._target, self.limit_sql
        slot_at: list[float] = []  # when a rate limit spent as the wait began has a token again (monotonic)
        spent: list[tuple[str, int]] = []  # (kind, leased) of the kinds whose slot frees a waiter (limit_ops.look)

        def due(conn: Any) -> float | None:
            if not slot_at:
                wait, spent_now = drive(conn, limit_ops.look(t, sql, kinds))
                slot_at.append(math.inf if wait is None else time.monotonic() + wait)
                spent.extend(spent_now)
            elif drive(conn, limit_ops.slot_freed(t, sql, spent)):
                return 0.0  # an ack sends no NOTIFY: a freed slot is seen at the next recheck
            times = [s for s in (whole.next_due(conn, t), slot_at[0] - time.monotonic()) if s is not None and s < math.inf]
            return min(times) if times else None

        return self._listener.wait(timeout, interrupt, due)

    def _start_pruning(self) -> None:
        """Prune in the background, on the second connection: leases never wait for it."""
        self._prune_at = time.monotonic() + PRUNE_INTERVAL
        if self._pruning is not None and self._pruning.is_alive():
            return
        self._pruning = threading.Thread(target=self._prune, name="nobroker-prune", daemon=True)
        self._pruning.start()

    def _prune(self) -> None:
        """A few bounded batches of done and dead jobs past their retention, each a run of its own; the counts folded."""
        retentions = ((whole.FINISHED_KEPT_AS_DONE, self.done_retention), (("dead",), self.dead_retention))
        try:
            dropped = carry(self._side, whole.upkeep_pruning(self._target, retentions, PRUNE_BATCHES))
        except Exception as exc:  # upkeep only: the next round tries again
            logger.warning("queue %r: pruning finished jobs failed (%s); trying again later", self.name, exc)
            return
        if dropped:
            logger.debug("queue %r: pruned %d finished jobs", self.name, dropped)
        if dropped >= PRUNE_BATCHES * PRUNE_BATCH // 2:  # a backlog: the next round soon, not in PRUNE_INTERVAL
            self._prune_at = min(self._prune_at, time.monotonic() + PRUNE_CATCH_UP)

    def _send_owed_notify(self) -> None:
        t = self._target
        self._side.run("notify", lambda c: whole.notify(c, t), retry=True)

    def release_connections(self) -> None:
        """Close the connections for now; each opens again when next used (AsyncPostgresStorage works on its own)."""
        self._link.release()
        self._side.release()
        self._spare.release()

    def close(self) -> None:
        self._gate.close()
        self._link.close()
        self._side.close()
        self._spare.close()
        self._listener.close()
        self._finished_listener.close()

    @property
    def location(self) -> str:
        """The DSN without its password."""
        return redact_dsn(self.dsn)

    @property
    def recovery(self) -> RecoveryReport:
        return self._recovery


__all__ = ["PostgresStorage"]
