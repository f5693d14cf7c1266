"""The commands about limits per kind: limit set, limit list, limit clear (issue 16).

Owns: each limit command's call into the Queue and its text or JSON, and
the commands' entries in the parser (``add_limits``, called once by
parser.build_parser). Imports: limits, values, output, location.

The limits live in the queue: every worker, in every process and on every
host, obeys them from its next lease, so setting one here is all it takes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ..limits import MAX_LIMIT_COUNT, MAX_PERIOD_SECONDS, MAX_WEIGHT, MIN_PERIOD_SECONDS, Limit
from .location import open_queue
from .output import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Output, safe
from .values import int_in, seconds_in


def add_limits(add: Callable[..., argparse.ArgumentParser]) -> None:
    """The limit commands, through build_parser's ``add``."""
    top = add("limit", "limits per kind kept in the queue (set, list, clear); every worker obeys them",
              "  nobroker limit set emails --concurrency 3\n"
              "  nobroker limit list", cmd_limit)  # fmt: skip
    commands = top.add_subparsers(dest="limit_command", metavar="LIMIT_COMMAND", title="commands")
    p = add(
        "set", "limit a kind: at most N leased at once, and/or at most N leases per period",
        "  nobroker limit set emails --concurrency 3\n"
        "  nobroker limit set api --rate 100 --per 60 --burst 10\n"
        "  nobroker limit set reports --group-concurrency 2 --weight vip=3",
        cmd_limit_set, under=commands,
        description=(
            "Limit the jobs of KIND for the whole queue, across every worker process and host:\n"
            "--concurrency N: at most N of them leased at once (an expired lease frees its slot);\n"
            "--rate N [--per SECONDS] [--burst B]: at most N leases per SECONDS (default 1), at most\n"
            "B at once (default N); --group-concurrency N: at most N leased at once per group\n"
            "(enqueue --group); --group-concurrency or --weight GROUP=W (repeatable; --fair: all\n"
            "weights 1) makes leases rotate between the kind's groups, each group's share its weight.\n"
            "The new limit replaces the kind's old one as a whole."
        ),
    )
    p.add_argument("kind", metavar="KIND")
    count = int_in(1, MAX_LIMIT_COUNT)
    p.add_argument("--concurrency", type=count, metavar="N", help="at most N jobs of the kind leased at once")
    p.add_argument("--rate", type=count, metavar="N", help="at most N leases of the kind per --per seconds")
    p.add_argument("--per", type=seconds_in(MIN_PERIOD_SECONDS, MAX_PERIOD_SECONDS), default=1.0,
                   metavar="SECONDS", help="the period --rate counts over (default 1)")  # fmt: skip
    p.add_argument("--burst", type=count, metavar="B", help="leases the rate lets through at once (default: --rate)")
    p.add_argument("--group-concurrency", type=count, metavar="N", help="at most N jobs of each group leased at once")
    p.add_argument("--weight", action="append", type=_weight, metavar="GROUP=W", default=None,
                   help=f"a group's share of the fair share (1 to {MAX_WEIGHT:,}; default 1); repeatable")  # fmt: skip
    p.add_argument("--fair", action="store_true", help="rotate between the kind's groups, every weight 1")
    add("list", "list the limits of the queue", "  nobroker limit list --json", cmd_limit_list, under=commands)
    p = add("clear", "remove a kind's limit (exit 1 if it has none)", "  nobroker limit clear emails",
            cmd_limit_clear, under=commands)  # fmt: skip
    p.add_argument("kind", metavar="KIND")


def cmd_limit(args: argparse.Namespace, out: Output) -> int:
    args._parser.print_help(sys.stderr)
    return EXIT_USAGE


def _weight(text: str) -> tuple[str, int]:
    group, sep, weight = text.rpartition("=")
    if not sep or not group or not weight.isdigit() or not 1 <= int(weight) <= MAX_WEIGHT:
        raise argparse.ArgumentTypeError(f"expected GROUP=W with W from 1 to {MAX_WEIGHT:,}, got {text!r}")
    return group, int(weight)


def cmd_limit_set(args: argparse.Namespace, out: Output) -> int:
    weights = dict(args.weight) if args.weight else ({} if args.fair else None)
    if args.concurrency is None and args.rate is None and args.group_concurrency is None and weights is None:
        out.note(
            "limit set needs --concurrency, --rate, --group-concurrency, --weight or --fair "
            "(to remove a limit: nobroker limit clear KIND)"
        )
        return EXIT_USAGE
    with open_queue(args, create=True) as queue:
        limit = queue.set_limit(
            args.kind, concurrency=args.concurrency, rate=args.rate, per=args.per, burst=args.burst,
            group_concurrency=args.group_concurrency, weights=weights,
        )  # fmt: skip
    assert limit is not None, "a limit with concurrency, rate, group concurrency or weights is stored, not cleared"
    if out.as_json:
        out.document(limit.to_dict())
    else:
        out.line(f"kind {safe(limit.kind)}: {describe(limit)}")
    return EXIT_OK


def cmd_limit_list(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        limits = queue.limits()
    if out.as_json:
        out.document([limit.to_dict() for limit in limits])
        return EXIT_OK
    if not limits:
        out.line("no limits")
        return EXIT_OK
    out.line(f"{'KIND':<24} LIMIT")
    for limit in limits:
        out.line(f"{safe(limit.kind):<24} {describe(limit)}")
    return EXIT_OK


def cmd_limit_clear(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        removed = queue.clear_limit(args.kind)
    if out.as_json:
        out.document({"removed": removed})
    elif removed:
        out.line(f"kind {safe(args.kind)}: no limit")
    else:
        out.note(f"kind {safe(args.kind)} has no limit")
    return EXIT_OK if removed else EXIT_ERROR


def describe(limit: Limit) -> str:
    """A limit in words: ``at most 3 leased at once; 100 leases per 60 s (burst 10)``."""
    parts = []
    if limit.concurrency is not None:
        parts.append(f"at most {limit.concurrency} leased at once")
    if limit.rate is not None:
        parts.append(f"{limit.rate} leases per {limit.per:g} s (burst {limit.capacity})")
    if limit.group_concurrency is not None:
        parts.append(f"at most {limit.group_concurrency} leased at once per group")
    if limit.fair:
        weights = ", ".join(f"{safe(group)}={weight}" for group, weight in limit.weights or ())
        parts.append("fair share between groups" + (f" (weights {weights}; others 1)" if weights else ""))
    return "; ".join(parts)


__all__ = ["add_limits", "cmd_limit", "cmd_limit_clear", "cmd_limit_list", "cmd_limit_set", "describe"]
