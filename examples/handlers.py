"""Handlers to point ``nobroker work`` at, from a clone, with nothing installed.

Owns: five small handlers that show each way a job can end. Imports: the
standard library and nobroker.

    python make.py build
    python dist/nobroker.pyz --dir /tmp/q enqueue '{"seconds": 60}'
    python dist/nobroker.pyz --dir /tmp/q work examples.handlers:slow
    # kill -9 the worker mid-job: the job is back within one visibility timeout

A handler takes the leased Job. Returning acks the job (the return value is
stored as its result); raising nacks it (retry with backoff, the dead-letter
queue once attempts run out); raising PermanentError sends it straight to the
dead-letter queue. Delivery is at-least-once, so real handlers must be
idempotent: these are, because they touch nothing outside themselves.
"""

from __future__ import annotations

import time
from typing import Any

from nobroker import Job, PermanentError

#: How often `slow` wakes up, so a Ctrl-C or a kill lands mid-job, not between jobs.
SLOW_STEP_SECONDS = 0.1
#: `slow` sleeps this long unless the payload says {"seconds": N}.
SLOW_DEFAULT_SECONDS = 30.0
#: `flaky` fails this many attempts unless the payload says {"fail_times": N}.
FLAKY_DEFAULT_FAILURES = 2


def _options(job: Job) -> dict[str, Any]:
    """The payload when it is an object; any other payload means "use the defaults"."""
    return job.payload if isinstance(job.payload, dict) else {}


def ok(job: Job) -> dict[str, Any]:
    """Succeeds at once; the result records which attempt it was."""
    return {"ok": True, "attempt": job.attempts}


def echo(job: Job) -> Any:
    """Succeeds with the payload itself as the result."""
    return job.payload


def flaky(job: Job) -> dict[str, Any]:
    """Fails the first ``fail_times`` attempts (default 2), then succeeds.

    ``job.attempts`` counts this delivery too (1 on the first), so with the
    default the job succeeds on its third attempt, after two backoff delays.
    Give it ``max_attempts`` at or below ``fail_times`` to watch it go dead.
    """
    fail_times = int(_options(job).get("fail_times", FLAKY_DEFAULT_FAILURES))
    if job.attempts <= fail_times:
        raise RuntimeError(f"flaky: attempt {job.attempts} of the {fail_times} meant to fail")
    return {"ok": True, "attempt": job.attempts}


def slow(job: Job) -> dict[str, Any]:
    """Sleeps ``seconds`` (default 30) in small steps: built to be killed mid-job.

    The Worker's heartbeat keeps the lease alive while it runs, so a slow but
    healthy handler is never delivered twice; kill the worker and the job is
    leased again once its visibility timeout passes.
    """
    seconds = float(_options(job).get("seconds", SLOW_DEFAULT_SECONDS))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(SLOW_STEP_SECONDS, left))
    return {"slept": seconds, "attempt": job.attempts}


def permanent(job: Job) -> None:
    """Fails in a way no retry can fix: the job goes straight to the dead-letter queue."""
    raise PermanentError(f"permanent: job {job.id} can never succeed (payload {job.payload!r})")
