"""The dashboard's JSON API and /metrics: each route one call of the public Queue, its answer JSON.

Owns: the route table, the checking of query parameters, the JSON shape of a
job (the lease token never leaves), the mapping of queue errors to HTTP
statuses (HTTPError), and the JSON encoding every answer uses.
Imports: errors, jobs, queue, queues, listing, metrics, history. Queues are used through the
methods of the public Queue only, so every route works the same on the file
storage and on PostgreSQL.

Routes (the server serves the page at ``/`` itself): ``GET /api/queues`` (the
queues offered and the one a page opens on; with ``?counts=1`` also the counts
of each, and the errors of those that could not be counted); ``GET /api/stats``;
``GET /api/jobs?state=&kind=&q=&sort=&limit=&offset=`` (a state or
runnable/delayed, a kind, a search of ids and payloads, oldest or newest
first: see listing.py); ``GET /api/jobs/<id>``;
``GET /api/dlq?limit=``; ``GET /api/history`` (the counters' samples of the
last hour, for the chart: history.py); ``GET /api/workers`` (the workers'
announcements, each with ``gone``); ``POST /api/jobs/<id>/requeue``;
``POST /api/jobs/<id>/cancel`` (a ready or delayed job is cancelled, a leased
one marked: ``Queue.cancel``); ``POST /api/bulk`` (body ``{"action":
"cancel" | "requeue", "ids": [...]}``, at most MAX_BULK_IDS: each id acted on
as its own route would, the refusals listed by id);
``POST /api/dlq/requeue``; ``POST /api/purge`` (body ``{"confirm": "<queue name>"}``);
``POST /api/compact``; ``GET /metrics`` (Prometheus text format 0.0.4). Each
but /api/queues acts on the queue named by ``?queue=`` (default: the first).
Errors are JSON ``{"error": "..."}``: 400 bad parameters or request, 403 token/CSRF/Host/Origin,
404 unknown job, queue or route, 405 wrong method, 409 requeue of a job that is not
dead or cancel of a finished one, 411 Transfer-Encoding, 413 body too large, 503 queue lock busy.

Requests arrive on many threads and take turns at the queue under one lock.
Both storages are safe across threads on their own; the lock is for the
dashboard's check-then-act steps (look a job up, then requeue it) and keeps a
burst of page refreshes from crowding out the workers sharing the Queue.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import JobFinishedError, JobNotFoundError, LockTimeoutError, NobrokerError, SerializationError
from ..jobs import COUNTER_NAMES, LISTINGS, MAX_NAME_CHARS, Job, JobState, QueueStats
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
#: Characters of payload, result and error text shown in lists (the detail shows all).
PREVIEW_CHARS = 200
#: Most job ids one bulk action takes (a page of the list is at most MAX_PAGE_JOBS).
MAX_BULK_IDS = 500
#: The bulk actions, each the route it repeats per id.
BULK_ACTIONS = ("cancel", "requeue")
#: Most list counts remembered as hints for the next answer (see listing.count_listed).
MAX_COUNT_HINTS = 256

JSON_TYPE = "application/json; charset=utf-8"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class HTTPError(Exception):
    """An answer other than 200, raised by a route and sent as JSON {"error": ...}."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        assert 400 <= status <= 599, f"an HTTPError is a refusal or a failure, not {status}"
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclasses.dataclass(frozen=True)
class Answer:
    """What a route answers: the server adds the security headers and sends it."""

    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Call:
    """One request as a route sees it: its queue, its query, the path's variable parts, its body on demand."""

    queue: Queue
    query: dict[str, str]
    args: tuple[str, ...]
    read_body: Callable[[], dict[str, Any]]


def json_bytes(value: Any) -> bytes:
    """Compact JSON, with <, > and & escaped so no byte of it can ever read as markup."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"), default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.encode("ascii")


def json_answer(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return Answer(status, json_bytes(value), JSON_TYPE, headers or {})


def _clip(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _preview(value: Any) -> str:
    """A short one-line JSON rendering of ``value`` for lists."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return _clip(text)


def job_detail(job: Job) -> dict[str, Any]:
    """Every field of a job for the API, except the lease token.

    The token belongs to the worker holding the lease; an operator acts on a
    job by id, so the dashboard has no use for it and does not hand it out.
    """
    out = job.to_dict()
    out.pop("lease_token", None)
    out["leased"] = job.lease_token is not None and job.state == JobState.LEASED
    return out


