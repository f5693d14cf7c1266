"""The ``nobroker`` command line: argparse over the public Queue API.

Owns: ``main`` (parse, run the command, turn every failure into one line on
stderr and an exit code) and logging to stderr for ``-v``. Imports: errors,
values, output, location, parser.

Everything a command *means* lives in the library; this package only turns
words into calls and results into text, and knows no storage details: it
asks the Queue (``create=False`` refuses a queue that is not there),
``nobroker.list_queues`` and nobroker.filestore.admin (inspect, verify,
repair). Exit codes: 0 ok, 1 a nobroker error (one line on stderr, no
traceback), 2 a usage error, 130 Ctrl-C. Runs as ``nobroker`` (console
script), ``python -m nobroker`` and from the zipapp bundle, so it imports
only from inside the package.

The package, in its order (a module imports only modules above it):

    values.py          the CLI's own failures; JSON, seconds and counts read from words
    output.py          exit codes, Output, Progress, the prompt, the text of jobs and times
    location.py        --dir / --dsn / NOBROKER_DSN, opening the queue, "not there" refusals
    job_commands.py    enqueue, lease, ack, nack, extend, get, list, dlq (later: why)
    admin_commands.py  stats, counters, workers, purge, compact, inspect, verify, recover, repair (later: limit)
    bench.py           `nobroker bench`: the quick figure for this disk (ships in the pyz too)
    run_commands.py    work, serve, bench, pg migrate (later: work --processes, per-job lines)
    control_commands.py  cancel (control of jobs, issue 15), and its entries in the parser
    schedule_commands.py  nobroker schedule add|list|remove
    limit_commands.py  nobroker limit set|list|clear, and their entries in the parser
    parser.py          every command's options, help and example: the argparse table
    __init__.py        main
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence

from ..errors import CorruptLogError, NobrokerError
from .location import DEFAULT_QUEUE
from .output import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, PROG, Output, one_line, safe
from .parser import build_parser
from .values import CommandError, InputError, UsageError

__all__ = ["main", "build_parser"]

log = logging.getLogger("nobroker.cli")


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


def _error(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {safe(message)}\n")
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
            message = one_line(exc)
            if "repair" not in message:
                message += " (`nobroker verify` shows the damage; `nobroker repair` rebuilds from the valid records)"
            return _error(message)
        except UsageError as exc:
            log.debug("command failed", exc_info=True)
            _error(one_line(exc))
            return EXIT_USAGE
        except (NobrokerError, CommandError) as exc:
            log.debug("command failed", exc_info=True)
            return _error(one_line(exc))
        except (InputError, ValueError) as exc:
            # Input the library or the CLI refused (a bad payload, a value out
            # of range): the caller's mistake, so the usage exit code.
            log.debug("command failed", exc_info=True)
            _error(one_line(exc))
            return EXIT_USAGE
        except OSError as exc:
            log.debug("command failed", exc_info=True)
            return _error(one_line(exc))


if __name__ == "__main__":  # pragma: no cover - `python -m nobroker` goes through __main__.py
    sys.exit(main())
