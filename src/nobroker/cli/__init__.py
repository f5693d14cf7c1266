"""The ``nobroker`` command line: argparse over the public Queue API.

Owns: argument parsing, human and ``--json`` output, exit codes, the
confirmation prompts, progress on a terminal, and the signal handling of
``nobroker work``. Imports: the public ``nobroker`` API (Queue, Worker, the
errors, the data model), ``nobroker.maintenance`` and ``nobroker.quickbench``
(``nobroker bench``); the dashboard and the PostgreSQL module are imported
lazily, only by the subcommand that needs them, so a missing optional part
never breaks the rest.

Everything a command *means* lives in the library; this module only turns
words into calls and results into text. Exit codes: 0 ok, 1 a nobroker error
(one line on stderr, no traceback), 2 a usage error, 130 Ctrl-C.

Runs as ``nobroker`` (console script), ``python -m nobroker`` and from the
zipapp bundle, so it imports only from inside the package.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, NoReturn, TextIO

from .. import __version__
from ..errors import CorruptLogError, NobrokerError, QueueNotFoundError, UnknownStorageError
from ..jobs import LISTINGS, MAX_BATCH_JOBS, MAX_PAYLOAD_BYTES, Job, JobState
from ..queue import require_queue
from .bench import DEFAULT_SECONDS as BENCH_SECONDS
from .bench import MAX_SECONDS as BENCH_MAX_SECONDS
from .bench import MIN_SECONDS as BENCH_MIN_SECONDS
from ..storage import storage_kind

log = logging.getLogger("nobroker.cli")

PROG = "nobroker"
DEFAULT_DIR = "./.nobroker"
DEFAULT_QUEUE = "default"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
ENV_DSN = "NOBROKER_DSN"
ENV_TOKEN = "NOBROKER_TOKEN"

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C

#: ``list`` and ``dlq`` show this many jobs unless told otherwise, so a queue
#: of a million jobs does not flood a terminal by accident.
DEFAULT_LIST_LIMIT = 100
#: Payloads and log bodies are cut to this many characters in the human view
#: (``--json`` always shows them whole).
PREVIEW_CHARS = 60
INSPECT_BODY_CHARS = 200
#: Job ids ``repair`` lists on a terminal per kind of loss (``--json`` lists more).
REPORTED_IDS = 20
#: Most jobs one ``enqueue --count`` makes: every Job is printed, so they are all held in memory.
MAX_ENQUEUE_COUNT = 1_000_000
#: Jobs per durable write of ``enqueue --count``: a Ctrl-C takes effect after the batch being written.
ENQUEUE_COUNT_BATCH = 10_000
assert ENQUEUE_COUNT_BATCH <= MAX_BATCH_JOBS
#: Progress lines on a terminal are redrawn at most this often (seconds).
PROGRESS_INTERVAL = 0.2

_PLAIN_WORD = re.compile(r"\w[\w.:/@+\-]*\Z")
_HANDLER_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")


# ---------------------------------------------------------------- errors
class CommandError(Exception):
    """A user-facing failure outside the library's errors; exit 1, one line."""


class UsageError(CommandError):
    """The command line asks for something that cannot be meant; exit 2, one line."""


class InputError(ValueError):
    """Text on the command line (a payload, a result) that cannot be used."""


# ---------------------------------------------------------------- JSON input
class _DuplicateKeyError(ValueError):
    pass


class _NonFiniteError(ValueError):
    pass


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def _refuse_constant(name: str) -> NoReturn:
    raise _NonFiniteError(name)


def parse_json_value(text: str, *, what: str = "payload") -> Any:
    """The value a command-line argument stands for.

    JSON first. Text that is not JSON but is one plain word (``hello``,
    ``photo.jpg``, ``ada@example.com``) is taken as that string, so the common
    case needs no shell quoting. Duplicate keys and NaN/Infinity are refused:
    JSON readers disagree about them, and the queue must store exactly what
    was meant.
    """
    stripped = text.strip()
    try:
        return json.loads(stripped, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
    except _DuplicateKeyError as exc:
        raise InputError(
            f"{what} has the key {json.dumps(exc.args[0])} twice in one object; "
            "JSON readers disagree about which value wins, so nobroker refuses it. Keep one."
        ) from None
    except _NonFiniteError as exc:
        raise InputError(
            f"{what} contains {exc.args[0]}, which is not JSON; use null or a string such as \"{exc.args[0]}\""
        ) from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply to read as JSON") from None
    except json.JSONDecodeError as exc:
        if _PLAIN_WORD.match(stripped):
            return stripped
        raise InputError(
            f"{what} is not valid JSON ({exc.msg} at character {exc.pos}); "
            f"to send text, quote it as a JSON string, e.g. '\"hello world\"'"
        ) from None
    except ValueError as exc:  # e.g. an integer longer than Python will convert
        raise InputError(f"{what} cannot be read as JSON: {exc}") from None


def _read_stdin_payload(what: str) -> str:
    # One byte over the limit is enough to know the payload is too large,
    # without reading an endless pipe into memory.
    text = sys.stdin.read(MAX_PAYLOAD_BYTES + 1)
    if len(text) > MAX_PAYLOAD_BYTES:
        raise InputError(f"{what} on standard input is larger than the {MAX_PAYLOAD_BYTES:,}-byte limit")
    if not text.strip():
        raise InputError(f"{what} on standard input is empty")
    return text


# ---------------------------------------------------------------- argument types
def _seconds_arg(*, allow_zero: bool) -> Callable[[str], float]:
    bound = ">= 0" if allow_zero else "> 0"

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"expected a finite number of seconds {bound}, got {text!r}")
        return value

    convert.__name__ = "seconds"
    return convert


def _seconds_in(low: float, high: float) -> Callable[[str], float]:
    at_least = _seconds_arg(allow_zero=False)

    def convert(text: str) -> float:
        value = at_least(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a number of seconds from {low:g} to {high:g}, got {text!r}")
        return value

    convert.__name__ = "seconds"
    return convert


_nonneg_float = _seconds_arg(allow_zero=True)
_positive_float = _seconds_arg(allow_zero=False)


def _int_at_least(low: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}")
        return value

    convert.__name__ = "int"
    return convert


def _int_in(low: int, high: int) -> Callable[[str], int]:
    at_least = _int_at_least(low)

    def convert(text: str) -> int:
        value = at_least(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low} to {high:,}, got {text!r}")
        return value

    convert.__name__ = "int"
    return convert


_port = _int_in(0, 65535)


# ---------------------------------------------------------------- output helpers
def _safe(text: Any, *, keep_newlines: bool = False) -> str:
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


def _compact(value: Any) -> str:
    # ensure_ascii: lone surrogates and escape sequences print as \u escapes.
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), sort_keys=False)


