"""Each queue operation on one connection: the statements it sends, in order, and what their rows mean.

Owns: ``Target`` (one queue as the statements address it), an operation of
the Storage protocol per function (enqueue, lease, ack, ack_many, nack,
extend, extend_many, set_stage, cancel), each written as the steps it sends
(steps.py: a generator, so the Queue drives it on a Connection and the
AsyncQueue awaits it on an AsyncConnection), the refusals that say why a job
was not changed, and what PostgreSQL text can hold. Nothing here connects,
takes the storage's lock or retries a lost connection: storage.py runs these
through connection.Link, asyncstorage.py through asynclink.AsyncLink.
Imports: errors, jobs, storage, driver, statements, rows, steps, connection.

Semantics are the file storage's, statement by statement:

- every time is the database clock (``now()``), so hosts with skewed clocks
  agree on deadlines; a test-only ``clock_offset`` (seconds) is added to it
  in every statement;
- expired leases are reclaimed (like a nack at the deadline: backoff from
  there, or dead at max_attempts) by the operations that can see them, with
  no reaper process: every lease reclaims just before its claim (one round
  trip, one transaction), requeue_dead and compact reclaim first, and an ack,
  nack, extend or set_stage that finds its lease gone reclaims before it says
  why (so the refused caller sees the job exactly as the file storage would
  show it). An enqueue that meets a conflicting job reclaims before it looks
  that job up. Reads never write, as on the file storage, yet show an expired
  lease as that reclaim will leave it (fragments.SHOWN);
- a claim is one ``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)``;
  ack, nack, extend and set_stage check the fencing token in the WHERE of the
  one UPDATE that changes the row; zero rows means "find out why";
- ``dedupe_key`` is a partial unique index over ready/leased rows, and
  ``job_id`` is the primary key (queue, id): enqueue is
  ``INSERT ... ON CONFLICT DO NOTHING``, then the existing job is looked up;
- ``compact()`` deletes done (and cancelled) jobs finished at least ``retention`` seconds ago;
- ``cancel`` of a ready job ends it cancelled; of a leased one marks it
  (``cancel_requested``: its ack and nack refused, its lease ends cancelled).

PostgreSQL text cannot hold the NUL character: the Queue refuses a job id,
kind, dedupe key, stage or schedule name holding one on both storages, and
error texts get U+FFFD instead (checks.py). Payloads and results are
unaffected: they are stored as JSON text, where NUL is the escape ``\\u0000``.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from typing import Any, NoReturn

from ..errors import LockTimeoutError, StorageError
from ..jobs import Job, JobState
from ..jobs import FINISHED_STATES
from ..storage import EnqueueSpec, cancel_refusal, finished_refusal, job_not_found, new_job_id, refusal, worker_label
from .connection import Session
from .driver import pg_errors, psycopg
from .rows import JOB_COLUMNS, row_job
from .statements import Statements
from .steps import Steps, drive, every, one, pause, piped, run

logger = logging.getLogger("nobroker.postgres")

#: Tries for an enqueue (or requeue) whose conflicting job changed before it could be read.
ENQUEUE_TRIES = 5
#: Tries for an enqueue on our own connection that met a deadlock or a serialization failure.
CONFLICT_TRIES = 5
#: Longest pause before the next of those tries, times the attempt number (seconds, drawn at random).
CONFLICT_PAUSE = 0.02
#: set_stage, as messages name it ("cannot set the stage of job ...").
SET_STAGE = "set the stage of"


@dataclass
class Target:
    """One queue as the statements address it: its statements, name, NOTIFY channel, backoff and clock."""

    sql: Statements
    queue: str
    channel: str
    #: The queue's BackoffPolicy as statement parameters (statements.backoff_parameters).
    backoff: dict[str, float]
    #: Seconds added to the database clock in every statement (tests move time with it).
    clock_offset: float = 0.0

    def params(self, **values: Any) -> dict[str, Any]:
        """The parameters of a statement: ``values``, the queue and the clock offset."""
        values["q"] = self.queue
        values["off"] = self.clock_offset
        return values

    def with_backoff(self, **values: Any) -> dict[str, Any]:
        """The parameters of a statement that computes a retry delay (or shows one)."""
        params = self.params(**values)
        params.update(self.backoff)
        return params


def _json_text(value: str | None) -> str:
    """A string (or None) as JSON text, its characters as they are (the driver sends UTF-8)."""
    return "null" if value is None else _quote(value)


#: A str as a JSON string, non-ASCII characters kept (json.dumps with ensure_ascii=False, without its set-up).
_quote = json.encoder.encode_basestring


def batch_rows(specs: list[EnqueueSpec], ids: list[str]) -> str:
    """A batch of jobs as the one parameter the batch statements read (fragments.batch_of): a JSON array."""
    assert len(specs) == len(ids), "an id per job"
    rows = ",".join(
        f'{{"id":{_json_text(job_id)},"kind":{_json_text(s.kind)},"prio":{s.priority},"max":{s.max_attempts},'
        f'"delay":{s.delay!r},"key":{_json_text(s.dedupe_key)},"payload":{s.payload_json}'
        + ("" if s.timeout is None else f',"timeout":{s.timeout!r}')
        + ("}" if s.group is None else f',"grp":{_json_text(s.group)}}}')
        for s, job_id in zip(specs, ids)
    )
    return f"[{rows}]"


# ---------------------------------------------------------------- enqueue
def enqueue_in_transaction(conn: Any, t: Target, specs: list[EnqueueSpec]) -> list[Job]:
    """Enqueue on the caller's connection, inside the caller's open transaction, never committing."""
    if not isinstance(conn, psycopg.Connection):
        raise ValueError(
            "conn must be a psycopg 3 Connection (synchronous) with an open transaction "
            f"(an AsyncConnection goes to AsyncQueue), got {type(conn).__name__}"
        )
    try:
        return drive(Session(conn), in_transaction(t, specs))
    except psycopg.Error as exc:
        raise transaction_error(exc) from None


def in_transaction(t: Target, specs: list[EnqueueSpec]) -> Steps[list[Job]]:
    """The steps of an enqueue in the caller's transaction (never committed here)."""
    return enqueue(t, specs, own=False, notify=any(spec.delay <= 0 for spec in specs))


