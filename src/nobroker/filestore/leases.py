"""The writer's decisions: ids, fencing tokens, deadlines, retries and reclaims.

Owns: every value that replay must never invent (lease bodies with their
tokens, jittered retry times) and the rules that turn "lease expired" or
"handler failed" into the next state. Imports: jobs, storage (ids, tokens),
replay. What a refused ack/nack/extend/set_stage says is shared by both
storages: storage.refusal.

These functions read the clock value they are given and the random source;
their output is written into records as absolute values, so replay (which
only reads records) stays a pure function of the bytes.
"""

from __future__ import annotations

import random
from typing import Any

from ..jobs import BackoffPolicy, Job, JobState
from ..storage import new_token
from .entry import Entry

_rng = random.SystemRandom()


def retry_time(entry: Entry, now: float, backoff: BackoffPolicy, delay: float | None) -> float:
    """Absolute time a failed attempt may run again: explicit delay, else backoff with jitter."""
    if delay is None:
        delay = backoff.delay_for(entry.attempts, _rng)
    return now + delay


def reclaim_time(entry: Entry, backoff: BackoffPolicy) -> float:
    """When a job whose lease expired may run again: its deadline plus the backoff, with jitter.

    The failed attempt ended at the deadline, so the backoff counts from there,
    not from whenever a writer happens to record the reclaim: then a read can
    say when the job comes back without waiting for that writer (as_reclaimed).
    """
    assert entry.lease_deadline is not None, "only a leased job's lease expires"
    return entry.lease_deadline + backoff.delay_for(entry.attempts, _rng)


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


def expiry_error(entry: Entry | Job) -> str:
    return f"lease expired on attempt {entry.attempts} of {entry.max_attempts}"


def lease_expired(entry: Entry, now: float) -> bool:
    """Is this a lease whose deadline has passed (a reclaim not recorded yet, if ``now`` is a read's)?"""
    deadline = entry.lease_deadline
    return entry.state is JobState.LEASED and deadline is not None and deadline <= now


def as_reclaimed(entry: Entry, backoff: BackoffPolicy) -> dict[str, Any]:
    """The fields the reclaim of this expired lease will give its job, for reads: they never write.

    Dead once its attempts are used up (with the error a reclaim records);
    otherwise ready again at ``lease_deadline + backoff.nominal_delay``, the
    backoff's delay before jitter (see reclaim_time). The writer that records
    the reclaim draws the jitter, which may bring the job back up to
    ``jitter`` of that delay sooner than a read says, never later.
    """
    if exhausted(entry):
        return {
            "state": JobState.DEAD, "last_error": expiry_error(entry), "traceback": None,
            "lease_deadline": None, "lease_token": None,
        }  # fmt: skip
    assert entry.lease_deadline is not None, "only a leased job's lease expires"
    available_at = entry.lease_deadline + backoff.nominal_delay(entry.attempts)
    return {"state": JobState.READY, "available_at": available_at, "lease_deadline": None, "lease_token": None}


def finished_under(entry: Entry | None, token: Any) -> bool:
    """Is the job done, finished by this token's lease (or is ``token`` None, an operator)?"""
    return entry is not None and entry.state is JobState.DONE and (token is None or entry.finished_token == token)


def holds_lease(entry: Entry, token: Any) -> bool:
    """Does ``token`` (None: an operator acting by id) currently hold the job's lease?"""
    if entry.state is not JobState.LEASED:
        return False
    return token is None or entry.lease_token == token