def _preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    text = _compact(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _utc(ts: float | None) -> str:
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


def _relative(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    delta = ts - now
    if abs(delta) < 0.5:
        return "now"
    if delta > 0:
        return f"in {_span(math.ceil(delta))}"
    return f"{_span(-delta)} ago"


def _state_text(job: Job, now: float) -> str:
    state = JobState(job.state).value
    if state == "ready" and job.available_at > now + 0.5:
        return f"delayed ({_relative(job.available_at, now)})"
    if state == "leased":
        return f"leased (until {_relative(job.lease_deadline, now)})"
    return state


def _first_line(text: str | None) -> str:
    if not text:
        return ""
    return text.strip().splitlines()[0] if text.strip() else ""


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


def _job_row(job: Job, now: float) -> str:
    error = _first_line(job.last_error)
    extra = f"  error: {_safe(error)[:PREVIEW_CHARS]}" if error else ""
    stage = f"  stage: {_safe(job.stage)}" if job.stage else ""
    return (
        f"{_safe(job.id):<24} {_state_text(job, now):<22} {_safe(job.kind):<10} "
        f"{job.priority:>4} {job.attempts:>3}/{job.max_attempts:<3} {_preview(job.payload)}{stage}{extra}"
    )


def _job_table(out: Output, jobs: Sequence[Job]) -> None:
    now = time.time()
    out.line(f"{'ID':<24} {'STATE':<22} {'KIND':<10} {'PRI':>4} {'TRIES':<7} PAYLOAD")
    for job in jobs:
        out.line(_job_row(job, now))


def _job_detail(out: Output, job: Job) -> None:
    now = time.time()

    def field(name: str, value: str) -> None:
        out.line(f"{name:<13}{value}")

    def multiline(name: str, text: str) -> None:
        lines = text.splitlines() or [""]
        field(name, lines[0])
        for more in lines[1:]:
            out.line(" " * 13 + more)

    field("id", _safe(job.id))
    field("state", _state_text(job, now))
    field("kind", _safe(job.kind))
    field("priority", str(job.priority))
    field("attempts", f"{job.attempts} of {job.max_attempts}")
    field("enqueued", f"{_utc(job.enqueued_at)} ({_relative(job.enqueued_at, now)})")
    field("available", f"{_utc(job.available_at)} ({_relative(job.available_at, now)})")
    if job.lease_deadline is not None:
        field("lease until", f"{_utc(job.lease_deadline)} ({_relative(job.lease_deadline, now)})")
    if job.dedupe_key is not None:
        field("dedupe key", _safe(job.dedupe_key))
    if job.stage is not None:
        field("stage", _safe(job.stage))
    if job.last_error:
        multiline("last error", _safe(job.last_error, keep_newlines=True))
    if job.traceback:
        multiline("traceback", _safe(job.traceback, keep_newlines=True))
    multiline("payload", json.dumps(job.payload, ensure_ascii=True, indent=2))
    if job.result is not None:
        multiline("result", json.dumps(job.result, ensure_ascii=True, indent=2))


# ---------------------------------------------------------------- queue access
#: The only commands that may create a queue folder or a queue: ``enqueue``
#: adds the first job, and ``work`` waits for the first one to arrive. Every
#: other command refuses a queue that is not there (a mistyped --dir/--queue).
CREATING_COMMANDS = frozenset({"enqueue", "work"})


def _storage(args: argparse.Namespace) -> tuple[str, bool]:
    """(path or DSN, is_dsn). An explicit --dsn or --dir wins over NOBROKER_DSN.

    Each is checked against what it must be (storage.storage_kind), so a
    location that is neither a folder path nor a PostgreSQL DSN, or one given
    to the wrong option, is refused with one line (exit 2) before anything is
    opened or created.
    """
    if args.dsn and args.dir:
        args._parser.error("--dir and --dsn choose different storages; pass one of them")
    if args.dsn:
        where, option, want_dsn = args.dsn, "--dsn", True
    elif args.dir:
        where, option, want_dsn = args.dir, "--dir", False
    elif os.environ.get(ENV_DSN):
        where, option, want_dsn = os.environ[ENV_DSN], ENV_DSN, True
    else:
        return DEFAULT_DIR, False
    try:
        kind = storage_kind(where)
    except UnknownStorageError as exc:
        raise UsageError(f"{option}: {exc}") from None
    if want_dsn and kind != "postgresql":
        raise UsageError(
            f"{option} takes a PostgreSQL DSN (postgresql://... or 'host=... dbname=...'), "
            f"got {_safe(where)!r}; for a queue folder pass --dir"
        )
    if not want_dsn and kind == "postgresql":
        raise UsageError("--dir takes a folder; that is a PostgreSQL DSN: pass it as --dsn")
    return where, want_dsn


def _require_file_storage(args: argparse.Namespace) -> str:
    where, is_dsn = _storage(args)
    if is_dsn:
        args._parser.error(
            f"'{args.command}' reads the files of the file storage; it does not apply to PostgreSQL "
            f"(drop --dsn / unset {ENV_DSN}, and pass --dir)"
        )
    return where


#: What to check when a queue is not there, by what QueueNotFoundError says is missing.
_NOT_FOUND_HINTS = {"folder": "check --dir", "queue": "check --queue", "schema": "check --dsn and --schema"}


def _not_found(exc: QueueNotFoundError) -> CommandError:
    return CommandError(f"{exc}; {_NOT_FOUND_HINTS.get(exc.missing, 'check --dir and --queue')}")


def _pg_options(args: argparse.Namespace, is_dsn: bool) -> dict[str, Any]:
    """The PostgreSQL-only options given (--schema, --connect-timeout), refused for a folder."""
    options: dict[str, Any] = {}
    for flag, attribute, key in (("--schema", "schema", "schema"), ("--connect-timeout", "connect_timeout", "reconnect_timeout")):
        value = getattr(args, attribute, None)
        if value is None:
            continue
        if not is_dsn:
            args._parser.error(f"{flag} applies to the PostgreSQL storage (--dsn); a folder has none")
        options[key] = value
    return options


def _check_queue_exists(args: argparse.Namespace, where: str, is_dsn: bool) -> None:
    """The shared refusal of a queue that is not there (nothing is created)."""
    options = _pg_options(args, is_dsn)
    try:
        require_queue(where, args.queue, schema=options.get("schema"), connect_timeout=options.get("reconnect_timeout"))
    except QueueNotFoundError as exc:
        raise _not_found(exc) from None


@contextlib.contextmanager
def _open_queue(args: argparse.Namespace, *, create: bool = False) -> Iterator[Any]:
    """The queue the global options name. Only CREATING_COMMANDS pass ``create=True``."""
    assert not create or args.command in CREATING_COMMANDS, f"{args.command} must not create a queue"
    where, is_dsn = _storage(args)
    options = _pg_options(args, is_dsn)
    from .. import Queue

    try:
        queue = Queue(where, name=args.queue, create=create, **options)
    except QueueNotFoundError as exc:
        raise _not_found(exc) from None
    try:
        if is_dsn and not create:
            _note_unknown_pg_queue(args, queue, where, options)
        yield queue
    finally:
        queue.close()


def _note_unknown_pg_queue(args: argparse.Namespace, queue: Any, where: str, options: dict[str, Any]) -> None:
    # On PostgreSQL a queue is the rows that carry its name, so a mistyped
    # --queue opens an empty queue rather than failing; say so when the name
    # holds nothing and others do.
    if len(queue):
        return
    from .. import list_queues

    names = list_queues(where, schema=options.get("schema"), connect_timeout=options.get("reconnect_timeout"))
    if names and args.queue not in names:
        listed = ", ".join(repr(n) for n in names[:20]) + (", ..." if len(names) > 20 else "")
        Output.note(f"queue {args.queue!r} holds no jobs here (queues holding jobs: {listed}); check --queue")


def _confirm(args: argparse.Namespace, question: str) -> bool:
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


# ---------------------------------------------------------------- commands
def cmd_enqueue(args: argparse.Namespace, out: Output) -> int:
    if args.count > 1 and (args.id is not None or args.dedupe_key is not None):
        args._parser.error("--count makes that many distinct jobs; it cannot be combined with --id or --dedupe-key")
    text = _read_stdin_payload("payload") if args.payload == "-" else args.payload
    payload = parse_json_value(text, what="payload")
    options: dict[str, Any] = {"priority": args.priority, "delay": args.delay, "kind": args.kind}
    if args.max_attempts is not None:
        options["max_attempts"] = args.max_attempts
    with _open_queue(args, create=True) as queue:
        if args.count == 1 and not args.count_given:
            job = queue.enqueue(payload, job_id=args.id, dedupe_key=args.dedupe_key, **options)
            if out.as_json:
                out.document(job.to_dict())
            else:
                out.line(f"enqueued {_safe(job.id)} ({_state_text(job, time.time())}, priority {job.priority})")
            return EXIT_OK
        jobs: list[Job] = []
        torn = False
        progress = Progress("enqueueing")
        progress.start()
        # Ctrl-C stops between two batches, so every job reported is in the
        # queue and every job in the queue is reported; a second one quits
        # during the batch being written (which may or may not have landed).
        with _NoteInterrupt(defer=True) as interrupt:
            try:
                while len(jobs) < args.count and not interrupt.seen:
                    batch = min(ENQUEUE_COUNT_BATCH, args.count - len(jobs))
                    jobs.extend(queue.enqueue_many([payload] * batch, **options))
                    progress.update(len(jobs), args.count)
            except KeyboardInterrupt:
                torn = True
            finally:
                progress.done()
        if out.as_json:
            out.document([job.to_dict() for job in jobs])
        else:
            for job in jobs:
                out.line(_safe(job.id))
        if not interrupt.seen:
            out.note(f"enqueued {len(jobs):,} jobs")
            return EXIT_OK
        out.note(f"interrupted: enqueued {len(jobs):,} of {args.count:,} jobs" + (" (their ids are above)" if jobs else ""))
        if torn:
            out.note(f"the batch being written at the second Ctrl-C (up to {ENQUEUE_COUNT_BATCH:,} jobs) may or may not be in the queue")
    return EXIT_INTERRUPTED


def cmd_lease(args: argparse.Namespace, out: Output) -> int:
    with _open_queue(args) as queue:
        jobs = queue.lease(args.count, visibility_timeout=args.visibility_timeout, kinds=args.kind)
    if out.as_json:
        out.document([job.to_dict() for job in jobs])
        return EXIT_OK
    if not jobs:
        out.line("no job is ready to lease")
        return EXIT_OK
    now = time.time()
    for job in jobs:
        out.line(
            f"leased {_safe(job.id)}  attempt {job.attempts} of {job.max_attempts}, "
            f"lease ends {_relative(job.lease_deadline, now)}, token {_safe(job.lease_token)}"
        )
        out.line(f"  payload: {_preview(job.payload, 4 * PREVIEW_CHARS)}")
    return EXIT_OK


def cmd_ack(args: argparse.Namespace, out: Output) -> int:
    result = parse_json_value(args.result, what="result") if args.result is not None else None
    with _open_queue(args) as queue:
        queue.ack(args.id, result=result)
        job = queue.get(args.id)
    if out.as_json:
        out.document(job.to_dict())
    else:
        out.line(f"acked {_safe(job.id)}: {job.state.value}")
    return EXIT_OK


def cmd_nack(args: argparse.Namespace, out: Output) -> int:
    with _open_queue(args) as queue:
        job = queue.nack(args.id, error=args.error, delay=args.delay, permanent=args.permanent)
    if out.as_json:
        out.document(job.to_dict())
    elif job.state == JobState.DEAD:
        out.line(f"nacked {_safe(job.id)}: dead after {job.attempts} attempt(s) (see `nobroker dlq`)")
    else:
        out.line(
            f"nacked {_safe(job.id)}: ready again {_relative(job.available_at, time.time())} "
            f"(attempt {job.attempts} of {job.max_attempts} used)"
        )
    return EXIT_OK


def cmd_extend(args: argparse.Namespace, out: Output) -> int:
    with _open_queue(args) as queue:
        job = queue.extend(args.id, args.seconds)
    if out.as_json:
        out.document(job.to_dict())
    else:
        out.line(f"extended {_safe(job.id)}: lease ends {_utc(job.lease_deadline)} ({_relative(job.lease_deadline, time.time())})")
    return EXIT_OK


def cmd_stats(args: argparse.Namespace, out: Output) -> int:
    with _open_queue(args) as queue:
        stats = queue.stats()
        durable = queue.durable
    if out.as_json:
        out.document(stats.to_dict())
        return EXIT_OK
    counts = stats.to_dict()
    out.line(f"queue {_safe(args.queue)!s}" + ("" if durable else "  (NOT durable: fsync is off)"))
    for key in ("ready", "delayed", "leased", "done", "dead", "total"):
        out.line(f"  {key:<8}{counts[key]:>10,}")
    return EXIT_OK


def _list_limit(value: int) -> int | None:
    return None if value == 0 else value


def _paging_hint(out: Output, shown: int, limit: int | None) -> None:
    if limit is not None and shown == limit:
        out.note(f"showing {shown} jobs; --limit 0 shows all, --offset pages")


def cmd_list(args: argparse.Namespace, out: Output) -> int:
    limit = _list_limit(args.limit)
    with _open_queue(args) as queue:
        jobs = queue.list_jobs(args.state, limit=limit, offset=args.offset, kind=args.kind)
    if out.as_json:
        out.document([job.to_dict() for job in jobs])
        return EXIT_OK
    if not jobs:
        out.line("no jobs")
        return EXIT_OK
    _job_table(out, jobs)
    _paging_hint(out, len(jobs), limit)
    return EXIT_OK


def cmd_get(args: argparse.Namespace, out: Output) -> int:
    with _open_queue(args) as queue:
        job = queue.get(args.id)
    if out.as_json:
        out.document(job.to_dict())
    else:
        _job_detail(out, job)
    return EXIT_OK


def cmd_dlq(args: argparse.Namespace, out: Output) -> int:
    if args.requeue is not None:
        job_id = None if args.requeue is _ALL else args.requeue
        with _open_queue(args) as queue:
            count = queue.requeue_dead(job_id)
        if out.as_json:
            out.document({"requeued": count})
        elif job_id is not None:
            out.line(f"requeued {_safe(job_id)}" if count else f"{_safe(job_id)} was not dead; nothing requeued")
        else:
            out.line(f"requeued {count:,} dead job(s)")
        return EXIT_OK
    limit = _list_limit(args.limit)
    with _open_queue(args) as queue:
        jobs = queue.dlq(limit=limit)
    if out.as_json:
        out.document([job.to_dict() for job in jobs])
        return EXIT_OK
    if not jobs:
        out.line("the dead-letter queue is empty")
        return EXIT_OK
    _job_table(out, jobs)
    _paging_hint(out, len(jobs), limit)
    return EXIT_OK


def cmd_purge(args: argparse.Namespace, out: Output) -> int:
    with _open_queue(args) as queue:
        held = len(queue)
        if not _confirm(args, f"Delete all {held:,} job(s) of queue {args.queue!r} for good?"):
            out.note("purge cancelled; nothing was changed")
            return EXIT_ERROR
        count = queue.purge()
    if out.as_json:
        out.document({"purged": count})
    else:
        out.line(f"purged {count:,} job(s)")
    return EXIT_OK


def cmd_compact(args: argparse.Namespace, out: Output) -> int:
    progress = Progress(f"compacting queue {args.queue!r}")
    with _open_queue(args) as queue:
        progress.start()
        try:
            result = queue.compact()
        finally:
            progress.done()
    data = {
        "old_generation": result.old_generation,
        "new_generation": result.new_generation,
        "jobs_kept": result.jobs_kept,
        "jobs_dropped": result.jobs_dropped,
        "bytes_before": result.bytes_before,
        "bytes_after": result.bytes_after,
        "elapsed": result.elapsed,
    }
    if out.as_json:
        out.document(data)
    else:
        files = ""
        if result.new_generation != result.old_generation:  # the file storage wrote a new generation
            files = (
                f", generation {result.old_generation} -> {result.new_generation}, "
                f"{result.bytes_before:,} -> {result.bytes_after:,} bytes"
            )
        out.line(
            f"compacted: kept {result.jobs_kept:,} job(s), dropped {result.jobs_dropped:,} done{files} "
            f"in {result.elapsed:.2f}s"
        )
    return EXIT_OK


def _record_dict(view: Any) -> dict[str, Any]:
    return {
        "offset": view.offset,
        "length": view.length,
        "type": view.type,
        "type_name": view.type_name,
        "body": view.body,
        "damage": view.damage,
    }


def cmd_inspect(args: argparse.Namespace, out: Output) -> int:
    from ..filestore import admin as maintenance

    directory = _require_file_storage(args)
    _check_queue_exists(args, directory, False)
    progress = Progress("reading log")
    records = 0
    damage: tuple[int, str] | None = None
    stream = out.out
    # Stream the records out one by one (also as JSON) so a large log never
    # has to fit in memory twice.
    if out.as_json:
        stream.write('{\n  "records": [')
    else:
        out.line(f"{'OFFSET':>10} {'LENGTH':>9}  {'TYPE':<8} BODY")
    first = True
    progress.start()
    try:
        for view in maintenance.inspect_log(directory, args.queue, generation=args.generation):
            if view.damage is not None:
                damage = (view.offset, view.damage)
            elif view.type_name != "HEADER":
                records += 1
            if out.as_json:
                stream.write(("\n    " if first else ",\n    ") + json.dumps(_record_dict(view), ensure_ascii=True))
                first = False
            elif view.damage is not None:
                out.line(f"{view.offset:>10} {'-':>9}  {'DAMAGE':<8} {_safe(view.damage)}")
            else:
                body = "-" if view.body is None else _preview(view.body, INSPECT_BODY_CHARS)
                out.line(f"{view.offset:>10} {view.length:>9}  {_safe(view.type_name):<8} {body}")
            progress.update(records)
    finally:
        progress.done()
    if out.as_json:
        summary = {"offset": damage[0], "message": damage[1]} if damage else None
        stream.write(("\n  " if not first else "") + f'],\n  "count": {records},\n  "damage": {json.dumps(summary)}\n}}\n')
    elif damage:
        out.line(f"{records:,} record(s); damage at offset {damage[0]:,}: {_safe(damage[1])}")
        out.line("  `nobroker verify` says whether opening will truncate it (a torn tail) or refuse (run `nobroker repair`)")
    else:
        out.line(f"{records:,} record(s), no damage")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace, out: Output) -> int:
    from ..filestore import admin as maintenance

    directory = _require_file_storage(args)
    _check_queue_exists(args, directory, False)
    report = maintenance.verify(directory, args.queue)
    if out.as_json:
        out.document(report.to_dict())
    elif report.ok:
        torn = f", a torn tail of {report.torn_bytes:,} bytes (opening truncates it)" if report.torn_bytes else ""
        out.line(
            f"ok: queue {args.queue!r}, generation {report.generation}, "
            f"{report.records:,} record(s), {report.jobs:,} job(s){torn}"
        )
    else:
        out.line(f"queue {args.queue!r}: {len(report.problems)} problem(s)")
        for problem in report.problems:
            out.line(f"  - {_safe(problem)}")
        out.line("`nobroker repair` keeps the damaged file aside and rebuilds from the valid records")
    return EXIT_OK if report.ok else EXIT_ERROR


def cmd_recover(args: argparse.Namespace, out: Output) -> int:
    _where, is_dsn = _storage(args)
    with _open_queue(args) as queue:
        report = queue.recovery
    data = {
        "generation": report.generation,
        "records": report.records,
        "bytes_read": report.bytes_read,
        "torn_bytes": report.torn_bytes,
        "jobs": report.jobs,
        "elapsed": report.elapsed,
        "clean": report.clean,
    }
    if out.as_json:
        out.document(data)
        return EXIT_OK
    if is_dsn:
        out.line(f"opened queue {args.queue!r} on PostgreSQL: the database recovers itself; nothing to report")
        return EXIT_OK
    out.line(
        f"opened queue {args.queue!r}: generation {report.generation}, {report.records:,} record(s) "
        f"({report.bytes_read:,} bytes), {report.jobs:,} job(s) in {report.elapsed:.2f}s"
    )
    if report.clean:
        out.line("clean: nothing was torn")
    else:
        out.line(f"a torn tail of {report.torn_bytes:,} bytes (a write cut by a crash) was truncated")
    return EXIT_OK


def cmd_repair(args: argparse.Namespace, out: Output) -> int:
    from ..filestore import admin as maintenance

    directory = _require_file_storage(args)
    _check_queue_exists(args, directory, False)
    before = maintenance.verify(directory, args.queue)
    if before.ok:
        if out.as_json:
            out.document({"repaired": False, "verify": before.to_dict()})
        else:
            out.line(f"queue {args.queue!r} is healthy; nothing to repair")
        return EXIT_OK
    if not out.as_json:
        for problem in before.problems:
            out.line(f"  - {_safe(problem)}")
    if not _confirm(args, "Rebuild the queue from its valid records (the damaged file is kept aside)?"):
        out.note("repair cancelled; nothing was changed")
        return EXIT_ERROR
    report = maintenance.repair(directory, args.queue)
    if out.as_json:
        out.document({"repaired": True, **report.to_dict()})
        return EXIT_OK
    out.line(
        f"repaired: kept {report.records_kept:,} record(s), dropped {report.records_dropped:,} record(s) "
        f"({report.bytes_dropped:,} bytes); the damaged file is kept at {_safe(report.kept_aside)}"
    )
    _repair_losses(out, report)
    return EXIT_OK


def _id_list(ids: Sequence[str], total: int) -> str:
    shown = ", ".join(_safe(job_id) for job_id in ids[:REPORTED_IDS])
    return shown + (f", ... ({total - min(len(ids), REPORTED_IDS):,} more; --json lists up to {len(ids):,})" if total > REPORTED_IDS else "")


def _repair_losses(out: Output, report: Any) -> None:
    """Which jobs the repair lost or set back: ids where the records could be read, counts otherwise."""
    if report.lost_job_count:
        out.line(f"lost {report.lost_job_count:,} job(s) whose enqueue was in the damage: "
                 f"{_id_list(report.lost_jobs, report.lost_job_count)}")
    if report.changed_job_count:
        out.line(f"kept {report.changed_job_count:,} job(s) that lost later records (their state may be older "
                 f"than it was: a done job may run again): {_id_list(report.changed_jobs, report.changed_job_count)}")
    unknown = []
    if report.unidentified_records:
        unknown.append(f"{report.unidentified_records:,} damaged record(s) whose job id cannot be read")
    if report.unreadable_bytes:
        unknown.append(f"{report.unreadable_bytes:,} byte(s) in which no record can be made out")
    if unknown:
        out.line("also lost, job unknown: " + " and ".join(unknown))
    if not (report.lost_job_count or report.changed_job_count or unknown):
        out.line("no job lost a record")


def load_handler(spec: str) -> Callable[..., Any]:
    """The callable named by ``module:attribute`` (the current folder is importable)."""
    if not _HANDLER_SPEC.match(spec):
        raise InputError(f"handler must look like MODULE:CALLABLE (e.g. myapp.tasks:handle), got {spec!r}")
    module_name, _, attribute = spec.partition(":")
    cwd = os.getcwd()
    # Python puts the script's folder on sys.path, not the caller's; a user
    # running `nobroker work tasks:handle` next to tasks.py expects it found.
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CommandError(f"cannot import handler module {module_name!r} (looked in {cwd} and sys.path)") from None
        raise _import_failed(module_name, exc) from exc
    except Exception as exc:  # the module is there but fails while it runs: a missing dependency, a typo
        raise _import_failed(module_name, exc) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CommandError(f"module {module_name!r} has no attribute {attribute!r}") from None
        except Exception as exc:  # a module __getattr__ or a descriptor that fails
            raise CommandError(
                f"looking up {attribute!r} in module {module_name!r} failed: {type(exc).__name__}: {_one_line(exc)}"
            ) from exc
    if not callable(target):
        raise CommandError(f"{spec} is not callable")
    return target  # type: ignore[no-any-return]


def _import_failed(module_name: str, exc: BaseException) -> CommandError:
    # One line; `-vv` still logs the traceback (the exception is chained).
    return CommandError(
        f"cannot import handler module {module_name!r}: {type(exc).__name__}: {_one_line(exc)} "
        "(-vv shows the traceback)"
    )


class _SignalStop:
    """Ctrl-C / SIGTERM for ``work``: the first stops gracefully, a second Ctrl-C quits at once.

    The handler only records the signal and sets a private Event; a watcher
    thread makes the ``worker.stop()`` call. A signal handler runs in the main
    thread between two bytecodes, possibly while that thread holds one of the
    Worker's locks, so calling into the Worker from it could deadlock.
    """

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.received: int | None = None
        self._wake = threading.Event()
        self._finished = False
        self._previous: dict[int, Any] = {}
        self._watcher = threading.Thread(target=self._watch, name="nobroker-cli-signals", daemon=True)

    def __enter__(self) -> _SignalStop:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                try:
                    self._previous[signum] = signal.signal(signum, self._handle)
                except (ValueError, OSError):  # an embedding interpreter may forbid it
                    continue
        self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._finished = True
        self._wake.set()
        self._watcher.join()

    def _watch(self) -> None:
        self._wake.wait()
        if not self._finished:
            sys.stderr.write(f"\n{PROG}: stopping: finishing running jobs (Ctrl-C again to quit at once)\n")
            sys.stderr.flush()
            self.worker.stop()

    def _handle(self, signum: int, frame: types.FrameType | None) -> None:
        if self.received is not None:
            if signum == signal.SIGINT:
                # The second Ctrl-C: leave now. Running jobs are not acked;
                # their leases expire and they are delivered again.
                raise KeyboardInterrupt
            return
        self.received = signum
        self._wake.set()


class _NoteInterrupt:
    """Remember that Ctrl-C came, then let it raise KeyboardInterrupt as usual.

    ``defer=True``: the first Ctrl-C only sets ``seen`` (the caller stops at
    its next safe point); a second one raises.
    """

    def __init__(self, *, defer: bool = False) -> None:
        self.seen = False
        self.defer = defer
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> _NoteInterrupt:
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, OSError):
                self._previous = signal.signal(signal.SIGINT, self._handle)
                self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame: types.FrameType | None) -> None:
        first = not self.seen
        self.seen = True
        if not (self.defer and first):
            raise KeyboardInterrupt


