"""Helpers shared by the tooling tests: run a tool as a user would, in a subprocess, with or without the clone.

Owns: ROOT (the clone), SUBPROCESS_TIMEOUT, ``run`` (``python ARGS`` in a
subprocess, output captured, stdin closed) and ``bare_env`` (the environment
of a user who has installed nothing: no PYTHONPATH at all). Imports: the
standard library only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Generous: these run on a shared 2-core machine next to other test modules.
SUBPROCESS_TIMEOUT = 120


def run(args: list[str], *, cwd: Path | str = ROOT, env: dict[str, str] | None = None,
        timeout: float = SUBPROCESS_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout,
    )


def bare_env() -> dict[str, str]:
    """The environment of a user who has installed nothing: no PYTHONPATH at all."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env
