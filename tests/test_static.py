"""The static checks: pyflakes over the project's Python, mypy --strict over the library.

Both tools are optional here (neither is a dependency of nobroker): absent,
each test is skipped with the reason, except in CI (tests.support.IN_CI),
which installs them (.ci/run) and where a skip is a failure. They run in a
subprocess, as a developer would run them, with mypy's cache in a temporary
folder so the checkout is left as it was.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from tests.support import IN_CI

ROOT = Path(__file__).resolve().parent.parent
#: Longest either tool may take (a cold mypy run takes seconds here).
TOOL_TIMEOUT = 600


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        reason = f"{module} is not installed (python -m pip install {module})"
        if IN_CI:
            raise AssertionError(f"the static checks must run in CI, but {reason}")
        raise unittest.SkipTest(reason)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=TOOL_TIMEOUT
    )


class StaticChecks(unittest.TestCase):
    def test_pyflakes_finds_nothing(self) -> None:
        _require("pyflakes")
        proc = _run("pyflakes", "src", "tools", "tests", "examples", "make.py")
        self.assertEqual(proc.returncode, 0, f"pyflakes:\n{proc.stdout}{proc.stderr}")
        self.assertEqual(proc.stdout.strip(), "")

    def test_mypy_finds_nothing_in_the_library(self) -> None:
        _require("mypy")
        with tempfile.TemporaryDirectory(prefix="nobroker-mypy-") as cache:
            proc = _run("mypy", "--strict", "--cache-dir", cache, "src")
        self.assertEqual(proc.returncode, 0, f"mypy:\n{proc.stdout}{proc.stderr}")
        self.assertIn("Success", proc.stdout)


if __name__ == "__main__":
    unittest.main()
