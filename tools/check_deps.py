#!/usr/bin/env python3
"""The dependency proof: every import in the project, classified, without importing anything.

Owns: the scan behind ``python make.py check-deps`` and the committed
deps-proof.txt. Imports: the standard library only.

Each ``.py`` file under src/, tests/, tools/ and examples/ (and make.py) is
parsed with ``ast``; reading source this way never runs a module's top-level
code, which importing it to look would. Every imported top-level name is
then checked against ``sys.stdlib_module_names``, the list CPython itself
keeps of what its standard library is. A name is first-party when it is a
relative import or names one of the project's own packages or modules.
Anything else is third-party: allowed only where OPTIONAL_THIRD_PARTY says,
and never in the library itself apart from the PostgreSQL adapter.

The report is deterministic (sorted, no timings, Python's minor version
only) so that CI can diff it against the committed deps-proof.txt.

    python tools/check_deps.py [--root DIR]     exit 0 when the proof holds, 1 when not
"""

from __future__ import annotations

import argparse
import ast
import sys
import textwrap
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

#: The folders scanned, relative to the root, plus top-level scripts such as make.py.
SCANNED_DIRS = ("src", "tests", "tools", "examples")
#: The project's own top-level names, whatever files exist.
FIRST_PARTY = frozenset({"nobroker", "tests", "tools", "examples", "make"})
#: Report lines wrap here so the committed proof reads well in a diff.
REPORT_WIDTH = 100
#: The library itself: no third-party import here except where OPTIONAL_THIRD_PARTY allows.
LIBRARY_DIR = "src/"


@dataclass(frozen=True)
class OptionalPackage:
    """A third-party package the project may import, where, and why."""

    places: tuple[str, ...]  # path prefixes (a folder ends with "/")
    why: str

    def allows(self, path: str) -> bool:
        return any(path == p or (p.endswith("/") and path.startswith(p)) for p in self.places)


OPTIONAL_THIRD_PARTY: dict[str, OptionalPackage] = {
    "psycopg": OptionalPackage(
        places=(
            "src/nobroker/postgres/",
            "tools/bench/pg.py",
            "tools/bench/pg_measure.py",
            "tools/bench/pg_baseline.py",
            "tools/bench/pg_count.py",
            "tools/bench/pg_scale.py",
            "tests/",
        ),
        why=(
            'the PostgreSQL storage (pip install "nobroker[postgres]") and its benchmark, imported '
            "only when a postgresql:// DSN is opened or the PostgreSQL benchmark runs; "
            "the PostgreSQL tests skip without it"
        ),
    ),
}


@dataclass(frozen=True)
class ImportSite:
    module: str  # the top-level name
    path: str  # relative, with forward slashes
    line: int


