"""The dashboard's safety rules over HTTP, without a browser: headers, CSRF, origins, Host, the token, raw requests.

Owns: ``PageTest`` (the page's strict security headers, its nonce and CSRF
token, nothing from the network), ``SafetyTest`` (POSTs need the CSRF token
and the same origin, GET changes nothing, a foreign Host is refused, stored
markup comes back escaped; also on PostgreSQL), ``RawHttpTest`` (what only a
raw socket sends: hang-ups, chunked bodies, odd Content-Length and Host
values, HTTP/0.9) and ``TokenTest`` (the bearer token on every route, traded
for a strict cookie by the page). Imports: the standard library, nobroker,
tests.dashsupport (the server and its request helpers), tests.support.
"""

from __future__ import annotations

import io
import logging
import re
import socket
import struct
import threading
import unittest
import urllib.parse
from typing import Any
from unittest import mock

from nobroker.dashboard import CSRF_HEADER, MAX_BODY_BYTES, SESSION_COOKIE, DashboardServer
from nobroker.jobs import JobState
from tests.dashsupport import DashboardCase, OnPostgres
from tests.support import WAIT_SECONDS

SCRIPT_PAYLOAD = "<script>alert(1)</script>"


def nonce_of(csp: str) -> str:
    match = re.search(r"script-src 'nonce-([A-Za-z0-9_-]+)'", csp)
    assert match is not None, f"no script nonce in {csp!r}"
    return match.group(1)


class PageTest(DashboardCase):
    def test_page_is_served_with_strict_security_headers(self) -> None:
        resp = self.request("GET", "/")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.headers["Content-Type"], "text/html; charset=utf-8")
        csp = resp.headers["Content-Security-Policy"]
        self.assertIn("default-src 'self'", csp)
        self.assertIn("frame-ancestors 'none'", csp)
        self.assertNotIn("unsafe-inline", csp)
        self.assertNotIn("unsafe-eval", csp)
        nonce = nonce_of(csp)
        # Every script and style block carries this response's nonce; nothing else can run.
        self.assertEqual(re.findall(r"<script\b[^>]*>", resp.text), [f'<script nonce="{nonce}">'])
        self.assertEqual(re.findall(r"<style\b[^>]*>", resp.text), [f'<style nonce="{nonce}">'])
        self.assertEqual(resp.headers["X-Content-Type-Options"], "nosniff")
        self.assertEqual(resp.headers["X-Frame-Options"], "DENY")
        self.assertEqual(resp.headers["Referrer-Policy"], "no-referrer")
        self.assertEqual(resp.headers["Server"], "nobroker")

    def test_each_page_gets_a_fresh_nonce_and_the_server_csrf_token(self) -> None:
        first, second = self.request("GET", "/"), self.request("GET", "/")
        nonces = [nonce_of(r.headers["Content-Security-Policy"]) for r in (first, second)]
        self.assertNotEqual(nonces[0], nonces[1])
        for resp in (first, second):
            self.assertIn(f'<meta name="csrf-token" content="{self.server.csrf_token}">', resp.text)
        self.assertRegex(self.server.csrf_token, r"^[0-9a-f]{64}$")

    def test_page_needs_nothing_from_the_network(self) -> None:
        page = self.request("GET", "/").text
        self.assertNotRegex(page, r"(?i)(src|href)\s*=\s*[\"']?(https?:)?//")
        self.assertNotIn("@import", page)
        self.assertNotIn("innerHTML", page)
        self.assertNotIn("outerHTML", page)
        self.assertNotIn("insertAdjacentHTML", page)
        self.assertNotIn("document.write", page)

    def test_api_answers_carry_the_security_headers_too(self) -> None:
        for path in ("/api/stats", "/metrics", "/api/nope"):
            resp = self.request("GET", path)
            self.assertEqual(resp.headers["X-Content-Type-Options"], "nosniff", path)
            self.assertEqual(resp.headers["X-Frame-Options"], "DENY", path)
            self.assertIn("default-src 'none'", resp.headers["Content-Security-Policy"], path)
            self.assertEqual(resp.headers["Cache-Control"], "no-store", path)

    def test_head_answers_without_a_body(self) -> None:
        resp = self.request("HEAD", "/api/stats")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.body, b"")


