"""Where the dashboard listens: loopback only unless a token guards it, bad tokens and ports refused, serve().

Owns: ``BindTest`` (make_server's host, port and token checks, a busy port,
IPv6 loopback, and serve(): it logs its address, stops on shutdown and can
open the page with the token). Imports: the standard library, nobroker,
tests.dashsupport (POLL_SECONDS), tests.support.
"""

from __future__ import annotations

import http.client
import logging
import socket
import threading
import unittest
from unittest import mock

from nobroker import Queue
from nobroker.dashboard import DashboardConfigError, DashboardServer, is_loopback_host, make_server, serve
from nobroker.errors import NobrokerError
from tests.dashsupport import POLL_SECONDS
from tests.support import WAIT_SECONDS, TempDirTestCase


class BindTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.queue = Queue(self.dir, fsync=False)
        self.addCleanup(self.queue.close)

    def test_loopback_hosts(self) -> None:
        for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
            self.assertTrue(is_loopback_host(host), host)
        for host in ("0.0.0.0", "::", "", "192.168.1.5", "10.0.0.1", "example.com", "localhost.evil.example"):
            self.assertFalse(is_loopback_host(host), host)

    def test_a_public_address_without_a_token_is_refused(self) -> None:
        for host in ("0.0.0.0", "::", "192.168.1.5", "example.com", ""):
            with self.subTest(host=host):
                with self.assertRaises(DashboardConfigError) as caught:
                    make_server(self.queue, host=host, port=0)
                self.assertIn("--token", str(caught.exception))
                self.assertIsInstance(caught.exception, ValueError)
                self.assertIsInstance(caught.exception, NobrokerError)

    def test_a_public_address_with_a_token_binds(self) -> None:
        server = make_server(self.queue, host="0.0.0.0", port=0, token="t0ken")
        server.server_close()

    def test_bad_tokens_and_ports_are_refused(self) -> None:
        for token in ("", "   ", "has space", "tab\there", "ünï"):
            with self.subTest(token=token), self.assertRaises(DashboardConfigError):
                make_server(self.queue, port=0, token=token)
        for port in (-1, 65536, True):
            with self.subTest(port=port), self.assertRaises(DashboardConfigError):
                make_server(self.queue, port=port)

    def test_a_busy_port_is_one_error_naming_it(self) -> None:
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with self.assertRaises(DashboardConfigError) as caught:
            make_server(self.queue, host="127.0.0.1", port=port)
        self.assertIsInstance(caught.exception, OSError)
        self.assertIn(f"127.0.0.1:{port}: address already in use; pick another port", str(caught.exception))

    def test_ipv6_loopback(self) -> None:
        if not socket.has_ipv6:
            self.skipTest("no IPv6 on this machine")
        try:
            server = make_server(self.queue, host="::1", port=0)
        except OSError as exc:
            self.skipTest(f"cannot bind ::1 here: {exc}")
        self.addCleanup(server.server_close)
        self.assertTrue(server.url.startswith("http://[::1]:"))
        thread = threading.Thread(target=server.serve_forever, args=(POLL_SECONDS,), daemon=True)
        thread.start()
        self.addCleanup(thread.join, 10)
        self.addCleanup(server.shutdown)
        conn = http.client.HTTPConnection("::1", server.server_address[1], timeout=60)
        conn.request("GET", "/api/stats")
        self.assertEqual(conn.getresponse().status, 200)
        conn.close()

    def test_serve_logs_the_address_and_stops_on_shutdown(self) -> None:
        ready = threading.Event()
        servers: list[DashboardServer] = []

        def on_ready(server: DashboardServer) -> None:
            servers.append(server)
            ready.set()

        with self.assertLogs("nobroker.dashboard", logging.INFO) as logs:
            thread = threading.Thread(
                target=serve, args=(self.queue,), kwargs={"port": 0, "on_ready": on_ready}, daemon=True
            )
            thread.start()
            self.assertTrue(ready.wait(WAIT_SECONDS))
            (server,) = servers
            conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
            conn.request("GET", "/api/stats")
            self.assertEqual(conn.getresponse().status, 200)
            conn.close()
            server.shutdown()
            thread.join(WAIT_SECONDS)
            self.assertFalse(thread.is_alive())
        self.assertTrue(any(server.url in line for line in logs.output), logs.output)

    def test_serve_can_open_the_page_in_a_browser_with_the_token(self) -> None:
        servers: list[DashboardServer] = []

        def on_ready(server: DashboardServer) -> None:
            servers.append(server)
            # shutdown() waits for serve_forever, which starts after this returns.
            threading.Thread(target=server.shutdown, daemon=True).start()

        with mock.patch("webbrowser.open") as opened:
            serve(self.queue, port=0, token="tok-123", open_browser=True, on_ready=on_ready)
        (server,) = servers
        opened.assert_called_once_with(server.url + "?token=tok-123")


if __name__ == "__main__":
    unittest.main()
