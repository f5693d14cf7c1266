"""The dashboard's JSON API and /metrics: each route one call of the public Queue, its answer JSON.

Owns: the route table, the GET routes (the POSTs are actions.py's, inherited),
the checking of list parameters, and the mapping of queue errors to HTTP
statuses. Imports: errors, jobs, queue, queues, listing, metrics, history,
answers, actions. Queues are used through the methods of the public Queue
only, so every route works the same on the file storage and on PostgreSQL.

Routes (the server serves the page at ``/`` itself): ``GET /api/queues`` (the
queues offered and the one a page opens on; with ``?counts=1`` also the counts
of each, and the errors of those that could not be counted); ``GET /api/stats``;
``GET /api/jobs?state=&kind=&q=&sort=&limit=&offset=`` (a state or
runnable/delayed, a kind, a search of ids and payloads, oldest or newest
first: see listing.py); ``GET /api/jobs/<id>`` (every field, its attempts
among them); ``GET /api/jobs/<id>/explain`` (``Queue.explain``: why it is
where it is, each reason ``{"code", "text", ...}``, the lease token left out);
``GET /api/dlq?limit=``; ``GET /api/history`` (the counters' samples of the
last hour, for the chart: history.py); ``GET /api/workers`` (the workers'
announcements, each with ``gone``); ``GET /api/schedules`` (``Queue.schedules``);
``GET /api/limits`` (``Queue.limits`` and ``Queue.paused``);
``POST /api/jobs/<id>/cancel | requeue | run-now | delete``; ``POST /api/bulk``
(body ``{"action": "cancel" | "requeue" | "run_now" | "delete", "ids": [...]}``,
at most MAX_BULK_IDS: each id acted on as its own route would, the refusals
listed by id); ``POST /api/dlq/requeue``; ``POST /api/purge`` (body
``{"confirm": "<queue name>"}``); ``POST /api/compact``; ``GET /metrics``
(Prometheus text format 0.0.4). Each but /api/queues acts on the queue named
by ``?queue=`` (default: the first).
Errors are JSON ``{"error": "..."}``: 400 bad parameters or request, 403 token/CSRF/Host/Origin,
404 unknown job, queue or route, 405 wrong method, 409 an action the job's state does not
allow (actions.py), 411 Transfer-Encoding, 413 body too large, 503 queue lock busy.

The explain route is apart from the job's own answer: for a runnable job it
reads up to 10,000 jobs of its kind (those ahead of it), a cost the job's
answer (read by every API user, and by the page every few seconds) should not
carry; the page asks for both when it shows a job.

Requests arrive on many threads and take turns at the queue under one lock.
Both storages are safe across threads on their own; the lock is for the
dashboard's check-then-act steps (look a job up, then requeue it) and keeps a
burst of page refreshes from crowding out the workers sharing the Queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import JobNotFoundError, LockTimeoutError, NobrokerError, SerializationError
from ..jobs import COUNTER_NAMES, LISTINGS, MAX_NAME_CHARS, Job, QueueStats
from .actions import BULK_ACTIONS, MAX_BULK_IDS, ActionRoutes
from .answers import (
    JSON_TYPE, Answer, Call, HTTPError, allow, int_param, job_detail, job_summary, json_answer, json_bytes, preview, text_param,
)  # fmt: skip
from .history import GAP_SECONDS, HISTORY_SECONDS, CounterHistory, Sampler
from .listing import MAX_SEARCH_CHARS, SORTS, JobQuery, list_page, page_fields
from .metrics import metrics_text
from .queues import MAX_COUNTED_QUEUES, QueueSet, UnknownQueueError

if TYPE_CHECKING:  # for the annotations only: any object with the public Queue methods works
    from ..queue import Queue

logger = logging.getLogger("nobroker.dashboard")

#: Default page size of /api/jobs and /api/dlq, and the most one call returns.
DEFAULT_PAGE_JOBS = 50
MAX_PAGE_JOBS = 500
#: Largest offset a list accepts: paging further than this is a mistake, not a use.
MAX_OFFSET = 10_000_000
#: Most list counts remembered as hints for the next answer (see listing.count_listed).
MAX_COUNT_HINTS = 256

METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def job_query(query: dict[str, str]) -> JobQuery:
    """What ``/api/jobs?state=&kind=&q=&sort=&limit=&offset=`` asks for (HTTPError 400 for a bad value)."""
    state_text = query.get("state", "").strip().lower()
    if state_text in ("", "all"):
        listing = None
    elif state_text in LISTINGS:  # a state, or runnable / delayed: the two halves of ready
        listing = state_text
    else:
        raise HTTPError(400, f"state must be one of {', '.join(LISTINGS)} or all, got {state_text!r}")
    sort = query.get("sort", "").strip().lower() or SORTS[0]
    if sort not in SORTS:
        raise HTTPError(400, f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
    kind = text_param(query, "kind", MAX_NAME_CHARS) or None
    text = text_param(query, "q", MAX_SEARCH_CHARS).strip()
    limit = int_param(query, "limit", DEFAULT_PAGE_JOBS, 1, MAX_PAGE_JOBS)
    offset = int_param(query, "offset", 0, 0, MAX_OFFSET)
    return JobQuery(listing, kind, text, sort == "newest", offset, limit)


class _Locked:
    """A queue whose every read takes the dashboard's lock, so a long search lets other requests in between its pages."""

    def __init__(self, queue: Queue, lock: threading.Lock) -> None:
        self._queue = queue
        self._lock = lock

    def list_jobs(self, state: str | None = None, *, limit: int | None = None, offset: int = 0, kind: str | None = None) -> list[Job]:
        with self._lock:
            return self._queue.list_jobs(state, limit=limit, offset=offset, kind=kind)

    def stats(self) -> QueueStats:
        with self._lock:
            return self._queue.stats()

    def get(self, job_id: str) -> Job:
        with self._lock:
            return self._queue.get(job_id)


