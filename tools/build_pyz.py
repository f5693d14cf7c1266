#!/usr/bin/env python3
"""Build dist/nobroker.pyz: the whole tool as one file that any Python 3.11+ runs.

Owns: the single-file bundle behind ``python make.py build``. Imports: the
standard library only.

The bundle is a zipapp (PEP 441) of three files: a ``__main__`` that calls
``nobroker.cli:main``, the importer of tools/pyz_bundle.py, and src/nobroker/
as one LZMA blob, which that importer serves from memory (one compressed
stream is about 40 % smaller than a zip of sixty small files). Nothing is
unpacked to disk and nothing is installed. psycopg is not bundled: the
PostgreSQL storage imports it only when a DSN is opened.

The bundled source is the repository's, slimmed: comments are dropped (in
the SQL files too); a docstring help() shows (a module's, a public class's,
function's or method's) keeps its first line, and the others (private
names', nested functions') keep nothing. Every line stays where it was, so a
traceback from the bundle points at the right line of the source in the
repository. ``--full-source`` bundles the files untouched. Data files go in as
they are (the dashboard's page.html, page.css and page.js among them): the
package reads them from the blob with importlib.resources.

    python tools/build_pyz.py [--output PATH] [--full-source]
"""

from __future__ import annotations

import argparse
import ast
import io
import shutil
import sys
import tempfile
import tokenize
import stat
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: tools/ is a folder of the clone, not installed
    sys.path.insert(0, str(ROOT))

from tools import pyz_bundle  # noqa: E402
PACKAGE = ROOT / "src" / "nobroker"
DEFAULT_OUTPUT = ROOT / "dist" / "nobroker.pyz"
ENTRY_POINT = "nobroker.cli:main"
#: The three files of the zip: its entry point, the importer, and the package as one blob.
MAIN_FILE = "__main__.py"
IMPORTER_FILE = "_nobroker_bundle.py"
#: The promise in README: the whole tool in under 208 KB. The build fails past it. (128 KB held the
#: layout's split; periodic jobs, cancel, the process pool and checkpoints came after it, then
#: AsyncQueue at 136 KB, and the operator's view (counters, announcements, the chart's script) at 147 KB;
#: time limits, attempt history, explain, limits per kind and the control of jobs (snooze, pause,
#: run_now, delete, wait) after that, with the text-tuned LZMA, at 176 KB; groups and fair share
#: filled that, and format version 2 and the engine's leaner paths went past it: 192 KB; the
#: PostgreSQL lease kind by kind past limited and paused kinds' backlogs went past that: 208 KB.)
MAX_BYTES = 208 * 1024
#: ``./nobroker.pyz`` runs directly on POSIX; ``python nobroker.pyz`` works everywhere.
INTERPRETER = "/usr/bin/env python3"


def _docstrings(tree: ast.Module) -> dict[tuple[int, int], tuple[int, str]]:
    """Each docstring's (line, column) -> (its last line, what the bundle keeps of it).

    A docstring help() can show (the module's, and those of public classes,
    functions and methods, dunders included) keeps its first line; one it
    cannot (a private name's, anything inside a function) keeps nothing.
    """
    found: dict[tuple[int, int], tuple[int, str]] = {}

    def visit(node: ast.AST, shown: bool) -> None:
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                doc = first.value
                summary = (doc.value.strip().splitlines() or [""])[0] if shown else ""
                found[(doc.lineno, doc.col_offset)] = (doc.end_lineno or doc.lineno, summary)
        inside_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            name = getattr(child, "name", None) or ""
            private = name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
            visit(child, shown and not inside_function and not private)

    visit(tree, True)
    return found


def slim_source(source: str) -> str:
    """``source`` without comments and with docstrings cut to what help() shows, every statement on its line."""
    docstrings = _docstrings(ast.parse(source))
    tokens = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.STRING and tok.start in docstrings:
            end_line, summary = docstrings[tok.start]
            summary = summary.replace("\\", "\\\\").replace('"', '\\"')
            newlines = end_line - tok.start[0]
            # Blank lines inside the quotes keep every later line at its number.
            tok = tok._replace(string=f'"""{summary}{chr(10) * newlines}"""' if newlines else f'"{summary}"')
        tokens.append(tok)
    slimmed = tokenize.untokenize(tokens)
    if slimmed.count("\n") != source.count("\n"):
        raise SystemExit("build_pyz: slimming moved lines; build with --full-source and report this")
    return slimmed


