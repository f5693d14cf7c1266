"""What the command line shows: text for people, or one JSON document, and the exit codes.

Owns: the exit codes, Output (results on stdout, remarks on stderr),
Progress (a one-line counter on a terminal), ``confirm`` (the prompt before
purge and repair), and the text of jobs and times: escaping stored text so
it cannot drive the terminal, previews, UTC and relative times, the job
table and a job in full. Imports: jobs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

from ..jobs import Job, JobState

PROG = "nobroker"

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C

#: Payloads are cut to this many characters in the human view (``--json``
#: always shows them whole).
PREVIEW_CHARS = 60
#: Progress lines on a terminal are redrawn at most this often (seconds).
PROGRESS_INTERVAL = 0.2
#: Column width of the field names in ``nobroker get``.
DETAIL_LABEL_CHARS = 13


# ---------------------------------------------------------------- text
def safe(text: Any, *, keep_newlines: bool = False) -> str:
    """Text with control characters escaped, so stored data cannot drive the terminal."""
    s = str(text)
    out = []
    for ch in s:
        if ch == "\n" and keep_newlines:
            out.append(ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ascii(ch)[1:-1])
    return "".join(out)


def compact(value: Any) -> str:
    # ensure_ascii: lone surrogates and escape sequences print as \u escapes.
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), sort_keys=False)


def preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    text = compact(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type's name when it has none)."""
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return text or type(exc).__name__


def utc(ts: float | None) -> str:
    if ts is None:
        return "-"
    try:
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return repr(ts)


def _span(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def relative(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    delta = ts - now
    if abs(delta) < 0.5:
        return "now"
    if delta > 0:
        return f"in {_span(math.ceil(delta))}"
    return f"{_span(-delta)} ago"


def state_text(job: Job, now: float) -> str:
    state = JobState(job.state)
    if state is JobState.READY and job.available_at > now + 0.5:
        return f"delayed ({relative(job.available_at, now)})"
    if state is JobState.LEASED:
        return f"leased (until {relative(job.lease_deadline, now)})"
    return str(state.value)


def _first_line(text: str | None) -> str:
    if not text:
        return ""
    return text.strip().splitlines()[0] if text.strip() else ""


# ---------------------------------------------------------------- where it goes
class Output:
    """Where a command's result goes: text for people, or one JSON document."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    @property
    def out(self) -> TextIO:
        return sys.stdout

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def document(self, value: Any) -> None:
        self.out.write(json.dumps(value, ensure_ascii=True, indent=2) + "\n")

    @staticmethod
    def note(text: str) -> None:
        """A remark for a person, on stderr so it never mixes into results."""
        sys.stderr.write(f"{PROG}: {text}\n")


class Progress:
    """A one-line progress counter on stderr, drawn only when stderr is a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self._last = 0.0
        self._drawn = False

    def start(self) -> None:
        if self.enabled:
            self._draw(f"{self.label}...")

    def update(self, count: int, total: int | None = None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < PROGRESS_INTERVAL:
            return
        self._last = now
        suffix = f"{count:,}/{total:,}" if total else f"{count:,}"
        self._draw(f"{self.label}: {suffix}")

    def done(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def _draw(self, text: str) -> None:
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()
        self._drawn = True


def confirm(args: argparse.Namespace, question: str) -> bool:
    """True to go ahead. --yes goes ahead; a terminal is asked; anything else is refused (exit 2)."""
    if args.yes:
        return True
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        args._parser.error(f"refusing to {args.command} without confirmation: pass --yes (standard input is not a terminal)")
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = stdin.readline()
    return answer.strip().lower() in ("y", "yes")


# ---------------------------------------------------------------- jobs
def _job_row(job: Job, now: float) -> str:
    error = _first_line(job.last_error)
    extra = f"  error: {safe(error)[:PREVIEW_CHARS]}" if error else ""
    stage = f"  stage: {safe(job.stage)}" if job.stage else ""
    return (
        f"{safe(job.id):<24} {state_text(job, now):<22} {safe(job.kind):<10} "
        f"{job.priority:>4} {job.attempts:>3}/{job.max_attempts:<3} {preview(job.payload)}{stage}{extra}"
    )


def job_table(out: Output, jobs: Sequence[Job]) -> None:
    now = time.time()
    out.line(f"{'ID':<24} {'STATE':<22} {'KIND':<10} {'PRI':>4} {'TRIES':<7} PAYLOAD")
    for job in jobs:
        out.line(_job_row(job, now))


def attempt_text(attempt: dict[str, Any]) -> str:
    """One attempt of a job's history: its outcome, when, how long, by which worker."""
    started = attempt.get("started")
    when = "" if started is None else f" at {utc(started)}"
    took = "" if attempt.get("seconds") is None else f", {attempt['seconds']:.3f} s"
    by = "" if attempt.get("by") is None else f", by {safe(attempt['by'])}"
    return f"{safe(str(attempt.get('outcome')))}{when}{took}{by}"


def job_detail(out: Output, job: Job) -> None:
    now = time.time()

    def field(name: str, value: str) -> None:
        out.line(f"{name:<{DETAIL_LABEL_CHARS}}{value}")

    def multiline(name: str, text: str) -> None:
        lines = text.splitlines() or [""]
        field(name, lines[0])
        for more in lines[1:]:
            out.line(" " * DETAIL_LABEL_CHARS + more)

    field("id", safe(job.id))
    field("state", state_text(job, now))
    field("kind", safe(job.kind))
    field("priority", str(job.priority))
    field("attempts", f"{job.attempts} of {job.max_attempts}")
    field("enqueued", f"{utc(job.enqueued_at)} ({relative(job.enqueued_at, now)})")
    field("available", f"{utc(job.available_at)} ({relative(job.available_at, now)})")
    if job.lease_deadline is not None:
        field("lease until", f"{utc(job.lease_deadline)} ({relative(job.lease_deadline, now)})")
    if job.dedupe_key is not None:
        field("dedupe key", safe(job.dedupe_key))
    if job.stage is not None:
        field("stage", safe(job.stage))
    if job.timeout is not None:
        field("time limit", f"{job.timeout:g} s")
    for attempt in job.attempt_history:
        field(f"attempt {attempt['attempt']}", attempt_text(attempt))
    if job.last_error:
        multiline("last error", safe(job.last_error, keep_newlines=True))
    if job.traceback:
        multiline("traceback", safe(job.traceback, keep_newlines=True))
    multiline("payload", json.dumps(job.payload, ensure_ascii=True, indent=2))
    if job.result is not None:
        multiline("result", json.dumps(job.result, ensure_ascii=True, indent=2))
