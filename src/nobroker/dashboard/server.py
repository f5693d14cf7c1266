"""The live dashboard behind ``nobroker serve``: one HTML page, a JSON API, /metrics.

Owns: the HTTP server (standard library ``http.server``), its routes and its
security rules; the page itself is page.html, page.css and page.js (page.py
reads them), so it needs no network: no CDN, no font, no external URL.
Imports: the public nobroker API only (queue objects are used through the
methods of the public Queue), errors, jobs, page, queues. It never reaches
into a storage, so the dashboard works the same on the file storage and on
PostgreSQL.

One dashboard shows every queue of its folder or database when it is given
``list_queues`` and ``open_queue`` (``nobroker serve`` does): the page has a
picker, and every API route takes ``?queue=NAME`` (default: the queue it was
started on). Only listed queues are opened, and never created.

Security, in one place (each rule has its reason next to the code):

* Bound to loopback by default. Binding anything else needs a token; without
  one, ``make_server`` refuses with :class:`DashboardConfigError`.
* With a token, every request needs ``Authorization: Bearer <token>``. The page
  is opened once as ``/?token=<token>``; the server answers with an HttpOnly,
  SameSite=Strict session cookie (a per-server random value, not the token) and
  a redirect that drops the token from the address bar.
* Without a token, the Host header must name a loopback address, so a web page
  that re-points its own DNS name at 127.0.0.1 (DNS rebinding) gets nothing.
  It is parsed strictly: ``[::1]evil.com``, ``127.0.0.1.evil.com`` or a port
  that is not 1-65535 in ASCII digits is not loopback.
* Requests are read the one way a proxy in front reads them too: no
  Transfer-Encoding (411), one Content-Length of digits, one Host, and no
  HTTP/0.9 request line (no version, so no headers to check or answer with).
  Every refusal, http.server's own included, is JSON with the headers below.
* GET never changes anything. Every change is a POST carrying the per-server
  CSRF token in ``X-CSRF-Token`` (random at start, embedded in the page,
  compared with ``hmac.compare_digest``); a POST whose Origin is not this
  server is refused too. Purge also needs ``{"confirm": "<queue name>"}``.
* The page builds its DOM with ``textContent``; no data ever passes through
  ``innerHTML``. JSON answers escape ``<``, ``>`` and ``&`` as ``\\u003c`` etc.
  The HTML itself carries no queue data at all, only values the server made
  (the CSRF token and the nonce).
* The page's Content-Security-Policy lets only its one script and its one
  style block run, by a nonce drawn afresh for each response; every other
  answer gets ``default-src 'none'``. All answers carry nosniff,
  X-Frame-Options DENY, Referrer-Policy no-referrer and Cache-Control no-store.

Routes: ``GET /`` the page; ``GET /api/queues`` (the queues offered, and the
default); ``GET /api/stats``; ``GET /api/jobs?state=&limit=&offset=``;
``GET /api/jobs/<id>``; ``GET /api/dlq?limit=``; ``POST /api/jobs/<id>/requeue``;
``POST /api/dlq/requeue``; ``POST /api/purge`` (body ``{"confirm": "<queue name>"}``);
``POST /api/compact``; ``GET /metrics`` (Prometheus text format 0.0.4). Each
but the page and /api/queues acts on the queue named by ``?queue=`` (default:
the first).
Errors are JSON ``{"error": "..."}``: 400 bad parameters or request, 403 token/CSRF/Host/Origin,
404 unknown job, queue or route, 405 wrong method, 409 requeue of a job that is not
dead, 411 Transfer-Encoding, 413 body too large, 503 queue lock busy.

Requests arrive on many threads and take turns at the queue under one lock.
Both storages are safe across threads on their own; the lock is for the
dashboard's check-then-act steps (look a job up, then requeue it) and keeps a
burst of page refreshes from crowding out the workers sharing this Queue.
"""

from __future__ import annotations

import errno
import hmac
import http.cookies
import http.server
import ipaddress
import json
import logging
import math
import re
import secrets
import socket
import threading
import time
import urllib.parse
import webbrowser
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .page import load_page
from .queues import QueueSet, UnknownQueueError
from ..errors import JobNotFoundError, LockTimeoutError, NobrokerError, SerializationError
from ..jobs import LISTINGS, Job, JobState