def cmd_work(args: argparse.Namespace, out: Output) -> int:
    from .. import Worker

    handler = load_handler(args.handler)
    with _open_queue(args, create=True) as queue:
        worker = Worker(
            queue,
            handler,
            concurrency=args.concurrency,
            max_jobs=args.max_jobs,
            idle_timeout=args.idle_timeout,
            handle_signals=False,
            kinds=args.kind,
        )
        if sys.stderr.isatty():
            sys.stderr.write(
                f"{PROG}: working queue {args.queue!r} with {_safe(args.handler)} "
                f"(concurrency {args.concurrency}); Ctrl-C stops\n"
            )
        with _SignalStop(worker) as stopper:
            stats = worker.run()
    if out.as_json:
        out.document(stats.to_dict())
    else:
        out.line(
            f"worker stopped: leased {stats.leased}, succeeded {stats.succeeded}, failed {stats.failed}, "
            f"dead {stats.dead}, lost leases {stats.lost_leases}"
        )
    # A requested stop is success; Ctrl-C reports itself the way shells expect.
    return EXIT_INTERRUPTED if stopper.received == signal.SIGINT else EXIT_OK


def _missing_module(exc: ImportError, module: str) -> bool:
    return isinstance(exc, ModuleNotFoundError) and exc.name == module