class SafetyTest(DashboardCase):
    POSTS = ("/api/dlq/requeue", "/api/purge", "/api/compact")

    def test_post_without_or_with_a_wrong_csrf_token_is_refused(self) -> None:
        dead = self.make_dead()
        self.make_done()
        ready = self.queue.enqueue("ready")
        before = self.snapshot()
        paths = (*self.POSTS, f"/api/jobs/{dead}/requeue", f"/api/jobs/{ready.id}/cancel", "/api/bulk",
                 f"/api/jobs/{ready.id}/run-now", f"/api/jobs/{ready.id}/delete", f"/api/jobs/{dead}/delete")
        for path in paths:
            body = {"confirm": self.queue.name, "action": "cancel", "ids": [ready.id, dead]}
            for csrf in (False, "0" * 64, self.server.csrf_token[:-1], self.server.csrf_token + "0"):
                with self.subTest(path=path, csrf=csrf):
                    self.assertError(self.request("POST", path, body=body, csrf=csrf), 403, CSRF_HEADER)
        self.assertEqual(self.snapshot(), before)

    def test_a_post_from_another_origin_is_refused_even_with_the_token(self) -> None:
        dead = self.make_dead()
        for origin in ("http://evil.example", "null", f"http://localhost:{self.port}"):
            with self.subTest(origin=origin):
                resp = self.request("POST", "/api/dlq/requeue", headers={"Origin": origin})
                self.assertError(resp, 403, "cross-origin")
        self.assertEqual(self.queue.get(dead).state, JobState.DEAD)
        same = self.request("POST", "/api/dlq/requeue", headers={"Origin": f"http://127.0.0.1:{self.port}"})
        self.assertEqual(same.status, 200, same.body)

    def test_the_job_actions_from_another_origin_are_refused(self) -> None:
        later = self.queue.enqueue("later", delay=3600)
        dead = self.make_dead()
        before = self.snapshot()
        for path, body in ((f"/api/jobs/{later.id}/run-now", None), (f"/api/jobs/{later.id}/delete", None),
                           (f"/api/jobs/{dead}/delete", None), (f"/api/jobs/{later.id}/cancel", None),
                           ("/api/bulk", {"action": "run_now", "ids": [later.id]}),
                           ("/api/bulk", {"action": "delete", "ids": [later.id, dead]})):  # fmt: skip
            for origin in ("http://evil.example", "null"):
                with self.subTest(path=path, origin=origin):
                    self.assertError(self.request("POST", path, body=body, headers={"Origin": origin}), 403, "cross-origin")
        self.assertEqual(self.snapshot(), before)

    def test_get_never_changes_state(self) -> None:
        dead = self.make_dead()
        self.queue.enqueue("ready")
        self.make_done()
        before = self.snapshot()
        paths = [
            "/",
            "/api/stats",
            "/api/jobs",
            "/api/jobs?state=dead",
            f"/api/jobs/{dead}",
            "/api/dlq",
            "/metrics",
            "/api/history",
            "/api/workers",
            # The state-changing routes must not act on GET or HEAD.
            f"/api/jobs/{dead}/requeue",
            f"/api/jobs/{dead}/cancel",
            f"/api/jobs/{dead}/run-now",
            f"/api/jobs/{dead}/delete",
            f"/api/jobs/{dead}/explain",
            "/api/schedules",
            "/api/limits",
            "/api/bulk",
            "/api/dlq/requeue",
            "/api/purge",
            "/api/compact",
        ]
        for path in paths:
            for method in ("GET", "HEAD"):
                self.request(method, path)
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.queue.get(dead).state, JobState.DEAD)

    def test_a_foreign_host_header_is_refused(self) -> None:
        # A page whose DNS name is re-pointed at 127.0.0.1 (DNS rebinding) sends its own name.
        for host in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example"):
            with self.subTest(host=host):
                self.assertError(self.request("GET", "/api/stats", headers={"Host": host}), 403, "Host")
                self.assertError(self.request("GET", "/", headers={"Host": host}), 403, "Host")
        for host in (f"localhost:{self.port}", f"127.0.0.1:{self.port}", "127.0.0.1"):
            with self.subTest(host=host):
                self.assertEqual(self.request("GET", "/api/stats", headers={"Host": host}).status, 200)

    def test_a_script_payload_comes_back_escaped(self) -> None:
        job = self.queue.enqueue(SCRIPT_PAYLOAD, job_id="xss-1")
        self.queue.enqueue({"html": "<img src=x onerror=alert(2)>", "amp": "a&b"})
        leased = self.lease()
        self.queue.nack(leased, error="</pre><script>alert(3)</script>", permanent=True)
        for path in ("/api/jobs", "/api/jobs?state=dead", "/api/dlq", f"/api/jobs/{job.id}"):
            with self.subTest(path=path):
                resp = self.request("GET", path)
                self.assertEqual(resp.status, 200)
                for raw in (b"<", b">", b"&"):
                    self.assertNotIn(raw, resp.body)
                self.assertIn(b"\\u003cscript\\u003e", resp.body)
        detail = self.get_json(f"/api/jobs/{job.id}")["job"]
        self.assertEqual(detail["payload"], SCRIPT_PAYLOAD)
        self.assertEqual(detail["last_error"], "</pre><script>alert(3)</script>")
        page = self.request("GET", "/").text
        self.assertNotIn("alert(", page)
        self.assertNotIn("xss-1", page)