if TYPE_CHECKING:  # for the annotations only: any object with the public Queue methods works
    from ..queue import Queue

logger = logging.getLogger("nobroker.dashboard")

# ---------------------------------------------------------------- limits
#: Default page size of /api/jobs and /api/dlq, and the most one call returns.
DEFAULT_PAGE_JOBS = 50
MAX_PAGE_JOBS = 500
#: Largest offset a list accepts: paging further than this is a mistake, not a use.
MAX_OFFSET = 10_000_000
#: Characters of payload, result and error text shown in lists (the detail shows all).
PREVIEW_CHARS = 200
#: Largest request body read (the API's bodies are tiny JSON objects).
MAX_BODY_BYTES = 16 * 1024
#: Most query parameters parsed from one URL.
MAX_QUERY_FIELDS = 16
#: Seconds a connection may sit idle mid-request before the server drops it.
REQUEST_TIMEOUT_SECONDS = 30.0
#: Ready jobs read per page, and at most in all, to find the longest-waiting one for /metrics.
METRICS_SCAN_PAGE = 1_000
METRICS_SCAN_JOBS = 100_000
#: Bytes of randomness in the CSRF token, the session cookie and each CSP nonce.
SECRET_BYTES = 32
NONCE_BYTES = 16

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
SESSION_COOKIE = "nobroker_session"
CSRF_HEADER = "X-CSRF-Token"

_LOOPBACK_NAMES = frozenset({"localhost"})
#: A Host header, strictly (RFC 9110 7.2 over RFC 3986 3.2.2): an IPv6 literal in brackets, or a
#: name or IPv4 address of plain characters, then at most ":" and a port of ASCII digits.
#: Anything else (text after the brackets, a second colon, a sign) is not a host we know.
_HOST_HEADER = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::([0-9]{1,5}))?")
_MAX_PORT = 65535
_METRIC_STATES = ("ready", "delayed", "leased", "done", "dead")


class DashboardConfigError(NobrokerError, ValueError):
    """The dashboard cannot start as asked (for example: a public address without a token)."""


class DashboardBindError(DashboardConfigError, OSError):
    """The dashboard's address cannot be bound (say, the port is in use); the message names host and port."""


class _HTTPError(Exception):
    """An answer other than 200, raised inside a handler and turned into JSON {"error": ...}."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


# ---------------------------------------------------------------- helpers
def is_loopback_host(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; every other name or address is public."""
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        # A host name other than localhost may resolve anywhere (or change):
        # treat it as public, so it needs a token.
        return False


def host_header_name(value: str) -> str | None:
    """The host part of a Host header value, or None if the value is not a well-formed host[:port]."""
    match = _HOST_HEADER.fullmatch(value.strip())
    if match is None:
        return None
    port = match.group(2)
    if port is not None and not 1 <= int(port) <= _MAX_PORT:
        return None
    return match.group(1)


def _json_bytes(value: Any) -> bytes:
    """Compact JSON, with <, > and & escaped so no byte of it can ever read as markup."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"), default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.encode("ascii")


def _preview(value: Any) -> str:
    """A short one-line JSON rendering of ``value`` for lists."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "…"
    return text


def _short(text: str | None) -> str | None:
    if text is None or len(text) <= PREVIEW_CHARS:
        return text
    return text[: PREVIEW_CHARS - 1] + "…"


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
    out["last_error"] = _short(out.get("last_error"))
    out.pop("traceback", None)
    return out


