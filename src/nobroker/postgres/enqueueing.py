"""Adding jobs on one connection: one fresh job, a batch, in the caller's transaction, and the retries a conflict needs.

Owns: the enqueue operations (``enqueue``, ``insert_one_fresh``,
``enqueue_retrying``, ``enqueue_in_transaction`` and ``in_transaction``),
``batch_rows`` (a batch as the one JSON parameter the batch statements
read) and the tries and pauses of a conflicting enqueue. Written as steps,
as operations.py's are. Imports: errors, jobs, storage, driver,
connection, rows, steps, operations.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Any

from ..errors import LockTimeoutError, StorageError
from ..jobs import Job, JobState
from ..storage import EnqueueSpec, new_job_id
from .connection import Session
from .driver import pg_errors, psycopg
from .rows import row_job
from .steps import Steps, drive, every, one, pause
from .operations import Target, json_text, upkeep

logger = logging.getLogger("nobroker.postgres")

#: Tries for an enqueue (or requeue) whose conflicting job changed before it could be read.
ENQUEUE_TRIES = 5
#: Tries for an enqueue on our own connection that met a deadlock or a serialization failure.
CONFLICT_TRIES = 5
#: Longest pause before the next of those tries, times the attempt number (seconds, drawn at random).
CONFLICT_PAUSE = 0.02


def batch_rows(specs: list[EnqueueSpec], ids: list[str]) -> str:
    """A batch of jobs as the one parameter the batch statements read (fragments.batch_of): a JSON array."""
    assert len(specs) == len(ids), "an id per job"
    rows = ",".join(
        f'{{"id":{json_text(job_id)},"kind":{json_text(s.kind)},"prio":{s.priority},"max":{s.max_attempts},'
        f'"delay":{s.delay!r},"key":{json_text(s.dedupe_key)},"payload":{s.payload_json}'
        + ("" if s.timeout is None else f',"timeout":{s.timeout!r}')
        + ("}" if s.group is None else f',"grp":{json_text(s.group)}}}')
        for s, job_id in zip(specs, ids)
    )
    return f"[{rows}]"


def enqueue_in_transaction(conn: Any, t: Target, specs: Sequence[EnqueueSpec]) -> list[Job]:
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


def in_transaction(t: Target, specs: Sequence[EnqueueSpec]) -> Steps[list[Job]]:
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
        row = yield one(t.sql.notifying("insert_one_fresh", notify), params)
    except pg_errors.UniqueViolation:
        return None
    return Job(
        id=job_id, payload=spec.payload, priority=spec.priority, attempts=0, max_attempts=spec.max_attempts,
        available_at=row[2], enqueued_at=row[3], seq=row[1], kind=spec.kind, timeout=spec.timeout, group=spec.group,
    )  # fmt: skip


def enqueue(t: Target, specs: Sequence[EnqueueSpec], *, own: bool, notify: bool) -> Steps[list[Job]]:
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


def enqueue_retrying(t: Target, specs: Sequence[EnqueueSpec], *, notify: bool) -> Steps[list[Job]]:
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
    rows = yield every(t.sql.notifying(statement + variant, notify), params)
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
