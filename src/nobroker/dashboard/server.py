"""The dashboard's HTTP server: reading requests, and every security rule, in one place.

Owns: DashboardServer (the queues, the secrets, the lock queue calls take
turns under), the request handler (request reading, the checks below, the
page, every answer with its security headers) and check_config (what
make_server may bind). Imports: errors, queue, queues, page, api. The routes
behind /api/ and /metrics are api.py's; this module decides whether a
request reaches them.

One dashboard shows every queue of its folder or database when it is given
``list_queues`` and ``open_queue`` (``nobroker serve`` does): the page lists
them with their counts, and every API route takes ``?queue=NAME`` (default:
the queue it was started on). Only listed queues are opened, and never created.

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
  ``innerHTML``. JSON answers (api.json_bytes) escape ``<``, ``>`` and ``&``
  as ``\\u003c`` etc. The HTML itself carries no queue data at all, only
  values the server made (the CSRF token and the nonce).
* The page's Content-Security-Policy lets only its one script and its one
  style block run, by a nonce drawn afresh for each response; every other
  answer gets ``default-src 'none'``. All answers carry nosniff,
  X-Frame-Options DENY, Referrer-Policy no-referrer and Cache-Control no-store.
"""

from __future__ import annotations

import hmac
import http.cookies
import http.server
import ipaddress
import json
import logging
import re
import secrets
import socket
import sys
import threading
import urllib.parse
from typing import TYPE_CHECKING, Any

from ..errors import NobrokerError
from .api import Answer, Api, HTTPError, allow, json_answer
from .page import load_page
from .queues import QueueSet

if TYPE_CHECKING:  # for the annotations only: any object with the public Queue methods works
    from ..queue import Queue

logger = logging.getLogger("nobroker.dashboard")

