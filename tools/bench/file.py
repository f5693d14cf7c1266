"""The benchmark: every figure beside the disk's own append+fsync rate.

Owns: ``python -m tools.bench`` (what ``python make.py bench`` and
``bench-md`` run): the flags, the order of the suites (SUITES), the header
line and the table; with ``--pg``, every other flag is pg.py's (its --quick
and --md too).
Imports: plan, report, throughput, scale, pickup; pg for ``--pg``.
``nobroker bench`` is the quick figure of nobroker.cli.bench, which ships in
the single-file app; these suites do not.

This machine is shared and noisy, so no figure is quoted alone: before each
repetition the bench measures ``limit``, the rate of 120-byte append+fdatasync
on the same filesystem, and reports the median value and the median ratio.
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

from tools.bench import pickup, scale, throughput
from tools.bench.plan import Figure, Plan, progress
from tools.bench.report import render

#: The file storage's suites, in the table's order; each is ``figures(root, plan) -> list[Figure]``.
SUITES: tuple[Callable[[str, Plan], list[Figure]], ...] = (throughput.figures, scale.figures, pickup.figures)


def run(root: str, plan: Plan) -> list[Figure]:
    """Every suite's figures, measured in scratch queues under ``root``."""
    figures = [figure for suite in SUITES for figure in suite(root, plan)]
    progress("done")
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    return figures


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--pg" in argv:
        # Every other flag is the PostgreSQL suite's, --quick and --md included.
        return _main_pg([arg for arg in argv if arg != "--pg"])
    parser = argparse.ArgumentParser(prog="nobroker bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs, under a minute")
    parser.add_argument("--full", action="store_true", help="the 1,000,000-job figures too (minutes)")
    parser.add_argument("--md", action="store_true", help="print a Markdown table for README.md")
    parser.add_argument("--runs", type=int, default=None, help="repetitions per figure (median reported)")
    parser.add_argument("--dir", default=None, help="where to put the scratch queues (default: a temp folder)")
    # Listed for --help only: a command line with --pg went to the PostgreSQL suite above.
    parser.add_argument("--pg", action="store_true", help="benchmark the PostgreSQL storage instead")
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.quick else 5)
    root = tempfile.mkdtemp(prefix="nobroker-bench-", dir=args.dir)
    try:
        figures = run(root, Plan.of(quick=args.quick, full=args.full, runs=runs))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mode = "--full" if args.full else ("--quick" if args.quick else "default")
    header = (
        f"nobroker bench ({mode}, median of {runs} runs) on {time.strftime('%Y-%m-%d')}: "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}; "
        "limit = 120-byte append+fdatasync on the same disk, measured before each run"
    )
    print(("_" + header + "_") if args.md else header)
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
