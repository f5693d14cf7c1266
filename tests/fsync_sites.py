"""Where nobroker fsyncs, found by reading its source, and a switch for the real operating system's calls.

Owns: ``source_sites`` (every statement in src/nobroker that calls fsync,
fdatasync or a folder fsync, directly or through the FileSystem seam, found
with ``ast``), ``call_site`` (the statement a running call comes from) and
``OsSyncCalls`` (records the os.fsync / os.fdatasync calls a test makes and
can turn the ones of chosen sites into no-ops). Imports: the standard
library only.

A site is ``(file relative to src/nobroker, line)``. Both ways of naming one
meet there: the inventory reads it from the source, the switches (SimDisk's
SiteSwitch, OsSyncCalls) read it from the innermost frame in src/nobroker
when the call runs. The teeth test (tests/test_fsync_teeth.py) requires the
two sets to be equal, so a site the inventory cannot see, or one no test
reaches, fails the suite.
"""

from __future__ import annotations

import ast
import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "src", "nobroker")
#: Names whose call makes something durable: the seam's methods and the os functions behind them.
SYNC_NAMES = frozenset({"fsync", "fsync_dir", "fdatasync"})
_SRC_MARK = os.sep + os.path.join("src", "nobroker") + os.sep

Site = tuple[str, int]


@dataclass(frozen=True)
class SourceSite:
    """One statement of src/nobroker that syncs: where, in which function, and what it says."""

    file: str
    line: int
    function: str
    op: str  # "fsync", "fsync_dir" (through the seam) or "os" (the operating system's own call)
    text: str

    @property
    def site(self) -> Site:
        return (self.file, self.line)

    def label(self) -> str:
        return f"{self.file}:{self.line} {self.function} ({self.op}: {self.text})"


def _names_in(node: ast.AST) -> set[str]:
    """Attribute and variable names, and string constants (getattr(os, "fdatasync")), used in ``node``."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            found.add(sub.attr)
        elif isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            found.add(sub.value)
    return found


def _sync_op(call: ast.Call) -> str | None:
    names = _names_in(call.func) & SYNC_NAMES
    if not names:
        return None
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("fsync", "fsync_dir"):
        if not (isinstance(call.func.value, ast.Name) and call.func.value.id == "os"):
            return call.func.attr  # fs.fsync(fd), self.fs.fsync_dir(path): through the seam
    return "os"


def _calls(node: ast.AST, scope: list[str], stmt: ast.stmt | None) -> Iterator[tuple[ast.Call, ast.stmt, str]]:
    """Every call, with the innermost statement holding it and the dotted name of the function around it."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield from _calls(child, [*scope, child.name], child)
            continue
        inner = child if isinstance(child, ast.stmt) else stmt
        if isinstance(child, ast.Call) and inner is not None:
            yield child, inner, ".".join(scope) or "<module>"
        yield from _calls(child, scope, inner)


def source_sites(package: str = PACKAGE) -> list[SourceSite]:
    """Every statement under ``package`` that calls fsync, fdatasync or fsync_dir."""
    found: dict[Site, SourceSite] = {}
    for dirpath, _dirs, files in os.walk(package):
        for filename in sorted(files):
            if not filename.endswith(".py"):
                continue
            path = os.path.join(dirpath, filename)
            with open(path, encoding="utf-8") as f:
                source = f.read()
            rel = os.path.relpath(path, package)
            for call, stmt, function in _calls(ast.parse(source, path), [], None):
                op = _sync_op(call)
                if op is None:
                    continue
                key = (rel, stmt.lineno)
                if key in found and op not in found[key].op.split("/"):
                    op = "/".join(sorted({op, *found[key].op.split("/")}))
                text = " ".join((ast.get_source_segment(source, stmt) or "").split())
                found[key] = SourceSite(rel, stmt.lineno, function, op, text)
    return sorted(found.values(), key=lambda s: s.site)


def call_site() -> Site:
    """(file relative to src/nobroker, line) of the innermost running frame inside src/nobroker."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if _SRC_MARK in filename:
            return (filename.rsplit(_SRC_MARK, 1)[1], frame.f_lineno)
        frame = frame.f_back
    return ("?", 0)


@dataclass(frozen=True)
class OsSync:
    """One os.fsync / os.fdatasync call that ran: which function, on what, from which site."""

    name: str
    inode: tuple[int, int]  # (st_dev, st_ino)
    is_dir: bool
    site: Site


@dataclass
class OsSyncCalls:
    """Within ``with``: every os.fsync and os.fdatasync of this process is recorded (and maybe skipped).

    ``off``: sites whose calls return without syncing, as if the statement
    were gone. Switched-off calls are counted in ``skipped``, not in ``calls``.
    """

    off: frozenset[Site] = frozenset()
    calls: list[OsSync] = field(default_factory=list)
    skipped: list[Site] = field(default_factory=list)
    _saved: dict[str, Any] = field(default_factory=dict)

    def _wrap(self, name: str, real: Callable[[int], None]) -> Callable[[int], None]:
        def recorded(fd: int) -> None:
            site = call_site()
            if site in self.off:
                self.skipped.append(site)
                return
            st = os.fstat(fd)
            real(fd)
            self.calls.append(OsSync(name, (st.st_dev, st.st_ino), stat.S_ISDIR(st.st_mode), site))

        return recorded

    def __enter__(self) -> OsSyncCalls:
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name, None)
            if real is not None:
                self._saved[name] = real
                setattr(os, name, self._wrap(name, real))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, real in self._saved.items():
            setattr(os, name, real)
        self._saved.clear()

    def sites(self) -> set[Site]:
        return {c.site for c in self.calls} | set(self.skipped)

    def synced(self, inode: tuple[int, int], since: int = 0) -> bool:
        """Did a call after the first ``since`` ones make ``inode`` durable?"""
        return any(c.inode == inode for c in self.calls[since:])


def inode_of(path_or_fd: str | int) -> tuple[int, int]:
    st = os.stat(path_or_fd)
    return (st.st_dev, st.st_ino)


__all__ = ["SourceSite", "Site", "OsSync", "OsSyncCalls", "source_sites", "call_site", "inode_of", "SYNC_NAMES"]
