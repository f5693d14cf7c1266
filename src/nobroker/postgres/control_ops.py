"""Control of jobs on PostgreSQL: snooze, pause and resume, run_now, delete, and what Queue.wait listens to.

Owns: ControlStatements (the SQL text for one schema), one operation each,
written as the statements it sends (steps.py: ``snooze``, ``pause``,
``paused``, ``run_now``, ``delete``, ``mark_waited``), and
``finished_channel``, the channel sql/008's triggers notify when a job
someone waits for finishes. Imports: errors, jobs, storage, steps,
fragments, naming, rows, operations, queue_ops.

Each statement changes one row and adds its differences to the counts in
the same statement (fragments.TALLY), as the other operations do. Pauses are
rows of ``pauses`` (kind '' is the whole queue); the claim reads them
(fragments.DUE: a queue with a pause is leased kind by kind, past the
paused kinds, by limit_ops.lease; fragments.UNPAUSED elsewhere), so a
pause is seen by every claim that starts after its commit, on every host. A statement that finds its job's lease expired
reclaims it first (operations.upkeep), then tries again, as cancel does: the
job is then what the file storage would show.
"""

from __future__ import annotations

import hashlib
from ..errors import JobStateError
from ..jobs import FINISHED_STATES, Job, JobState
from ..storage import finished_refusal, job_not_found
from . import operations as ops
from . import queue_ops as whole
from .steps import Steps, every, one, run
from .fragments import COLUMNS, DELETE_TALLY, NOTIFY, NOW, TALLY, ended
from .rows import row_job
from .naming import quote_schema

#: A snooze's (``s``): leased to ready, or to scheduled when it comes back later.
_SNOOZE_TALLY = TALLY.format(source="s", active="0", scheduled="count(*) FILTER (WHERE s.sched)", done="0",
                             dead="0", cancelled="0", having="bool_or(s.sched)")  # fmt: skip
#: A run_now's (``r``): a scheduled job into the claim's index.
_RUN_NOW_TALLY = TALLY.format(source="r", active="0", scheduled="-count(*) FILTER (WHERE r.was)", done="0",
                              dead="0", cancelled="0", having="bool_or(r.was)")  # fmt: skip
_TEMPLATES = {
    # The holder's lease (token NULL: an operator), its cancel not asked for: ready at
    # now + secs with the attempt given back; its last error stays; the attempt ends
    # in the history as "snoozed" (by the number it ran as: SET reads the old row).
    "snooze": f"""
        WITH s AS (
        UPDATE {{schema}}.jobs AS j SET
            state = 'ready', attempts = j.attempts - 1,
            available_at = {NOW} + %(secs)s::float8 * interval '1 second', scheduled = %(secs)s::float8 > 0,
            lease_deadline = NULL, lease_token = NULL, {ended(NOW, "'snoozed'")}
        WHERE j.queue = %(q)s AND j.id = %(id)s AND j.lease_deadline > {NOW} AND NOT j.cancel_requested
          AND (%(token)s::text IS NULL OR j.lease_token = %(token)s::text)
        RETURNING {COLUMNS}, j.scheduled AS sched
        ), {_SNOOZE_TALLY}
        SELECT s.*, CASE WHEN NOT s.sched THEN {NOTIFY} END FROM s""",
    "pause": "INSERT INTO {schema}.pauses (queue, kind) VALUES (%(q)s, %(kind)s) ON CONFLICT DO NOTHING",
    "resume": f"""
        WITH r AS (DELETE FROM {{schema}}.pauses WHERE queue = %(q)s AND kind = %(kind)s RETURNING 1)
        SELECT {NOTIFY} FROM r""",
    "paused": "SELECT kind FROM {schema}.pauses WHERE queue = %(q)s ORDER BY kind",
    # Only a ready job whose time has not come: it becomes runnable now (into the claim's index).
    "run_now": f"""
        WITH r AS (
        UPDATE {{schema}}.jobs AS j SET available_at = {NOW}, scheduled = false
        FROM (SELECT queue, id, scheduled AS was FROM {{schema}}.jobs
              WHERE queue = %(q)s AND id = %(id)s AND state = 'ready' AND available_at > {NOW} FOR UPDATE) AS o
        WHERE j.queue = o.queue AND j.id = o.id AND j.state = 'ready'
        RETURNING {COLUMNS}, o.was
        ), {_RUN_NOW_TALLY}
        SELECT r.*, {NOTIFY} FROM r""",
    "delete": f"""
        WITH d AS (
        DELETE FROM {{schema}}.jobs AS j WHERE j.queue = %(q)s AND j.id = %(id)s AND j.state <> 'leased'
        RETURNING {COLUMNS}, j.scheduled
        ), {DELETE_TALLY}
        SELECT d.* FROM d""",
    "state": "SELECT state FROM {schema}.jobs WHERE queue = %(q)s AND id = %(id)s",
    "mark_waited": "UPDATE {schema}.jobs SET waited = true WHERE queue = %(q)s AND id = %(id)s AND NOT waited",
}