def cmd_serve(args: argparse.Namespace, out: Output) -> int:
    try:
        from ..dashboard import serve
    except ImportError as exc:
        if _missing_module(exc, "nobroker.dashboard"):
            raise CommandError("this copy of nobroker has no dashboard (nobroker/dashboard.py is missing)") from None
        raise
    token = args.token if args.token is not None else os.environ.get(ENV_TOKEN) or None

    def ready(server: Any) -> None:
        url = getattr(server, "url", f"http://{args.host}:{args.port}/")
        if out.as_json:
            out.document({"url": url, "queue": args.queue})
        else:
            others = len(set(names()) - {args.queue})
            picker = f", {others} more in the page's picker" if others else ""
            out.line(f"dashboard for queue {_safe(args.queue)!r}{picker} at {_safe(url)}  (Ctrl-C stops)")
        out.out.flush()

    where, is_dsn = _storage(args)
    options = _pg_options(args, is_dsn)
    from .. import Queue, list_queues

    def names() -> list[str]:
        return list_queues(where, schema=options.get("schema"), connect_timeout=options.get("reconnect_timeout"))

    def open_queue(name: str) -> Any:
        return Queue(where, name=name, create=False, **options)

    args.queue = _first_queue_to_serve(args, names, is_dsn)
    with _open_queue(args) as queue, _NoteInterrupt() as interrupt:
        serve(queue, host=args.host, port=args.port, token=token, on_ready=ready, list_queues=names, open_queue=open_queue)
    # The dashboard treats Ctrl-C as its normal way out and returns; the
    # exit code still says it was interrupted, like every other command.
    return EXIT_INTERRUPTED if interrupt.seen else EXIT_OK