class Api(ActionRoutes):
    """The routes: each a public Queue call on the queue a request names, under the dashboard's one lock (the POSTs: actions.py)."""

    def __init__(self, queues: QueueSet, lock: threading.Lock) -> None:
        self.queues = queues
        self.lock = lock
        #: Samples the open queues' counters for the chart (the server starts and stops its thread).
        self.sampler = Sampler(CounterHistory(), queues.open_queues, lock)
        # The count of each (queue, state, kind) list last read newest first: usually confirmed by one read.
        self._count_hints: dict[tuple[str, str | None, str | None], int] = {}

    def answer(
        self, method: str, path: str, parts: list[str], query: dict[str, str], read_body: Callable[[], dict[str, Any]]
    ) -> Answer:
        """The answer to ``method`` on ``path`` (its ``parts``, decoded); HTTPError for every refusal."""
        try:
            if parts == ["api", "queues"]:
                allow(method, "GET")
                return self.queue_list(counted=query.get("counts", "") not in ("", "0"))
            # Only a queue the set lists is opened (never created): anything else is a 404.
            queue = self.queues.get(query.get("queue"))
            for pattern, allowed, route in _ROUTES:
                if len(pattern) == len(parts) and all(p in ("*", part) for p, part in zip(pattern, parts)):
                    allow(method, allowed)
                    args = tuple(part for p, part in zip(pattern, parts) if p == "*")
                    return route(self, Call(queue, query, args, read_body))
            raise HTTPError(404, f"no such page: {path}")
        except (JobNotFoundError, UnknownQueueError) as exc:
            raise HTTPError(404, str(exc)) from None
        except LockTimeoutError as exc:
            raise HTTPError(503, str(exc), {"Retry-After": "1"}) from None
        except (SerializationError, ValueError) as exc:
            raise HTTPError(400, str(exc)) from None
        except NobrokerError as exc:
            logger.warning("dashboard: %s failed: %s", path, exc)
            raise HTTPError(500, str(exc)) from None

    def queue_list(self, *, counted: bool) -> Answer:
        """The queues offered and the one a page opens on; ``counted``: the counts of each too (of MAX_COUNTED_QUEUES at most).

        A queue that cannot be opened or counted (damaged, locked, gone since
        it was listed) is listed with its error instead of counts, so one bad
        queue never hides the others.
        """
        names, default = self.queues.offered()
        if not counted:
            return json_answer({"queues": names, "default": default})
        counts: dict[str, dict[str, int]] = {}
        errors: dict[str, str] = {}
        for name in [default, *(n for n in names if n != default)][:MAX_COUNTED_QUEUES]:
            try:
                queue = self.queues.get(name)
                with self.lock:
                    counts[name] = queue.stats().to_dict()
            except (NobrokerError, OSError) as exc:
                errors[name] = str(exc)
        return json_answer({"queues": names, "default": default, "stats": counts, "errors": errors})

    def stats(self, call: Call) -> Answer:
        with self.lock:
            stats = call.queue.stats()
        return json_answer({"queue": call.queue.name, "durable": call.queue.durable, "stats": stats.to_dict(), "now": time.time()})

    def jobs(self, call: Call) -> Answer:
        query = job_query(call.query)
        key = (call.queue.name, query.listing, query.kind)
        page = list_page(_Locked(call.queue, self.lock), query, now=time.time(), count_hint=self._count_hints.get(key))
        if query.kind is not None and page.total is not None:
            if len(self._count_hints) >= MAX_COUNT_HINTS:
                self._count_hints.clear()  # a bound, not a cache policy: the next answers refill it
            self._count_hints[key] = page.total
        return json_answer({
            "state": query.listing or "all", "kind": query.kind, "q": query.text,
            "sort": "newest" if query.newest else "oldest", "limit": query.limit, "offset": query.offset,
            **page_fields(page), "jobs": [job_summary(j) for j in page.jobs],
        })  # fmt: skip

    def job(self, call: Call) -> Answer:
        with self.lock:
            job = call.queue.get(call.args[0])
        return json_answer({"job": job_detail(job)})

    def explain(self, call: Call) -> Answer:
        """Why the job is where it is: each reason as ``{"code", "text", ...its facts}``; the lease token never leaves."""
        with self.lock:
            reasons = [reason.to_dict() for reason in call.queue.explain(call.args[0])]
        tokens = [token for reason in reasons if isinstance(token := reason.pop("token", None), str) and token]
        for reason in reasons:
            for token in tokens:
                reason["text"] = reason["text"].replace(token, "(hidden)")
        return json_answer({"id": call.args[0], "reasons": reasons})

    def schedules(self, call: Call) -> Answer:
        """The schedules stored in the queue, by name, each with its next run (a payload preview, not the payload)."""
        with self.lock:
            schedules = call.queue.schedules()
        shown = []
        for schedule in schedules:
            fields = schedule.to_dict()
            fields["payload_preview"] = preview(fields.pop("payload"))
            shown.append(fields)
        return json_answer({"queue": call.queue.name, "now": time.time(), "schedules": shown})

    def limits(self, call: Call) -> Answer:
        """The limits stored in the queue (each kind's, every field its to_dict has) and what is paused (null: the queue)."""
        with self.lock:
            limits = call.queue.limits()
            paused = call.queue.paused()
        return json_answer({"queue": call.queue.name, "limits": [limit.to_dict() for limit in limits], "paused": paused})

    def dlq(self, call: Call) -> Answer:
        limit = int_param(call.query, "limit", DEFAULT_PAGE_JOBS, 1, MAX_PAGE_JOBS)
        with self.lock:
            jobs = call.queue.dlq(limit=limit + 1)
        return json_answer({"limit": limit, "has_more": len(jobs) > limit, "jobs": [job_summary(j) for j in jobs[:limit]]})

    def history(self, call: Call) -> Answer:
        """The counters' samples of the last hour (each the totals over the kinds), oldest first."""
        self.sampler.sample(call.queue)  # a sample now if one is owed: a new page draws at once
        now = time.time()
        samples = [{"at": at, **values} for at, values in self.sampler.history.samples(call.queue.name, now)]
        return json_answer({
            "queue": call.queue.name, "now": now, "interval": self.sampler.history.interval,
            "window": HISTORY_SECONDS, "gap": GAP_SECONDS, "counters": list(COUNTER_NAMES), "samples": samples,
        })  # fmt: skip

    def workers(self, call: Call) -> Answer:
        with self.lock:
            workers = call.queue.workers()
        now = time.time()
        return json_answer({"queue": call.queue.name, "now": now, "workers": [w.to_dict(now) for w in workers]})

    def metrics(self, call: Call) -> Answer:
        return Answer(200, metrics_text(call.queue, self.lock).encode("utf-8"), METRICS_TYPE)