def _format_metric_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# ---------------------------------------------------------------- the server
class DashboardServer(http.server.ThreadingHTTPServer):
    """The HTTP server: holds the queues, the secrets and the lock around queue calls."""

    daemon_threads = True

    def __init__(self, queue: Queue, host: str, port: int, token: str | None, queues: QueueSet | None = None) -> None:
        self.queues = queues if queues is not None else QueueSet(queue)
        assert self.queues.first is queue, "the first queue of the set is the one served"
        self.token = token
        self.csrf_token = secrets.token_hex(SECRET_BYTES)
        self.session_secret = secrets.token_hex(SECRET_BYTES)
        self.queue_lock = threading.Lock()
        family = socket.AF_INET
        if ":" in host.strip("[]"):
            family = socket.AF_INET6
        elif host.lower() == "localhost":
            host = "127.0.0.1"
        self.address_family = family
        super().__init__((host.strip("[]"), port), _Handler)

    @property
    def queue(self) -> Queue:
        """The first queue: what a request that names none gets."""
        return self.queues.first

    @queue.setter
    def queue(self, queue: Queue) -> None:
        self.queues.first = queue

    @property
    def url(self) -> str:
        """The page's address (without the token)."""
        host, port = str(self.server_address[0]), int(self.server_address[1])
        if self.address_family == socket.AF_INET6:
            host = f"[{host}]"
        return f"http://{host}:{port}/"

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run one method of the first queue under the dashboard's lock."""
        return self.call_on(self.queue, method, *args, **kwargs)

    def call_on(self, queue: Queue, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run one Queue method of ``queue`` under the dashboard's lock."""
        with self.queue_lock:
            return getattr(queue, method)(*args, **kwargs)

    def server_close(self) -> None:
        super().server_close()
        self.queues.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: DashboardServer
    raw_requestline: bytes  # set by http.server before parse_request
    queue: Queue  # the queue this request acts on (set by _route)
    server_version = "nobroker"
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_SECONDS

    # ------------------------------------------------------------ plumbing
    def version_string(self) -> str:
        return self.server_version  # the Python version is nobody's business

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        logger.debug("%s %s", self.address_string(), format % args)

    def _security_headers(self, nonce: str | None = None) -> None:
        if nonce:
            csp = (
                "default-src 'self'; "
                f"script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
                "img-src 'self' data:; connect-src 'self'; object-src 'none'; "
                "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
            )
        else:
            csp = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
        self.send_header("Content-Security-Policy", csp)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        *,
        headers: dict[str, str] | None = None,
        nonce: str | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self._security_headers(nonce)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, _json_bytes(value), "application/json; charset=utf-8", headers=headers)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Every refusal http.server makes itself, as ours: JSON, the security headers, connection closed."""
        if self.request_version == "HTTP/0.9":
            # An HTTP/0.9 answer has no status line and no headers: none of the security ones.
            self.request_version = "HTTP/1.0"
        self.log_error("code %d, message %s", code, message)
        self.close_connection = True
        text = message or self.responses.get(code, ("refused", ""))[0]
        self._send_json(code, {"error": text}, {"Connection": "close"})

    def parse_request(self) -> bool:
        """The request line and headers, refusing what two HTTP parsers could read differently.

        A front proxy and this server must agree where a request ends, or a body
        is taken for a second request (request smuggling): so no Transfer-Encoding
        (bodies come with one Content-Length, of digits only), and no HTTP/0.9
        line (no version, no headers: no Host to check, no headers to answer with).
        """
        if len(self.raw_requestline.split()) == 2:
            self.command, self.request_version = None, "HTTP/1.0"  # type: ignore[assignment]
            self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
            self.send_error(400, "a request line needs an HTTP version (HTTP/0.9 is not served): send HTTP/1.1")
            return False
        if not super().parse_request():
            return False
        if self.headers.get_all("Transfer-Encoding"):
            self.send_error(411, "Transfer-Encoding is not accepted here: send the body with a Content-Length")
            return False
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) > 1 or not all(n.strip().isascii() and n.strip().isdigit() for n in lengths):
            self.send_error(400, "bad Content-Length: one header, of digits only")
            return False
        if len(self.headers.get_all("Host") or []) > 1:
            self.send_error(400, "more than one Host header")
            return False
        return True

    def _dispatch(self, method: str) -> None:
        try:
            try:
                self._check_host()
                self._route(method)
            except _HTTPError:
                raise
            except (JobNotFoundError, UnknownQueueError) as exc:
                raise _HTTPError(404, str(exc)) from None
            except LockTimeoutError as exc:
                raise _HTTPError(503, str(exc), {"Retry-After": "1"}) from None
            except (SerializationError, ValueError) as exc:
                raise _HTTPError(400, str(exc)) from None
            except NobrokerError as exc:
                logger.warning("dashboard: %s failed: %s", self.path, exc)
                raise _HTTPError(500, str(exc)) from None
            except Exception:
                logger.exception("dashboard: unexpected error on %s %s", method, self.path)
                raise _HTTPError(500, "internal error; see the server's log") from None
        except _HTTPError as err:
            # A refused request may leave its body unread on the socket, where it
            # would be parsed as the next request: close the connection instead.
            self.close_connection = True
            self._send_json(err.status, {"error": err.message}, {**err.headers, "Connection": "close"})
        except (BrokenPipeError, ConnectionResetError):
            # The client went away mid-answer: nothing to tell it.
            pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _method_not_allowed(self) -> None:
        self._dispatch(self.command)

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _method_not_allowed

    # ------------------------------------------------------------ checks
    def _check_host(self) -> None:
        if self.server.token is not None:
            return  # the token guards a public bind; a rebinding page does not have it
        host = self.headers.get("Host")
        if host is None:
            return  # only non-browser clients omit Host; DNS rebinding needs a browser
        name = host_header_name(host)
        if name is None or not is_loopback_host(name):
            raise _HTTPError(403, f"unexpected Host header {host!r}: open the dashboard by its loopback address")

    def _session_ok(self) -> bool:
        raw = self.headers.get("Cookie")
        if not raw:
            return False
        jar = http.cookies.SimpleCookie()
        try:
            jar.load(raw)
        except http.cookies.CookieError:
            return False
        morsel = jar.get(SESSION_COOKIE)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), self.server.session_secret.encode())

    def _bearer_ok(self) -> bool:
        token = self.server.token
        header = self.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value:
            return False
        return hmac.compare_digest(value.strip().encode("utf-8"), token.encode("utf-8")) if token else False

    def _check_auth(self) -> None:
        if self.server.token is None:
            return
        if self._bearer_ok() or self._session_ok():
            return
        raise _HTTPError(
            403,
            "a token is required: send 'Authorization: Bearer <token>', or open the page once as /?token=<token>",
        )

    def _check_csrf(self) -> None:
        sent = self.headers.get(CSRF_HEADER, "")
        if not sent or not hmac.compare_digest(sent.encode("utf-8", "replace"), self.server.csrf_token.encode()):
            raise _HTTPError(403, f"missing or wrong {CSRF_HEADER} header (reload the dashboard page)")
        # The page's own fetches carry its origin; "null" (a sandboxed frame, a
        # file:// page) or any other origin is not the page, whatever it holds.
        origin = self.headers.get("Origin")
        if origin is not None and urllib.parse.urlsplit(origin).netloc != self.headers.get("Host", ""):
            raise _HTTPError(403, f"cross-origin request from {origin!r} refused")

    def _read_body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length", "0") or "0")  # digits only: see parse_request
        if length > MAX_BODY_BYTES:
            raise _HTTPError(413, f"request body over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise _HTTPError(400, "request body is not JSON") from None
        except RecursionError:
            raise _HTTPError(400, "request body is nested too deeply (the API takes a flat JSON object)") from None
        if not isinstance(body, dict):
            raise _HTTPError(400, "request body must be a JSON object")
        return body

    # ------------------------------------------------------------ routing
    def _route(self, method: str) -> None:
        split = urllib.parse.urlsplit(self.path)
        try:
            query = dict(
                urllib.parse.parse_qsl(split.query, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
            )
        except ValueError:
            raise _HTTPError(400, "too many query parameters") from None
        parts = [urllib.parse.unquote(p) for p in split.path.split("/")[1:]]
        if parts and parts[-1] == "" and len(parts) > 1:
            parts.pop()

        if parts == [""] or parts == ["index.html"]:
            self._allow(method, "GET")
            self._page(query)
            return

        self._check_auth()
        if method == "POST":
            # Checked before routing so a cross-site POST learns nothing, not even 404s.
            self._check_csrf()
        if parts == ["api", "queues"]:
            self._allow(method, "GET")
            self._send_json(200, {"queues": self.server.queues.names(), "default": self.server.queues.first_name})
            return
        # Only a queue the set lists is opened (never created): anything else is a 404.
        self.queue = self.server.queues.get(query.get("queue"))

        if parts == ["metrics"]:
            self._allow(method, "GET")
            self._metrics()
        elif parts == ["api", "stats"]:
            self._allow(method, "GET")
            self._send_json(200, self._stats_body())
        elif parts == ["api", "jobs"]:
            self._allow(method, "GET")
            self._list_jobs(query)
        elif len(parts) == 3 and parts[:2] == ["api", "jobs"]:
            self._allow(method, "GET")
            self._send_json(200, {"job": job_detail(self._call("get", parts[2]))})
        elif len(parts) == 4 and parts[:2] == ["api", "jobs"] and parts[3] == "requeue":
            self._allow(method, "POST")
            self._requeue_one(parts[2])
        elif parts == ["api", "dlq"]:
            self._allow(method, "GET")
            self._dlq(query)
        elif parts == ["api", "dlq", "requeue"]:
            self._allow(method, "POST")
            self._read_body()
            count = self._call("requeue_dead", None)
            logger.info("dashboard: requeued %d dead job(s)", count)
            self._send_json(200, {"requeued": count})
        elif parts == ["api", "purge"]:
            self._allow(method, "POST")
            self._purge()
        elif parts == ["api", "compact"]:
            self._allow(method, "POST")
            self._read_body()
            result = self._call("compact")
            logger.info("dashboard: compacted (%s)", result)
            self._send_json(200, {"compaction": _compaction_dict(result)})
        else:
            raise _HTTPError(404, f"no such page: {split.path}")

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run one Queue method on the queue this request names."""
        return self.server.call_on(self.queue, method, *args, **kwargs)

    def _allow(self, method: str, allowed: str) -> None:
        if method != allowed:
            methods = "GET, HEAD" if allowed == "GET" else allowed
            raise _HTTPError(405, f"use {allowed} here", {"Allow": methods})

    # ------------------------------------------------------------ pages
    def _page(self, query: dict[str, str]) -> None:
        server = self.server
        if server.token is not None and "token" in query:
            given = query["token"]
            if not hmac.compare_digest(given.encode("utf-8"), server.token.encode("utf-8")):
                raise _HTTPError(403, "wrong token")
            cookie = f"{SESSION_COOKIE}={server.session_secret}; Path=/; HttpOnly; SameSite=Strict"
            # A redirect drops the token from the address bar and the history.
            self._send(303, b"", "text/plain; charset=utf-8", headers={"Location": "/", "Set-Cookie": cookie})
            return
        self._check_auth()
        nonce = secrets.token_urlsafe(NONCE_BYTES)
        body = load_page().render(nonce=nonce, csrf=server.csrf_token)
        self._send(200, body, "text/html; charset=utf-8", nonce=nonce)

    def _stats_body(self) -> dict[str, Any]:
        stats = self._call("stats")
        return {
            "queue": str(getattr(self.queue, "name", "default")),
            "durable": bool(getattr(self.queue, "durable", True)),
            "stats": stats.to_dict(),
            "now": time.time(),
        }

    def _int_param(self, query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
        raw = query.get(name, "")
        if raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise _HTTPError(400, f"{name} must be an integer, got {raw!r}") from None
        if not low <= value <= high:
            raise _HTTPError(400, f"{name} must be between {low} and {high}, got {value}")
        return value

    def _list_jobs(self, query: dict[str, str]) -> None:
        state_text = query.get("state", "").strip().lower()
        if state_text in ("", "all"):
            state = None
        elif state_text in LISTINGS:  # a state, or runnable / delayed: the two halves of ready
            state = state_text
        else:
            raise _HTTPError(400, f"state must be one of {', '.join(LISTINGS)} or all, got {state_text!r}")
        limit = self._int_param(query, "limit", DEFAULT_PAGE_JOBS, 1, MAX_PAGE_JOBS)
        offset = self._int_param(query, "offset", 0, 0, MAX_OFFSET)
        # One more than asked tells whether a next page exists without a count.
        jobs = self._call("list_jobs", state, limit=limit + 1, offset=offset)
        self._send_json(
            200,
            {
                "state": state or "all",
                "limit": limit,
                "offset": offset,
                "has_more": len(jobs) > limit,
                "jobs": [job_summary(j) for j in jobs[:limit]],
            },
        )

    def _dlq(self, query: dict[str, str]) -> None:
        limit = self._int_param(query, "limit", DEFAULT_PAGE_JOBS, 1, MAX_PAGE_JOBS)
        jobs = self._call("dlq", limit=limit + 1)
        self._send_json(
            200, {"limit": limit, "has_more": len(jobs) > limit, "jobs": [job_summary(j) for j in jobs[:limit]]}
        )

    def _requeue_one(self, job_id: str) -> None:
        self._read_body()
        with self.server.queue_lock:
            job = self.queue.get(job_id)
            if job.state != JobState.DEAD:
                raise _HTTPError(409, f"job {job_id} is {job.state.value}, not dead: only dead jobs are requeued")
            count = self.queue.requeue_dead(job_id)
        logger.info("dashboard: requeued dead job %s", job_id)
        self._send_json(200, {"requeued": count})

    def _purge(self) -> None:
        body = self._read_body()
        name = str(getattr(self.queue, "name", "default"))
        if body.get("confirm") != name:
            raise _HTTPError(400, f'purge deletes every job: send {{"confirm": "{name}"}} (the queue name) to confirm')
        count = self._call("purge")
        logger.warning("dashboard: purged %d job(s) from queue %s", count, name)
        self._send_json(200, {"purged": count})

    def _metrics(self) -> None:
        text = render_metrics(self.server, self.queue)
        self._send(200, text.encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8")


def _compaction_dict(result: Any) -> dict[str, Any]:
    fields = getattr(result, "__dataclass_fields__", None)
    if fields:
        return {name: getattr(result, name) for name in fields}
    return {"result": str(result)}


# ---------------------------------------------------------------- metrics
def render_metrics(server: DashboardServer, queue: Queue | None = None) -> str:
    """The Prometheus text exposition (format 0.0.4) of a queue's state right now (default: the first).

    Counters (``nobroker_enqueued_total``, ``nobroker_acked_total``) are
    emitted only when the queue's stats carry ``enqueued_total`` and
    ``acked_total``: deriving them from the counts by state would be wrong
    after every compaction or purge, so the dashboard does not guess.
    """
    queue = server.queue if queue is None else queue
    name = _escape_label(str(getattr(queue, "name", "default")))
    now = time.time()
    with server.queue_lock:
        stats = queue.stats()
        oldest = _earliest_runnable(queue, now) if stats.ready else None
    oldest_age = max(0.0, now - oldest) if oldest is not None else 0.0
    counts = stats.to_dict()

    lines: list[str] = []

    def metric(metric_name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {metric_name} {help_text}")
        lines.append(f"# TYPE {metric_name} {kind}")
        for labels, value in samples:
            lines.append(f"{metric_name}{{{labels}}} {_format_metric_value(value)}")

    metric(
        "nobroker_jobs",
        "gauge",
        "Jobs held by the queue, by state (delayed: ready but not yet runnable).",
        [(f'queue="{name}",state="{s}"', counts[s]) for s in _METRIC_STATES],
    )
    metric(
        "nobroker_oldest_ready_age_seconds",
        "gauge",
        "Seconds the longest-waiting runnable job has been runnable (0 when none).",
        [(f'queue="{name}"', round(oldest_age, 3))],
    )
    metric("nobroker_leases_active", "gauge", "Jobs leased right now.", [(f'queue="{name}"', counts["leased"])])
    metric("nobroker_dead_jobs", "gauge", "Jobs in the dead-letter queue.", [(f'queue="{name}"', counts["dead"])])
    enqueued = getattr(stats, "enqueued_total", None)
    acked = getattr(stats, "acked_total", None)
    if isinstance(enqueued, int) and not isinstance(enqueued, bool):
        metric("nobroker_enqueued_total", "counter", "Jobs enqueued since the queue was created.", [(f'queue="{name}"', enqueued)])
    if isinstance(acked, int) and not isinstance(acked, bool):
        metric("nobroker_acked_total", "counter", "Jobs acknowledged since the queue was created.", [(f'queue="{name}"', acked)])
    return "\n".join(lines) + "\n"


def _earliest_runnable(queue: Queue, now: float) -> float | None:
    """The smallest ``available_at`` among ready jobs runnable at ``now``, or None.

    Jobs come oldest first, and a job never becomes available before it was
    enqueued: once the best time found is no later than the last scanned
    job's ``enqueued_at``, no later job can beat it, so the scan usually ends
    after one page. It stops at METRICS_SCAN_JOBS on a pathological queue.
    """
    best: float | None = None
    offset = 0
    while offset < METRICS_SCAN_JOBS:
        page = queue.list_jobs(JobState.READY, limit=METRICS_SCAN_PAGE, offset=offset)
        for job in page:
            if job.available_at <= now and (best is None or job.available_at < best):
                best = job.available_at
        if len(page) < METRICS_SCAN_PAGE:
            break
        if best is not None and best <= page[-1].enqueued_at:
            break
        offset += len(page)
    return best


# ---------------------------------------------------------------- entry points
def make_server(
    queue: Queue,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    list_queues: Callable[[], list[str]] | None = None,
    open_queue: Callable[[str], Queue] | None = None,
) -> DashboardServer:
    """Bind the dashboard for ``queue`` and return the server, not yet serving.

    With ``list_queues`` (the names of the queues there are) and
    ``open_queue`` (open one by name, without creating it), the page and the
    API also offer every other queue listed; the server closes those it
    opened in ``server_close``.

    ``port=0`` picks a free port (``server.server_address[1]`` tells which).
    Call ``server.serve_forever()`` (in a thread, for tests), then
    ``server.shutdown()`` and ``server.server_close()``.
    Raises DashboardConfigError for a public ``host`` without a ``token``, and
    DashboardBindError (also an OSError) when the address cannot be bound (a
    busy port), naming host and port.
    """
    if token is not None:
        if not isinstance(token, str) or not token.strip():
            raise DashboardConfigError("the dashboard token must be a non-empty string")
        if any(ord(c) < 0x21 or ord(c) > 0x7E for c in token):
            raise DashboardConfigError("the dashboard token must be printable ASCII without spaces")
    if not is_loopback_host(host) and token is None:
        raise DashboardConfigError(
            f"refusing to serve the dashboard on {host!r} without a token: anyone who can reach it could "
            "purge the queue. Pass --token <secret> (or bind to 127.0.0.1)."
        )
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise DashboardConfigError(f"port must be an integer from 0 to 65535, got {port!r}")
    queues = QueueSet(queue, list_names=list_queues, open_queue=open_queue)
    try:
        return DashboardServer(queue, host, port, token, queues)
    except OSError as exc:
        # The bare OSError ("Address already in use") names neither the address nor a way out.
        reason = (exc.strerror or str(exc)).lower()
        raise DashboardBindError(
            f"cannot serve the dashboard on {host}:{port}: {reason}; pick another port (--port; 0 takes any free one)"
            if exc.errno == errno.EADDRINUSE
            else f"cannot serve the dashboard on {host}:{port}: {reason}"
        ) from None


def serve(
    queue: Queue,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    open_browser: bool = False,
    on_ready: Callable[[DashboardServer], None] | None = None,
    list_queues: Callable[[], list[str]] | None = None,
    open_queue: Callable[[str], Queue] | None = None,
) -> None:
    """Serve the dashboard for ``queue`` until Ctrl-C (or ``server.shutdown()`` from another thread).

    Logs the address on the ``nobroker.dashboard`` logger and, when given,
    calls ``on_ready(server)`` once the socket listens: ``server.url`` is the
    address to print, and ``server.shutdown()`` stops serving.
    ``open_browser`` opens the page in the default browser (with the token,
    so the browser gets its session cookie). ``list_queues`` and
    ``open_queue``: as for make_server (the picker of the other queues).
    """
    server = make_server(queue, host=host, port=port, token=token, list_queues=list_queues, open_queue=open_queue)
    url = server.url
    logger.info("dashboard for queue %s at %s", getattr(queue, "name", "default"), url)
    if on_ready is not None:
        on_ready(server)
    if open_browser:
        target = url if token is None else f"{url}?{urllib.parse.urlencode({'token': token})}"
        webbrowser.open(target)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        logger.info("dashboard stopped")
    finally:
        server.server_close()


__all__ = [
    "DashboardConfigError",
    "DashboardServer",
    "make_server",
    "serve",
    "render_metrics",
    "is_loopback_host",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
]