def _first_queue_to_serve(args: argparse.Namespace, names: Callable[[], list[str]], is_dsn: bool) -> str:
    """The queue the page opens on: --queue if given, else 'default', else the first queue there is.

    A folder without a 'default' queue is shown as it is (the page's picker
    lists its queues); nothing is created. No queue at all, or a --queue
    that is not there, is refused as every other command refuses it.
    """
    if args.queue_given or is_dsn:
        return str(args.queue)
    try:
        found = names()
    except QueueNotFoundError as exc:
        raise _not_found(exc) from None
    if DEFAULT_QUEUE in found or not found:
        return DEFAULT_QUEUE  # none at all: the shared check refuses it with the usual message
    return found[0]


def cmd_bench(args: argparse.Namespace, out: Output) -> int:
    from . import bench as quickbench

    if args.dir or args.dsn:
        args._parser.error("bench measures a scratch queue in a folder of its own inside --in (default: here); "
                           "it does not use --dir or --dsn (`python make.py bench --pg` measures PostgreSQL)")
    where = args.where
    if not os.path.isdir(where):
        raise UsageError(f"--in {where!r} is not a folder: pass a folder on the disk to measure")
    progress = Progress(f"measuring on the disk of {where} (about {4 * args.seconds + 1:.0f} s)")
    progress.start()
    try:
        figures = quickbench.run_quick(where, args.seconds)
    finally:
        progress.done()
    if out.as_json:
        out.document({"machine": quickbench.describe(where), "figures": [f.to_dict() for f in figures]})
    else:
        for line in quickbench.report_lines(figures, where):
            out.line(line)
    return EXIT_OK