def python_files(root: Path) -> list[Path]:
    files = [p for p in root.glob("*.py") if p.is_file()]
    for folder in SCANNED_DIRS:
        base = root / folder
        if base.is_dir():
            files += [p for p in base.rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(set(files))


def own_package(path: str) -> str:
    """The top-level package a relative import in ``path`` resolves into (src/nobroker/x.py → nobroker)."""
    parts = path.split("/")
    return parts[1] if parts[0] == "src" and len(parts) > 2 else parts[0]


def imports_in(tree: ast.AST, path: str) -> list[tuple[str, int]]:
    """Top-level module names imported by a parsed file; a relative import names its own package."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append((own_package(path), node.lineno))
            elif node.module:
                found.append((node.module.split(".")[0], node.lineno))
        elif isinstance(node, ast.Call) and node.args:
            # importlib.import_module("x") and __import__("x") with a literal name
            # are imports too; a computed name (the CLI's `work MODULE:CALLABLE`)
            # is the user's own code and cannot be known here.
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            first = node.args[0]
            if name in ("import_module", "__import__") and isinstance(first, ast.Constant):
                if isinstance(first.value, str) and first.value and not first.value.startswith("."):
                    found.append((first.value.split(".")[0], node.lineno))
    return found


def is_sibling(root: Path, importer: str, module: str) -> bool:
    """True when a script imports a module from its own folder (sys.path[0]), e.g. tools/x.py → y."""
    folder = (root / importer).parent
    return (folder / f"{module}.py").is_file() or (folder / module / "__init__.py").is_file()


def scan(root: Path) -> tuple[list[Path], list[ImportSite], list[str]]:
    files = python_files(root)
    sites: list[ImportSite] = []
    unreadable: list[str] = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            tree = ast.parse(path.read_bytes(), filename=rel)
        except (SyntaxError, ValueError, OSError) as exc:
            unreadable.append(f"{rel}: {exc}")
            continue
        sites += [ImportSite(name, rel, line) for name, line in imports_in(tree, rel)]
    return files, sites, unreadable


def manifest(root: Path) -> tuple[list[str], list[str]]:
    """The declared dependencies in pyproject.toml: report lines and problems."""
    path = root / "pyproject.toml"
    if not path.is_file():
        return ["manifest: no pyproject.toml here"], []
    try:
        project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
    except (tomllib.TOMLDecodeError, OSError) as exc:
        return ["manifest: pyproject.toml unreadable"], [f"cannot read pyproject.toml: {exc}"]
    deps = list(project.get("dependencies", []))
    extras = project.get("optional-dependencies", {})
    lines = [f"manifest: pyproject.toml dependencies = {deps!r}"]
    lines += [f"          extra {name!r} = {list(reqs)!r}" for name, reqs in sorted(extras.items())]
    problems = [f"pyproject.toml declares a required dependency: {d}" for d in deps]
    return lines, problems


def wrap(label: str, width: int, items: list[str]) -> list[str]:
    """One report row: the label, then comma-separated items wrapped under each other."""
    text = ", ".join(items)
    lines = textwrap.wrap(text, REPORT_WIDTH - width - 2, break_on_hyphens=False, break_long_words=False) or [""]
    return [f"  {label if i == 0 else '':<{width}}{line}" for i, line in enumerate(lines)]


def report(root: Path) -> tuple[str, bool]:
    files, sites, unreadable = scan(root)
    stdlib = sys.stdlib_module_names

    by_kind: dict[str, dict[str, set[str]]] = {"stdlib": defaultdict(set), "first": defaultdict(set), "third": defaultdict(set)}
    for site in sites:
        if site.module in stdlib:
            kind = "stdlib"
        elif site.module in FIRST_PARTY or is_sibling(root, site.path, site.module):
            kind = "first"
        else:
            kind = "third"
        by_kind[kind][site.module].add(site.path)

    problems: list[str] = []
    for module, paths in sorted(by_kind["third"].items()):
        allowed = OPTIONAL_THIRD_PARTY.get(module)
        for path in sorted(paths):
            if allowed is None:
                where = "the library" if path.startswith(LIBRARY_DIR) else path.split("/")[0] + "/"
                problems.append(f"{module} imported in {path}: a third-party package in {where}, not on the optional list")
            elif not allowed.allows(path):
                problems.append(f"{module} imported in {path}: allowed only in {', '.join(allowed.places)}")
    problems += [f"cannot parse {u}" for u in unreadable]

    scanned = ", ".join([f"{d}/**/*.py" for d in SCANNED_DIRS if (root / d).is_dir()] + [p.name for p in files if p.parent == root])
    v = sys.version_info
    out: list[str] = []
    out.append("nobroker dependency proof (python make.py check-deps)")
    out.append("")
    out.append(f"python:   {v.major}.{v.minor} (the standard library list is per minor version)")
    out.append(f"scanned:  {scanned} ({len(files)} files)")
    out.append("method:   ast.parse + sys.stdlib_module_names (no file imported, no code executed)")
    out.append("")

    width = max([len(m) for kind in by_kind.values() for m in kind] + [12]) + 2
    out.append(f"standard library modules imported ({len(by_kind['stdlib'])}):")
    for module, paths in sorted(by_kind["stdlib"].items()):
        out += wrap(module, width, sorted(paths))
    out.append("")
    out.append(f"first-party modules ({len(by_kind['first'])}):")
    for module, paths in sorted(by_kind["first"].items()):
        out.append(f"  {module:<{width}}imported by {len(paths)} file{'s' if len(paths) != 1 else ''}")
    out.append("")

    optional = {m: p for m, p in by_kind["third"].items() if m in OPTIONAL_THIRD_PARTY}
    out.append(f"optional third-party packages ({len(optional)}), never needed by the file storage:")
    for module, paths in sorted(optional.items()):
        out += wrap(module, width, sorted(paths))
        out += wrap("", width, ["why: " + OPTIONAL_THIRD_PARTY[module].why])
    out.append("")
    required = sorted(m for m in by_kind["third"] if m not in OPTIONAL_THIRD_PARTY)
    out.append(f"required third-party dependencies: {len(required)}" + (f" ({', '.join(required)})" if required else ""))
    manifest_lines, manifest_problems = manifest(root)
    problems += manifest_problems
    out += manifest_lines
    out.append("")
    if problems:
        out.append("VERDICT: FAILED. The zero-dependency claim does not hold:")
        out += [f"  - {p}" for p in problems]
    else:
        out.append("VERDICT: nobroker runs on the Python standard library alone.")
        if optional:
            out.append(f"         ({', '.join(sorted(optional))}: optional, only where listed above.)")
    return "\n".join(out) + "\n", not problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="the project folder to scan")
    opts = parser.parse_args(argv)
    text, ok = report(opts.root.resolve())
    sys.stdout.write(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
