"""Which queue the global options name, and opening it; the CLI asks the library, never the disk.

Owns: the choice between --dir, --dsn and NOBROKER_DSN (each checked against
what it must be before anything is opened or created), the PostgreSQL-only
options, ``open_queue`` (only CREATING_COMMANDS may create), and the one-line
refusal of a queue that is not there, with what to check. Whether a queue
exists is the library's answer (queue.require_queue, nobroker.list_queues);
no folder or file name is looked at here. Imports: nobroker, errors, locations,
addresses, values, output.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from ..errors import QueueNotFoundError, UnknownStorageError
from ..locations import require_queue
from ..addresses import storage_kind
from .output import Output, safe
from .values import CommandError, UsageError

DEFAULT_DIR = "./.nobroker"
DEFAULT_QUEUE = "default"
ENV_DSN = "NOBROKER_DSN"
#: The only commands that may create a queue folder or a queue: ``enqueue``
#: adds the first job, and ``work`` waits for the first one to arrive. Every
#: other command refuses a queue that is not there (a mistyped --dir/--queue).
CREATING_COMMANDS = frozenset({"enqueue", "work", "schedule", "limit"})  # schedule, limit: only add, set create
#: Queue names a note about a mistyped --queue lists at most.
LISTED_QUEUES = 20
#: What to check when a queue is not there, by what QueueNotFoundError says is missing.
_NOT_FOUND_HINTS = {"folder": "check --dir", "queue": "check --queue", "schema": "check --dsn and --schema"}


def storage_of(args: argparse.Namespace) -> tuple[str, bool]:
    """(path or DSN, is_dsn). An explicit --dsn or --dir wins over NOBROKER_DSN.

    Each is checked against what it must be (addresses.storage_kind), so a
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
            f"got {safe(where)!r}; for a queue folder pass --dir"
        )
    if not want_dsn and kind == "postgresql":
        raise UsageError("--dir takes a folder; that is a PostgreSQL DSN: pass it as --dsn")
    return where, want_dsn


def file_storage_of(args: argparse.Namespace) -> str:
    """The queue folder, for the commands that read the file storage's own files (inspect, verify, repair)."""
    where, is_dsn = storage_of(args)
    if is_dsn:
        args._parser.error(
            f"'{args.command}' reads the files of the file storage; it does not apply to PostgreSQL "
            f"(drop --dsn / unset {ENV_DSN}, and pass --dir)"
        )
    return where


def not_found(exc: QueueNotFoundError) -> CommandError:
    return CommandError(f"{exc}; {_NOT_FOUND_HINTS.get(exc.missing, 'check --dir and --queue')}")


def storage_options(args: argparse.Namespace, is_dsn: bool) -> dict[str, Any]:
    """The options only one storage has: PostgreSQL's (--schema, --connect-timeout), the folder's (--log-format).

    Each is refused for the other storage.
    """
    options: dict[str, Any] = {}
    for flag, attribute, key in (("--schema", "schema", "schema"), ("--connect-timeout", "connect_timeout", "reconnect_timeout")):
        value = getattr(args, attribute, None)
        if value is None:
            continue
        if not is_dsn:
            args._parser.error(f"{flag} applies to the PostgreSQL storage (--dsn); a folder has none")
        options[key] = value
    log_format = getattr(args, "log_format", None)
    if log_format is not None:
        if is_dsn:
            args._parser.error("--log-format applies to the file storage (--dir); PostgreSQL has no log files")
        options["log_format"] = log_format
    return options


def list_queue_names(where: str, options: dict[str, Any]) -> list[str]:
    """The queues kept at ``where`` (nobroker.list_queues, with the PostgreSQL options given)."""
    from .. import list_queues

    return list_queues(where, schema=options.get("schema"), connect_timeout=options.get("reconnect_timeout"))


def check_queue_exists(args: argparse.Namespace, where: str, is_dsn: bool) -> None:
    """The shared refusal of a queue that is not there (nothing is created)."""
    options = storage_options(args, is_dsn)
    try:
        require_queue(where, args.queue, schema=options.get("schema"), connect_timeout=options.get("reconnect_timeout"))
    except QueueNotFoundError as exc:
        raise not_found(exc) from None


@contextlib.contextmanager
def open_queue(args: argparse.Namespace, *, create: bool = False) -> Iterator[Any]:
    """The queue the global options name. Only CREATING_COMMANDS pass ``create=True``."""
    assert not create or args.command in CREATING_COMMANDS, f"{args.command} must not create a queue"
    where, is_dsn = storage_of(args)
    options = storage_options(args, is_dsn)
    from .. import Queue  # looked up at each call, so a test can stand a fake in for it

    try:
        queue = Queue(where, name=args.queue, create=create, **options)
    except QueueNotFoundError as exc:
        raise not_found(exc) from None
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
    names = list_queue_names(where, options)
    if names and args.queue not in names:
        listed = ", ".join(repr(n) for n in names[:LISTED_QUEUES]) + (", ..." if len(names) > LISTED_QUEUES else "")
        Output.note(f"queue {args.queue!r} holds no jobs here (queues holding jobs: {listed}); check --queue")
