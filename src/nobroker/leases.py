"""The writer's decisions: ids, fencing tokens, deadlines, retries and reclaims.

Owns: every value that replay must never invent (job ids, lease tokens,
jittered retry times), the rules that turn "lease expired" or "handler
failed" into the next state, and what a refused ack/nack/extend/set_stage
says (``refusal``, shared by both storages). Imports: errors, jobs, replay.

These functions read the clock value they are given and the random source;
their output is written into records as absolute values, so replay (which
only reads records) stays a pure function of the bytes.
"""

from __future__ import annotations

import os
import random
from typing import Any

from .errors import NotLeasedError
from .jobs import BackoffPolicy, JobState
from .replay import Entry

_rng = random.SystemRandom()


def new_job_id() -> str:
    """16 hex digits of randomness: unique without coordination between processes."""
    return os.urandom(8).hex()


def new_token() -> str:
    """A fencing token: any later lease of the same job gets a different one."""
    return os.urandom(8).hex()


def retry_time(entry: Entry, now: float, backoff: BackoffPolicy, delay: float | None) -> float:
    """Absolute time a failed attempt may run again: explicit delay, else backoff with jitter."""
    if delay is None:
        delay = backoff.delay_for(entry.attempts, _rng)
    return now + delay


def exhausted(entry: Entry) -> bool:
    return entry.attempts >= entry.max_attempts


def lease_body(entry: Entry, now: float, visibility_timeout: float) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": now,
        "deadline": now + visibility_timeout,
        "attempts": entry.attempts + 1,
        "token": new_token(),
    }


def expiry_error(entry: Entry) -> str:
    return f"lease expired on attempt {entry.attempts} of {entry.max_attempts}"


def finished_under(entry: Entry | None, token: Any) -> bool:
    """Is the job done, finished by this token's lease (or is ``token`` None, an operator)?"""
    return entry is not None and entry.state is JobState.DONE and (token is None or entry.lease_token == token)


def holds_lease(entry: Entry, token: Any) -> bool:
    """Does ``token`` (None: an operator acting by id) currently hold the job's lease?"""
    if entry.state is not JobState.LEASED:
        return False
    return token is None or entry.lease_token == token


def refusal(action: str, job_id: str, state: str, token: Any, held_token: Any) -> NotLeasedError:
    """Why ``action`` on a job that ``token`` does not hold is refused, saying what really happened.

    ``state`` is the job's state now and ``held_token`` the token it carries
    (a done job keeps the one that finished it). ``token`` None is an
    operator acting by id. A caller whose own ack finished the job is told it
    is done, not that a lease expired.
    """
    if state == JobState.LEASED.value:
        return NotLeasedError(
            f"cannot {action} job {job_id}: your lease is stale (it expired and the job was leased again). "
            "The work may run twice; handlers must be idempotent."
        )
    if token is None:
        return NotLeasedError(f"cannot {action} job {job_id}: it is {state}, not leased")
    if state == JobState.DONE.value and held_token in (token, None):
        how = " (acked under this lease)" if held_token == token else ""
        return NotLeasedError(f"cannot {action} job {job_id}: it is already done{how}; nothing changed")
    if state == JobState.DONE.value:
        return NotLeasedError(
            f"cannot {action} job {job_id}: it is done, finished under a later lease after yours ended "
            "(the work may have run twice; handlers must be idempotent)"
        )
    return NotLeasedError(
        f"cannot {action} job {job_id}: it is {state}, not leased (your lease ended: it expired, or the job was nacked)"
    )