#: Largest request body read (the API's bodies are tiny JSON objects).
MAX_BODY_BYTES = 16 * 1024
#: Most query parameters parsed from one URL.
MAX_QUERY_FIELDS = 16
#: Seconds a connection may sit idle mid-request before the server drops it.
REQUEST_TIMEOUT_SECONDS = 30.0
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
#: The page's policy: only its own style and script run, by the nonce of this answer.
_PAGE_CSP = (
    "default-src 'self'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
#: What a socket raises when the client has gone away.
_GONE = (BrokenPipeError, ConnectionResetError)
#: Every other answer's policy: nothing at all.
_DATA_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"


class DashboardConfigError(NobrokerError, ValueError):
    """The dashboard cannot start as asked (for example: a public address without a token)."""


class DashboardBindError(DashboardConfigError, OSError):
    """The dashboard's address cannot be bound (say, the port is in use); the message names host and port."""


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


def check_config(host: str, port: int, token: str | None) -> None:
    """Refuse, with DashboardConfigError, what make_server must not bind: above all a public address without a token."""
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
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= _MAX_PORT:
        raise DashboardConfigError(f"port must be an integer from 0 to {_MAX_PORT}, got {port!r}")


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
        self.api = Api(self.queues, self.queue_lock)
        family = socket.AF_INET
        if ":" in host.strip("[]"):
            family = socket.AF_INET6
        elif host.lower() == "localhost":
            host = "127.0.0.1"
        self.address_family = family
        super().__init__((host.strip("[]"), port), _Handler)
        self.api.sampler.start()  # bound: from here on server_close() stops it

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

    def server_close(self) -> None:
        super().server_close()
        self.api.sampler.stop()
        self.queues.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a browser dropping an idle connection) is routine, not a traceback on stderr."""
        if isinstance(sys.exc_info()[1], _GONE):
            logger.debug("dashboard: %s hung up", client_address)
            return
        super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: DashboardServer
    raw_requestline: bytes  # set by http.server before parse_request
    server_version = "nobroker"
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_SECONDS

    # ------------------------------------------------------------ plumbing
    def version_string(self) -> str:
        return self.server_version  # the Python version is nobody's business

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        logger.debug("%s %s", self.address_string(), format % args)

    def _send(self, answer: Answer, *, nonce: str | None = None) -> None:
        """``answer``, with the security headers every answer carries (the page's CSP when ``nonce`` is given)."""
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        self.send_header("Content-Security-Policy", _PAGE_CSP.format(nonce=nonce) if nonce else _DATA_CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        for key, value in answer.headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Every refusal http.server makes itself, as ours: JSON, the security headers, connection closed."""
        if self.request_version == "HTTP/0.9":
            # An HTTP/0.9 answer has no status line and no headers: none of the security ones.
            self.request_version = "HTTP/1.0"
        self.log_error("code %d, message %s", code, message)
        self.close_connection = True
        text = message or self.responses.get(code, ("refused", ""))[0]
        self._send(json_answer({"error": text}, code, {"Connection": "close"}))

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
            except (HTTPError, *_GONE):
                raise
            except Exception:
                logger.exception("dashboard: unexpected error on %s %s", method, self.path)
                raise HTTPError(500, "internal error; see the server's log") from None
        except HTTPError as err:
            # A refused request may leave its body unread on the socket, where it
            # would be parsed as the next request: close the connection instead.
            self.close_connection = True
            try:
                self._send(json_answer({"error": err.message}, err.status, {**err.headers, "Connection": "close"}))
            except _GONE:
                pass
        except _GONE:
            # The client went away mid-answer (a page left, a tab closed): nothing to tell it, nothing wrong here.
            self.close_connection = True

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
            raise HTTPError(403, f"unexpected Host header {host!r}: open the dashboard by its loopback address")

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
        raise HTTPError(
            403,
            "a token is required: send 'Authorization: Bearer <token>', or open the page once as /?token=<token>",
        )

    def _check_csrf(self) -> None:
        sent = self.headers.get(CSRF_HEADER, "")
        if not sent or not hmac.compare_digest(sent.encode("utf-8", "replace"), self.server.csrf_token.encode()):
            raise HTTPError(403, f"missing or wrong {CSRF_HEADER} header (reload the dashboard page)")
        # The page's own fetches carry its origin; "null" (a sandboxed frame, a
        # file:// page) or any other origin is not the page, whatever it holds.
        origin = self.headers.get("Origin")
        if origin is not None and urllib.parse.urlsplit(origin).netloc != self.headers.get("Host", ""):
            raise HTTPError(403, f"cross-origin request from {origin!r} refused")

    def _read_body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length", "0") or "0")  # digits only: see parse_request
        if length > MAX_BODY_BYTES:
            raise HTTPError(413, f"request body over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise HTTPError(400, "request body is not JSON") from None
        except RecursionError:
            raise HTTPError(400, "request body is nested too deeply (the API takes a flat JSON object)") from None
        if not isinstance(body, dict):
            raise HTTPError(400, "request body must be a JSON object")
        return body

    # ------------------------------------------------------------ routing
    def _route(self, method: str) -> None:
        split = urllib.parse.urlsplit(self.path)
        try:
            query = dict(
                urllib.parse.parse_qsl(split.query, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
            )
        except ValueError:
            raise HTTPError(400, "too many query parameters") from None
        parts = [urllib.parse.unquote(p) for p in split.path.split("/")[1:]]
        if parts and parts[-1] == "" and len(parts) > 1:
            parts.pop()
        if parts == [""] or parts == ["index.html"]:
            allow(method, "GET")
            self._page(query)
            return
        self._check_auth()
        if method == "POST":
            # Checked before routing so a cross-site POST learns nothing, not even 404s.
            self._check_csrf()
        self._send(self.server.api.answer(method, split.path, parts, query, self._read_body))

    def _page(self, query: dict[str, str]) -> None:
        server = self.server
        if server.token is not None and "token" in query:
            given = query["token"]
            if not hmac.compare_digest(given.encode("utf-8"), server.token.encode("utf-8")):
                raise HTTPError(403, "wrong token")
            cookie = f"{SESSION_COOKIE}={server.session_secret}; Path=/; HttpOnly; SameSite=Strict"
            # A redirect drops the token from the address bar and the history; the
            # rest of the address (the queue and the view it names) is kept.
            rest = urllib.parse.urlencode({k: v for k, v in query.items() if k != "token"})
            location = "/?" + rest if rest else "/"
            self._send(Answer(303, b"", "text/plain; charset=utf-8", {"Location": location, "Set-Cookie": cookie}))
            return
        self._check_auth()
        nonce = secrets.token_urlsafe(NONCE_BYTES)
        body = load_page().render(nonce=nonce, csrf=server.csrf_token)
        self._send(Answer(200, body, "text/html; charset=utf-8"), nonce=nonce)


__all__ = [
    "DashboardConfigError",
    "DashboardBindError",
    "DashboardServer",
    "check_config",
    "is_loopback_host",
    "host_header_name",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "MAX_BODY_BYTES",
]
