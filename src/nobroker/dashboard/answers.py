"""What every route answers with: refusals as HTTPError, answers as JSON, a job as the API shows it.

Owns: HTTPError (an answer other than 200), Answer and Call (a route's
answer and its view of the request), the JSON encoding every answer uses
(``<``, ``>`` and ``&`` escaped), the JSON shape of a job (the lease token
never leaves), the checking of query parameters, and ``allow`` (405 for a
wrong method). Imports: jobs, queue. The routes themselves are actions.py's (the
POSTs) and api.py's (the reads).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..jobs import Job, JobState

if TYPE_CHECKING:  # for the annotations only: any object with the public Queue methods works
    from ..queue import Queue

#: Characters of payload, result and error text shown in lists (the detail shows all).
PREVIEW_CHARS = 200

JSON_TYPE = "application/json; charset=utf-8"


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


def preview(value: Any) -> str:
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
    out["payload_preview"] = preview(out.pop("payload"))
    result = out.pop("result")
    out["result_preview"] = None if result is None else preview(result)
    last_error = out.get("last_error")
    out["last_error"] = None if last_error is None else _clip(last_error)
    out.pop("traceback", None)
    return out


def int_param(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
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


def text_param(query: dict[str, str], name: str, longest: int) -> str:
    value = query.get(name, "")
    if len(value) > longest:
        raise HTTPError(400, f"{name} must be at most {longest} characters, got {len(value)}")
    if "\x00" in value:
        raise HTTPError(400, f"{name} must not contain a NUL character")
    return value


def allow(method: str, allowed: str) -> None:
    """Refuse (405, naming the method allowed) a request whose method is not ``allowed``."""
    if method != allowed:
        methods = "GET, HEAD" if allowed == "GET" else allowed
        raise HTTPError(405, f"use {allowed} here", {"Allow": methods})


__all__ = ["Answer", "Call", "HTTPError", "allow", "int_param", "text_param", "json_answer", "json_bytes", "job_detail", "job_summary",
           "preview", "PREVIEW_CHARS", "JSON_TYPE"]
