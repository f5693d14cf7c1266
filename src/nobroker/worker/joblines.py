"""What a Worker tells about each job it finished: one JobReport, handed to a listener.

Owns: JobReport (when, which job, its kind, the outcome, how long since its
lease, its attempt, the error text) with its two renderings (the terminal
line of ``nobroker work``, and a JSON-ready dict for ``--json``), and
``tell``: builds the report and calls the listener, which must never stop the
worker. Imports: jobs.

The hot path stays cheap: the Settler calls ``tell`` only when a listener was
given (``Worker(on_job=...)``); with none, nothing is built or formatted.
A listener runs on the thread that settled the job (a handler thread or the
settling thread), so it should be quick; one that raises is logged once per
run and otherwise ignored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..jobs import Job

logger = logging.getLogger("nobroker.worker")

#: The outcomes a report names, one per leased job (WorkerStats' buckets).
OUTCOMES = ("succeeded", "failed", "dead", "cancelled", "lost")
#: Longest error text a terminal line shows (the whole text is in --json and on the job).
LINE_ERROR_CHARS = 120


@dataclass(frozen=True)
class JobReport:
    """One finished job, as ``nobroker work`` prints it."""

    at: float  #: wall-clock time the outcome was recorded (seconds since the epoch)
    id: str
    kind: str
    outcome: str  #: one of OUTCOMES
    duration: float  #: seconds from its lease to its outcome
    attempts: int
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "at": round(self.at, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.at)) + f".{int(self.at * 1000) % 1000:03d}Z",
            "id": self.id, "kind": self.kind, "outcome": self.outcome,
            "duration": round(self.duration, 6), "attempts": self.attempts,
        }  # fmt: skip
        if self.error is not None:
            out["error"] = self.error
        return out

    def text_line(self) -> str:
        """``19:04:05.123  <id>  <kind>  succeeded  12.3 ms`` (local time), printable characters only."""
        clock = time.strftime("%H:%M:%S", time.localtime(self.at)) + f".{int(self.at * 1000) % 1000:03d}"
        line = f"{clock}  {self.id}  {self.kind}  {self.outcome:<9}  {_duration(self.duration)}"
        if self.attempts > 1:
            line += f"  attempt {self.attempts}"
        if self.error is not None and self.outcome in ("failed", "dead"):
            error = self.error if len(self.error) <= LINE_ERROR_CHARS else self.error[: LINE_ERROR_CHARS - 3] + "..."
            line += f"  {error}"
        return _printable(line)


Listener = Callable[[JobReport], None]


class Teller:
    """``tell(job, leased_at, outcome, error)``: the report to the listener; a failing listener is logged once."""

    __slots__ = ("listener", "_complained")

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self._complained = False

    def tell(self, job: Job, leased_at: float, outcome: str, error: str | None = None) -> None:
        assert outcome in OUTCOMES, f"unknown outcome {outcome!r}"
        report = JobReport(
            time.time(), job.id, getattr(job, "kind", "default"), outcome, max(0.0, time.monotonic() - leased_at),
            job.attempts, error,
        )  # fmt: skip
        try:
            self.listener(report)
        except Exception as exc:  # the listener's failure is not the job's
            if not self._complained:
                self._complained = True
                logger.error("the worker's on_job listener failed (ignored from now on): %s", exc, exc_info=exc)


def _duration(seconds: float) -> str:
    if seconds < 1.0:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 120.0:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def _printable(text: str) -> str:
    """Control characters (a kind or error from a producer) shown escaped, so a line cannot rewrite the terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