def transaction_error(exc: Exception) -> Exception:
    """What a driver error in the caller's transaction becomes (the caller's to handle: roll back)."""
    if isinstance(exc, pg_errors.LockNotAvailable):
        return LockTimeoutError(f"enqueue waited too long for a row lock: {exc}")
    return StorageError(f"enqueue on the caller's connection failed: {exc}")


def insert_one_fresh(t: Target, spec: EnqueueSpec, notify: bool) -> Steps[Job | None]:
    """The common case, kept short: one job, nothing it could conflict with (None: drawn id taken)."""
    job_id = new_job_id()
    params = {
        "q": t.queue, "off": t.clock_offset, "chan": t.channel, "notify": notify, "id": job_id, "kind": spec.kind,
        "prio": spec.priority, "max": spec.max_attempts, "delay": spec.delay, "key": None, "payload": spec.payload_json,
        "timeout": spec.timeout, "group": spec.group,
    }  # fmt: skip
    try:
        row = yield one(t.sql["insert_one_fresh"], params)
    except pg_errors.UniqueViolation:
        return None
    return Job(
        id=job_id, payload=spec.payload, priority=spec.priority, attempts=0, max_attempts=spec.max_attempts,
        available_at=row[2], enqueued_at=row[3], seq=row[1], kind=spec.kind, timeout=spec.timeout, group=spec.group,
    )  # fmt: skip


def enqueue(t: Target, specs: list[EnqueueSpec], *, own: bool, notify: bool) -> Steps[list[Job]]:
    """Insert what does not conflict, look up what does, until every spec has its job (``own``: our connection).

    ``notify``: the inserts NOTIFY the queue's channel (the caller decided
    whether any job is runnable at once and whether it is time to).
    """
    out: list[Job | None] = [None] * len(specs)
    ids = [spec.job_id or new_job_id() for spec in specs]
    pending = list(range(len(specs)))
    for _try in range(ENQUEUE_TRIES):
        created = yield from _insert(t, [specs[i] for i in pending], [ids[i] for i in pending], own=own, notify=notify)
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
            yield from upkeep(t)
        found = yield from _find_existing(t, [specs[i] for i in unresolved])
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
    assert all(job is not None for job in out), "every spec has its job, new or existing"
    return out  # type: ignore[return-value]