class RawHttpTest(DashboardCase):
    """What only a raw socket can send: smuggling attempts, HTTP/0.9, odd Host values."""

    SECURITY_HEADERS = (b"content-security-policy:", b"x-content-type-options: nosniff", b"x-frame-options: deny")

    def raw(self, data: bytes) -> bytes:
        """Send ``data``, close our side, and read everything the server answers until it closes."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)

    @staticmethod
    def statuses(answer: bytes) -> list[int]:
        return [int(code) for code in re.findall(rb"^HTTP/1\.[01] (\d{3}) ", answer, re.M)]

    def test_a_client_that_hangs_up_mid_answer_is_routine(self) -> None:
        job = self.queue.enqueue("x" * (12 * 1024 * 1024))  # an answer larger than the socket buffers
        finished = threading.Semaphore(0)
        real = DashboardServer.shutdown_request

        def shutdown_request(server: DashboardServer, request: Any) -> None:
            real(server, request)
            finished.release()

        stderr = io.StringIO()
        with mock.patch.object(DashboardServer, "shutdown_request", shutdown_request), \
                mock.patch("sys.stderr", stderr), self.assertNoLogs("nobroker.dashboard", logging.INFO):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            sock.sendall(f"GET /api/jobs/{job.id} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
                         + (f"Authorization: Bearer {self.token}\r\n".encode() if self.token else b"") + b"\r\n")
            self.assertTrue(sock.recv(1024).startswith(b"HTTP/1.1 200"))
            # Hang up hard (a reset) while the server is still writing the body.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            self.assertTrue(finished.acquire(timeout=WAIT_SECONDS), "the server never finished the request")
        self.assertEqual(stderr.getvalue(), "", "a hang-up printed a traceback")
        self.assertEqual(self.request("GET", "/api/stats").status, 200, "the server serves on")

    def test_a_chunked_body_is_refused_not_read_as_a_second_request(self) -> None:
        self.make_done()
        before = self.snapshot()
        smuggled = b"GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        for method, path in (("POST", "/api/compact"), ("GET", "/api/stats")):
            with self.subTest(method=method):
                answer = self.raw(
                    f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n{CSRF_HEADER}: {self.server.csrf_token}\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n".encode() + f"{len(smuggled):x}\r\n".encode() + smuggled
                    + b"\r\n0\r\n\r\n" + smuggled
                )  # fmt: skip
                self.assertEqual(self.statuses(answer), [411], answer)
                self.assertIn(b"Transfer-Encoding", answer)
                self.assertIn(b"connection: close", answer.lower())
        self.assertEqual(self.snapshot(), before, "the refused request did something")

    def test_content_length_must_be_one_number_of_digits(self) -> None:
        for lengths in (("2", "40"), ("+2",), ("0x2",), ("2_0",), ("-1",), ("\u0662",)):
            with self.subTest(lengths=lengths):
                head = "".join(f"Content-Length: {n}\r\n" for n in lengths)
                answer = self.raw(
                    f"POST /api/compact HTTP/1.1\r\nHost: 127.0.0.1\r\n{CSRF_HEADER}: {self.server.csrf_token}\r\n"
                    f"{head}\r\n{{}}".encode("utf-8") + b"GET /api/stats HTTP/1.1\r\n\r\n"
                )  # fmt: skip
                self.assertEqual(self.statuses(answer), [400], answer)
        two_hosts = self.raw(b"GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n")
        self.assertEqual(self.statuses(two_hosts), [400], two_hosts)

    def test_an_http_0_9_request_line_gets_a_proper_refusal(self) -> None:
        for line in (b"GET /api/stats\r\n", b"GET /\r\n", b"POST /api/purge\r\n"):
            with self.subTest(line=line):
                answer = self.raw(line)
                self.assertEqual(self.statuses(answer), [400], answer)
                self.assertTrue(answer.startswith(b"HTTP/1."), answer)
                for header in self.SECURITY_HEADERS:
                    self.assertIn(header, answer.lower())
                self.assertIn(b"HTTP version", answer)
                self.assertNotIn(b'"ready"', answer, "the stats went out")

    def test_http_server_own_refusals_carry_the_security_headers(self) -> None:
        for line in (b"GET /api/stats HTTP/9.9\r\n\r\n", b"GET /api/stats HTTX/1.1\r\n\r\n", b"BREW\r\n\r\n",
                     b"GET / HTTP/1.1 extra\r\n\r\n"):  # fmt: skip
            with self.subTest(line=line):
                answer = self.raw(line)
                self.assertTrue(answer.startswith(b"HTTP/1."), answer)
                self.assertGreaterEqual(self.statuses(answer)[0], 400, answer)
                for header in self.SECURITY_HEADERS:
                    self.assertIn(header, answer.lower())

    def test_a_deeply_nested_json_body_is_a_400(self) -> None:
        for body in (b"[" * 10_000, b'{"a":' * 2_000 + b"1" + b"}" * 2_000):
            with self.subTest(size=len(body)):
                self.assertLess(len(body), MAX_BODY_BYTES)
                self.assertError(self.request("POST", "/api/purge", body=body), 400, "nested")

    def test_host_values_are_parsed_strictly(self) -> None:
        port = self.port
        for host in (
            "[::1]evil.com", "[::1].evil.com", "[::1]:80evil.com", "127.0.0.1.evil.com", "127.0.0.1evil.com",
            "::1", "[::1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:99999", "127.0.0.1:+80",
            "127.0.0.1:0x50", f"127.0.0.1:{port}:1", f"127.0.0.1:{port}x", "127.0.0.1 :80", "localhost.evil.com",
            "localhost@evil.com", "evil.com#127.0.0.1", "",
        ):  # fmt: skip
            with self.subTest(host=host):
                answer = self.raw(f"GET /api/stats HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                self.assertEqual(self.statuses(answer), [403], answer)
        for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}",
                     "[::1]", f"127.1.2.3:{port}"):  # fmt: skip
            with self.subTest(host=host):
                answer = self.raw(f"GET /api/stats HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                self.assertEqual(self.statuses(answer), [200], answer)


class TokenTest(DashboardCase):
    token = "s3cret-token-for-tests"

    def test_every_route_needs_the_bearer_token(self) -> None:
        dead = self.make_dead()
        for method, path in (
            ("GET", "/"),
            ("GET", "/api/stats"),
            ("GET", "/api/jobs"),
            ("GET", f"/api/jobs/{dead}"),
            ("GET", "/api/dlq"),
            ("GET", "/metrics"),
            ("POST", "/api/dlq/requeue"),
            ("POST", f"/api/jobs/{dead}/requeue"),
            ("POST", f"/api/jobs/{dead}/cancel"),
            ("POST", f"/api/jobs/{dead}/run-now"),
            ("POST", f"/api/jobs/{dead}/delete"),
            ("GET", f"/api/jobs/{dead}/explain"),
            ("GET", "/api/schedules"),
            ("GET", "/api/limits"),
            ("POST", "/api/bulk"),
            ("GET", "/api/history"),
            ("GET", "/api/workers"),
            ("POST", "/api/compact"),
        ):
            with self.subTest(method=method, path=path):
                self.assertError(self.request(method, path, auth=False), 403, "token")
                wrong = {"Authorization": "Bearer not-the-token"}
                self.assertError(self.request(method, path, auth=False, headers=wrong), 403, "token")
                basic = {"Authorization": "Basic " + self.token}
                self.assertError(self.request(method, path, auth=False, headers=basic), 403, "token")
        self.assertEqual(self.queue.get(dead).state, JobState.DEAD)
        for path in ("/", "/api/stats", "/metrics", f"/api/jobs/{dead}"):
            self.assertEqual(self.request("GET", path).status, 200, path)

    def test_the_token_does_not_replace_the_csrf_token(self) -> None:
        dead = self.make_dead()
        self.assertError(self.request("POST", "/api/dlq/requeue", csrf=False), 403, CSRF_HEADER)
        self.assertEqual(self.queue.get(dead).state, JobState.DEAD)
        self.assertEqual(self.request("POST", "/api/dlq/requeue").json(), {"requeued": 1})

    def test_the_page_trades_the_token_in_the_url_for_a_strict_cookie(self) -> None:
        self.assertError(self.request("GET", "/?token=wrong", auth=False), 403, "token")
        resp = self.request("GET", "/?" + urllib.parse.urlencode({"token": self.token}), auth=False)
        self.assertEqual(resp.status, 303)
        self.assertEqual(resp.headers["Location"], "/")
        # The rest of the address (the queue and view it names) survives the trade.
        kept = self.request("GET", "/?" + urllib.parse.urlencode({"queue": "a b&c", "token": self.token, "state": "dead"}), auth=False)
        self.assertEqual(kept.headers["Location"], "/?queue=a+b%26c&state=dead")
        cookie = resp.headers["Set-Cookie"]
        self.assertIn("HttpOnly", cookie)
        self.assertIn("SameSite=Strict", cookie)
        self.assertIn("Path=/", cookie)
        name_value = cookie.split(";", 1)[0]
        name, value = name_value.split("=", 1)
        self.assertEqual(name, SESSION_COOKIE)
        self.assertNotIn(self.token, cookie)  # the cookie is a server secret, not the token
        with_cookie = {"Cookie": name_value}
        self.assertEqual(self.request("GET", "/", auth=False, headers=with_cookie).status, 200)
        self.assertEqual(self.request("GET", "/api/stats", auth=False, headers=with_cookie).status, 200)
        flipped = "1" if value[-1] != "1" else "2"
        forged = {"Cookie": f"{SESSION_COOKIE}={value[:-1]}{flipped}"}
        self.assertError(self.request("GET", "/api/stats", auth=False, headers=forged), 403, "token")

    def test_with_a_token_any_host_name_is_accepted(self) -> None:
        resp = self.request("GET", "/api/stats", headers={"Host": "queue-box.internal:8765"})
        self.assertEqual(resp.status, 200)


class PostgresSafetyTest(OnPostgres, SafetyTest):
    pass


if __name__ == "__main__":
    unittest.main()
