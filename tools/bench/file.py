"""The benchmark: every figure beside the disk's own append+fsync rate, and beside a queue on sqlite3.

Owns: ``python -m tools.bench`` (what ``python make.py bench`` and
``bench-md`` run): the flags, the order of the suites (the comparison
table of engine.py first, then SUITES), the header line with the machine's
note, and the two tables; with ``--pg``, every other flag is pg.py's (its
--quick and --md too).
Imports: plan, report, engine, throughput, scale, peers, pickup, limited; pg
for ``--pg``.
``nobroker bench`` is the quick figure of nobroker.cli.bench, which ships in
the single-file app; these suites do not.

This machine is shared and noisy, so no figure is quoted alone: each
repetition measures ``limit``, the rate of 120-byte append+fdatasync on the
same filesystem, beside it (and, for the comparison table, the sqlite3
queue in the same round), and the bench reports medians of values and of
ratios.
Benchmarks are never timed tests: the tests check behaviour, this checks speed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

from tools.bench import engine, limited, peers, pickup, scale, throughput
from tools.bench.plan import Figure, Plan, progress
from tools.bench.report import render

#: The file storage's suites after the comparison table, in the table's order; each is ``figures(root, plan) -> list[Figure]``.
SUITES: tuple[Callable[[str, Plan], list[Figure]], ...] = (
    throughput.figures, scale.figures, peers.figures, pickup.figures, limited.figures,
)
#: The suites ``--only`` names, to run one alone (without the comparison table).
BY_NAME = {"throughput": throughput.figures, "scale": scale.figures, "peers": peers.figures, "pickup": pickup.figures,
           "limits": limited.figures}


def run(root: str, plan: Plan) -> list[Figure]:
    """Every suite's figures, measured in scratch queues under ``root``."""
    figures = [figure for suite in SUITES for figure in suite(root, plan)]
    progress("done")
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    return figures


def machine(directory: str) -> str:
    """The machine's note: cores and their model, Python, the system, the scratch folder's filesystem."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    cores = f"{os.cpu_count()} cores" + (f" ({model})" if model else "")
    return f"{cores}, Python {platform.python_version()}, {platform.system()} {platform.release()}, {filesystem(directory)}"


def filesystem(directory: str) -> str:
    """The type of the filesystem that holds ``directory`` (from /proc/mounts; "" where there is none)."""
    best, kind = "", ""
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                _dev, mount, fstype, *_ = line.split()
                if os.path.realpath(directory).startswith(mount.rstrip("/") + "/") and len(mount) > len(best):
                    best, kind = mount, fstype
    except (OSError, ValueError):
        return ""
    return f"scratch queues on {kind} ({best})" if kind else ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--pg" in argv:
        # Every other flag is the PostgreSQL suite's, --quick and --md included.
        return _main_pg([arg for arg in argv if arg != "--pg"])
    parser = argparse.ArgumentParser(prog="nobroker bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (a few minutes on a loaded 2-core machine)")
    parser.add_argument("--full", action="store_true", help="the 1,000,000-job figures too (minutes)")
    parser.add_argument("--md", action="store_true", help="print a Markdown table for README.md")
    parser.add_argument("--runs", type=int, default=None, help="repetitions per figure (median reported)")
    parser.add_argument("--dir", default=None, help="where to put the scratch queues (default: a temp folder)")
    parser.add_argument("--only", choices=sorted(BY_NAME), default=None, help="run this one suite alone")
    # Listed for --help only: a command line with --pg went to the PostgreSQL suite above.
    parser.add_argument("--pg", action="store_true", help="benchmark the PostgreSQL storage instead")
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.quick else 5)
    root = tempfile.mkdtemp(prefix="nobroker-bench-", dir=args.dir)
    plan = Plan.of(quick=args.quick, full=args.full, runs=runs)
    try:
        note = machine(root)
        contests = None if args.only else engine.contests(root, plan)
        figures = run(root, plan) if args.only is None else BY_NAME[args.only](root, plan)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mode = "--full" if args.full else ("--quick" if args.quick else "default")
    header = (
        f"nobroker bench ({mode}, median of {runs} runs) on {time.strftime('%Y-%m-%d')}: {note}; "
        "limit = 120-byte append+fdatasync on the same disk, measured in each run; "
        f"payload {engine.PAYLOAD_TEXT} ({engine.PAYLOAD_BYTES} bytes)"
    )
    print(("_" + header + "_") if args.md else header)
    print()
    if contests is not None:
        print(engine.render(contests, markdown=args.md))
        print()
        print(engine.NOTE)
        print()
    print(render(figures, markdown=args.md))
    return 0


def _main_pg(argv: list[str]) -> int:
    if importlib.util.find_spec("psycopg") is None:
        print("nobroker bench: the PostgreSQL benchmark needs psycopg: pip install 'nobroker[postgres]'", file=sys.stderr)
        return 1
    from tools.bench import pg

    return pg.main(argv)


if __name__ == "__main__":
    sys.exit(main())
