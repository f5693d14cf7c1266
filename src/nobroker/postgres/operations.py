"""Each queue operation on one connection: the statements it sends, in order, and what their rows mean.

Owns: ``Target`` (one queue as the statements address it), an operation of
the Storage protocol per function (lease, ack, ack_many, nack, extend,
extend_many, set_stage, cancel; enqueue is enqueueing.py's), each written as the steps it sends
(steps.py: a generator, so the Queue drives it on a Connection and the
AsyncQueue awaits it on an AsyncConnection), the refusals that say why a job
was not changed, and what PostgreSQL text can hold. Nothing here connects,
takes the storage's lock or retries a lost connection: storage.py runs these
through connection.Link, asyncstorage.py through asynclink.AsyncLink.
Imports: errors, jobs, storage, statements, rows, steps.

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
from dataclasses import dataclass
from typing import Any, NoReturn

from ..errors import StorageError
from ..jobs import Job, JobState
from ..jobs import FINISHED_STATES
from ..storage import cancel_refusal, finished_refusal, job_not_found, refusal, worker_label
from .rows import JOB_COLUMNS, row_job
from .statements import Statements
from .steps import Steps, every, one, piped, run

logger = logging.getLogger("nobroker.postgres")

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


def json_text(value: str | None) -> str:
    """A string (or None) as JSON text, its characters as they are (the driver sends UTF-8)."""
    return "null" if value is None else _quote(value)


#: A str as a JSON string, non-ASCII characters kept (json.dumps with ensure_ascii=False, without its set-up).
_quote = json.encoder.encode_basestring


# ---------------------------------------------------------------- leases
def upkeep(t: Target) -> Steps[None]:
    """Reclaim expired leases and move scheduled jobs that came due into the claim's index (a batch of each)."""
    yield run(t.sql["upkeep"], t.with_backoff())


def upkeep_then(t: Target, statement: str, params: dict[str, Any]) -> Steps[list[Any]]:
    """The upkeep, then ``statement``, in one round trip and one transaction (autocommit): its rows."""
    rows: list[Any] = yield piped(t.sql["upkeep"], statement, params)
    return rows


#: Where a checked claim's rows say whether the upkeep has work, and whether the queue has
#: limits or pauses (fragments.DUE).
UPKEEP_DUE, LIMITED, PAUSED = JOB_COLUMNS, JOB_COLUMNS + 1, JOB_COLUMNS + 2


@dataclass(frozen=True)
class ByKinds:
    """What ``lease`` found on a queue with limits or pauses: it took nothing, whether the upkeep has
    work, and whether the queue has limits (else only pauses)."""

    upkeep_due: bool
    limited: bool


def lease(t: Target, count: int, visibility_timeout: float, kinds: frozenset[str] | None) -> Steps[list[Job] | ByKinds]:
    """One statement, one round trip, unless a scheduled job came due or a lease expired: then two.

    ByKinds: the queue has limits or pauses, and this took nothing;
    limit_ops.lease leases it kind by kind, under its limits and past its
    pauses, with the upkeep first only where this claim found it due.

    The checked claim takes nothing while the upkeep has work and says so;
    then the upkeep and the plain claim go together (one round trip, one
    transaction), since a reclaimed job may be runnable at once (its backoff
    counts from its deadline, which may be long past) and a claim sees the
    rows the upkeep changed only as a statement after it.
    """
    some = kinds is not None
    params = t.with_backoff(vt=visibility_timeout, kinds=None if kinds is None else sorted(kinds), by=worker_label())
    rows = yield every(t.sql.claim(count, kinds=some, checked=True), params)
    if rows and (rows[0][LIMITED] or rows[0][PAUSED]):
        assert len(rows) == 1 and rows[0][0] is None, "a claim that found limits or pauses took nothing"
        return ByKinds(bool(rows[0][UPKEEP_DUE]), bool(rows[0][LIMITED]))
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


# A batch of one job takes the one-job statement (ack, extend): its row found by both columns
# of the primary key as parameters, no arrays to unnest, no join. Measured, the server's CPU
# an ack: 257 µs against 325 µs for the batch's statement with one job. A Worker running
# one job at a time acks (and renews) one at a time, mostly.


def ack_many(t: Target, items: list[tuple[str, str | None, str | None]]) -> Steps[None]:
    """Ack many leased jobs in one statement: (job id, token or None, result JSON or None) each.

    Every job whose lease still holds is done when this returns; if any
    could not be acked, NotLeasedError (or JobNotFoundError) names the
    first of them after the others were acked.

    One job takes ``ack`` (see the note above).
    """
    if not items:
        return
    if len(items) == 1:
        return (yield from ack(t, *items[0]))
    ids, tokens, results = map(list, zip(*items))
    rows = yield every(t.sql["ack_many"], t.params(ids=ids, tokens=tokens, results=results, n=len(items)))
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
        t, "nack", t.sql.notifying("nack", notify), job_id, token, error=error, traceback=traceback,
        delay=delay, perm=permanent, notify=notify,
    )  # fmt: skip
    return row_job(row), row[NACK_NOTIFIED] == 0


def extend(t: Target, job_id: str, token: str | None, seconds: float) -> Steps[Job]:
    return (yield from _change(t, "extend", t.sql["extend"], job_id, token, secs=seconds))


def extend_many(t: Target, items: list[tuple[str, str | None]], seconds: float) -> Steps[list[Job]]:
    """Renew many leases in one statement; the jobs in the order given, or the first refusal.

    As ack_many: every lease that still holds is renewed when this returns,
    and a refusal (found out only then, a statement per refused job) names
    the first job that was not.

    One job takes ``extend`` (see the note above ack_many).
    """
    if not items:
        return []
    if len(items) == 1:
        job_id, token = items[0]
        return [(yield from extend(t, job_id, token, seconds))]
    ids, tokens = map(list, zip(*items))
    rows = yield every(t.sql["extend_many"], t.params(ids=ids, tokens=tokens, n=len(items), secs=seconds))
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
    return (yield from _change(t, SET_STAGE, t.sql["stage"], job_id, token, stage=stage))


def _change(t: Target, action: str, statement: str, job_id: str, token: str | None, **values: Any) -> Steps[Job]:
    """Run one of the statements that change a leased job (extend, stage); refuse if it changed nothing."""
    return row_job((yield from _changed(t, action, statement, job_id, token, **values)))


def _changed(t: Target, action: str, statement: str, job_id: str, token: str | None, **values: Any) -> Steps[Any]:
    """Run ``statement`` (its text) on one leased job; refuse (raise) if it changed nothing, else its row."""
    params = t.with_backoff(id=job_id, token=token, chan=t.channel, **values)
    row = yield one(statement, params)
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
