"""The Queue's answer to "why isn't job X running?": explain.

Owns: ExplainMethods (the facts gathered at one moment through the public
reads, handed to the pure explain.py). Imports: checks, jobs, explain, looking.

A fact a new reason needs (``q.paused()``, a kind's limits) is gathered in
``_facts`` into ``Facts.extra``, and read by its blocker in explain.BLOCKERS.
"""

from __future__ import annotations

from .. import checks
from ..explain import Facts, Reason, explain
from ..jobs import JobState
from ..checks import JobRef
from .looking import LookMethods

#: Most runnable jobs of a kind scanned to count those ahead of a job (past it: "at least").
MAX_AHEAD_SCANNED = 10_000


class ExplainMethods(LookMethods):
    """explain(job | id) (see Queue)."""

    def explain(self, job: JobRef) -> list[Reason]:
        """Why the job is where it is, most important first: a list of sentences (each a ``str``).

        Each is an ``explain.Reason``: ``reason.code`` names it
        (``delayed``, ``backing_off``, ``leased``, ``lease_past_due``,
        ``heartbeat``, ``cancel_requested``, ``work_ahead``,
        ``first_in_line``, ``done``, ``dead``, ...) and ``reason.to_dict()``
        gives its numbers. JobNotFoundError for an id the queue does not hold.
        """
        job_id, _ = checks.job_ref(job)
        found = self.get(job_id)
        storage = self._open_storage()
        now = storage.now()
        ahead, exact = None, True
        if found.state is JobState.READY and found.available_at <= now:
            listed = self.list_jobs("runnable", kind=found.kind, limit=MAX_AHEAD_SCANNED)
            key = (-found.priority, found.seq)
            ahead = sum(1 for other in listed if other.id != found.id and (-other.priority, other.seq) < key)
            exact = len(listed) < MAX_AHEAD_SCANNED
        return explain(found, Facts(now=now, ahead=ahead, ahead_exact=exact, visibility_timeout=self.visibility_timeout))
