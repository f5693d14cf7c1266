#!/usr/bin/env python3
"""Build dist/nobroker.pyz: the whole tool as one file that any Python 3.11+ runs.

Owns: the single-file bundle behind ``python make.py build``. Imports: the
standard library only.

The bundle is a zipapp (PEP 441): src/nobroker/ zipped, compressed, with a
``__main__`` that calls ``nobroker.cli:main``. Python imports straight from
the zip, so nothing is unpacked to disk and nothing is installed. psycopg is
not bundled: the PostgreSQL storage imports it only when a DSN is opened.

    python tools/build_pyz.py [--output PATH]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import zipapp
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "nobroker"
DEFAULT_OUTPUT = ROOT / "dist" / "nobroker.pyz"
ENTRY_POINT = "nobroker.cli:main"
#: The promise in README: the whole tool in under 100 KB. The build fails past it.
MAX_BYTES = 100 * 1024
#: ``./nobroker.pyz`` runs directly on POSIX; ``python nobroker.pyz`` works everywhere.
INTERPRETER = "/usr/bin/env python3"


def build(output: Path) -> int:
    """Write the bundle to ``output``; returns its size in bytes."""
    if not (PACKAGE / "cli.py").is_file():
        raise SystemExit(f"build_pyz: {PACKAGE.relative_to(ROOT)}/cli.py is missing: nothing to bundle yet")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nobroker-pyz-") as staging:
        # A staging copy keeps build debris out of the bundle (caches, egg-info)
        # and leaves the archive root holding exactly one thing: the package.
        shutil.copytree(PACKAGE, Path(staging) / "nobroker", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        tmp_output = output.with_name(output.name + ".tmp")
        zipapp.create_archive(staging, tmp_output, interpreter=INTERPRETER, main=ENTRY_POINT, compressed=True)
        tmp_output.replace(output)
    return output.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the single-file nobroker.pyz with zipapp.")
    parser.add_argument("--output", "-o", type=Path, default=DEFAULT_OUTPUT, help=f"where to write it (default {DEFAULT_OUTPUT.relative_to(ROOT)})")
    opts = parser.parse_args(argv)
    output = opts.output.resolve()
    size = build(output)
    try:
        shown = output.relative_to(Path.cwd())
    except ValueError:
        shown = output
    print(f"built {shown}: {size:,} bytes ({size / 1024:.1f} KB), entry point {ENTRY_POINT}")
    print(f"run it from anywhere: python {shown} --help")
    if size > MAX_BYTES:
        print(f"build_pyz: {size:,} bytes is over the {MAX_BYTES // 1024} KB budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