def cmd_pg_migrate(args: argparse.Namespace, out: Output) -> int:
    if args.dir:
        args._parser.error("pg migrate works on PostgreSQL; pass --dsn (not --dir)")
    dsn = args.dsn or os.environ.get(ENV_DSN)
    if not dsn:
        args._parser.error(f"needs a PostgreSQL DSN: pass --dsn postgresql://... or set {ENV_DSN}")
    try:
        from ..postgres import migrate
    except ImportError as exc:
        if _missing_module(exc, "nobroker.postgres"):
            raise CommandError("this copy of nobroker has no PostgreSQL storage (nobroker/postgres.py is missing)") from None
        if _missing_module(exc, "psycopg"):
            raise CommandError("PostgreSQL support needs psycopg: pip install 'nobroker[postgres]'") from None
        raise
    kwargs: dict[str, Any] = {}
    if args.schema is not None:
        kwargs["schema"] = args.schema
    if args.worker_role is not None:
        kwargs["worker_role"] = args.worker_role
    if getattr(args, "connect_timeout", None) is not None:
        kwargs["connect_timeout"] = args.connect_timeout
    result = migrate(str(dsn), **kwargs)
    applied = [str(name) for name in result] if isinstance(result, (list, tuple)) else []
    if out.as_json:
        out.document({"migrated": True, "applied": applied})
    elif applied:
        out.line(f"applied {len(applied)} migration(s): {', '.join(_safe(name) for name in applied)}")
    else:
        out.line("the schema is already up to date")
    return EXIT_OK


def cmd_pg(args: argparse.Namespace, out: Output) -> int:
    args._parser.print_help(sys.stderr)
    return EXIT_USAGE


# ---------------------------------------------------------------- the parser
class _All:
    """Marks ``dlq --requeue`` given without an id: requeue the whole DLQ."""

    def __repr__(self) -> str:
        return "ALL"


_ALL = _All()


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


def _add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # Sub-commands accept the global options too (`nobroker stats --dir q`);
    # there they default to SUPPRESS so they never overwrite a value given
    # before the sub-command.
    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("global options")
    group.add_argument("--dir", metavar="DIR", default=default(None),
                       help=f"queue folder for the file storage (default: {DEFAULT_DIR})")
    # None until parsed, so `serve` can tell an explicit --queue default from no --queue (see main).
    group.add_argument("--queue", metavar="NAME", default=default(None),
                       help=f"queue name inside the folder or database (default: {DEFAULT_QUEUE})")
    group.add_argument("--dsn", metavar="DSN", default=default(None),
                       help=f"use PostgreSQL at this DSN (postgresql://...) instead of a folder; env {ENV_DSN}")
    group.add_argument("--schema", metavar="SCHEMA", default=default(None),
                       help="PostgreSQL schema holding the queue tables (default: the storage's, nobroker)")
    group.add_argument("--connect-timeout", type=_nonneg_float, metavar="SECONDS", default=default(None),
                       help="PostgreSQL: keep trying to reach the server this long, then fail "
                            "(default: the DSN's connect_timeout, else 30; 0 tries once)")
    group.add_argument("--json", action="store_true", default=default(False),
                       help="print the result as one JSON document")
    group.add_argument("-v", "--verbose", action="count", default=default(0),
                       help="log to stderr (-v info, -vv debug with tracebacks)")


DESCRIPTION = f"""\
A durable, crash-safe job queue: enqueue work, lease it, ack it.

The file storage keeps each queue in a folder (--dir, default {DEFAULT_DIR});
--dsn or {ENV_DSN} selects PostgreSQL instead (an explicit --dir or --dsn wins
over the environment). Global options go before or after the sub-command.
"""

