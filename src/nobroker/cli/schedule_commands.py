"""The commands about periodic jobs: schedule add, schedule list, schedule remove.

Owns: each schedule command's call into the Queue and its text or JSON.
Imports: schedules, values, output, location.

The schedules live in the queue; ``nobroker work`` (every Worker) enqueues
their due ticks, so adding one here is all it takes.
"""

from __future__ import annotations

import argparse
import sys
import time

from ..schedules import Schedule
from .location import open_queue
from .output import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Output, preview, relative, safe, utc
from .values import parse_json_value


def cmd_schedule(args: argparse.Namespace, out: Output) -> int:
    args._parser.print_help(sys.stderr)
    return EXIT_USAGE


def cmd_schedule_add(args: argparse.Namespace, out: Output) -> int:
    payload = parse_json_value(args.payload) if args.payload is not None else None
    with open_queue(args, create=True) as queue:
        sched = queue.schedule(
            args.name, payload, every=args.every, cron=args.cron, kind=args.kind, priority=args.priority,
            tz=args.tz, catch_up=args.catch_up,
        )  # fmt: skip
    if out.as_json:
        out.document(sched.to_dict())
    else:
        out.line(f"schedule {safe(sched.name)}: {_when(sched)}; next run {utc(sched.next_run)}")
    return EXIT_OK


def cmd_schedule_list(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        schedules = queue.schedules()
    if out.as_json:
        out.document([s.to_dict() for s in schedules])
        return EXIT_OK
    if not schedules:
        out.line("no schedules")
        return EXIT_OK
    now = time.time()
    out.line(f"{'NAME':<24} {'WHEN':<28} {'CATCH_UP':<8} {'NEXT RUN':<26} PAYLOAD")
    for s in schedules:
        next_run = f"{utc(s.next_run)} ({relative(s.next_run, now)})"
        out.line(f"{safe(s.name):<24} {_when(s):<28} {s.catch_up:<8} {next_run:<26} {safe(preview(s.payload))}")
    return EXIT_OK


def cmd_schedule_remove(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        removed = queue.unschedule(args.name)
    if out.as_json:
        out.document({"removed": removed})
    elif removed:
        out.line(f"schedule {safe(args.name)} removed (ticks already enqueued stay)")
    else:
        out.note(f"no schedule named {safe(args.name)}")
    return EXIT_OK if removed else EXIT_ERROR


def _when(s: Schedule) -> str:
    if s.every is not None:
        return f"every {s.every:g} s"
    return f"cron {safe(s.cron)}" + (f" ({safe(s.tz)})" if s.tz else "")
