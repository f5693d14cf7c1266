"""The PostgreSQL storage: the same queue, kept in one table that many hosts share.

Owns: PostgresStorage (the Storage protocol on PostgreSQL): its options, the
schema brought up to date on open (schema.py), and every operation, each run
on its connection (connection.py). Imports: errors, jobs, storage, driver,
statements, connection, schema.

Semantics are the file storage's, statement by statement:

- every time is the database clock (``now()``), so hosts with skewed clocks
  agree on deadlines; a test-only ``clock_offset`` (seconds) is added to it
  in every statement;
- expired leases are reclaimed (like a nack at the deadline: backoff from
  there, or dead at max_attempts) by the operations that can see them, with
  no reaper process: every lease reclaims just before its claim (one round
  trip, one transaction), requeue_dead and
  compact reclaim first, and an ack, nack, extend or set_stage that finds its
  lease gone reclaims before it says why (so the refused caller sees the job
  exactly as the file storage would show it). An enqueue that meets a
  conflicting job reclaims before it looks that job up. Reads never write,
  as on the file storage, yet show an expired lease as that reclaim will
  leave it (see _SHOWN);
- a claim is one ``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)``;
  ack, nack, extend and set_stage check the fencing token in the WHERE of the
  one UPDATE that changes the row; zero rows means "find out why";
- ``dedupe_key`` is a partial unique index over ready/leased rows, and
  ``job_id`` is the primary key (queue, id): enqueue is
  ``INSERT ... ON CONFLICT DO NOTHING``, then the existing job is looked up;
- ``compact()`` deletes done jobs finished at least ``retention`` seconds ago
  (storage option, default 0: every done job).

Transactional enqueue: ``Queue.enqueue(..., conn=connection)`` runs the INSERT
on the caller's psycopg connection, inside the caller's open transaction, and
never commits: roll back and there is no job.

Storage options (keyword arguments to ``Queue`` that the facade passes on):
``schema`` (default ``nobroker``), ``migrate`` (default True: bring the
schema up to date on open), ``worker_role`` (apply the RLS policies on open),
``retention`` (seconds a done job is kept from compaction, default 0),
``reconnect_timeout`` (seconds to keep trying to reach the server, when the
queue opens and after it went away; default: the DSN's ``connect_timeout``,
else 30), ``prepare_threshold`` (psycopg's; None turns server-side prepared
statements off) and ``clock_offset`` (tests only). ``lock_timeout`` becomes
the session's ``lock_timeout``; ``fsync=False`` becomes
``synchronous_commit=off`` (faster, and NOT durable: a server crash can lose
the last acknowledged writes). Each Queue holds one connection for its work
and, once a Worker idles on it, one more that LISTENs.

Connections (connection.py): one per storage, behind a lock, replaced when
it dies. A statement that fails because the connection died is retried once
when that is safe: reads, and writes that do the same thing twice (ack,
extend, set_stage, lease, compact, enqueue with job ids). Otherwise the
caller gets StorageError saying the outcome is unknown.

PostgreSQL text cannot hold the NUL character: a job id, kind, dedupe key,
stage or queue name containing one is refused with ValueError (error texts
get U+FFFD instead). Payloads and results are unaffected: they are stored as
JSON text, where NUL is the escape ``\u0000``.

Pools like PgBouncer in transaction mode: pass ``prepare_threshold=None`` as a
storage option so no server-side prepared statements are used.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..errors import LockTimeoutError, StorageError
from ..jobs import CompactionResult, Job, JobState, QueueStats, RecoveryReport, finite_float, shown
from ..storage import EnqueueSpec, StorageOptions, job_not_found, new_job_id, refusal
from .connection import DEFAULT_RECONNECT_TIMEOUT, Link, Listener, channel_name, connect_timeout_of, redact_dsn
from .driver import pg_errors, psycopg, require_psycopg, tuple_row
from .schema import DEFAULT_SCHEMA, ensure_schema
from .statements import Statements, check_identifier, row_job

logger = logging.getLogger("nobroker.postgres")

T = TypeVar("T")

#: Tries for an enqueue whose conflicting job vanished before it could be read.
ENQUEUE_TRIES = 5
# ---------------------------------------------------------------- names and DSNs
def _check_text(value: str | None, what: str) -> str | None:
    if value is not None and "\x00" in value:
        raise ValueError(f"{what} cannot contain NUL characters in PostgreSQL, got {value!r}")
    return value


def _clean_error(error: str | None) -> str | None:
    """Error text as PostgreSQL can store it: no NUL, valid UTF-8 (it is only informational)."""
    if error is None:
        return None
    return error.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


class PostgresStorage:
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
    ) -> None:
        require_psycopg()
        name = options.name
        if options.clock is not None:
            raise ValueError(
                "clock= is for the file storage; the PostgreSQL storage uses the database clock, "
                "so every host agrees on deadlines"
            )
        if not isinstance(name, str) or not name or len(name) > 256 or "\x00" in name:
            raise ValueError(f"queue name must be 1 to 256 characters without NUL, got {name!r}")
        if reconnect_timeout is None:
            reconnect_timeout = connect_timeout_of(dsn) or DEFAULT_RECONNECT_TIMEOUT
        for what, value in (("retention", retention), ("reconnect_timeout", reconnect_timeout)):
            number = finite_float(value)  # never raises, not even for 10**400
            if number is None or number < 0:
                raise ValueError(f"{what} must be a finite number of seconds >= 0, got {shown(value)}")
        if finite_float(clock_offset) is None:
            raise ValueError(f"clock_offset must be a finite number of seconds, got {shown(clock_offset)}")
        self.dsn = dsn
        self.name = name
        self.schema = check_identifier(schema, "schema")
        self.durable = options.fsync
        self.visibility_timeout = options.visibility_timeout
        self.max_attempts = options.max_attempts
        self.backoff = options.backoff
        self.lock_timeout = options.lock_timeout
        self.retention = float(retention)
        #: Seconds added to the database clock in every statement (tests move time with it).
        self.clock_offset = float(clock_offset)
        self.reconnect_timeout = float(reconnect_timeout)
        self._channel = channel_name(self.schema, name)
        b = self.backoff
        self._backoff_values = {
            "b_base": float(b.base), "b_factor": float(b.factor), "b_max": float(b.max_delay), "b_jitter": float(b.jitter),
        }  # fmt: skip
        self._sql = Statements(self.schema)
        self._link = Link(
            dsn, queue=name, schema=self.schema, reconnect_timeout=self.reconnect_timeout,
            lock_timeout=self.lock_timeout, durable=self.durable, prepare_threshold=prepare_threshold,
        )  # fmt: skip
        self._listener = Listener(dsn, self._channel)
        started = time.perf_counter()
        with self._link.held() as conn:  # connect now, so a wrong DSN fails here rather than at first use
            if migrate:
                ensure_schema(conn, self.schema, worker_role, self.location)
        self._recovery = RecoveryReport(elapsed=time.perf_counter() - started)
        if not self.durable:
            logger.warning("queue %r at %s: synchronous_commit=off, NOT durable", name, self.location)

    def _params(self, **values: Any) -> dict[str, Any]:
        values["q"] = self.name
        values["off"] = self.clock_offset
        return values

    def _backoff_params(self, params: dict[str, Any]) -> dict[str, Any]:
        params.update(self._backoff_values)
        return params

    @contextmanager
    def _pipeline(self, conn: Any) -> Iterator[None]:
        """Statements sent together: one round trip, one implicit transaction (autocommit)."""
        with conn.pipeline():
            yield

    def _write(self, conn: Any, statement: str, params: dict[str, Any]) -> Any:
        """Reclaim expired leases, then run ``statement``, in one round trip and one transaction."""
        self._backoff_params(params)
        with self._pipeline(conn):
            conn.execute(self._sql["reclaim"], params)
            cur = conn.execute(self._sql[statement], params)
        return cur

    def _reclaim(self, conn: Any) -> None:
        conn.execute(self._sql["reclaim"], self._backoff_params(self._params()))

    # ================================================================ operations
    def enqueue(self, specs: list[EnqueueSpec], conn: Any = None) -> list[Job]:
        for spec in specs:
            _check_text(spec.job_id, "job_id")
            _check_text(spec.kind, "kind")
            _check_text(spec.dedupe_key, "dedupe_key")
        if conn is not None:
            if not isinstance(conn, psycopg.Connection):
                raise ValueError(
                    f"conn must be a psycopg 3 Connection (synchronous) with an open transaction, got {type(conn).__name__}"
                )
            try:
                return self._enqueue_on(conn, specs, own=False)
            except pg_errors.LockNotAvailable as exc:
                raise LockTimeoutError(f"enqueue waited too long for a row lock: {exc}") from None
            except psycopg.Error as exc:
                raise StorageError(f"enqueue on the caller's connection failed: {exc}") from None
        if len(specs) == 1 and specs[0].job_id is None and specs[0].dedupe_key is None:
            job = self._link.run("enqueue", lambda c: self._insert_one_fresh(c, specs[0]), retry=False)
            if job is not None:
                return [job]
        # Enqueue twice is harmless only when every job names its id.
        safe = all(spec.job_id is not None for spec in specs)
        return self._link.run("enqueue", lambda c: self._enqueue_on(c, specs, own=True), retry=safe)

    def _insert_one_fresh(self, conn: Any, spec: EnqueueSpec) -> Job | None:
        """The common case, kept short: one job, nothing it could conflict with (None: drawn id taken)."""
        job_id = new_job_id()
        params = {
            "q": self.name, "off": self.clock_offset, "chan": self._channel, "id": job_id, "kind": spec.kind,
            "prio": spec.priority, "max": spec.max_attempts, "delay": spec.delay, "key": None, "payload": spec.payload_json,
        }  # fmt: skip
        try:
            row = conn.execute(self._sql["insert_one_fresh"], params).fetchone()
        except pg_errors.UniqueViolation:
            return None
        return Job(
            id=job_id, payload=spec.payload, priority=spec.priority, attempts=0, max_attempts=spec.max_attempts,
            available_at=row[2], enqueued_at=row[3], seq=row[1], kind=spec.kind,
        )  # fmt: skip

    def _enqueue_on(self, conn: Any, specs: list[EnqueueSpec], *, own: bool) -> list[Job]:
        out: list[Job | None] = [None] * len(specs)
        ids = [spec.job_id or new_job_id() for spec in specs]
        pending = list(range(len(specs)))
        for _try in range(ENQUEUE_TRIES):
            created = self._insert(conn, [specs[i] for i in pending], [ids[i] for i in pending], own=own)
            unresolved = []
            for i in pending:
                got = created.get(ids[i])
                if got is not None:
                    out[i] = got
                else:
                    unresolved.append(i)
            if not unresolved:
                break
            if own:
                # The conflicting job may hold an expired lease on its last attempt: once
                # reclaimed it is dead and its dedupe key free, as the file storage sees it.
                self._reclaim(conn)
            found = self._find_existing(conn, [specs[i] for i in unresolved])
            pending = []
            for i in unresolved:
                spec = specs[i]
                job = found.get(("id", spec.job_id)) if spec.job_id is not None else None
                if job is None and spec.dedupe_key is not None:
                    job = found.get(("key", spec.kind, spec.dedupe_key))
                if job is not None:
                    out[i] = job
                else:
                    # The conflicting job changed between the insert and the look-up, or a
                    # generated id collided: try again (with a fresh id if we made it up).
                    if spec.job_id is None:
                        ids[i] = new_job_id()
                    pending.append(i)
            if not pending:
                break
        else:
            raise StorageError(f"enqueue kept conflicting with concurrent changes after {ENQUEUE_TRIES} tries")
        return out  # type: ignore[return-value]

    def _insert(self, conn: Any, specs: list[EnqueueSpec], ids: list[str], *, own: bool) -> dict[str, Job]:
        """INSERT what does not conflict; the new jobs by id (the first spec of an id wins)."""
        # Without ids or keys nothing can conflict but a random id, which is
        # astronomically rare: skip ON CONFLICT, and on our own connection
        # (an error there aborts no caller's transaction) just draw again.
        fresh = own and all(s.job_id is None and s.dedupe_key is None for s in specs)
        if fresh:
            try:
                return self._insert_as(conn, specs, ids, "_fresh")
            except pg_errors.UniqueViolation:
                return {}  # nothing was inserted; the caller draws new ids
        return self._insert_as(conn, specs, ids, "")

    def _insert_as(self, conn: Any, specs: list[EnqueueSpec], ids: list[str], variant: str) -> dict[str, Job]:
        params = self._params(chan=self._channel)
        if len(specs) == 1:
            spec = specs[0]
            params.update(
                id=ids[0], kind=spec.kind, prio=spec.priority, max=spec.max_attempts, delay=spec.delay,
                key=spec.dedupe_key, payload=spec.payload_json,
            )  # fmt: skip
            statement = "insert_one"
        else:
            params.update(
                ids=ids, kinds=[s.kind for s in specs], prios=[s.priority for s in specs],
                maxs=[s.max_attempts for s in specs], delays=[s.delay for s in specs],
                keys=[s.dedupe_key for s in specs], payloads=[s.payload_json for s in specs],
            )  # fmt: skip
            statement = "insert_many"
        cur = conn.cursor(row_factory=tuple_row)
        cur.execute(self._sql[statement + variant], params)
        first: dict[str, Any] = {}
        for spec, job_id in zip(specs, ids):
            first.setdefault(job_id, spec)
        jobs = {}
        for job_id, seq, available_at, enqueued_at, _notified in cur.fetchall():
            spec = first[job_id]
            jobs[job_id] = Job(
                id=job_id, payload=spec.payload, priority=spec.priority, attempts=0, max_attempts=spec.max_attempts,
                available_at=available_at, enqueued_at=enqueued_at, seq=seq, kind=spec.kind, dedupe_key=spec.dedupe_key,
            )  # fmt: skip
        return jobs

    def _find_existing(self, conn: Any, specs: list[EnqueueSpec]) -> dict[tuple[str, ...], Job]:
        params = self._params(
            ids=[s.job_id for s in specs if s.job_id is not None],
            kinds=[s.kind for s in specs if s.dedupe_key is not None],
            keys=[s.dedupe_key for s in specs if s.dedupe_key is not None],
        )
        cur = conn.cursor(row_factory=tuple_row)
        cur.execute(self._sql["existing"], params)
        found: dict[tuple[str, ...], Job] = {}
        for row in cur.fetchall():
            job = row_job(row)
            found[("id", job.id)] = job
            if job.dedupe_key is not None and job.state in (JobState.READY, JobState.LEASED):
                found[("key", job.kind, job.dedupe_key)] = job
        return found

    def lease(self, count: int, visibility_timeout: float, kinds: frozenset[str] | None) -> list[Job]:
        params = self._backoff_params(
            self._params(vt=visibility_timeout, kinds=sorted(kinds) if kinds is not None else None)
        )
        claim = self._sql.claim(count, kinds=kinds is not None)

        def run(conn: Any) -> list[Job]:
            with self._pipeline(conn):  # one round trip, one transaction
                conn.execute(self._sql["reclaim"], params)
                cur = conn.execute(claim, params)
            rows = cur.fetchall()
            jobs = [row_job(row) for row in rows]
            jobs.sort(key=lambda job: (-job.priority, job.seq))
            return jobs

        # A retried claim is safe: a lease we never heard of just expires and comes back.
        return self._link.run("lease", run, retry=True)

    def _refuse(self, conn: Any, job_id: str, token: str | None, action: str) -> None:
        """The UPDATE changed nothing: reclaim what expired (as the file storage would have), then say why."""
        self._reclaim(conn)
        row = conn.execute(self._sql["why"], self._params(id=job_id)).fetchone()
        if row is None:
            raise job_not_found(job_id, self.name)
        state, finished = row  # the token that finished a done job (the one refusal wants then)
        raise refusal(action, job_id, state, token, finished)

    def _already_done(self, conn: Any, job_id: str, token: str | None) -> bool:
        row = conn.execute(self._sql["why"], self._params(id=job_id)).fetchone()
        return row is not None and row[0] == "done" and (token is None or row[1] == token)

    def ack(self, job_id: str, token: str | None, result_json: str | None, result: Any) -> None:
        params = self._params(id=job_id, token=token, result=result_json)

        def run(conn: Any) -> None:
            if conn.execute(self._sql["ack"], params).fetchone() is not None:
                return
            if self._already_done(conn, job_id, token):
                return  # acking a finished job again is harmless
            self._refuse(conn, job_id, token, "ack")

        # Twice is harmless: the second ack finds the job done under the same token.
        self._link.run("ack", run, retry=True)

    def ack_many(self, items: list[tuple[str, str | None, str | None]]) -> None:
        """Ack many leased jobs in one statement: (job id, token or None, result JSON or None) each.

        Every job whose lease still holds is done when this returns; if any
        could not be acked, NotLeasedError (or JobNotFoundError) names the
        first of them after the others were acked.
        """
        if not items:
            return
        params = self._params(
            ids=[i[0] for i in items], tokens=[i[1] for i in items], results=[i[2] for i in items]
        )

        def run(conn: Any) -> None:
            cur = conn.execute(self._sql["ack_many"], params)
            # By (id, token), not by id: a stale copy of a job acked in the same call
            # shares its id, and must be refused as the file storage refuses it.
            acked = {(row[0], row[1]) for row in cur.fetchall()}
            for job_id, token, _result in items:
                if (job_id, token) not in acked and not self._already_done(conn, job_id, token):
                    self._refuse(conn, job_id, token, "ack")

        self._link.run("ack_many", run, retry=True)

    def _change(self, what: str, statement: str, job_id: str, token: str | None, retry: bool, **values: Any) -> Job:
        params = self._backoff_params(self._params(id=job_id, token=token, chan=self._channel, **values))

        def run(conn: Any) -> Job:
            row = conn.execute(self._sql[statement], params).fetchone()
            if row is None:
                self._refuse(conn, job_id, token, what)
            return row_job(row)

        return self._link.run(what, run, retry=retry)

    def nack(
        self, job_id: str, token: str | None, error: str | None, delay: float | None, permanent: bool,
        traceback: str | None = None,
    ) -> Job:  # fmt: skip
        return self._change(
            "nack", "nack", job_id, token, False, error=_clean_error(error), traceback=_clean_error(traceback),
            delay=delay, perm=permanent,
        )  # fmt: skip

    def extend(self, job_id: str, token: str | None, seconds: float) -> Job:
        return self._change("extend", "extend", job_id, token, True, secs=seconds)

    def set_stage(self, job_id: str, token: str | None, stage: str | None) -> Job:
        return self._change("set the stage of", "stage", job_id, token, True, stage=_check_text(stage, "stage"))

    def requeue_dead(self, job_id: str | None) -> int:
        params = self._params(id=job_id, chan=self._channel)

        def run(conn: Any) -> int | None:
            try:
                count = len(self._write(conn, "requeue", params).fetchall())
            except pg_errors.UniqueViolation:
                return None  # a job with the same dedupe key became active meanwhile: look again
            if count or job_id is None:
                return count
            row = conn.execute(self._sql["requeue_why"], params).fetchone()
            if row is None:
                raise job_not_found(job_id, self.name)
            state, holder, key = row
            if state == "dead" and holder is not None:
                raise ValueError(
                    f"job {job_id} cannot be requeued: job {holder} is active with the same dedupe key {key!r}"
                )
            return 0

        for _try in range(ENQUEUE_TRIES):
            count = self._link.run("requeue_dead", run, retry=False)
            if count is not None:
                return count
        raise StorageError(f"requeue_dead kept conflicting with concurrent enqueues after {ENQUEUE_TRIES} tries")

    def purge(self) -> int:
        params = self._params()
        return self._link.run("purge", lambda conn: conn.execute(self._sql["purge"], params).rowcount, retry=False)

    def compact(self) -> CompactionResult:
        started = time.perf_counter()
        params = self._params(keep=self.retention)

        def run(conn: Any) -> tuple[int, int]:
            dropped = self._write(conn, "compact", params).rowcount
            kept = conn.execute(self._sql["count"], params).fetchone()[0]
            return dropped, kept

        dropped, kept = self._link.run("compact", run, retry=True)
        return CompactionResult(jobs_kept=kept, jobs_dropped=dropped, elapsed=time.perf_counter() - started)

    # ================================================================ reads
    def _read(self, what: str, statement: str, params: dict[str, Any], shape: Callable[[Any], T]) -> T:
        return self._link.run(what, lambda conn: shape(conn.execute(self._sql[statement], params)), retry=True)

    def get(self, job_id: str) -> Job:
        _check_text(job_id, "job_id")

        def shape(cur: Any) -> Job:
            row = cur.fetchone()
            if row is None:
                raise job_not_found(job_id, self.name)
            return row_job(row)

        return self._read("get", "get", self._backoff_params(self._params(id=job_id)), shape)

    def stats(self) -> QueueStats:
        def shape(cur: Any) -> QueueStats:
            ready, delayed, leased, done, dead = cur.fetchone()
            return QueueStats(ready=ready, delayed=delayed, leased=leased, done=done, dead=dead)

        return self._read("stats", "stats", self._backoff_params(self._params()), shape)

    def count(self) -> int:
        return self._read("count", "count", self._params(), lambda cur: cur.fetchone()[0])

    def list_jobs(self, listing: str | None, limit: int | None, offset: int, kind: str | None) -> list[Job]:
        reach = None if limit is None else limit + offset  # where the page ends
        params = self._backoff_params(
            self._params(kind=_check_text(kind, "kind"), limit=limit, offset=offset, reach=reach)
        )
        statement = "list" if listing is None else f"list_{listing}"
        return self._read("list_jobs", statement, params, lambda cur: [row_job(row) for row in cur.fetchall()])

    # ================================================================ waiting and closing
    def wakes_waiters(self) -> bool:
        """False: NOTIFY announces new and retried jobs, not delayed jobs or leases coming due."""
        return False

    def wait_for_jobs(
        self, timeout: float, interrupt: int | None = None, kinds: frozenset[str] | None = None
    ) -> bool:
        """Sleep until a NOTIFY says work arrived on this queue, or ``timeout`` passes.

        A hint, not a promise. Enqueue, nack and requeue notify in their own
        transaction, so the wake-up comes when the job is visible. If the
        listening connection cannot be had, this sleeps (polling fallback).
        ``interrupt``: a descriptor that ends the wait (returning False) as
        soon as it is readable; it is never read. ``kinds`` changes nothing:
        every listener hears every NOTIFY, so none can take another's.
        """
        return self._listener.wait(timeout, interrupt)

    def close(self) -> None:
        self._link.close()
        self._listener.close()

    @property
    def location(self) -> str:
        """The DSN without its password."""
        return redact_dsn(self.dsn)

    @property
    def recovery(self) -> RecoveryReport:
        return self._recovery


__all__ = ["PostgresStorage"]
