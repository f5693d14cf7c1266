"""Every file name of a queue, formatted and parsed in one place.

Owns: the queue name rule (``check_name``), the name of each file a queue
keeps in its folder, and reading names back (which generation a log or a
snapshot belongs to, which queues a folder holds, what an opener may delete).
Imports: nothing from nobroker. Pure: names in, names out; whoever lists the
folder passes the entries in.

For a queue named ``emails``::

    emails.000000.log          generation 0 (later ones count up: six digits, MAX_GENERATION)
    emails.current             the authoritative generation (from the first compaction on)
    emails.lock                zero bytes: what the writers' lock is taken on
    emails.compactor           zero bytes: held by the one process compacting (or repairing)
    emails.000003.snap         a snapshot of generation 3's replayed state (a cache)
    emails.wake                a named pipe: writers wake idle workers through it
    emails.wake-kinds          the same, for workers limited to some kinds
    emails.workers/            a private folder: one <worker id>.json per running Worker (roster.py)
    emails.wake-finished       a named pipe: writers that finish a job wake Queue.wait through it
    <any of them>.<pid>.tmp    being written by process <pid>; renamed into place when whole
    <a log>.damaged-<time>     kept aside by repair, never deleted by nobroker
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import NamedTuple

#: Generations are six decimal digits in file names.
MAX_GENERATION = 999_999
#: Queue names: safe as file names on every platform, no path separators. Matched
#: whole (fullmatch): ``$`` would also match before a final newline.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
#: What follows ``<name>.`` in a generation's log and in its snapshot.
_LOG_REST = re.compile(r"([0-9]{6})\.log")
_SNAP_REST = re.compile(r"([0-9]{6})\.snap")
#: A file that makes a folder entry name a queue (a generation, the pointer, the lock).
_QUEUE_FILE = re.compile(r"(.+)\.(?:[0-9]{6}\.log|current|lock)")


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or name.endswith((".log", ".tmp")):
        raise ValueError(
            f"queue name {name!r} is not allowed: use 1-128 letters, digits, '_', '-' or '.', starting with a letter or digit"
        )
    return name


# ---------------------------------------------------------------- formatting
def log_path(directory: str, name: str, generation: int) -> str:
    return os.path.join(directory, f"{name}.{generation:06d}.log")


def pointer_path(directory: str, name: str) -> str:
    return os.path.join(directory, f"{name}.current")


def lock_path(directory: str, name: str) -> str:
    return os.path.join(directory, f"{name}.lock")


def compactor_path(directory: str, name: str) -> str:
    """The lock file held by whoever compacts (or repairs) the queue, for the whole rewrite."""
    return os.path.join(directory, f"{name}.compactor")


def snapshot_path(directory: str, name: str, generation: int) -> str:
    return os.path.join(directory, f"{name}.{generation:06d}.snap")


def wake_path(directory: str, name: str, *, some_kinds: bool = False) -> str:
    """The named pipe idle workers wait on (``some_kinds``: those that take only some kinds)."""
    return os.path.join(directory, f"{name}.wake-kinds" if some_kinds else f"{name}.wake")


def workers_path(directory: str, name: str) -> str:
    """The folder of the queue's worker announcements (one small JSON file per worker)."""
    return os.path.join(directory, f"{name}.workers")


def finished_wake_path(directory: str, name: str) -> str:
    """The named pipe ``Queue.wait`` waits on: a write that finishes a job (done, dead, cancelled) wakes it."""
    return os.path.join(directory, f"{name}.wake-finished")


def temp_path(final: str) -> str:
    """Where this process writes ``final`` before renaming it into place (a dead writer's is a leftover)."""
    return f"{final}.{os.getpid()}.tmp"


def damaged_path(path: str, when: int) -> str:
    """Where repair keeps a damaged generation aside (``when``: unix time)."""
    return f"{path}.damaged-{when}"


# ---------------------------------------------------------------- parsing
def _generation_in(pattern: re.Pattern[str], entry: str, name: str) -> int | None:
    prefix = name + "."
    if not entry.startswith(prefix):
        return None
    m = pattern.fullmatch(entry, len(prefix))
    return int(m.group(1)) if m else None


def log_generation(entry: str, name: str) -> int | None:
    """The generation whose log the folder entry ``entry`` is, for queue ``name``; None if it is none."""
    return _generation_in(_LOG_REST, entry, name)


def snapshot_generation(entry: str, name: str) -> int | None:
    """The generation whose snapshot ``entry`` is, for queue ``name``; None if it is none."""
    return _generation_in(_SNAP_REST, entry, name)


def generations(entries: Iterable[str], name: str) -> list[int]:
    """Generation numbers that have a log file for ``name`` among the folder's ``entries``, in order."""
    return sorted(g for g in (log_generation(entry, name) for entry in entries) if g is not None)


def queue_names(entries: Iterable[str]) -> list[str]:
    """Names of the queues that have files among the folder's ``entries``."""
    return sorted({m.group(1) for m in map(_QUEUE_FILE.fullmatch, entries) if m})


class Leftover(NamedTuple):
    """A file a crashed writer or compactor may have left: a temp file, another generation's log or snapshot."""

    kind: str  # "tmp", "log" or "snap"
    number: int | None  # the writer's pid (None if the name holds none) or the generation


def leftover(entry: str, name: str) -> Leftover | None:
    """What ``entry`` is if it may be a leftover of queue ``name``; None for every other file.

    Whether it is one depends on the caller's current generation and on who
    is alive (see recovery.remove_leftovers); this only reads the name.
    """
    if not entry.startswith(name + "."):
        return None
    if entry.endswith(".tmp"):
        pid = entry.rsplit(".", 2)[-2]
        return Leftover("tmp", int(pid) if pid.isascii() and pid.isdigit() else None)
    snap = snapshot_generation(entry, name)
    if snap is not None:
        return Leftover("snap", snap)
    log = log_generation(entry, name)
    return None if log is None else Leftover("log", log)