def job_summary(job: Job) -> dict[str, Any]:
    """A job for a list: previews instead of the full payload, result and error, and no traceback."""
    out = job_detail(job)
    out["payload_preview"] = _preview(out.pop("payload"))
    result = out.pop("result")
    out["result_preview"] = None if result is None else _preview(result)
    last_error = out.get("last_error")
    out["last_error"] = None if last_error is None else _clip(last_error)
    out.pop("traceback", None)
    return out


def _int_param(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = query.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HTTPError(400, f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise HTTPError(400, f"{name} must be between {low} and {high}, got {value}")
    return value


def _text_param(query: dict[str, str], name: str, longest: int) -> str:
    value = query.get(name, "")
    if len(value) > longest:
        raise HTTPError(400, f"{name} must be at most {longest} characters, got {len(value)}")
    if "\x00" in value:
        raise HTTPError(400, f"{name} must not contain a NUL character")
    return value


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
    kind = _text_param(query, "kind", MAX_NAME_CHARS) or None
    text = _text_param(query, "q", MAX_SEARCH_CHARS).strip()
    limit = _int_param(query, "limit", DEFAULT_PAGE_JOBS, 1, MAX_PAGE_JOBS)
    offset = _int_param(query, "offset", 0, 0, MAX_OFFSET)
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


def allow(method: str, allowed: str) -> None:
    """Refuse (405, naming the method allowed) a request whose method is not ``allowed``."""
    if method != allowed:
        methods = "GET, HEAD" if allowed == "GET" else allowed
        raise HTTPError(405, f"use {allowed} here", {"Allow": methods})


class Api:
    """The routes: each a public Queue call on the queue a request names, under the dashboard's one lock."""

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

    def dlq(self, call: Call) -> Answer:
        limit = _int_param(call.query, "limit", DEFAULT_PAGE_JOBS, 1, MAX_PAGE_JOBS)
        with self.lock:
            jobs = call.queue.dlq(limit=limit + 1)
        return json_answer({"limit": limit, "has_more": len(jobs) > limit, "jobs": [job_summary(j) for j in jobs[:limit]]})

    def requeue_one(self, call: Call) -> Answer:
        call.read_body()
        job_id = call.args[0]
        with self.lock:
            count = self._requeue(call.queue, job_id)
        logger.info("dashboard: requeued dead job %s", job_id)
        return json_answer({"requeued": count})

    def cancel_one(self, call: Call) -> Answer:
        call.read_body()
        job_id = call.args[0]
        with self.lock:
            job = self._cancel(call.queue, job_id)
        logger.info("dashboard: cancel of job %s (now %s)", job_id, job.state.value)
        return json_answer({"job": job_detail(job)})

    def _cancel(self, queue: Queue, job_id: str) -> Job:
        try:
            return queue.cancel(job_id)
        except JobFinishedError as exc:
            raise HTTPError(409, f"job {job_id} is {exc.state}: only ready, delayed and leased jobs are cancelled") from None

    def _requeue(self, queue: Queue, job_id: str) -> int:
        job = queue.get(job_id)
        if job.state != JobState.DEAD:
            raise HTTPError(409, f"job {job_id} is {job.state.value}, not dead: only dead jobs are requeued")
        return queue.requeue_dead(job_id)

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
                    if action == "cancel":
                        self._cancel(call.queue, job_id)
                    else:
                        self._requeue(call.queue, job_id)
                done.append(job_id)
            except HTTPError as exc:
                refused[job_id] = exc.message
            except JobNotFoundError as exc:
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
    (("api", "bulk"), "POST", Api.bulk),
    (("api", "jobs", "*", "requeue"), "POST", Api.requeue_one),
    (("api", "jobs", "*", "cancel"), "POST", Api.cancel_one),
    (("api", "dlq"), "GET", Api.dlq),
    (("api", "history"), "GET", Api.history),
    (("api", "workers"), "GET", Api.workers),
    (("api", "dlq", "requeue"), "POST", Api.requeue_all),
    (("api", "purge"), "POST", Api.purge),
    (("api", "compact"), "POST", Api.compact),
)


__all__ = ["Api", "Answer", "Call", "HTTPError", "allow", "json_answer", "json_bytes", "job_detail", "job_summary", "MAX_PAGE_JOBS"]
