"""The live dashboard behind ``nobroker serve``: one HTML page, a JSON API, /metrics.

Owns: the HTTP server (standard library ``http.server``), its routes, its
security rules, and the embedded page (HTML, CSS and JavaScript live in this
module as strings, so the page ships inside the single-file zipapp and needs no
network: no CDN, no font, no external URL).
Imports: the public nobroker API only (queue objects are used through the
methods of the public Queue), errors, jobs, dashboard_queues. It never reaches
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
        body = (
            _PAGE.replace("{{NONCE}}", nonce)
            .replace("{{CSRF}}", server.csrf_token)
            .replace("{{CSRF_HEADER}}", CSRF_HEADER)
        )
        self._send(200, body.encode("utf-8"), "text/html; charset=utf-8", nonce=nonce)

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


# ---------------------------------------------------------------- the page
# The page holds no queue data: everything arrives as JSON and goes into the
# DOM through textContent. {{NONCE}} and {{CSRF}} are server-made hex/base64url.
_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf-token" content="{{CSRF}}">
<link rel="icon" href="data:,">
<title>nobroker dashboard</title>
<style nonce="{{NONCE}}">
:root { --fg:#1d2330; --muted:#667085; --line:#d9dde5; --bg:#f7f8fa; --card:#fff; --accent:#2f5bd3;
        --ready:#2f7d4f; --delayed:#8a6d1d; --leased:#2f5bd3; --done:#5b6475; --dead:#b3261e; }
* { box-sizing: border-box; }
[hidden] { display:none !important; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--fg); background:var(--bg); }
header { display:flex; align-items:baseline; gap:1rem; padding:.8rem 1.2rem; background:var(--card); border-bottom:1px solid var(--line); flex-wrap:wrap; }
header h1 { font-size:1.1rem; margin:0; }
header .meta { color:var(--muted); }
#status.bad { color:var(--dead); font-weight:600; }
main { padding:1rem 1.2rem; display:grid; gap:1rem; }
.counts { display:grid; grid-template-columns:repeat(6, minmax(6rem, 1fr)); gap:.6rem; }
.count { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:.6rem .8rem; }
.count .n { font-size:1.6rem; font-weight:650; font-variant-numeric:tabular-nums; }
.count .label { color:var(--muted); text-transform:uppercase; font-size:.75rem; letter-spacing:.04em; }
.count.ready .n { color:var(--ready); } .count.delayed .n { color:var(--delayed); }
.count.leased .n { color:var(--leased); } .count.done .n { color:var(--done); } .count.dead .n { color:var(--dead); }
.panel { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:.8rem; min-width:0; }
.layout { display:grid; grid-template-columns:minmax(0, 3fr) minmax(0, 2fr); gap:1rem; }
.tabs { display:flex; gap:.3rem; flex-wrap:wrap; margin-bottom:.6rem; }
button { font:inherit; border:1px solid var(--line); background:#fff; border-radius:6px; padding:.25rem .7rem; cursor:pointer; }
button:hover { border-color:var(--accent); }
button[aria-pressed="true"] { background:var(--accent); color:#fff; border-color:var(--accent); }
button.danger { color:var(--dead); border-color:#e7b4b0; }
button:disabled { opacity:.5; cursor:default; }
table { width:100%; border-collapse:collapse; }
th, td { text-align:left; padding:.3rem .4rem; border-bottom:1px solid var(--line); vertical-align:top; }
th { color:var(--muted); font-weight:600; font-size:.8rem; }
td.mono, .mono { font-family:ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:.82rem; }
/* max-width:0 lets these cells shrink to the table, then clip with an ellipsis. */
td.clip { max-width:0; width:30%; overflow:hidden; text-overflow:ellipsis; white-space:nowrap; }
tr.job { cursor:pointer; } tr.job:focus { outline:2px solid var(--accent); outline-offset:-2px; } tr.job:hover { background:#eef2fb; } tr.job.selected { background:#e2e9fb; }
.pager { display:flex; gap:.5rem; align-items:center; margin-top:.6rem; color:var(--muted); }
.empty { color:var(--muted); padding:.8rem 0; }
dl { display:grid; grid-template-columns:max-content 1fr; gap:.2rem .8rem; margin:0 0 .6rem; }
dt { color:var(--muted); } dd { margin:0; overflow-wrap:anywhere; }
pre { background:#f2f4f7; border:1px solid var(--line); border-radius:6px; padding:.6rem; overflow:auto; max-height:22rem; margin:.2rem 0 .6rem; white-space:pre-wrap; overflow-wrap:anywhere; }
.actions { display:flex; gap:.5rem; flex-wrap:wrap; align-items:center; }
#message:empty { display:none; }
#message.error { color:var(--dead); }
dialog { border:1px solid var(--line); border-radius:8px; max-width:28rem; }
dialog input { font:inherit; width:100%; margin:.4rem 0 .8rem; padding:.3rem; }
.hint { color:var(--muted); font-size:.85rem; }
#detail-title { font-family:ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:1rem; margin:0 0 .6rem; overflow-wrap:anywhere; }
@media (max-width: 900px) { .layout { grid-template-columns:1fr; } .counts { grid-template-columns:repeat(3, 1fr); } }
</style>
</head>
<body>
<header>
  <h1>nobroker</h1>
  <span class="meta">queue <strong id="queue-name">…</strong></span>
  <label class="meta" id="queue-picker-label" hidden>switch to <select id="queue-picker"></select></label>
  <span class="meta" id="durable"></span>
  <span class="meta">updated <span id="updated">never</span></span>
  <span class="meta" id="status">connecting…</span>
</header>
<main>
  <section class="counts" aria-label="jobs by state">
    <div class="count ready"><div class="label">ready</div><div class="n" id="count-ready">–</div></div>
    <div class="count delayed"><div class="label">delayed</div><div class="n" id="count-delayed">–</div></div>
    <div class="count leased"><div class="label">leased</div><div class="n" id="count-leased">–</div></div>
    <div class="count done"><div class="label">done</div><div class="n" id="count-done">–</div></div>
    <div class="count dead"><div class="label">dead</div><div class="n" id="count-dead">–</div></div>
    <div class="count total"><div class="label">total</div><div class="n" id="count-total">–</div></div>
  </section>
  <div id="message" role="status"></div>
  <div class="layout">
    <section class="panel" aria-label="jobs">
      <div class="tabs" id="tabs">
        <button data-state="runnable" aria-pressed="true">ready</button>
        <button data-state="delayed" aria-pressed="false">delayed</button>
        <button data-state="leased" aria-pressed="false">leased</button>
        <button data-state="done" aria-pressed="false">done</button>
        <button data-state="dead" aria-pressed="false">dead (DLQ)</button>
        <button data-state="all" aria-pressed="false">all</button>
      </div>
      <div class="actions" id="dlq-actions" hidden>
        <button id="requeue-all">Requeue all dead jobs</button>
      </div>
      <table>
        <thead><tr><th>id</th><th>kind</th><th>state</th><th>prio</th><th>tries</th><th>info</th><th>payload</th><th></th></tr></thead>
        <tbody id="jobs"></tbody>
      </table>
      <div class="empty" id="jobs-empty" hidden>No jobs here.</div>
      <div class="pager">
        <button id="prev">← newer</button>
        <span id="page-info"></span>
        <button id="next">older →</button>
        <label>per page <select id="page-size"><option>20</option><option selected>50</option><option>100</option><option>500</option></select></label>
      </div>
    </section>
    <section class="panel" aria-label="job detail">
      <h2 id="detail-title">Select a job</h2>
      <p class="hint" id="detail-hint">Click a row to see the job in full: payload, attempts, error and its traceback, stage, result.</p>
      <div id="detail" hidden>
        <dl id="detail-fields"></dl>
        <div>payload</div><pre id="detail-payload"></pre>
        <div>last error</div><pre id="detail-error"></pre>
        <div id="detail-traceback-label">traceback</div><pre id="detail-traceback"></pre>
        <div>result</div><pre id="detail-result"></pre>
        <div class="actions"><button id="detail-requeue" hidden>Requeue this job</button><button id="detail-refresh">Refresh</button></div>
      </div>
    </section>
  </div>
  <section class="panel" aria-label="maintenance">
    <div class="actions">
      <button id="compact">Compact…</button>
      <button id="purge" class="danger">Purge…</button>
      <span class="hint">Compact drops done jobs. Purge deletes every job in the queue.</span>
    </div>
  </section>
</main>
<dialog id="purge-dialog">
  <form method="dialog" id="purge-form">
    <p><strong>Purge deletes every job in this queue</strong>, in every state. It cannot be undone.</p>
    <label>Type the queue name <strong class="mono" id="purge-name"></strong> to confirm:
      <input id="purge-input" autocomplete="off" spellcheck="false"></label>
    <div class="actions">
      <button type="button" id="purge-cancel">Cancel</button>
      <button type="submit" id="purge-confirm" class="danger" disabled>Purge every job</button>
    </div>
  </form>
</dialog>
<script nonce="{{NONCE}}">
"use strict";
(function () {
  const CSRF = document.querySelector('meta[name="csrf-token"]').content;
  const REFRESH_MS = 1000;
  const DETAIL_EVERY = 3;  // rounds between reloads of an unchanged job's detail
  const QUEUES_EVERY = 10;  // rounds between looks for queues added to the folder or database
  const $ = (id) => document.getElementById(id);
  const view = { state: "runnable", offset: 0, limit: 50, selected: null, queue: "", lastStats: "", ticks: 0, listSeq: 0, detailSeq: 0, now: Date.now() / 1000 };

  // Build elements only through textContent: nothing from the queue is ever parsed as HTML.
  function el(tag, props, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "text") node.textContent = value == null ? "" : String(value);
      else if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children || []) node.append(child);
    return node;
  }

  function say(text, isError) {
    const box = $("message");
    box.textContent = text || "";
    box.className = isError ? "error" : "";
  }

  // Every API call names the queue on show; the server opens only queues it lists.
  function withQueue(path) {
    if (!view.queue) return path;
    return path + (path.includes("?") ? "&" : "?") + "queue=" + encodeURIComponent(view.queue);
  }

  async function api(path, options) {
    if (path !== "/api/queues") path = withQueue(path);
    const opts = Object.assign({ credentials: "same-origin", headers: {} }, options || {});
    if (opts.method === "POST") {
      opts.headers = Object.assign({ "Content-Type": "application/json", "X-CSRF-Token": CSRF }, opts.headers);
      opts.body = JSON.stringify(opts.body || {});
    }
    const response = await fetch(path, opts);
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) {
      const reason = data && typeof data.error === "string" ? data.error : "HTTP " + response.status;
      throw new Error(reason);
    }
    return data;
  }

  function duration(seconds) {
    const abs = Math.abs(seconds);
    if (abs < 120) return Math.round(abs) + " s";
    if (abs < 7200) return Math.round(abs / 60) + " min";
    if (abs < 172800) return Math.round(abs / 3600) + " h";
    return Math.round(abs / 86400) + " d";
  }

  function relTime(t) {
    const delta = t - view.now;
    if (Math.abs(delta) < 1) return "now";
    return delta > 0 ? "in " + duration(delta) : duration(delta) + " ago";
  }

  function isoTime(t) {
    return new Date(t * 1000).toISOString().replace("T", " ").replace(/\\.\\d+Z$/, "Z");
  }

  function fmtTime(t) {
    return t == null ? "–" : isoTime(t) + " (" + relTime(t) + ")";
  }

  // One short line for the list: what the job is waiting for, or why it died.
  function infoOf(job) {
    if (job.state === "dead") return ["error: " + (job.last_error == null ? "–" : job.last_error), job.last_error || ""];
    if (job.state === "leased") {
      const stage = job.stage == null ? "" : " · " + job.stage;
      return ["lease ends " + relTime(job.lease_deadline) + stage, isoTime(job.lease_deadline)];
    }
    if (job.state === "ready" && job.available_at > view.now) return ["runs " + relTime(job.available_at), isoTime(job.available_at)];
    if (job.state === "ready") {
      const waited = view.now - job.available_at;
      return [waited < 1 ? "ready now" : "waiting " + duration(waited), isoTime(job.available_at)];
    }
    return ["enqueued " + relTime(job.enqueued_at), isoTime(job.enqueued_at)];
  }

  // ---------------------------------------------------------------- counts
  async function refreshStats() {
    try {
      const data = await api("/api/stats");
      if (view.queue && data.queue !== view.queue) return;  // an answer for the queue shown before a switch
      view.now = data.now;
      view.queue = data.queue;
      $("queue-name").textContent = data.queue;
      $("durable").textContent = data.durable ? "durable (fsync on)" : "NOT durable (fsync off)";
      for (const key of ["ready", "delayed", "leased", "done", "dead", "total"]) {
        $("count-" + key).textContent = String(data.stats[key]);
      }
      $("updated").textContent = new Date().toLocaleTimeString();
      $("status").textContent = "live";
      $("status").className = "";
      // The list is small (one page of previews): redraw it every round, so
      // waiting times, lease deadlines and stages stay current. The detail may
      // hold a large payload: reload it when the counts move, else now and then.
      await refreshJobs();
      const signature = JSON.stringify(data.stats);
      view.ticks += 1;
      if (view.ticks % QUEUES_EVERY === 0) await loadQueues();
      if (view.selected && (signature !== view.lastStats || view.ticks % DETAIL_EVERY === 0)) {
        await showJob(view.selected, true);
      }
      view.lastStats = signature;
    } catch (err) {
      $("status").textContent = "disconnected: " + err.message;
      $("status").className = "bad";
    }
  }

  // ---------------------------------------------------------------- queues
  async function loadQueues() {
    let data;
    try {
      data = await api("/api/queues");
    } catch (err) {
      return;  // the picker is a convenience; the counts say when the server is gone
    }
    if (!view.queue) view.queue = data["default"];
    const picker = $("queue-picker");
    picker.replaceChildren(...data.queues.map((name) => el("option", { value: name, text: name })));
    picker.value = view.queue;
    $("queue-picker-label").hidden = data.queues.length < 2;
  }

  function switchQueue(name) {
    if (name === view.queue) return;
    view.queue = name;
    view.offset = 0;
    view.lastStats = "";
    view.listSeq += 1;  // answers still coming for the previous queue must not draw
    view.detailSeq += 1;
    clearDetail();
    say("");
    $("queue-name").textContent = name;
    refreshStats();
  }

  // ---------------------------------------------------------------- lists
  async function refreshJobs() {
    const params = new URLSearchParams({ state: view.state, limit: String(view.limit), offset: String(view.offset) });
    // Only the latest request may draw: a slow answer for the previous tab must not win.
    const mine = ++view.listSeq;
    let data;
    try {
      data = await api("/api/jobs?" + params.toString());
    } catch (err) {
      if (mine === view.listSeq) say("Could not list jobs: " + err.message, true);
      return;
    }
    if (mine !== view.listSeq) return;
    if (data.jobs.length === 0 && view.offset > 0) {
      view.offset = Math.max(0, view.offset - view.limit);
      return refreshJobs();
    }
    const focused = document.activeElement && document.activeElement.closest
      ? document.activeElement.closest("tr.job") : null;
    const focusId = focused ? focused.getAttribute("data-job-id") : null;
    const rows = data.jobs.map(jobRow);
    $("jobs").replaceChildren(...rows);
    // Redrawing must not steal the keyboard user's place in the list.
    const again = focusId === null ? null : rows.find((row) => row.getAttribute("data-job-id") === focusId);
    if (again) again.focus();
    $("jobs-empty").hidden = rows.length !== 0;
    $("prev").disabled = view.offset === 0;
    $("next").disabled = !data.has_more;
    $("page-info").textContent = rows.length
      ? (view.offset + 1) + "–" + (view.offset + rows.length)
      : "";
    $("dlq-actions").hidden = view.state !== "dead";
  }

  function jobRow(job) {
    const info = infoOf(job);
    const cells = [
      el("td", { class: "mono", text: job.id }),
      el("td", { text: job.kind }),
      el("td", { text: job.state === "ready" && job.available_at > view.now ? "delayed" : job.state }),
      el("td", { text: job.priority }),
      el("td", { text: job.attempts + "/" + job.max_attempts }),
      el("td", { class: "clip", text: info[0], title: info[1] }),
      el("td", { class: "mono clip payload", text: job.payload_preview, title: job.payload_preview }),
    ];
    const actions = el("td");
    if (job.state === "dead") {
      actions.append(el("button", {
        text: "Requeue", "data-action": "requeue", "data-job-id": job.id,
        onclick: (ev) => { ev.stopPropagation(); requeueOne(job.id); },
      }));
    }
    cells.push(actions);
    const row = el("tr", {
      class: "job" + (job.id === view.selected ? " selected" : ""), "data-job-id": job.id, tabindex: 0,
      onclick: () => showJob(job.id, false),
      onkeydown: (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); showJob(job.id, false); } },
    }, cells);
    return row;
  }

  // ---------------------------------------------------------------- detail
  async function showJob(id, quiet) {
    const mine = ++view.detailSeq;
    let data;
    try {
      data = await api("/api/jobs/" + encodeURIComponent(id));
      if (mine !== view.detailSeq) return;
    } catch (err) {
      if (mine !== view.detailSeq) return;
      if (!quiet) say("Could not load job " + id + ": " + err.message, true);
      if (quiet) clearDetail();
      return;
    }
    const job = data.job;
    view.selected = job.id;
    for (const row of document.querySelectorAll("tr.job")) {
      row.classList.toggle("selected", row.getAttribute("data-job-id") === job.id);
    }
    $("detail-title").textContent = job.id;
    $("detail-hint").hidden = true;
    const fields = [
      ["state", job.state === "ready" && job.available_at > view.now ? "ready (delayed)" : job.state],
      ["kind", job.kind], ["priority", job.priority],
      ["attempts", job.attempts + " of " + job.max_attempts],
      ["stage", job.stage == null ? "–" : job.stage],
      ["dedupe key", job.dedupe_key == null ? "–" : job.dedupe_key],
      ["enqueued", fmtTime(job.enqueued_at)], ["available", fmtTime(job.available_at)],
      ["lease deadline", fmtTime(job.lease_deadline)], ["seq", job.seq],
    ];
    $("detail-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
    $("detail-payload").textContent = JSON.stringify(job.payload, null, 2);
    $("detail-error").textContent = job.last_error == null ? "–" : job.last_error;
    $("detail-traceback").textContent = job.traceback == null ? "" : job.traceback;  // text, never markup
    $("detail-traceback").hidden = $("detail-traceback-label").hidden = job.traceback == null;
    $("detail-result").textContent = job.result == null ? "–" : JSON.stringify(job.result, null, 2);
    $("detail-requeue").hidden = job.state !== "dead";
    $("detail").hidden = false;
  }

  function clearDetail() {
    view.selected = null;
    $("detail").hidden = true;
    $("detail-hint").hidden = false;
    $("detail-title").textContent = "Select a job";
  }

  // ---------------------------------------------------------------- actions
  async function requeueOne(id) {
    try {
      const data = await api("/api/jobs/" + encodeURIComponent(id) + "/requeue", { method: "POST" });
      say("Requeued " + data.requeued + " job: " + id);
    } catch (err) {
      say("Requeue failed: " + err.message, true);
    }
    view.lastStats = "";
    await refreshStats();
  }

  async function requeueAll() {
    if (!window.confirm("Requeue every dead job? Their attempts start again from 0.")) return;
    try {
      const data = await api("/api/dlq/requeue", { method: "POST" });
      say("Requeued " + data.requeued + " dead job(s).");
    } catch (err) {
      say("Requeue failed: " + err.message, true);
    }
    view.lastStats = "";
    await refreshStats();
  }

  async function compact() {
    if (!window.confirm("Compact the queue? Done jobs are dropped for good; everything else is kept.")) return;
    try {
      const data = await api("/api/compact", { method: "POST" });
      const c = data.compaction;
      say("Compacted: kept " + c.jobs_kept + ", dropped " + c.jobs_dropped + " done job(s).");
    } catch (err) {
      say("Compaction failed: " + err.message, true);
    }
    view.lastStats = "";
    await refreshStats();
  }

  function openPurge() {
    if (!window.confirm("Purge deletes EVERY job in queue " + view.queue + ". Continue?")) return;
    $("purge-name").textContent = view.queue;
    $("purge-input").value = "";
    $("purge-confirm").disabled = true;
    $("purge-dialog").showModal();
    $("purge-input").focus();
  }

  async function purge(ev) {
    ev.preventDefault();
    const typed = $("purge-input").value;
    $("purge-dialog").close();
    if (typed !== view.queue) return;
    try {
      const data = await api("/api/purge", { method: "POST", body: { confirm: typed } });
      say("Purged " + data.purged + " job(s).");
    } catch (err) {
      say("Purge failed: " + err.message, true);
    }
    clearDetail();
    view.lastStats = "";
    await refreshStats();
  }

  // ---------------------------------------------------------------- wiring
  for (const button of document.querySelectorAll("#tabs button")) {
    button.addEventListener("click", () => {
      view.state = button.getAttribute("data-state");
      view.offset = 0;
      for (const b of document.querySelectorAll("#tabs button")) b.setAttribute("aria-pressed", String(b === button));
      refreshJobs();
    });
  }
  $("prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - view.limit); refreshJobs(); });
  $("next").addEventListener("click", () => { view.offset += view.limit; refreshJobs(); });
  $("page-size").addEventListener("change", () => { view.limit = Number($("page-size").value); view.offset = 0; refreshJobs(); });
  $("requeue-all").addEventListener("click", requeueAll);
  $("detail-requeue").addEventListener("click", () => { if (view.selected) requeueOne(view.selected); });
  $("detail-refresh").addEventListener("click", () => { if (view.selected) showJob(view.selected, false); });
  $("compact").addEventListener("click", compact);
  $("purge").addEventListener("click", openPurge);
  $("purge-input").addEventListener("input", () => { $("purge-confirm").disabled = $("purge-input").value !== view.queue; });
  $("purge-cancel").addEventListener("click", () => $("purge-dialog").close());
  $("purge-form").addEventListener("submit", purge);
  $("queue-picker").addEventListener("change", () => switchQueue($("queue-picker").value));

  // A timer that waits for each round to finish, so a slow queue never piles up requests.
  async function loop() {
    await refreshStats();
    setTimeout(loop, REFRESH_MS);
  }
  loadQueues().then(loop);
})();
</script>
</body>
</html>
"""

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
