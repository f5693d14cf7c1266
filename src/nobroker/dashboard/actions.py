"""The dashboard's POST routes: every change an operator makes from the page, one public Queue call each.

Owns: ActionRoutes (the routes Api inherits: per-job cancel, requeue, run
now and delete, the same on a selection, requeue of the whole DLQ, purge and
compact), the state each per-job action needs and its 409 when the job is not
in it (act), and BULK_ACTIONS. Imports: errors, jobs, queue, answers. The server has
checked the token, the CSRF token and the Origin before any of these runs.

What each per-job action takes, refused with 409 otherwise (the page shows a
button only where it would work):

* cancel: a ready, delayed or leased job (``Queue.cancel``: a leased one is
  marked, its worker stops it); a finished one is refused.
* requeue (retry): a dead job, ready again with its attempts reset
  (``Queue.requeue_dead``). A cancelled job cannot be retried: no public
  Queue call brings one back.
* run now: a ready job (``Queue.run_now``: a delayed or backing-off one
  becomes runnable now; a runnable one is left as it is); leased and
  finished ones are refused.
* delete: any job but a leased one (``Queue.delete``); cancel that first.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import JobFinishedError, JobNotFoundError, JobStateError
from ..jobs import Job, JobState
from .answers import Answer, Call, HTTPError, job_detail, json_answer

if TYPE_CHECKING:  # for the annotations only: any object with the public Queue methods works
    from ..queue import Queue

logger = logging.getLogger("nobroker.dashboard")

#: Most job ids one bulk action takes (a page of the list is at most MAX_PAGE_JOBS).
MAX_BULK_IDS = 500


#: What each Queue call refuses with, and the 409's words for it (requeue is checked apart: requeue_dead of a job
#: that is not dead does nothing, so the state is looked at first).
_REFUSALS: dict[str, tuple[type[JobStateError], str]] = {
    "cancel": (JobFinishedError, "only ready, delayed and leased jobs are cancelled"),
    "run_now": (JobStateError, "only ready jobs (delayed or backing off) are run now"),
    "delete": (JobStateError, "a leased job is not deleted (cancel it first)"),
}
#: The per-job actions, by the name a bulk request gives (each also a route of its own).
BULK_ACTIONS = ("cancel", "requeue", "run_now", "delete")


def act(queue: Queue, action: str, job_id: str) -> Job:
    """Do ``action`` to one job: the job as it now is (delete: as it was); HTTPError 409 when its state does not allow it."""
    assert action in BULK_ACTIONS, f"no such action {action!r}"
    if action == "requeue":
        job = queue.get(job_id)
        if job.state != JobState.DEAD:
            raise HTTPError(409, f"job {job_id} is {job.state.value}, not dead: only dead jobs are requeued")
        queue.requeue_dead(job_id)
        return queue.get(job_id)
    refusal, words = _REFUSALS[action]
    call: Callable[[str], Job] = getattr(queue, action)  # Queue.cancel, Queue.run_now, Queue.delete
    try:
        return call(job_id)
    except refusal as exc:
        raise HTTPError(409, f"job {job_id} is {exc.state}: {words}") from None


class ActionRoutes:
    """The POST routes (Api inherits them): each under the dashboard's one lock, logged."""

    lock: threading.Lock

    def _one(self, call: Call, action: str) -> dict[str, Any]:
        call.read_body()
        job_id = call.args[0]
        with self.lock:
            job = act(call.queue, action, job_id)
        logger.info("dashboard: %s of job %s (now %s)", action, job_id, job.state.value)
        return {"action": action, "job": job_detail(job)}

    def requeue_one(self, call: Call) -> Answer:
        return json_answer({"requeued": 1, **self._one(call, "requeue")})

    def cancel_one(self, call: Call) -> Answer:
        return json_answer(self._one(call, "cancel"))

    def run_now_one(self, call: Call) -> Answer:
        return json_answer(self._one(call, "run_now"))

    def delete_one(self, call: Call) -> Answer:
        """The job deleted, as it was."""
        return json_answer(self._one(call, "delete"))

    def bulk(self, call: Call) -> Answer:
        """One action over many ids, each as its own route would do it; what was refused, by id, with why."""
        body = call.read_body()
        action, ids = body.get("action"), body.get("ids")
        if action not in BULK_ACTIONS:
            raise HTTPError(400, f"action must be one of {', '.join(BULK_ACTIONS)}, got {action!r}")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
            raise HTTPError(400, "ids must be a non-empty list of job ids")
        if len(ids) > MAX_BULK_IDS:
            raise HTTPError(400, f"at most {MAX_BULK_IDS} ids at once, got {len(ids)}")
        done: list[str] = []
        refused: dict[str, str] = {}
        for job_id in dict.fromkeys(ids):  # each once, in the order given
            try:
                with self.lock:  # per id: a long selection lets other requests in between
                    act(call.queue, action, job_id)
                done.append(job_id)
            except HTTPError as exc:
                refused[job_id] = exc.message
            except (JobNotFoundError, ValueError) as exc:  # ValueError: a requeue whose dedupe key is taken
                refused[job_id] = str(exc)
        logger.info("dashboard: bulk %s of %d job(s), %d refused", action, len(done), len(refused))
        return json_answer({"action": action, "done": done, "refused": refused})

    def requeue_all(self, call: Call) -> Answer:
        call.read_body()
        with self.lock:
            count = call.queue.requeue_dead(None)
        logger.info("dashboard: requeued %d dead job(s)", count)
        return json_answer({"requeued": count})

    def purge(self, call: Call) -> Answer:
        body = call.read_body()
        name = call.queue.name
        if body.get("confirm") != name:
            raise HTTPError(400, f'purge deletes every job: send {{"confirm": "{name}"}} (the queue name) to confirm')
        with self.lock:
            count = call.queue.purge()
        logger.warning("dashboard: purged %d job(s) from queue %s", count, name)
        return json_answer({"purged": count})

    def compact(self, call: Call) -> Answer:
        call.read_body()
        with self.lock:
            result = call.queue.compact()
        logger.info("dashboard: compacted (%s)", result)
        return json_answer({"compaction": dataclasses.asdict(result)})


__all__ = ["ActionRoutes", "BULK_ACTIONS", "MAX_BULK_IDS", "act"]
