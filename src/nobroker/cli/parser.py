"""The command line's words: every command, its options, its help and its example, as one table.

Owns: build_parser (argparse: the global options, which go before or after
the command, and one sub-parser per command, each set to call its cmd_*
function), the top-level description and epilog. Declarative: the table
reads top to bottom in the order ``nobroker --help`` lists the commands, in
four groups of a function each; a new command is one ``add(...)`` call here
and one cmd_* function in the module of its group.
Imports: nobroker, jobs, schedules, values, output, location, job_commands,
admin_commands, bench, run_commands, schedule_commands, control_commands,
limit_commands.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

from .. import __version__
from ..jobs import LISTINGS
from .admin_commands import (
    INSPECT_BODY_CHARS, cmd_compact, cmd_counters, cmd_inspect, cmd_purge, cmd_recover, cmd_repair, cmd_stats, cmd_verify, cmd_workers,
)  # fmt: skip
from .control_commands import add_control
from .limit_commands import add_limits
from .bench import DEFAULT_SECONDS as BENCH_SECONDS
from .bench import MAX_SECONDS as BENCH_MAX_SECONDS
from .bench import MIN_SECONDS as BENCH_MIN_SECONDS
from .job_commands import (
    DEFAULT_LIST_LIMIT, MAX_ENQUEUE_COUNT, cmd_ack, cmd_dlq, cmd_enqueue, cmd_extend, cmd_get, cmd_lease, cmd_list, cmd_why,
    cmd_nack,
)  # fmt: skip
from .location import DEFAULT_DIR, DEFAULT_QUEUE, ENV_DSN
from .output import PROG
from .schedule_commands import cmd_schedule, cmd_schedule_add, cmd_schedule_list, cmd_schedule_remove
from ..schedules import CATCH_UP_RULES, DEFAULT_CATCH_UP
from .run_commands import (
    DEFAULT_HOST, DEFAULT_PORT, ENV_TOKEN, cmd_bench, cmd_pg, cmd_pg_migrate, cmd_serve, cmd_work,
)  # fmt: skip
from .values import ALL, int_at_least, int_in, nonneg_float, port, positive_float, seconds_in

#: What every command's help says about purge's and repair's prompt.
CONFIRM_RULE = (
    "Without --yes, asks on the terminal first (answer y); when standard input\n"
    "is not a terminal (a script, a pipe, CI) it refuses with exit 2 unless --yes\n"
    "is given. Declining at the prompt changes nothing and exits 1."
)


class _Add(Protocol):
    """``add(name, help, example, func, ...)``: one sub-command, its global options and its cmd_* function."""

    def __call__(
        self, name: str, help: str, example: str, func: Callable[..., int], *, description: str | None = None,
        under: Any = None,
    ) -> argparse.ArgumentParser: ...  # fmt: skip


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
    group.add_argument("--connect-timeout", type=nonneg_float, metavar="SECONDS", default=default(None),
                       help="PostgreSQL: keep trying to reach the server this long, then fail "
                            "(default: the DSN's connect_timeout, else 30; 0 tries once)")
    group.add_argument("--log-format", type=int, choices=(1, 2, 4), metavar="{1,2,4}", default=default(None),
                       help="file storage: the log format a new queue and each compaction write: 3 (the default), "
                            "2 (as 3, with every job's available_at written) or 1 (which nobroker 0.1.2 reads)")
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

EPILOG = """\
examples:
  nobroker enqueue '{"resize": "photo.jpg"}' --priority 5
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

    def add(name: str, help: str, example: str, func: Callable[..., int], *,
            description: str | None = None, under: Any = None) -> argparse.ArgumentParser:
        sub = (under or commands).add_parser(
            name, help=help, description=description or help, epilog=f"example:\n{example}",
            formatter_class=_Formatter,
        )
        _add_global_options(sub, top=False)
        sub.set_defaults(func=func, _parser=sub)
        return sub

    _add_producing_and_consuming(add)
    _add_looking(add)
    add_control(add)
    _add_maintaining(add)
    _add_running(add)
    _add_scheduling(add)
    add_limits(add)
    return parser


