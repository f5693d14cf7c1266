"""A tiny headless-Chromium driver over the DevTools protocol, for tests.

Owns: starting Chromium with ``--remote-debugging-pipe``, talking to it,
collecting console errors, exceptions and network requests, and always
killing the process. Imports: the standard library and tests.support only.

The pipe transport needs no port and no package: Chromium reads commands
from fd 3 and writes replies to fd 4, one JSON message per NUL-terminated
chunk. Every wait has a timeout, so a hung browser fails a test instead of
hanging CI.

Usage::

    from tests.browser import require_browser, file_url

    class PageTest(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            cls.browser = require_browser(cls)     # skips (or fails in CI) if absent

        def test_title(self):
            self.browser.open(file_url("web/index.html"))
            self.assertEqual(self.browser.evaluate("document.title"), "nobroker")
            self.assertEqual(self.browser.errors, [])

API: ``Browser.start()``, ``open(url)``, ``evaluate(js)``, ``screenshot(path)``,
``send(method, params)`` (any DevTools command), ``close()``, the lists
``errors``, ``requests`` and ``dialogs`` (native dialogs are accepted and
recorded, never left blocking), ``clear()``;
``require_browser(testcase_or_class)``, ``find_chromium()``, ``file_url(path)``.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
from typing import Any

from tests.support import IN_CI

#: Executable names tried on PATH, in order. NOBROKER_CHROMIUM overrides.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Flags for a quiet, offline, sandbox-free headless run (root in a container has no sandbox).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
)
#: Seconds to wait for one protocol reply, for a page load, and for the process to exit.
COMMAND_TIMEOUT = 120.0
LOAD_TIMEOUT = 120.0
EXIT_TIMEOUT = 5.0
#: The page's viewport, also the screenshot size unless full_page is asked for.
WINDOW_SIZE = (1280, 900)
#: Largest single protocol message we accept (screenshots are the big ones).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: Lowest fd number for the parent's copies of the pipe ends, so the child
#: can move them to 3 and 4 without clobbering one with the other.
_HIGH_FD = 10


class BrowserUnavailable(RuntimeError):
    """No Chromium on this machine, or it would not start."""


class BrowserError(RuntimeError):
    """The browser answered with an error, timed out, or went away."""


def find_chromium() -> str | None:
    """Path of a Chromium-like executable, or None."""
    override = os.environ.get("NOBROKER_CHROMIUM")
    if override:
        return shutil.which(override) or (override if os.access(override, os.X_OK) else None)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def file_url(path: str | os.PathLike[str]) -> str:
    """A file:// URL for a local path (relative paths are taken from the repo root)."""
    p = pathlib.Path(path)
    if not p.is_absolute():
        p = pathlib.Path(__file__).resolve().parent.parent / p
    return p.resolve().as_uri()