def slim_sql(text: str) -> str:
    """A migration file without its comment lines (each left empty: every statement stays on its line)."""
    return "".join("\n" if line.lstrip().startswith("--") else line for line in text.splitlines(keepends=True))


def main_source() -> str:
    """The bundle's ``__main__``: serve nobroker from the blob, then run the CLI.

    Our own rather than zipapp's ``main=``: zipapp's calls the function and drops
    its return value, so every exit code would become 0.
    """
    module, function = ENTRY_POINT.split(":")
    importer = IMPORTER_FILE.removesuffix(".py")
    return (
        f"import sys\nimport {importer}\n"
        f"{importer}.install(__loader__.archive, __loader__.get_data({pyz_bundle.BLOB!r}))\n"
        f"from {module} import {function}\nsys.exit({function}())\n"
    )


def bundled_files(pyz: Path) -> dict[str, bytes]:
    """The package files inside a built bundle (path -> bytes), for checks and tests."""
    with zipfile.ZipFile(pyz) as bundle:
        return pyz_bundle.unpack(bundle.read(pyz_bundle.BLOB))


def build(output: Path, *, full_source: bool = False) -> int:
    """Write the bundle to ``output``; returns its size in bytes."""
    if not (PACKAGE / "cli" / "__init__.py").is_file():
        raise SystemExit(f"build_pyz: {PACKAGE.relative_to(ROOT)}/cli/ is missing: nothing to bundle yet")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nobroker-pyz-") as staging:
        # A staging copy keeps build debris out of the bundle (caches, egg-info)
        # and leaves the archive root holding exactly one thing: the package,
        # all of it (the benchmark suites live outside it, in tools/bench/).
        shutil.copytree(PACKAGE, Path(staging) / "nobroker", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if not full_source:
            for path in (Path(staging) / "nobroker").rglob("*.py"):
                path.write_text(slim_source(path.read_text(encoding="utf-8")), encoding="utf-8")
            for path in (Path(staging) / "nobroker").rglob("*.sql"):
                path.write_text(slim_sql(path.read_text(encoding="utf-8")), encoding="utf-8")
        files = {
            path.relative_to(staging).as_posix(): path.read_bytes()
            for path in sorted(Path(staging, "nobroker").rglob("*"))
            if path.is_file()
        }
        importer = (ROOT / "tools" / "pyz_bundle.py").read_text(encoding="utf-8")
        tmp_output = output.with_name(output.name + ".tmp")
        # What zipapp.create_archive writes (shebang, then the zip, executable); the package
        # goes in as one LZMA blob (see tools/pyz_bundle.py), stored as it is.
        with open(tmp_output, "wb") as f:
            f.write(b"#!" + INTERPRETER.encode("utf-8") + b"\n")
            with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as bundle:
                bundle.writestr(MAIN_FILE, main_source())
                bundle.writestr(IMPORTER_FILE, importer if full_source else slim_source(importer))
                bundle.writestr(pyz_bundle.BLOB, pyz_bundle.pack(files), compress_type=zipfile.ZIP_STORED)
        tmp_output.chmod(tmp_output.stat().st_mode | stat.S_IEXEC)
        tmp_output.replace(output)
    return output.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the single-file nobroker.pyz with zipapp.")
    parser.add_argument("--output", "-o", type=Path, default=DEFAULT_OUTPUT, help=f"where to write it (default {DEFAULT_OUTPUT.relative_to(ROOT)})")
    parser.add_argument("--full-source", action="store_true", help="bundle the source untouched (comments and docstrings kept)")
    opts = parser.parse_args(argv)
    output = opts.output.resolve()
    size = build(output, full_source=opts.full_source)
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