def _add_producing_and_consuming(add: _Add) -> None:
    p = add(
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
    p.add_argument("--delay", type=nonneg_float, default=0.0, metavar="SECONDS", help="not before this many seconds from now")
    p.add_argument("--max-attempts", type=int_at_least(1), metavar="N", help="dead after N failed attempts (queue default: 5)")
    p.add_argument("--id", metavar="JOB_ID", help="idempotent: if the queue still holds this id, nothing new is scheduled")
    p.add_argument("--kind", default="default", help="the job's type; workers may lease only some kinds (default: default)")
    p.add_argument("--dedupe-key", metavar="KEY", help="at most one ready/leased job per (kind, key)")
    p.add_argument("--group", metavar="GROUP", help="the job's group (a tenant): what --group-concurrency and fair share count")
    p.add_argument("--timeout", type=positive_float, default=None, metavar="SECONDS",
                   help="the job's time limit: a worker fails an attempt that runs longer")
    p.add_argument("--count", type=int_in(1, MAX_ENQUEUE_COUNT), default=None, metavar="N",
                   help="enqueue N copies in batches (prints the ids; --json prints a list)")

    p = add(
        "lease", "lease ready jobs (they become invisible until acked, nacked or expired)",
        "  nobroker lease --count 10 --visibility-timeout 120 --kind email", cmd_lease,
    )
    p.add_argument("--count", type=int_at_least(1), default=1, metavar="N", help="at most N jobs (default 1)")
    p.add_argument("--visibility-timeout", type=positive_float, default=None, metavar="SECONDS",
                   help="lease length (queue default: 30)")
    p.add_argument("--kind", action="append", metavar="KIND", help="only this kind (repeat for several)")

    p = add("ack", "mark a job done (by id: no lease-token check)",
            "  nobroker ack 01J9ZQ3F6Y --result '{\"pages\": 12}'", cmd_ack)
    p.add_argument("id", metavar="ID")
    p.add_argument("--result", metavar="JSON", help="a JSON result kept with the done job")

    p = add("nack", "report a failure: retry later, or dead when attempts are used up",
            "  nobroker nack 01J9ZQ3F6Y --error 'smtp timeout' --delay 30\n"
            "  nobroker nack 01J9ZQ3F6Y --permanent --error 'no such user'", cmd_nack)
    p.add_argument("id", metavar="ID")
    p.add_argument("--error", metavar="TEXT", help="why it failed (kept as last_error)")
    # A retry time and "never retry" contradict each other: argparse refuses the pair (exit 2).
    outcome = p.add_mutually_exclusive_group()
    outcome.add_argument("--delay", type=nonneg_float, default=None, metavar="SECONDS",
                         help="retry after this delay instead of the backoff")
    outcome.add_argument("--permanent", action="store_true", help="straight to the dead-letter queue, no retry")

    p = add("extend", "extend a leased job: its lease now ends SECONDS from now",
            "  nobroker extend 01J9ZQ3F6Y 300", cmd_extend)
    p.add_argument("id", metavar="ID")
    p.add_argument("seconds", type=positive_float, metavar="SECONDS")


def _add_looking(add: _Add) -> None:
    add("stats", "count jobs by state", "  nobroker --dir ./jobs stats --json", cmd_stats)
    add("counters", "what happened to the jobs so far, per kind: enqueued, succeeded, failed, dead, cancelled",
        "  nobroker counters\n  nobroker --dsn postgresql://localhost/app counters --json", cmd_counters)
    add("workers", "list the workers working the queue (gone: no heartbeat for 30 s)",
        "  nobroker workers\n  nobroker --dsn postgresql://localhost/app workers --json", cmd_workers)

    p = add("list", "list jobs, oldest first",
            "  nobroker list --state ready --limit 20 --offset 40", cmd_list)
    p.add_argument("--state", choices=LISTINGS,
                   help="only jobs in this state; runnable and delayed: the two halves of ready, as stats counts them")
    p.add_argument("--limit", type=int_at_least(0), default=DEFAULT_LIST_LIMIT, metavar="N",
                   help=f"at most N jobs (default {DEFAULT_LIST_LIMIT}; 0 = all)")
    p.add_argument("--offset", type=int_at_least(0), default=0, metavar="N", help="skip the first N")
    p.add_argument("--kind", metavar="KIND", help="only jobs of this kind")

    p = add("get", "show one job in full (payload, attempts and their history, error, stage, result)",
            "  nobroker get 01J9ZQ3F6Y", cmd_get)
    p.add_argument("id", metavar="ID")

    p = add("why", "say why a job is where it is (delayed, backing off, leased by whom, work ahead, ...)",
            "  nobroker why 01J9ZQ3F6Y\n  nobroker why 01J9ZQ3F6Y --json", cmd_why)
    p.add_argument("id", metavar="ID")

    p = add("dlq", "list the dead-letter queue, or requeue it (all, or one id)",
            "  nobroker dlq\n  nobroker dlq --requeue            # every dead job\n"
            "  nobroker dlq --requeue 01J9ZQ3F6Y # just this one", cmd_dlq)
    p.add_argument("--requeue", nargs="?", const=ALL, default=None, metavar="ID",
                   help="make dead jobs ready again with attempts reset (all, or the one ID)")
    p.add_argument("--limit", type=int_at_least(0), default=DEFAULT_LIST_LIMIT, metavar="N",
                   help=f"list at most N (default {DEFAULT_LIST_LIMIT}; 0 = all)")


def _add_maintaining(add: _Add) -> None:
    p = add("purge", "delete every job of the queue (asks first; --yes for scripts)",
            "  nobroker purge\n  nobroker purge --yes", cmd_purge,
            description="Delete every job of the queue, in every state.\n\n" + CONFIRM_RULE)
    p.add_argument("--yes", action="store_true", help="do not ask")

    add("compact", "rewrite the log without done jobs (the rest is kept)",
        "  nobroker compact", cmd_compact)

    p = add(
        "inspect", "print the raw log record by record: offset, length, type, body, damage",
        "  nobroker inspect | less\n  nobroker inspect --generation 2 --json", cmd_inspect,
        description=(
            "Print the raw log of the file storage, record by record. Reads only.\n"
            f"Bodies longer than {INSPECT_BODY_CHARS} characters are cut in this view; --json shows them whole.\n"
            "Damage (a torn or corrupt record) is shown where it is found; reading stops there."
        ),
    )
    p.add_argument("--generation", type=int_at_least(0), default=None, metavar="N",
                   help="read generation N (default: the current one)")

    add("verify", "check the queue files without changing them (exit 1 when there are problems)",
        "  nobroker verify && echo healthy", cmd_verify)
    add("recover", "open the queue (recovering it) and report what was found: torn tail, records, jobs",
        "  nobroker recover", cmd_recover)
    p = add("repair", "rebuild a damaged log from its valid records (the damaged file is kept aside)",
            "  nobroker verify || nobroker repair --yes", cmd_repair,
            description="Rebuild a damaged log from its valid records; the damaged file is kept\n"
                        "aside as <file>.damaged-<timestamp>. Does nothing if `verify` finds no problem.\n\n"
                        + CONFIRM_RULE)
    p.add_argument("--yes", action="store_true", help="do not ask")


def _add_running(add: _Add) -> None:
    p = add(
        "work", "run a worker: import MODULE:CALLABLE and call it for each job",
        "  nobroker work myapp.tasks:handle -c 4\n  nobroker work myapp.tasks:resize --processes 4\n"
        "  nobroker work examples.handlers:slow --max-jobs 1",
        cmd_work,
        description=(
            "Run a worker. The handler gets the Job; returning acks it, raising nacks it\n"
            "(retry with backoff), raising nobroker.PermanentError sends it to the DLQ.\n"
            "The current folder is importable. Ctrl-C finishes running jobs and exits 130;\n"
            "a second Ctrl-C exits at once. SIGTERM finishes running jobs and exits 0.\n"
            "--processes N forks N worker processes (each runs --concurrency handlers);\n"
            "one that dies is replaced, and a stop reaches them all.\n"
            "Prints one line per finished job (time, id, kind, outcome, duration);\n"
            "--json prints JSON lines (the last one: the run's counts); -q prints none."
        ),
    )
    p.add_argument("handler", metavar="MODULE:CALLABLE")
    p.add_argument("-c", "--concurrency", type=int_at_least(1), default=1, metavar="N",
                   help="handlers running at once (default 1; per process with --processes)")
    p.add_argument("-p", "--processes", type=int_at_least(1), default=None, metavar="N",
                   help="run N pre-forked worker processes (for CPU-bound handlers; POSIX only)")
    p.add_argument("--max-jobs", type=int_at_least(1), default=None, metavar="N", help="stop after N jobs (in total)")
    p.add_argument("--idle-timeout", type=nonneg_float, default=None, metavar="SECONDS",
                   help="stop after this long with no work (each process)")
    p.add_argument("--timeout", type=positive_float, default=None, metavar="SECONDS",
                   help="time limit of each job without its own: an attempt that runs longer fails")
    p.add_argument("--kind", action="append", metavar="KIND", help="only this kind (repeat for several)")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per job (only the final counts)")

    p = add(
        "serve", "serve the live dashboard and its JSON API over HTTP",
        f"  nobroker serve --port {DEFAULT_PORT}\n  {ENV_TOKEN}=s3cret nobroker serve --host 0.0.0.0",
        cmd_serve,
        description=f"Serve the dashboard. Binds {DEFAULT_HOST} by default; any other address needs a token.",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    p.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--token", default=None, help=f"require this bearer token (or env {ENV_TOKEN})")

    p = add(
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
    p.add_argument("--seconds", type=seconds_in(BENCH_MIN_SECONDS, BENCH_MAX_SECONDS), default=BENCH_SECONDS,
                   metavar="S", help=f"how long each figure runs (default {BENCH_SECONDS:g})")

    pg = add("pg", "PostgreSQL storage tools (see `nobroker pg migrate --help`)",
             "  nobroker --dsn postgresql://localhost/app pg migrate", cmd_pg)
    pg_commands = pg.add_subparsers(dest="pg_command", metavar="PG_COMMAND", title="commands")
    p = add(
        "migrate", "create or upgrade the queue schema (idempotent; needs --dsn or NOBROKER_DSN)",
        f"  nobroker pg migrate --dsn postgresql://app@localhost/app --schema jobs --worker-role nobroker_worker\n"
        f"  {ENV_DSN}=postgresql://localhost/app nobroker pg migrate",
        cmd_pg_migrate, under=pg_commands,
    )
    p.add_argument("--worker-role", metavar="ROLE", default=None,
                   help="also create this role and restrict the queue rows to it (row level security)")


def _add_scheduling(add: _Add) -> None:
    sched = add("schedule", "periodic jobs kept in the queue (add, list, remove); every worker enqueues their ticks",
                "  nobroker schedule add nightly-report --cron '0 3 * * *' --tz Europe/Berlin\n"
                "  nobroker schedule list", cmd_schedule)
    commands = sched.add_subparsers(dest="schedule_command", metavar="SCHEDULE_COMMAND", title="commands")
    p = add(
        "add", "add (or redefine) a schedule: every N seconds or a five-field cron expression",
        "  nobroker schedule add heartbeat --every 60 --payload '{\"ping\": true}'\n"
        "  nobroker schedule add nightly --cron '0 3 * * *' --tz Europe/Berlin --catch-up all",
        cmd_schedule_add, under=commands,
        description=(
            "Add a schedule, stored in the queue. Every running worker (nobroker work) enqueues\n"
            "its due ticks, each exactly once, as jobs with the id tick:NAME@<due time in ms>.\n"
            "Adding the same definition again changes nothing; a different one replaces it.\n"
            "--catch-up: what becomes of ticks that came due while no worker ran: all (every one),\n"
            "last (only the latest; the default), none (none more than a minute late)."
        ),
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--payload", metavar="JSON", default=None,
                   help="the ticks' payload (JSON; a plain word is a string; default null)")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--every", type=positive_float, metavar="SECONDS", help="a tick every SECONDS")
    when.add_argument("--cron", metavar="EXPR", help="minute hour day-of-month month day-of-week (or @daily, ...)")
    p.add_argument("--tz", metavar="ZONE", help="the IANA zone a cron expression's wall clock is in (default UTC)")
    p.add_argument("--kind", default="default", help="the ticks' kind (default: default)")
    p.add_argument("--priority", type=int, default=0, help="the ticks' priority (default 0)")
    p.add_argument("--catch-up", choices=CATCH_UP_RULES, default=DEFAULT_CATCH_UP,
                   help=f"missed ticks after downtime (default {DEFAULT_CATCH_UP})")
    add("list", "list the schedules with their next run", "  nobroker schedule list --json",
        cmd_schedule_list, under=commands)
    p = add("remove", "remove a schedule (its ticks already enqueued stay; exit 1 if there is none)",
            "  nobroker schedule remove heartbeat", cmd_schedule_remove, under=commands)
    p.add_argument("name", metavar="NAME")