EPILOG = f"""\
examples:
  nobroker enqueue '{{"resize": "photo.jpg"}}' --priority 5
  nobroker stats
  nobroker work myapp.tasks:handle --concurrency 4
  nobroker dlq --requeue
  nobroker --dsn postgresql://localhost/app pg migrate

exit codes:
  0 ok, 1 a nobroker error (one line on stderr), 2 usage error, 130 Ctrl-C

`nobroker COMMAND --help` explains each command with an example.
"""


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and for generated docs)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=DESCRIPTION, epilog=EPILOG, formatter_class=_Formatter
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _add_global_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    def command(name: str, help: str, example: str, func: Callable[..., int], *,
                description: str | None = None, globals_: bool = True,
                under: Any = None, **kwargs: Any) -> argparse.ArgumentParser:
        sub = (under or commands).add_parser(
            name, help=help, description=description or help, epilog=f"example:\n{example}",
            formatter_class=_Formatter, **kwargs,
        )
        if globals_:
            _add_global_options(sub, top=False)
        sub.set_defaults(func=func, _parser=sub)
        return sub

    p = command(
        "enqueue", "add a job (payload is JSON; a plain word is a string; - reads stdin)",
        "  nobroker enqueue '{\"to\": \"ada@example.com\"}' --priority 5 --id welcome-ada\n"
        "  nobroker enqueue hello --delay 60\n"
        "  echo '[1, 2, 3]' | nobroker enqueue - --kind sum",
        cmd_enqueue,
        description=(
            "Add a job. PAYLOAD is JSON ('{\"a\": 1}', 42, '\"two words\"'); one plain word\n"
            "(hello, photo.jpg) is taken as that string; - reads the payload from stdin.\n"
            "JSON with a key repeated in one object, NaN or Infinity is refused."
        ),
    )
    p.add_argument("payload", metavar="PAYLOAD", help="the job's payload: JSON, a plain word, or - for stdin")
    p.add_argument("--priority", type=int, default=0, help="higher runs first (default 0)")
    p.add_argument("--delay", type=_nonneg_float, default=0.0, metavar="SECONDS", help="not before this many seconds from now")
    p.add_argument("--max-attempts", type=_int_at_least(1), metavar="N", help="dead after N failed attempts (queue default: 5)")
    p.add_argument("--id", metavar="JOB_ID", help="idempotent: if the queue still holds this id, nothing new is scheduled")
    p.add_argument("--kind", default="default", help="the job's type; workers may lease only some kinds (default: default)")
    p.add_argument("--dedupe-key", metavar="KEY", help="at most one ready/leased job per (kind, key)")
    p.add_argument("--count", type=_int_in(1, MAX_ENQUEUE_COUNT), default=None, metavar="N",
                   help="enqueue N copies in batches (prints the ids; --json prints a list)")

    p = command(
        "lease", "lease ready jobs (they become invisible until acked, nacked or expired)",
        "  nobroker lease --count 10 --visibility-timeout 120 --kind email", cmd_lease,
    )
    p.add_argument("--count", type=_int_at_least(1), default=1, metavar="N", help="at most N jobs (default 1)")
    p.add_argument("--visibility-timeout", type=_positive_float, default=None, metavar="SECONDS",
                   help="lease length (queue default: 30)")
    p.add_argument("--kind", action="append", metavar="KIND", help="only this kind (repeat for several)")

    p = command("ack", "mark a job done (by id: no lease-token check)",
                "  nobroker ack 01J9ZQ3F6Y --result '{\"pages\": 12}'", cmd_ack)
    p.add_argument("id", metavar="ID")
    p.add_argument("--result", metavar="JSON", help="a JSON result kept with the done job")

    p = command("nack", "report a failure: retry later, or dead when attempts are used up",
                "  nobroker nack 01J9ZQ3F6Y --error 'smtp timeout' --delay 30\n"
                "  nobroker nack 01J9ZQ3F6Y --permanent --error 'no such user'", cmd_nack)
    p.add_argument("id", metavar="ID")
    p.add_argument("--error", metavar="TEXT", help="why it failed (kept as last_error)")
    # A retry time and "never retry" contradict each other: argparse refuses the pair (exit 2).
    outcome = p.add_mutually_exclusive_group()
    outcome.add_argument("--delay", type=_nonneg_float, default=None, metavar="SECONDS",
                         help="retry after this delay instead of the backoff")
    outcome.add_argument("--permanent", action="store_true", help="straight to the dead-letter queue, no retry")

    p = command("extend", "extend a leased job: its lease now ends SECONDS from now",
                "  nobroker extend 01J9ZQ3F6Y 300", cmd_extend)
    p.add_argument("id", metavar="ID")
    p.add_argument("seconds", type=_positive_float, metavar="SECONDS")

    command("stats", "count jobs by state", "  nobroker --dir ./jobs stats --json", cmd_stats)

    p = command("list", "list jobs, oldest first",
                "  nobroker list --state ready --limit 20 --offset 40", cmd_list)
    p.add_argument("--state", choices=LISTINGS,
                   help="only jobs in this state; runnable and delayed: the two halves of ready, as stats counts them")
    p.add_argument("--limit", type=_int_at_least(0), default=DEFAULT_LIST_LIMIT, metavar="N",
                   help=f"at most N jobs (default {DEFAULT_LIST_LIMIT}; 0 = all)")
    p.add_argument("--offset", type=_int_at_least(0), default=0, metavar="N", help="skip the first N")
    p.add_argument("--kind", metavar="KIND", help="only jobs of this kind")

    p = command("get", "show one job in full (payload, attempts, error, stage, result)",
                "  nobroker get 01J9ZQ3F6Y", cmd_get)
    p.add_argument("id", metavar="ID")

    p = command("dlq", "list the dead-letter queue, or requeue it (all, or one id)",
                "  nobroker dlq\n  nobroker dlq --requeue            # every dead job\n"
                "  nobroker dlq --requeue 01J9ZQ3F6Y # just this one", cmd_dlq)
    p.add_argument("--requeue", nargs="?", const=_ALL, default=None, metavar="ID",
                   help="make dead jobs ready again with attempts reset (all, or the one ID)")
    p.add_argument("--limit", type=_int_at_least(0), default=DEFAULT_LIST_LIMIT, metavar="N",
                   help=f"list at most N (default {DEFAULT_LIST_LIMIT}; 0 = all)")

    confirm_rule = (
        "Without --yes, asks on the terminal first (answer y); when standard input\n"
        "is not a terminal (a script, a pipe, CI) it refuses with exit 2 unless --yes\n"
        "is given. Declining at the prompt changes nothing and exits 1."
    )
    p = command("purge", "delete every job of the queue (asks first; --yes for scripts)",
                "  nobroker purge\n  nobroker purge --yes", cmd_purge,
                description="Delete every job of the queue, in every state.\n\n" + confirm_rule)
    p.add_argument("--yes", action="store_true", help="do not ask")

    command("compact", "rewrite the log without done jobs (the rest is kept)",
            "  nobroker compact", cmd_compact)

    p = command(
        "inspect", "print the raw log record by record: offset, length, type, body, damage",
        "  nobroker inspect | less\n  nobroker inspect --generation 2 --json", cmd_inspect,
        description=(
            "Print the raw log of the file storage, record by record. Reads only.\n"
            f"Bodies longer than {INSPECT_BODY_CHARS} characters are cut in this view; --json shows them whole.\n"
            "Damage (a torn or corrupt record) is shown where it is found; reading stops there."
        ),
    )
    p.add_argument("--generation", type=_int_at_least(0), default=None, metavar="N",
                   help="read generation N (default: the current one)")

    command("verify", "check the queue files without changing them (exit 1 when there are problems)",
            "  nobroker verify && echo healthy", cmd_verify)
    command("recover", "open the queue (recovering it) and report what was found: torn tail, records, jobs",
            "  nobroker recover", cmd_recover)
    p = command("repair", "rebuild a damaged log from its valid records (the damaged file is kept aside)",
                "  nobroker verify || nobroker repair --yes", cmd_repair,
                description="Rebuild a damaged log from its valid records; the damaged file is kept\n"
                            "aside as <file>.damaged-<timestamp>. Does nothing if `verify` finds no problem.\n\n"
                            + confirm_rule)
    p.add_argument("--yes", action="store_true", help="do not ask")

    p = command(
        "work", "run a worker: import MODULE:CALLABLE and call it for each job",
        "  nobroker work myapp.tasks:handle -c 4\n  nobroker work examples.handlers:slow --max-jobs 1",
        cmd_work,
        description=(
            "Run a worker. The handler gets the Job; returning acks it, raising nacks it\n"
            "(retry with backoff), raising nobroker.PermanentError sends it to the DLQ.\n"
            "The current folder is importable. Ctrl-C finishes running jobs and exits 130;\n"
            "a second Ctrl-C exits at once. SIGTERM finishes running jobs and exits 0."
        ),
    )
    p.add_argument("handler", metavar="MODULE:CALLABLE")
    p.add_argument("-c", "--concurrency", type=_int_at_least(1), default=1, metavar="N", help="handlers running at once (default 1)")
    p.add_argument("--max-jobs", type=_int_at_least(1), default=None, metavar="N", help="stop after N jobs")
    p.add_argument("--idle-timeout", type=_nonneg_float, default=None, metavar="SECONDS", help="stop after this long with no work")
    p.add_argument("--kind", action="append", metavar="KIND", help="only this kind (repeat for several)")

    p = command(
        "serve", "serve the live dashboard and its JSON API over HTTP",
        f"  nobroker serve --port {DEFAULT_PORT}\n  {ENV_TOKEN}=s3cret nobroker serve --host 0.0.0.0",
        cmd_serve,
        description=f"Serve the dashboard. Binds {DEFAULT_HOST} by default; any other address needs a token.",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--token", default=None, help=f"require this bearer token (or env {ENV_TOKEN})")

    p = command(
        "bench", "a quick figure for this disk: enqueue and lease+ack beside its append+fsync rate (a few seconds)",
        "  nobroker bench\n  nobroker bench --in /var/lib/jobs --json", cmd_bench,
        description=(
            "Measure enqueue, and lease_one + ack, on a scratch queue (removed afterwards), each beside\n"
            "the disk's own rate of 120-byte append + fdatasync measured just before it: the ratio is the\n"
            "number to compare between machines. The full suites are `python make.py bench` in a clone."
        ),
    )
    p.add_argument("--in", dest="where", default=".", metavar="FOLDER",
                   help="a folder on the disk to measure (default: the current folder)")
    p.add_argument("--seconds", type=_seconds_in(BENCH_MIN_SECONDS, BENCH_MAX_SECONDS), default=BENCH_SECONDS,
                   metavar="S", help=f"how long each figure runs (default {BENCH_SECONDS:g})")

    pg = command("pg", "PostgreSQL storage tools (see `nobroker pg migrate --help`)",
                 "  nobroker --dsn postgresql://localhost/app pg migrate", cmd_pg)
    pg_commands = pg.add_subparsers(dest="pg_command", metavar="PG_COMMAND", title="commands")
    p = command(
        "migrate", "create or upgrade the queue schema (idempotent; needs --dsn or NOBROKER_DSN)",
        f"  nobroker pg migrate --dsn postgresql://app@localhost/app --schema jobs --worker-role nobroker_worker\n"
        f"  {ENV_DSN}=postgresql://localhost/app nobroker pg migrate",
        cmd_pg_migrate, under=pg_commands,
    )
    p.add_argument("--worker-role", metavar="ROLE", default=None,
                   help="also create this role and restrict the queue rows to it (row level security)")
    return parser


# ---------------------------------------------------------------- main
class _ShortFormatter(logging.Formatter):
    """``nobroker: warning: ...``, in the same shape as the error lines."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{PROG}: {record.levelname.lower()}: {record.getMessage()}"


@contextlib.contextmanager
def _logging_to_stderr(verbosity: int) -> Iterator[None]:
    logger = logging.getLogger("nobroker")
    handler = logging.StreamHandler(sys.stderr)
    if verbosity:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(_ShortFormatter())
    level = logging.DEBUG if verbosity >= 2 else logging.INFO if verbosity == 1 else logging.WARNING
    previous = logger.level
    logger.setLevel(level)
    handler.setLevel(level)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def _one_line(exc: BaseException) -> str:
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return text or type(exc).__name__


def _error(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {_safe(message)}\n")
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises SystemExit)."""
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
        if extras:
            sub = getattr(args, "_parser", parser)
            sub.error(f"unrecognized arguments: {' '.join(extras)}")
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        args.queue_given = args.queue is not None
        args.queue = args.queue if args.queue_given else DEFAULT_QUEUE
        if args.command == "enqueue":
            args.count_given = args.count is not None
            args.count = args.count or 1
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)

    out = Output(as_json=bool(getattr(args, "json", False)))
    with _logging_to_stderr(getattr(args, "verbose", 0) or 0):
        try:
            return int(args.func(args, out))
        except SystemExit as exc:  # a usage error found after parsing
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        except KeyboardInterrupt:
            sys.stderr.write(f"\n{PROG}: interrupted\n")
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            # The reader went away (`nobroker inspect | head`); stay quiet.
            with contextlib.suppress(Exception):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            return EXIT_ERROR
        except CorruptLogError as exc:
            log.debug("command failed", exc_info=True)
            message = _one_line(exc)
            if "repair" not in message:
                message += " (`nobroker verify` shows the damage; `nobroker repair` rebuilds from the valid records)"
            return _error(message)
        except UsageError as exc:
            log.debug("command failed", exc_info=True)
            _error(_one_line(exc))
            return EXIT_USAGE
        except (NobrokerError, CommandError) as exc:
            log.debug("command failed", exc_info=True)
            return _error(_one_line(exc))
        except (InputError, ValueError) as exc:
            # Input the library or the CLI refused (a bad payload, a value out
            # of range): the caller's mistake, so the usage exit code.
            log.debug("command failed", exc_info=True)
            _error(_one_line(exc))
            return EXIT_USAGE
        except OSError as exc:
            log.debug("command failed", exc_info=True)
            return _error(_one_line(exc))


if __name__ == "__main__":  # pragma: no cover - `python -m nobroker` goes through __main__.py
    sys.exit(main())