def enqueue_retrying(t: Target, specs: list[EnqueueSpec], *, notify: bool) -> Steps[list[Job]]:
    """``enqueue`` on our own connection, tried again after a deadlock or a serialization failure.

    Safe: each statement is its own transaction (autocommit), so the one that
    failed left nothing, and what an earlier statement inserted is found again
    by its id or dedupe key. Batches insert in key order, so they should not
    deadlock with each other; an application's own transactions still can.
    """
    for attempt in range(1, CONFLICT_TRIES + 1):
        try:
            return (yield from enqueue(t, specs, own=True, notify=notify))
        except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure) as exc:
            if attempt == CONFLICT_TRIES:
                raise
            logger.info("enqueue: %s; trying again (%d of %d)", type(exc).__name__, attempt + 1, CONFLICT_TRIES)
            yield pause(random.uniform(0.0, CONFLICT_PAUSE * attempt))
    raise AssertionError("unreachable: the last attempt returns or raises")


def _insert(
    t: Target, specs: list[EnqueueSpec], ids: list[str], *, own: bool, notify: bool
) -> Steps[dict[str, Job]]:
    """INSERT what does not conflict; the new jobs by id (the first spec of an id wins)."""
    # Without ids or keys nothing can conflict but a random id, which is
    # astronomically rare: skip ON CONFLICT, and on our own connection
    # (an error there aborts no caller's transaction) just draw again.
    fresh = own and all(s.job_id is None and s.dedupe_key is None for s in specs)
    if fresh:
        try:
            return (yield from _insert_as(t, specs, ids, "_fresh", notify))
        except pg_errors.UniqueViolation:
            return {}  # nothing was inserted; the caller draws new ids
    # One row per id: a later spec of an id already in the batch gets the
    # first one's job (it is the job the queue holds with that id).
    first: dict[str, EnqueueSpec] = {}
    for spec, job_id in zip(specs, ids):
        first.setdefault(job_id, spec)
    return (yield from _insert_as(t, list(first.values()), list(first), "", notify))


def _insert_as(
    t: Target, specs: list[EnqueueSpec], ids: list[str], variant: str, notify: bool
) -> Steps[dict[str, Job]]:
    params = t.params(chan=t.channel, notify=notify)
    if len(specs) == 1:
        spec = specs[0]
        params.update(
            id=ids[0], kind=spec.kind, prio=spec.priority, max=spec.max_attempts, delay=spec.delay,
            key=spec.dedupe_key, payload=spec.payload_json, timeout=spec.timeout, group=spec.group,
        )  # fmt: skip
        statement = "insert_one"
    else:
        params["rows"] = batch_rows(specs, ids)
        statement = "insert_many"
        if not variant:
            statement, variant = "insert_sorted", ""
            params["seqname"] = t.sql.sequence
    rows = yield every(t.sql[statement + variant], params)
    first: dict[str, Any] = {}
    for spec, job_id in zip(specs, ids):
        first.setdefault(job_id, spec)
    jobs = {}
    for job_id, seq, available_at, enqueued_at, _notified in rows:
        spec = first[job_id]
        jobs[job_id] = Job(
            id=job_id, payload=spec.payload, priority=spec.priority, attempts=0, max_attempts=spec.max_attempts,
            available_at=available_at, enqueued_at=enqueued_at, seq=seq, kind=spec.kind, dedupe_key=spec.dedupe_key,
            timeout=spec.timeout, group=spec.group,
        )  # fmt: skip
    return jobs


def _find_existing(t: Target, specs: list[EnqueueSpec]) -> Steps[dict[tuple[str, ...], Job]]:
    params = t.params(
        ids=[s.job_id for s in specs if s.job_id is not None],
        kinds=[s.kind for s in specs if s.dedupe_key is not None],
        keys=[s.dedupe_key for s in specs if s.dedupe_key is not None],
    )
    found: dict[tuple[str, ...], Job] = {}
    for row in (yield every(t.sql["existing"], params)):
        job = row_job(row)
        found[("id", job.id)] = job
        if job.dedupe_key is not None and job.state in (JobState.READY, JobState.LEASED):
            found[("key", job.kind, job.dedupe_key)] = job
    return found