class ControlStatements:
    """The control statements of one schema, by name."""

    def __init__(self, schema: str) -> None:
        quoted = quote_schema(schema)
        self.text = {name: text.replace("{schema}", quoted) for name, text in _TEMPLATES.items()}


def finished_channel(schema: str, queue: str) -> str:
    """The channel sql/008's triggers notify when a job of ``queue`` that someone waits for finishes."""
    digest = hashlib.md5(f"{schema}.{queue}".encode(), usedforsecurity=False).hexdigest()[:20]
    return f"nobroker_done_{digest}"


def snooze(t: ops.Target, sql: ControlStatements, job_id: str, token: str | None, seconds: float) -> Steps[Job]:
    params = t.params(id=job_id, token=token, secs=seconds, chan=t.channel, notify=seconds <= 0)
    row = yield one(sql.text["snooze"], params)
    if row is None:
        yield from ops.refuse(t, job_id, token, "snooze")  # raises: NotLeasedError, JobCancelledError, JobNotFoundError
    return row_job(row)


def pause(t: ops.Target, sql: ControlStatements, kind: str | None, resume: bool) -> Steps[None]:
    params = t.params(kind=kind or "", chan=t.channel, notify=True)
    yield run(sql.text["resume" if resume else "pause"], params)


def paused(t: ops.Target, sql: ControlStatements) -> Steps[list[str | None]]:
    rows = yield every(sql.text["paused"], t.params())
    return [row[0] or None for row in rows]


def run_now(t: ops.Target, sql: ControlStatements, job_id: str) -> Steps[Job]:
    params = t.params(id=job_id, chan=t.channel, notify=True)
    row = yield one(sql.text["run_now"], params)
    if row is None:
        yield from ops.upkeep(t)  # an expired lease: reclaimed first (then it may be backing off), as the file storage does
        row = yield one(sql.text["run_now"], params)
    if row is not None:
        return row_job(row)
    state = yield from _state(t, sql, job_id)
    if state is JobState.READY:  # runnable already: nothing to change
        return (yield from whole.get(t, job_id))
    if state in FINISHED_STATES:
        raise finished_refusal("run now", job_id, state.value)
    raise JobStateError(
        f"cannot run job {job_id} now: it is leased (running); only a ready job that waits for its time can",
        state=state.value,
    )


def delete(t: ops.Target, sql: ControlStatements, job_id: str) -> Steps[Job]:
    params = t.params(id=job_id)
    row = yield one(sql.text["delete"], params)
    if row is None:
        yield from ops.upkeep(t)  # an expired lease: reclaimed first, and the job can go
        row = yield one(sql.text["delete"], params)
    if row is not None:
        return row_job(row)
    state = yield from _state(t, sql, job_id)
    raise JobStateError(
        f"cannot delete job {job_id}: it is {state.value} (a handler may be running it); cancel it, or wait for "
        "it to finish, then delete it",
        state=state.value,
    )


def mark_waited(t: ops.Target, sql: ControlStatements, job_id: str) -> Steps[None]:
    """From now on, the job's finish (or its row's going) notifies finished_channel (sql/008's triggers)."""
    yield run(sql.text["mark_waited"], t.params(id=job_id))


def _state(t: ops.Target, sql: ControlStatements, job_id: str) -> Steps[JobState]:
    found = yield one(sql.text["state"], t.params(id=job_id))
    if found is None:
        raise job_not_found(job_id, t.queue)
    return JobState(found[0])
