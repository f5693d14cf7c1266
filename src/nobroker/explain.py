"""Why a job is where it is: the chain of reasons, in plain words.

Owns: Reason (one link of the chain: a sentence that is also a ``str``, with
a ``code`` and its ``facts`` for programs), Facts (what the queue knows
beyond the job: the time, the ready jobs ahead of it, the lease length) and
``explain(job, facts)``, plus BLOCKERS, the hook for what else can hold a
ready job back. Imports: jobs. Pure: no clock, no storage; the Queue
(queue/explaining.py) gathers the facts and calls it.

A new kind of reason a ready job can be held back by (a paused queue or
kind, a concurrency, rate or group concurrency limit) is one function added to BLOCKERS: it
takes the job and the facts (``facts.extra`` carries what the Queue
gathered for it, say ``facts.extra["paused"]``) and returns a Reason or
None. Blockers come before "first in line", in the order listed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .jobs import Job, JobState

#: Longest last error quoted in a reason (the job itself keeps all of it).
QUOTED_ERROR_CHARS = 200


class Reason(str):
    """One reason, as a sentence; ``code`` names it for programs and ``facts`` holds its numbers."""

    code: str
    facts: dict[str, Any]

    def __new__(cls, code: str, text: str, **facts: Any) -> Reason:
        self = super().__new__(cls, text)
        self.code, self.facts = code, facts
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "text": str(self), **self.facts}


@dataclass(frozen=True)
class Facts:
    """What explain needs besides the job, gathered by the Queue at one moment.

    ``ahead``: ready jobs of the job's kind that a lease takes before it
    (None: not counted); ``ahead_exact``: False when the count stopped at a
    bound (then "at least"). ``visibility_timeout``: the queue's lease
    length, which tells how long ago a lease was last renewed.
    """

    now: float
    ahead: int | None = None
    ahead_exact: bool = True
    visibility_timeout: float | None = None
    #: Anything a blocker needs (the hook above): filled by the Queue, read by the blocker.
    extra: dict[str, Any] = field(default_factory=dict)


Blocker = Callable[[Job, Facts], "Reason | None"]
#: The key of ``Facts.extra`` that holds the words of the limit holding the job's kind back (None: none does).
LIMIT = "limit"


def held_by_limit(job: Job, facts: Facts) -> Reason | None:
    """A concurrency or rate limit of the job's kind, or its group concurrency limit for the job's group, that holds it back now (storage.limit_holding's words)."""
    words = facts.extra.get(LIMIT)
    if words is None:
        return None
    if job.group is None:
        return Reason("limit", f"held back by {words}", kind=job.kind, limit=words)
    return Reason("limit", f"held back by {words}", kind=job.kind, limit=words, group=job.group)


#: The key of ``Facts.extra`` that holds what is paused (``q.paused()``: kinds, None for the whole queue).
PAUSED = "paused"


def held_by_pause(job: Job, facts: Facts) -> Reason | None:
    """A pause of the whole queue or of the job's kind (``q.pause``): no lease hands it out until resumed."""
    paused = facts.extra.get(PAUSED) or ()
    if None in paused:
        return Reason("paused", "held back: the whole queue is paused (q.resume() or nobroker resume lifts it)", kind=None)
    if job.kind in paused:
        return Reason(
            "paused", f"held back: its kind {job.kind!r} is paused (nobroker resume --kind {job.kind} lifts it)",
            kind=job.kind,
        )  # fmt: skip
    return None


#: What else can hold a ready job back, asked in this order (the hook: one line each).
BLOCKERS: list[Blocker] = [held_by_pause, held_by_limit]


def _when(t: float | None) -> str:
    if t is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _span(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _error(job: Job) -> str:
    error = (job.last_error or "").splitlines()[0] if job.last_error else ""
    if not error:
        return ""
    cut = error if len(error) <= QUOTED_ERROR_CHARS else error[: QUOTED_ERROR_CHARS - 3] + "..."
    return f" (last error: {cut})"


def explain(job: Job, facts: Facts) -> list[Reason]:
    """The reasons, most important first, why ``job`` is where it is as of ``facts.now``."""
    if job.state is JobState.DONE:
        return [Reason("done", f"done after {job.attempts} attempt(s); it never runs again", attempts=job.attempts)]
    if job.state is JobState.CANCELLED:
        return [Reason("cancelled", "cancelled; it never runs again", attempts=job.attempts)]
    if job.state is JobState.DEAD:
        return [Reason(
            "dead", f"dead after {job.attempts} attempt(s) of {job.max_attempts}{_error(job)}; "
            "requeue_dead (nobroker dlq --requeue ID) makes it ready again", attempts=job.attempts, error=job.last_error,
        )]  # fmt: skip
    if job.state is JobState.LEASED:
        return _leased(job, facts)
    return _ready(job, facts)


def _leased(job: Job, facts: Facts) -> list[Reason]:
    history = job.attempt_history
    running = history[-1] if history and history[-1].get("outcome") == "running" else None
    by = running.get("by") if running else None
    started = running.get("started") if running else None
    deadline = job.lease_deadline
    reasons = [Reason(
        "leased", f"leased by {by or 'an unknown worker'} (attempt {job.attempts} of {job.max_attempts}) with token "
        f"{job.lease_token} until {_when(deadline)}", by=by, token=job.lease_token, deadline=deadline,
        attempt=job.attempts, started=started,
    )]  # fmt: skip
    if deadline is not None and deadline <= facts.now:
        reasons.append(Reason(
            "lease_past_due", f"its lease is past due ({_span(facts.now - deadline)} ago): its worker stopped "
            "renewing it, and the next write gives the job back (or ends it)", deadline=deadline,
        ))  # fmt: skip
    elif deadline is not None and facts.visibility_timeout and started is not None:
        renewed = deadline - facts.visibility_timeout  # a heartbeat sets the deadline to now + the lease length
        if renewed > started + 1e-3:
            reasons.append(Reason(
                "heartbeat", f"its worker still renews the lease: last about {_span(facts.now - renewed)} ago",
                last_extend=renewed,
            ))  # fmt: skip
        else:
            reasons.append(Reason(
                "no_heartbeat_yet", f"not renewed since it was leased {_span(facts.now - started)} ago",
                started=started,
            ))  # fmt: skip
    if job.cancel_requested:
        reasons.append(Reason(
            "cancel_requested", "cancel requested: its handler is told at its next heartbeat, its ack is refused, "
            "and the attempt ends cancelled",
        ))  # fmt: skip
    if job.timeout is not None:
        ran = f" (running for {_span(facts.now - started)})" if started is not None else ""
        reasons.append(Reason("time_limit", f"its time limit is {job.timeout:g} s{ran}", timeout=job.timeout))
    return reasons


def _ready(job: Job, facts: Facts) -> list[Reason]:
    reasons: list[Reason] = []
    last = job.attempt_history[-1] if job.attempt_history else None
    if last is not None and last.get("outcome") == "expired":
        reasons.append(Reason(
            "last_attempt_expired", f"its last attempt ({last.get('attempt')}, by {last.get('by') or 'an unknown worker'}) "
            f"expired at {_when(last.get('finished'))}: its worker stopped renewing the lease", attempt=last.get("attempt"),
        ))  # fmt: skip
    if job.available_at > facts.now:
        at = f"{_when(job.available_at)} (in {_span(job.available_at - facts.now)})"
        if job.attempts > 0:
            reasons.append(Reason(
                "backing_off", f"backing off after attempt {job.attempts} of {job.max_attempts}{_error(job)}: "
                f"ready again at {at}", attempts=job.attempts, available_at=job.available_at, error=job.last_error,
            ))  # fmt: skip
        else:
            reasons.append(Reason("delayed", f"delayed until {at}", available_at=job.available_at))
        return reasons
    blocked = False
    for blocker in BLOCKERS:
        reason = blocker(job, facts)
        if reason is not None:
            reasons.append(reason)
            blocked = True
    if facts.ahead:
        many = f"{facts.ahead}" if facts.ahead_exact else f"at least {facts.ahead}"
        reasons.append(Reason(
            "work_ahead", f"{many} ready job(s) of kind {job.kind!r} come before it (higher priority, or older at "
            f"priority {job.priority})", ahead=facts.ahead, exact=facts.ahead_exact,
        ))  # fmt: skip
    elif not blocked:
        reasons.append(Reason(
            "first_in_line", f"ready and first in line: the next lease of kind {job.kind!r} takes it", kind=job.kind,
        ))  # fmt: skip
    return reasons