# ---------------------------------------------------------------- leases
def upkeep(t: Target) -> Steps[None]:
    """Reclaim expired leases and move scheduled jobs that came due into the claim's index (a batch of each)."""
    yield run(t.sql["upkeep"], t.with_backoff())


def upkeep_then(t: Target, statement: str, params: dict[str, Any]) -> Steps[list[Any]]:
    """The upkeep, then ``statement``, in one round trip and one transaction (autocommit): its rows."""
    rows: list[Any] = yield piped(t.sql["upkeep"], statement, params)
    return rows


#: Where a checked claim's rows say whether the upkeep has work, and whether the queue has limits (fragments.DUE).
UPKEEP_DUE = JOB_COLUMNS
LIMITED = JOB_COLUMNS + 1


def lease(t: Target, count: int, visibility_timeout: float, kinds: frozenset[str] | None) -> Steps[list[Job] | None]:
    """One statement, one round trip, unless a scheduled job came due or a lease expired: then two.

    None: the queue has limits, and took nothing; limit_ops.lease leases under them.

    The checked claim takes nothing while the upkeep has work and says so;
    then the upkeep and the plain claim go together (one round trip, one
    transaction), since a reclaimed job may be runnable at once (its backoff
    counts from its deadline, which may be long past) and a claim sees the
    rows the upkeep changed only as a statement after it.
    """
    some = kinds is not None
    params = t.with_backoff(vt=visibility_timeout, kinds=None if kinds is None else sorted(kinds), by=worker_label())
    rows = yield every(t.sql.claim(count, kinds=some, checked=True), params)
    if rows and rows[0][LIMITED]:
        assert len(rows) == 1 and rows[0][0] is None, "a claim that found limits took nothing"
        return None
    if rows and rows[0][UPKEEP_DUE]:
        assert len(rows) == 1 and rows[0][0] is None, "a claim that found upkeep due took nothing"
        rows = yield from upkeep_then(t, t.sql.claim(count, kinds=some), params)
    jobs = [row_job(row) for row in rows if row[0] is not None]
    jobs.sort(key=lambda job: (-job.priority, job.seq))
    return jobs


def _refuse(t: Target, job_id: str, token: str | None, action: str) -> Steps[NoReturn]:
    """The UPDATE changed nothing: reclaim what expired (as the file storage would have), then say why."""
    yield from upkeep(t)
    row = yield one(t.sql["why"], t.params(id=job_id))
    if row is None:
        raise job_not_found(job_id, t.queue)
    state, finished, cancel_requested, held = row  # finished: the token that finished a done job
    if state == "leased" and cancel_requested and (token is None or token == held):
        raise cancel_refusal(action, job_id)
    raise refusal(action, job_id, state, token, finished)


#: The refusal, for the operations of other modules (control_ops.snooze).
refuse = _refuse


def _already_done(t: Target, job_id: str, token: str | None) -> Steps[bool]:
    row = yield one(t.sql["why"], t.params(id=job_id))
    return row is not None and row[0] == "done" and (token is None or row[1] == token)


def ack(t: Target, job_id: str, token: str | None, result_json: str | None) -> Steps[None]:
    if (yield one(t.sql["ack"], t.params(id=job_id, token=token, result=result_json))) is not None:
        return
    if (yield from _already_done(t, job_id, token)):
        return  # acking a finished job again is harmless
    yield from _refuse(t, job_id, token, "ack")


def ack_rows(items: list[tuple[str, str | None, str | None]]) -> str:
    """(job id, token, result JSON) each, as the one JSON parameter ``ack_many`` reads."""
    rows = ",".join(
        f'{{"id":{_json_text(job_id)},"token":{_json_text(token)},"result":{"null" if result is None else result}}}'
        for job_id, token, result in items
    )
    return f"[{rows}]"


def extend_rows(items: list[tuple[str, str | None]]) -> str:
    """(job id, token) each, as the one JSON parameter ``extend_many`` reads."""
    return "[" + ",".join(f'{{"id":{_json_text(job_id)},"token":{_json_text(token)}}}' for job_id, token in items) + "]"