class Browser:
    """One headless Chromium with one page. Not thread-safe; one test at a time.

    ``errors``: console.error texts, uncaught exceptions and error log entries,
    in arrival order. ``requests``: every URL the page asked the network for.
    """

    def __init__(self, proc: subprocess.Popen[bytes], to_browser: int, from_browser: int, profile: str) -> None:
        self._proc = proc
        self._out = to_browser
        self._in = from_browser
        self._profile = profile
        self._next_id = 0
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._events: list[dict[str, Any]] = []
        self._dead: str | None = None
        self._session: str | None = None
        self._write_lock = threading.Lock()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[tuple[str, str]] = []
        self._reader = threading.Thread(target=self._read_loop, name="cdp-reader", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def start(cls, executable: str | None = None, *, window_size: tuple[int, int] = WINDOW_SIZE) -> "Browser":
        """Launch headless Chromium and open one blank page. Raises BrowserUnavailable."""
        exe = executable or find_chromium()
        if exe is None and os.environ.get("NOBROKER_CHROMIUM"):
            raise BrowserUnavailable(f"NOBROKER_CHROMIUM={os.environ['NOBROKER_CHROMIUM']!r} is not an executable")
        if exe is None:
            raise BrowserUnavailable(
                "Chromium was not found on PATH (tried %s); install it, e.g. `apt-get install chromium`"
                % ", ".join(CHROMIUM_NAMES)
            )
        profile = tempfile.mkdtemp(prefix="nobroker-chromium-")
        # Two pipes: we write commands into cmd_w, Chromium reads them on fd 3;
        # Chromium writes replies on fd 4, we read them from rep_r.
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        child_in = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
        child_out = fcntl.fcntl(rep_w, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
        os.close(cmd_r)
        os.close(rep_w)

        def place_pipe_fds() -> None:  # runs in the child between fork and exec
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        args = [
            exe,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={window_size[0]},{window_size[1]}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=False,  # our pipe fds are CLOEXEC; only the dup2'd 3 and 4 survive exec
                preexec_fn=place_pipe_fds,
                start_new_session=True,
            )
        except OSError as exc:
            for fd in (child_in, child_out, cmd_w, rep_r):
                os.close(fd)
            shutil.rmtree(profile, ignore_errors=True)
            raise BrowserUnavailable(f"could not start {exe}: {exc}") from exc
        os.close(child_in)
        os.close(child_out)
        browser = cls(proc, cmd_w, rep_r, profile)
        try:
            browser._attach_page(window_size)
        except BaseException as exc:
            browser.close()
            if isinstance(exc, BrowserError):
                raise BrowserUnavailable(f"{exe} started but did not answer: {exc}") from exc
            raise
        return browser

    def close(self) -> None:
        """Close the browser; kill it if it does not exit promptly. Safe to call twice."""
        proc = self._proc
        if proc.poll() is None:
            try:
                self._send("Browser.close", {}, session=False, wait=False)
            except (BrowserError, OSError):
                pass
            try:
                proc.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, 9)  # its own session: renderer children go too
                except (ProcessLookupError, PermissionError):
                    proc.kill()
                proc.wait(timeout=EXIT_TIMEOUT)
        for fd in (self._out, self._in):
            try:
                os.close(fd)
            except OSError:
                pass
        self._out = self._in = -1
        self._reader.join(timeout=EXIT_TIMEOUT)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ page
    def open(self, url: str, *, timeout: float = LOAD_TIMEOUT) -> None:
        """Navigate the page to ``url`` and wait for its load event."""
        with self._cond:
            mark = len(self._events)
        reply = self.send("Page.navigate", {"url": url}, timeout=timeout)
        if reply.get("errorText"):
            raise BrowserError(f"navigation to {url} failed: {reply['errorText']}")
        self._wait_event("Page.loadEventFired", after=mark, timeout=timeout)

    def evaluate(self, expression: str, *, timeout: float = COMMAND_TIMEOUT) -> Any:
        """Run JavaScript in the page; await a returned promise; return the value as JSON data.

        A thrown exception raises BrowserError with its message.
        """
        reply = self.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True, "userGesture": True},
            timeout=timeout,
        )
        details = reply.get("exceptionDetails")
        if details:
            raise BrowserError("JavaScript error: " + _exception_text(details))
        result = reply.get("result", {})
        return result.get("value")

    def screenshot(self, path: str | os.PathLike[str], *, full_page: bool = False) -> str:
        """Save a PNG of the page (the viewport, or the whole page) and return its path."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            metrics = self.send("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            params["captureBeyondViewport"] = True
        reply = self.send("Page.captureScreenshot", params)
        out = pathlib.Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(reply["data"]))
        return str(out)

    def clear(self) -> None:
        """Forget collected errors and requests (e.g. before opening the next page)."""
        with self._cond:
            self.errors.clear()
            self.requests.clear()
            self.dialogs.clear()

    # ------------------------------------------------------------ protocol
    def send(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = COMMAND_TIMEOUT) -> dict[str, Any]:
        """Send one DevTools command to the page and return its result (raises BrowserError)."""
        return self._send(method, params or {}, session=True, wait=True, timeout=timeout)

    def _send(
        self, method: str, params: dict[str, Any], *, session: bool, wait: bool, timeout: float = COMMAND_TIMEOUT
    ) -> dict[str, Any]:
        with self._cond:
            if self._dead:
                raise BrowserError(f"browser is gone ({self._dead}); cannot send {method}")
            self._next_id += 1
            msg_id = self._next_id
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params}
        if session and self._session:
            message["sessionId"] = self._session
        data = json.dumps(message).encode() + b"\0"
        try:
            with self._write_lock:  # the reader thread answers dialogs on the same pipe
                while data:
                    written = os.write(self._out, data)
                    data = data[written:]
        except OSError as exc:
            raise BrowserError(f"cannot write to the browser: {exc}") from exc
        if not wait:
            return {}
        deadline = time.monotonic() + timeout
        with self._cond:
            while msg_id not in self._replies:
                left = deadline - time.monotonic()
                if self._dead:
                    raise BrowserError(f"browser went away while waiting for {method} ({self._dead})")
                if left <= 0:
                    raise BrowserError(f"no reply to {method} within {timeout:.0f}s")
                self._cond.wait(left)
            reply = self._replies.pop(msg_id)
        if "error" in reply:
            raise BrowserError(f"{method} failed: {reply['error'].get('message')}")
        return reply.get("result", {})

    def _attach_page(self, viewport: tuple[int, int]) -> None:
        target = self._send("Target.createTarget", {"url": "about:blank"}, session=False, wait=True)
        attached = self._send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False, wait=True
        )
        self._session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        # The window size includes a window frame that headless still reserves;
        # pin the page's own viewport so layouts and screenshots are exact.
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": viewport[0], "height": viewport[1], "deviceScaleFactor": 1, "mobile": False},
        )

    def _wait_event(self, method: str, *, after: int, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            index = after
            while True:
                while index < len(self._events):
                    event = self._events[index]
                    index += 1
                    if event.get("method") == method and event.get("sessionId") == self._session:
                        return event
                left = deadline - time.monotonic()
                if self._dead:
                    raise BrowserError(f"browser went away while waiting for {method} ({self._dead})")
                if left <= 0:
                    raise BrowserError(f"no {method} within {timeout:.0f}s")
                self._cond.wait(left)

    def _read_loop(self) -> None:
        buffer = b""
        reason = "pipe closed"
        try:
            while True:
                chunk = os.read(self._in, 1 << 16)
                if not chunk:
                    break
                buffer += chunk
                if len(buffer) > MAX_MESSAGE_BYTES:
                    reason = "message too large"
                    break
                while b"\0" in buffer:
                    raw, buffer = buffer.split(b"\0", 1)
                    self._dispatch(json.loads(raw))
        except (OSError, ValueError) as exc:
            reason = f"read failed: {exc}"
        with self._cond:
            self._dead = reason
            self._cond.notify_all()

    def _dispatch(self, message: dict[str, Any]) -> None:
        with self._cond:
            if "id" in message:
                self._replies[message["id"]] = message
            else:
                self._note(message)
                self._events.append(message)
            self._cond.notify_all()

    def _note(self, event: dict[str, Any]) -> None:
        method = event.get("method")
        params = event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            parts = [str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", [])]
            self.errors.append("console.error: " + " ".join(parts))
        elif method == "Runtime.exceptionThrown":
            self.errors.append("exception: " + _exception_text(params.get("exceptionDetails", {})))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log: {entry.get('text', '')} {entry.get('url', '')}".rstrip())
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        elif method == "Page.javascriptDialogOpening":
            # A native alert/confirm/prompt would block every later command until a
            # timeout; record it and accept it instead, so a test can assert on it.
            self.dialogs.append((params.get("type", ""), params.get("message", "")))
            threading.Thread(target=self._accept_dialog, daemon=True).start()


    def _accept_dialog(self) -> None:
        try:
            self._send("Page.handleJavaScriptDialog", {"accept": True}, session=True, wait=False)
        except (BrowserError, OSError):
            pass


def _exception_text(details: dict[str, Any]) -> str:
    exc = details.get("exception") or {}
    return str(exc.get("description") or details.get("text") or "unknown error")


def require_browser(testcase: unittest.TestCase | type[unittest.TestCase]) -> Browser:
    """A started Browser, closed when the test (or class) is cleaned up.

    Without Chromium the test is skipped with the reason, except in CI
    (env CI=true), where a missing browser is a failure: the browser tests
    must really run there. Call from setUp (instance) or setUpClass (class).
    """
    try:
        browser = Browser.start()
    except BrowserUnavailable as exc:
        if IN_CI:
            raise AssertionError(f"browser tests must run in CI: {exc}") from exc
        raise unittest.SkipTest(f"headless Chromium unavailable: {exc}") from exc
    if isinstance(testcase, type):
        testcase.addClassCleanup(browser.close)
    else:
        testcase.addCleanup(browser.close)
    return browser


__all__ = ["Browser", "BrowserError", "BrowserUnavailable", "find_chromium", "file_url", "require_browser"]
