"""The commands that control jobs already queued or running: cancel, pause, resume, run-now, delete (issue 15).

Owns: each command's call into the Queue and its text or JSON, and the
commands' entries in the parser (``add_control``, called once by
parser.build_parser), so the control commands grow here without touching
the other groups. Imports: jobs, output, location.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..jobs import Job

from .location import open_queue
from .output import EXIT_OK, Output


def add_control(add: Callable[..., argparse.ArgumentParser]) -> None:
    """The control commands, through build_parser's ``add``."""
    p = add(
        "cancel", "cancel a job: ready or delayed at once; leased: its handler is told, its lease ends cancelled",
        "  nobroker cancel 01J9ZQ3F6Y", cmd_cancel,
        description=(
            "Cancel a job. A ready or delayed job is cancelled at once (cancelled is final, kept as a\n"
            "done job is). A leased job is marked: its Worker tells the handler at its next heartbeat,\n"
            "its ack and nack are refused, and the attempt ends cancelled. A done, dead or cancelled\n"
            "job is refused (exit 1, naming its state)."
        ),
    )
    p.add_argument("id", metavar="ID")
    for name, verb, summary, run in (
        ("pause", "Pause", "stop handing out jobs (of one kind, or of the whole queue) until resume", cmd_pause),
        ("resume", "Resume", "hand out jobs again after a pause (of one kind, or of the whole queue)", cmd_resume),
    ):
        p = add(
            name, summary, f"  nobroker {name}\n  nobroker {name} --kind email", run,
            description=(
                f"{verb} the queue, or with --kind one kind of job. The pause is stored in the queue: every\n"
                "worker, in every process, sees it at its next lease. Running jobs finish; enqueue still works.\n"
                "A kind paused by name and the whole queue are paused and resumed separately."
            ),
        )
        p.add_argument("--kind", metavar="K", help="only this kind (default: the whole queue)")
    p = add(
        "run-now", "make a delayed or backing-off job runnable now", "  nobroker run-now 01J9ZQ3F6Y", cmd_run_now,
        description=(
            "Make a ready job that waits for its time (delayed, or backing off after a failure) runnable\n"
            "now. A job runnable already is left as it is; a leased, done, dead or cancelled one is\n"
            "refused (exit 1, naming its state)."
        ),
    )
    p.add_argument("id", metavar="ID")
    p = add(
        "delete", "remove one job that is not leased", "  nobroker delete 01J9ZQ3F6Y", cmd_delete,
        description=(
            "Remove one job: ready, delayed, done, dead or cancelled. A leased job is refused (exit 1):\n"
            "cancel it, or let it finish, first."
        ),
    )
    p.add_argument("id", metavar="ID")


def cmd_pause(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        queue.pause(args.kind)
        paused = queue.paused()
    return _show_paused(out, paused, f"kind {args.kind!r}" if args.kind else "the queue", "paused")


def cmd_resume(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        queue.resume(args.kind)
        paused = queue.paused()
    return _show_paused(out, paused, f"kind {args.kind!r}" if args.kind else "the queue", "resumed")


def _show_paused(out: Output, paused: list[str | None], what: str, done: str) -> int:
    if out.as_json:
        out.document({"paused": paused})
        return EXIT_OK
    out.line(f"{what} {done}")
    still = ["the whole queue" if kind is None else f"kind {kind!r}" for kind in paused]
    out.line("paused now: " + (", ".join(still) if still else "nothing"))
    return EXIT_OK


def _act_on_job(args: argparse.Namespace, out: Output, act: Callable[[Any, str], Job], said: Callable[[Job], str]) -> int:
    """One call on the job ``args.id`` names: the job after it as JSON, or the line ``said`` makes of it."""
    with open_queue(args) as queue:
        job = act(queue, args.id)
    if out.as_json:
        out.document(job.to_dict())
    else:
        out.line(said(job))
    return EXIT_OK


def cmd_run_now(args: argparse.Namespace, out: Output) -> int:
    return _act_on_job(args, out, lambda queue, job_id: queue.run_now(job_id), lambda job: f"{job.id} is runnable now")


def cmd_delete(args: argparse.Namespace, out: Output) -> int:
    return _act_on_job(args, out, lambda queue, job_id: queue.delete(job_id), lambda job: f"{job.id} deleted (it was {job.state.value})")


def _cancelled(job: Job) -> str:
    if job.cancel_requested:
        return f"{job.id} is running: cancel requested (its worker is told at its next heartbeat)"
    return f"{job.id} cancelled"


def cmd_cancel(args: argparse.Namespace, out: Output) -> int:
    return _act_on_job(args, out, lambda queue, job_id: queue.cancel(job_id), _cancelled)


__all__ = ["add_control", "cmd_cancel", "cmd_delete", "cmd_pause", "cmd_resume", "cmd_run_now"]