#: (path, with "*" for a part the route takes as an argument; the one method allowed; the route).
_ROUTES: tuple[tuple[tuple[str, ...], str, Callable[[Api, Call], Answer]], ...] = (
    (("metrics",), "GET", Api.metrics),
    (("api", "stats"), "GET", Api.stats),
    (("api", "jobs"), "GET", Api.jobs),
    (("api", "jobs", "*"), "GET", Api.job),
    (("api", "jobs", "*", "explain"), "GET", Api.explain),
    (("api", "bulk"), "POST", Api.bulk),
    (("api", "jobs", "*", "requeue"), "POST", Api.requeue_one),
    (("api", "jobs", "*", "cancel"), "POST", Api.cancel_one),
    (("api", "jobs", "*", "run-now"), "POST", Api.run_now_one),
    (("api", "jobs", "*", "delete"), "POST", Api.delete_one),
    (("api", "dlq"), "GET", Api.dlq),
    (("api", "history"), "GET", Api.history),
    (("api", "workers"), "GET", Api.workers),
    (("api", "schedules"), "GET", Api.schedules),
    (("api", "limits"), "GET", Api.limits),
    (("api", "dlq", "requeue"), "POST", Api.requeue_all),
    (("api", "purge"), "POST", Api.purge),
    (("api", "compact"), "POST", Api.compact),
)


__all__ = [
    "Api", "Answer", "Call", "HTTPError", "allow", "json_answer", "json_bytes", "job_detail", "job_summary", "MAX_PAGE_JOBS",
    "BULK_ACTIONS", "MAX_BULK_IDS", "JSON_TYPE",
]
