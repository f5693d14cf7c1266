"""Shared helpers for the command-line tests: run ``nobroker`` in-process against a queue folder per test.

Owns: ``run_main`` (``cli.main([...])`` with stdin given and stdout/stderr
captured, as a ``Result``), ``CliTestCase`` (a fresh queue folder per test;
``self.cli(...)``, ``self.ok(...)``, ``self.enqueue(...)`` run against it),
``fake_queue`` (a stand-in Queue) and ``stand_in_module`` (a fake module in
``sys.modules``, for the dashboard and the PostgreSQL module: what the tests
check with it is the wiring, not them).
Imports: the standard library, nobroker and tests.support.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import types
from dataclasses import dataclass
from unittest import mock

from nobroker import Queue, cli
from tests.support import TempDirTestCase


class _TtyInput(io.StringIO):
    """Standard input that claims to be a terminal (for the confirmation prompts)."""

    def isatty(self) -> bool:
        return True


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


def run_main(argv: list[str], *, stdin: str = "", tty: bool = False) -> Result:
    """``cli.main(argv)`` with stdin given and stdout/stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    fake_stdin = _TtyInput(stdin) if tty else io.StringIO(stdin)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), mock.patch("sys.stdin", fake_stdin):
        code = cli.main(argv)
    return Result(code, out.getvalue(), err.getvalue())


class CliTestCase(TempDirTestCase):
    """A fresh queue folder per test; ``self.cli(...)`` runs against it."""

    def setUp(self) -> None:
        super().setUp()
        self.qdir = os.path.join(self.dir, "q")
        patcher = mock.patch.dict(os.environ)
        patcher.start()
        self.addCleanup(patcher.stop)
        os.environ.pop("NOBROKER_DSN", None)
        os.environ.pop("NOBROKER_TOKEN", None)

    def cli(self, *args: str, stdin: str = "", tty: bool = False) -> Result:
        return run_main(["--dir", self.qdir, *args], stdin=stdin, tty=tty)

    def ok(self, *args: str, stdin: str = "", tty: bool = False) -> Result:
        result = self.cli(*args, stdin=stdin, tty=tty)
        self.assertEqual(result.code, 0, f"nobroker {' '.join(args)} failed: {result.err}")
        return result

    def ok_json(self, *args: str, stdin: str = "") -> object:
        return self.ok("--json", *args, stdin=stdin).json()

    def enqueue(self, payload: str = '{"n": 1}', *args: str) -> dict:
        return self.ok_json("enqueue", payload, *args)  # type: ignore[return-value]

    def queue(self) -> Queue:
        q = Queue(self.qdir)
        self.addCleanup(q.close)
        return q

    def log_path(self) -> str:
        return os.path.join(self.qdir, "default.000000.log")

    def assert_one_line_error(self, result: Result, code: int = 1) -> None:
        self.assertEqual(result.code, code, result.err)
        self.assertTrue(result.err.startswith("nobroker: error: "), result.err)
        self.assertEqual(result.err.count("\n"), 1, result.err)
        self.assertNotIn("Traceback", result.err)


def fake_queue() -> mock.MagicMock:
    """A stand-in Queue that holds one job (so the CLI has no reason to look for other queues)."""
    fake = mock.MagicMock()
    fake.__len__.return_value = 1
    return fake


@contextlib.contextmanager
def stand_in_module(name: str, **attributes: object):  # type: ignore[no-untyped-def]
    """Put a fake module at ``name`` in sys.modules (None makes the import fail)."""
    if attributes.get("_missing"):
        with mock.patch.dict(sys.modules, {name: None}):
            yield None
        return
    module = types.ModuleType(name)
    for key, value in attributes.items():
        setattr(module, key, value)
    with mock.patch.dict(sys.modules, {name: module}):
        yield module
