"""A row of a job's columns (fragments.COLUMNS, or SHOWN, their read-only twin) as a Job.

Owns: ``row_job`` and JOB_COLUMNS (how many columns that is: what a
statement returns after them starts there). Imports: codec, jobs.
"""

from __future__ import annotations

from typing import Any

from ..codec import load_json
from ..jobs import Job, JobState, attempt_history

_STATES = {s.value: s for s in JobState}
#: How many columns COLUMNS (and SHOWN) are: what a statement returns after them starts here.
JOB_COLUMNS = 24


def row_job(row: Any) -> Job:
    """The Job a row of COLUMNS (or of SHOWN, their read-only twin) makes; columns past them are ignored."""
    (job_id, payload, priority, state, attempts, max_attempts, available_at, enqueued_at,
     deadline, token, error, seq, kind, key, stage, result, traceback, cancel_requested, timeout,
     history, leased_by, leased_at, raw_deadline, group) = row[:JOB_COLUMNS]  # fmt: skip
    running = None
    if leased_at is not None:  # leased; or a lease that expired, which a read shows as its reclaim will record it
        outcome = "running" if state == "leased" else "cancelled" if state == "cancelled" else "expired"
        running = [attempts, leased_at, None if state == "leased" else raw_deadline, leased_by, outcome]
    return Job(
        id=job_id, payload=load_json(payload), priority=priority, state=_STATES[state], attempts=attempts,
        max_attempts=max_attempts, available_at=available_at, enqueued_at=enqueued_at, lease_deadline=deadline,
        lease_token=token, last_error=error, seq=seq, kind=kind, dedupe_key=key, stage=stage,
        result=None if result is None else load_json(result), traceback=traceback,
        cancel_requested=bool(cancel_requested), timeout=timeout,
        attempt_history=attempt_history(None if history is None else load_json(history), running), group=group,
    )  # fmt: skip


__all__ = ["JOB_COLUMNS", "row_job"]
