"""The Queue's answer to "why isn't job X running?": explain.

Owns: ExplainMethods (the facts gathered at one moment through the public
reads, handed to the pure explain.py) and ``facts_of``, which AsyncQueue's
explain shares. Imports: checks, jobs, explain, looking.

A fact a new reason needs is gathered beside the others into
``Facts.extra`` (the kind's limit, by storage.limit_holding; what is
paused, by storage.paused as ``q.paused()`` reads it), and read by its
blocker in explain.BLOCKERS.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import checks
from ..explain import LIMIT, PAUSED, Facts, Reason, explain
from ..jobs import Job, JobState
from ..checks import JobRef
from .looking import LookMethods

#: Most runnable jobs of a kind scanned to count those ahead of a job (past it: "at least").
MAX_AHEAD_SCANNED = 10_000


def runnable(found: Job, now: float) -> bool:
    """Is the job ready with its time come (the one state whose blockers and work ahead are asked)?"""
    return found.state is JobState.READY and found.available_at <= now


def facts_of(
    found: Job, now: float, listed: Sequence[Job] | None, holding: str | None, visibility_timeout: float | None,
    paused: Sequence[str | None] = (),
) -> Facts:
    """The facts for ``explain``: ``listed`` the runnable jobs of its kind (None: not asked), ``holding`` the
    words of the limit holding its kind back (None: none does), ``paused`` what is paused (``q.paused()``)."""
    ahead, exact = None, True
    if listed is not None:
        key = (-found.priority, found.seq)
        ahead = sum(1 for other in listed if other.id != found.id and (-other.priority, other.seq) < key)
        exact = len(listed) < MAX_AHEAD_SCANNED
    extra: dict[str, object] = {} if holding is None else {LIMIT: holding}
    if paused:
        extra[PAUSED] = list(paused)
    return Facts(now=now, ahead=ahead, ahead_exact=exact, visibility_timeout=visibility_timeout, extra=extra)


class ExplainMethods(LookMethods):
    """explain(job | id) (see Queue)."""

    def explain(self, job: JobRef) -> list[Reason]:
        """Why the job is where it is, most important first: a list of sentences (each a ``str``).

        Each is an ``explain.Reason``: ``reason.code`` names it
        (``delayed``, ``backing_off``, ``leased``, ``lease_past_due``,
        ``heartbeat``, ``cancel_requested``, ``paused``, ``limit``, ``work_ahead``,
        ``first_in_line``, ``done``, ``dead``, ...) and ``reason.to_dict()``
        gives its numbers. JobNotFoundError for an id the queue does not hold.
        """
        job_id, _ = checks.job_ref(job)
        found = self.get(job_id)
        storage = self._open_storage()
        now = storage.now()
        listed, holding, paused = None, None, []
        if runnable(found, now):
            listed = self.list_jobs("runnable", kind=found.kind, limit=MAX_AHEAD_SCANNED)
            holding = storage.limit_holding(found.kind, found.group)
            paused = storage.paused()
        return explain(found, facts_of(found, now, listed, holding, self.visibility_timeout, paused))
