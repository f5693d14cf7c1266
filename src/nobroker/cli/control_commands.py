"""The commands that control jobs already queued or running: cancel (issue 15).

Owns: each command's call into the Queue and its text or JSON, and the
commands' entries in the parser (``add_control``, called once by
parser.build_parser), so the control commands grow here without touching
the other groups. Imports: output, location.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

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


def cmd_cancel(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        job = queue.cancel(args.id)
    if out.as_json:
        out.document(job.to_dict())
    elif job.cancel_requested:
        out.line(f"{job.id} is running: cancel requested (its worker is told at its next heartbeat)")
    else:
        out.line(f"{job.id} cancelled")
    return EXIT_OK


__all__ = ["add_control", "cmd_cancel"]