def ack_many(t: Target, items: list[tuple[str, str | None, str | None]]) -> Steps[None]:
    """Ack many leased jobs in one statement: (job id, token or None, result JSON or None) each.

    Every job whose lease still holds is done when this returns; if any
    could not be acked, NotLeasedError (or JobNotFoundError) names the
    first of them after the others were acked.
    """
    rows = yield every(t.sql["ack_many"], t.params(rows=ack_rows(items)))
    # By (id, token), not by id: a stale copy of a job acked in the same call
    # shares its id, and must be refused as the file storage refuses it.
    acked = {(row[0], row[1]) for row in rows}
    for job_id, token, _result in items:
        if (job_id, token) not in acked and not (yield from _already_done(t, job_id, token)):
            yield from _refuse(t, job_id, token, "ack")


#: Where a nack's row says whether it notified: 0 runnable at once, not notified; 1 notified; NULL not runnable.
NACK_NOTIFIED = JOB_COLUMNS + 2


def nack(
    t: Target, job_id: str, token: str | None, *, error: str | None, traceback: str | None,
    delay: float | None, permanent: bool, notify: bool,
) -> Steps[tuple[Job, bool]]:  # fmt: skip
    """The job as the nack left it, and whether it is runnable at once without having notified (owed a NOTIFY)."""
    row = yield from _changed(
        t, "nack", "nack", job_id, token, error=error, traceback=traceback,
        delay=delay, perm=permanent, notify=notify,
    )  # fmt: skip
    return row_job(row), row[NACK_NOTIFIED] == 0


def extend(t: Target, job_id: str, token: str | None, seconds: float) -> Steps[Job]:
    return (yield from _change(t, "extend", "extend", job_id, token, secs=seconds))


def extend_many(t: Target, items: list[tuple[str, str | None]], seconds: float) -> Steps[list[Job]]:
    """Renew many leases in one statement; the jobs in the order given, or the first refusal.

    As ack_many: every lease that still holds is renewed when this returns,
    and a refusal (found out only then, a statement per refused job) names
    the first job that was not.
    """
    rows = yield every(t.sql["extend_many"], t.params(rows=extend_rows(items), secs=seconds))
    renewed = {job.id: job for job in map(row_job, rows)}
    out = []
    for job_id, token in items:
        job = renewed.get(job_id)
        # A row comes back once per job: a stale copy beside the lease it copies is told by its token.
        if job is None or (token is not None and job.lease_token != token):
            yield from _refuse(t, job_id, token, "extend")
        assert job is not None, "_refuse raised"
        out.append(job)
    return out


def set_stage(t: Target, job_id: str, token: str | None, stage: str | None) -> Steps[Job]:
    return (yield from _change(t, SET_STAGE, "stage", job_id, token, stage=stage))


def _change(t: Target, action: str, statement: str, job_id: str, token: str | None, **values: Any) -> Steps[Job]:
    """Run one of the statements that change a leased job (extend, stage); refuse if it changed nothing."""
    return row_job((yield from _changed(t, action, statement, job_id, token, **values)))


def _changed(t: Target, action: str, statement: str, job_id: str, token: str | None, **values: Any) -> Steps[Any]:
    params = t.with_backoff(id=job_id, token=token, chan=t.channel, **values)
    row = yield one(t.sql[statement], params)
    if row is None:
        yield from _refuse(t, job_id, token, action)
    return row


# ---------------------------------------------------------------- control of jobs (issue 15)
#: Tries for a cancel whose job's lease expired under it (the reclaim runs, then the cancel again).
CANCEL_TRIES = 3


def cancel(t: Target, job_id: str, token: str | None, stopped: bool) -> Steps[Job]:
    """Ready → cancelled; leased → marked, or with ``stopped`` cancelled (see statements, "cancel")."""
    params = t.params(id=job_id, token=token, stopped=stopped)
    for _try in range(CANCEL_TRIES):
        row = yield one(t.sql["cancel"], params)
        if row is not None:
            return row_job(row)
        yield from upkeep(t)  # an expired lease: reclaimed (or ended cancelled) first, as the file storage does
        why = yield one(t.sql["why"], t.params(id=job_id))
        if why is None:
            raise job_not_found(job_id, t.queue)
        state = why[0]
        if JobState(state) in FINISHED_STATES:
            raise finished_refusal("cancel", job_id, state)
        if state == "leased" and stopped:  # a live lease that the token does not hold
            raise refusal("end the cancelled attempt of", job_id, state, token, why[3])
    raise StorageError(f"cancel of job {job_id} kept meeting changes of its lease after {CANCEL_TRIES} tries")
