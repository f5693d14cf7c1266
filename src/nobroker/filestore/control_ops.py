"""The writer's decisions for control of jobs: snooze, pause, resume, run_now and delete.

Owns: one decision per operation, each a function of the state, the time and
the operation's arguments that refuses (raises) before it adds its record
(control_records.py), like those in leases.py. Each runs under the file lock, after the read forward and
the reclaim of expired leases. Imports: errors, jobs, storage, entry, leases,
control_records.

Pause on this storage: the PAUSE record is durable before ``pause`` returns,
and every lease in any process decides under the same lock after reading
every record before it (leases.lease skips paused kinds), so no lease that
starts after ``pause`` returned hands out a job of the paused kind.
"""

from __future__ import annotations

from typing import Any

from ..errors import JobStateError
from ..jobs import Job
from ..storage import cancel_refusal, finished_refusal, job_not_found
from . import control_records, leases
from .entry import CANCELLED, DEAD, DONE, LEASED, READY


def snooze(
    batch: leases.Batch, now: float, queue: str, job_id: str, token: str | None, seconds: float, payload_of: leases.PayloadOf
) -> Job:
    """A leased job ready again at ``now + seconds``, with the attempts it had before this lease."""
    entry = leases.leased_entry(batch.state, queue, job_id, token, "snooze")
    if entry.cancel_requested:
        raise cancel_refusal("snooze", job_id)
    assert entry.attempts >= 1, "a leased job has used an attempt"
    payload = payload_of(entry)  # before the record (see leases.PayloadOf)
    batch.add(control_records.snooze(job_id, now, entry.attempts - 1, now + seconds))
    if not seconds:
        batch.wakes = True  # runnable at once: worth waking an idle worker
    return _after(batch, job_id, payload)


def pause(batch: leases.Batch, now: float, kind: str | None, resume: bool) -> None:
    """Pause (or resume) ``kind``, None the whole queue; nothing is written when it already is so."""
    paused = batch.state.paused
    if (kind in paused) is not resume:
        return
    batch.add(control_records.pause(now, kind, resume=resume))
    if resume:
        batch.wakes = True  # its ready jobs may be leased again


def run_now(batch: leases.Batch, now: float, queue: str, job_id: str, payload_of: leases.PayloadOf) -> Job:
    """A ready job whose time has not come (delayed, or backing off) is runnable now; a runnable one stays as it is."""
    entry = batch.state.get(job_id)
    if entry is None:
        raise job_not_found(job_id, queue)
    if entry.state in (DONE, DEAD, CANCELLED):
        raise finished_refusal("run now", job_id, entry.state.value)
    if entry.state is LEASED:
        raise JobStateError(
            f"cannot run job {job_id} now: it is leased (running); only a ready job that waits for its time can",
            state=entry.state.value,
        )
    assert entry.state is READY, "every state is handled"
    payload = payload_of(entry)  # before the record (see leases.PayloadOf)
    if entry.available_at <= now:
        return entry.to_job(payload)  # runnable already: nothing to change
    batch.add(control_records.run_now(job_id, now))
    batch.wakes = True
    return _after(batch, job_id, payload)


def delete(batch: leases.Batch, now: float, queue: str, job_id: str, job_of: leases.JobOf) -> Job:
    """Remove one job that is not leased; returns it as it was."""
    entry = batch.state.get(job_id)
    if entry is None:
        raise job_not_found(job_id, queue)
    if entry.state is LEASED:
        raise JobStateError(
            f"cannot delete job {job_id}: it is leased (a handler may be running it); cancel it, or wait for "
            "it to finish, then delete it",
            state=entry.state.value,
        )
    job = job_of(entry)  # read before the DELETE: the payload's record is still the job's
    batch.add(control_records.delete(job_id, now))
    assert job_id not in batch.state, "a DELETE removes the job"
    return job


def _after(batch: leases.Batch, job_id: str, payload: Any) -> Job:
    after = batch.state.get(job_id)  # a cold job's Entry is built for the look only
    assert after is not None and after.state is READY, "the job is ready after the record"
    return after.to_job(payload)
