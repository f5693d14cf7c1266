"""The commands that run until stopped, and the tools: work, serve, bench, pg migrate.

Owns: loading a handler named MODULE:CALLABLE, running a Worker under the
shared two-stage stop (worker.signals: Ctrl-C finishes the running jobs, a
second quits), serving the dashboard, the quick bench, and the PostgreSQL
schema migration (through the queue facade). The dashboard and the
PostgreSQL storage are imported only by the command that needs them, so a
missing optional part never breaks the rest.
``work --processes N`` is ``Worker(..., processes=N)``: the Worker forks
and supervises the children, and this command's stop signals reach them
through ``Worker.stop()`` (a second Ctrl-C: KeyboardInterrupt, which kills
them). ``work`` prints one line per finished job on stdout (the Worker's
``on_job`` reports: time, id, kind, outcome, duration), JSON lines with
``--json`` (the last line is the run's counts), none with ``-q``.
Imports: nobroker, errors, locations, worker.signals, dashboard, values,
output, location, bench.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..errors import QueueNotFoundError
from . import bench as quickbench
from .location import DEFAULT_QUEUE, ENV_DSN, list_queue_names, not_found, open_queue, storage_of, storage_options
from .output import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, PROG, Output, Progress, one_line, safe
from .values import CommandError, InputError, UsageError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
ENV_TOKEN = "NOBROKER_TOKEN"

_HANDLER_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")


# ---------------------------------------------------------------- work
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
                f"looking up {attribute!r} in module {module_name!r} failed: {type(exc).__name__}: {one_line(exc)}"
            ) from exc
    if not callable(target):
        raise CommandError(f"{spec} is not callable")
    return target  # type: ignore[no-any-return]


def _import_failed(module_name: str, exc: BaseException) -> CommandError:
    # One line; `-vv` still logs the traceback (the exception is chained).
    return CommandError(
        f"cannot import handler module {module_name!r}: {type(exc).__name__}: {one_line(exc)} "
        "(-vv shows the traceback)"
    )


def job_lines(out: Output) -> Callable[[Any], None]:
    """The Worker's ``on_job`` listener of ``nobroker work``: one line per job on stdout, written whole.

    Handler threads report at once, and with ``--processes`` every child
    writes to the same stdout: each line is one write and one flush (shorter
    than a pipe's atomic write), under a lock for this process's threads.
    """
    lock = threading.Lock()
    stream = out.out

    def tell(report: Any) -> None:
        text = json.dumps(report.to_dict(), ensure_ascii=True) if out.as_json else report.text_line()
        with lock:
            stream.write(text + "\n")
            stream.flush()

    return tell


def cmd_work(args: argparse.Namespace, out: Output) -> int:
    from .. import Worker
    from ..worker.signals import StopSignals

    handler = load_handler(args.handler)
    processes = getattr(args, "processes", None)
    on_job = None if args.quiet else job_lines(out)
    with open_queue(args, create=True) as queue:
        try:
            worker = Worker(
                queue, handler, concurrency=args.concurrency, max_jobs=args.max_jobs, idle_timeout=args.idle_timeout,
                handle_signals=False, kinds=args.kind, processes=processes, on_job=on_job,
                timeout=getattr(args, "timeout", None),
            )  # fmt: skip
        except NotImplementedError as exc:  # --processes where there is no fork
            raise UsageError(str(exc)) from None
        if sys.stderr.isatty():
            how = f"concurrency {args.concurrency}" + ("" if processes is None else f" in each of {processes} processes")
            sys.stderr.write(f"{PROG}: working queue {args.queue!r} with {safe(args.handler)} ({how}); Ctrl-C stops\n")

        def stopping(signum: int) -> None:  # on the signals' watcher thread
            sys.stderr.write(f"\n{PROG}: stopping: finishing running jobs (Ctrl-C again to quit at once)\n")
            sys.stderr.flush()
            worker.stop()

        with StopSignals(stopping, name="nobroker-cli-signals") as stop_signals:
            stats = worker.run()
    replaced = {} if processes is None else {"processes_replaced": worker.processes_replaced}
    if out.as_json:  # one line, the last of the JSON lines
        out.line(json.dumps({**stats.to_dict(), **replaced}, ensure_ascii=True))
    else:
        out.line(
            f"worker stopped: leased {stats.leased}, succeeded {stats.succeeded}, failed {stats.failed}, "
            f"dead {stats.dead}, lost leases {stats.lost_leases}"
            + "".join(f", {name} {count}" for name, count in (("cancelled", stats.cancelled), ("snoozed", stats.snoozed)) if count)
            + ("" if processes is None else f", worker processes replaced {worker.processes_replaced}")
        )
    # A requested stop is success; Ctrl-C reports itself the way shells expect.
    return EXIT_INTERRUPTED if stop_signals.first == signal.SIGINT else EXIT_OK


# ---------------------------------------------------------------- serve
def _missing_module(exc: ImportError, module: str) -> bool:
    return isinstance(exc, ModuleNotFoundError) and exc.name == module


def cmd_serve(args: argparse.Namespace, out: Output) -> int:
    try:
        from ..dashboard import serve
    except ImportError as exc:
        if _missing_module(exc, "nobroker.dashboard"):
            raise CommandError("this copy of nobroker has no dashboard (nobroker/dashboard/ is missing)") from None
        raise
    from ..worker.signals import StopSignals  # here, so other commands never load the worker package

    token = args.token if args.token is not None else os.environ.get(ENV_TOKEN) or None
    where, is_dsn = storage_of(args)
    options = storage_options(args, is_dsn)

    def names() -> list[str]:
        return list_queue_names(where, options)

    def open_named(name: str) -> Any:
        from .. import Queue

        return Queue(where, name=name, create=False, **options)

    def ready(server: Any) -> None:
        url = getattr(server, "url", f"http://{args.host}:{args.port}/")
        if out.as_json:
            out.document({"url": url, "queue": args.queue})
        else:
            others = len(set(names()) - {args.queue})
            picker = f", {others} more in the page's picker" if others else ""
            out.line(f"dashboard for queue {safe(args.queue)!r}{picker} at {safe(url)}  (Ctrl-C stops)")
        out.out.flush()

    args.queue = _first_queue_to_serve(args, names, is_dsn)
    with open_queue(args) as queue, StopSignals(signals=(signal.SIGINT,), graceful=False) as interrupt:
        serve(queue, host=args.host, port=args.port, token=token, on_ready=ready, list_queues=names, open_queue=open_named)
    # The dashboard treats Ctrl-C as its normal way out and returns; the
    # exit code still says it was interrupted, like every other command.
    return EXIT_INTERRUPTED if interrupt.first is not None else EXIT_OK


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
        raise not_found(exc) from None
    if DEFAULT_QUEUE in found or not found:
        return DEFAULT_QUEUE  # none at all: the shared check refuses it with the usual message
    return found[0]


# ---------------------------------------------------------------- bench and pg
def cmd_bench(args: argparse.Namespace, out: Output) -> int:
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
    from ..locations import migrate_postgres

    if args.dir:
        args._parser.error("pg migrate works on PostgreSQL; pass --dsn (not --dir)")
    dsn = args.dsn or os.environ.get(ENV_DSN)
    if not dsn:
        args._parser.error(f"needs a PostgreSQL DSN: pass --dsn postgresql://... or set {ENV_DSN}")
    try:
        result = migrate_postgres(
            str(dsn), schema=args.schema, worker_role=args.worker_role, connect_timeout=getattr(args, "connect_timeout", None)
        )
    except ImportError as exc:
        if _missing_module(exc, "nobroker.postgres"):
            raise CommandError("this copy of nobroker has no PostgreSQL storage (nobroker/postgres/ is missing)") from None
        if _missing_module(exc, "psycopg"):
            raise CommandError("PostgreSQL support needs psycopg: pip install 'nobroker[postgres]'") from None
        raise
    applied = [str(name) for name in result] if isinstance(result, (list, tuple)) else []
    if out.as_json:
        out.document({"migrated": True, "applied": applied})
    elif applied:
        out.line(f"applied {len(applied)} migration(s): {', '.join(safe(name) for name in applied)}")
    else:
        out.line("the schema is already up to date")
    return EXIT_OK


def cmd_pg(args: argparse.Namespace, out: Output) -> int:
    args._parser.print_help(sys.stderr)
    return EXIT_USAGE
