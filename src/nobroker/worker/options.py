"""A Worker's options: their limits, and the checks made before anything runs.

Owns: check_options, MAX_CONCURRENCY, MAX_PROCESSES and can_fork (whether
``processes=`` can work here). Imports: jobs, outcome, protocol.
"""

from __future__ import annotations

import os

from ..jobs import MAX_SECONDS, shown
from .outcome import Handler
from .protocol import is_positive_number

#: Most jobs one Worker (or one process of a pool) runs at once.
MAX_CONCURRENCY = 1024
#: Most worker processes one pool forks.
MAX_PROCESSES = 256


def can_fork() -> bool:
    """Can this platform fork worker processes (POSIX)?"""
    return hasattr(os, "fork")


def check_options(
    handler: Handler, concurrency: int, poll_interval: float, max_jobs: int | None, idle_timeout: float | None,
    processes: int | None,
) -> None:  # fmt: skip
    """Refuse what a Worker cannot run with, before anything starts, saying what is allowed."""
    if not callable(handler):
        raise TypeError(f"handler must be callable, got {handler!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be an integer from 1 to {MAX_CONCURRENCY}, got {concurrency!r}")
    if not is_positive_number(poll_interval) or poll_interval > MAX_SECONDS:
        raise ValueError(f"poll_interval must be a finite number of seconds > 0 and at most {MAX_SECONDS:g}, got {shown(poll_interval)}")
    if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1):
        raise ValueError(f"max_jobs must be None or an integer >= 1, got {max_jobs!r}")
    if idle_timeout is not None and not (idle_timeout == 0 or is_positive_number(idle_timeout)):
        raise ValueError(f"idle_timeout must be None or a number of seconds >= 0, got {shown(idle_timeout)}")
    if processes is not None:
        if isinstance(processes, bool) or not isinstance(processes, int) or not 1 <= processes <= MAX_PROCESSES:
            raise ValueError(f"processes must be None or an integer from 1 to {MAX_PROCESSES}, got {processes!r}")
        if not can_fork():
            raise NotImplementedError(
                "processes= forks worker processes, which needs os.fork (Linux, macOS); here, start several "
                "`nobroker work` processes instead, or use concurrency="
            )
