"""Worker announcements: what a running Worker tells its queue about itself, on both storages.

Owns: WorkerInfo (host, pid, name, kinds, concurrency, started, jobs
running, last heartbeat), its checks (``checked``: bad values refused with a
clear error before anything is written), its JSON form, the timing rules
(ANNOUNCE_SECONDS between heartbeats, GONE_AFTER for "gone", PRUNE_AFTER
for "forgotten") and ``new_worker_id``. Imports: errors, jobs.

Times are the wall clock of the worker that wrote them (seconds since the
epoch); a reader compares them with its own, so "gone" assumes the machines'
clocks agree to well within GONE_AFTER. A worker that stops cleanly takes its
announcement away; one that was killed leaves it, shown as gone once its
heartbeat is GONE_AFTER old, and removed by the next announcement of any
worker of the queue once it is PRUNE_AFTER old.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from dataclasses import dataclass
from typing import Any

from .errors import SerializationError
from .jobs import MAX_NAME_CHARS

#: Seconds between two heartbeats of a running Worker's announcement.
ANNOUNCE_SECONDS = 5.0
#: A worker whose last heartbeat is older than this is shown as gone.
GONE_AFTER = 6 * ANNOUNCE_SECONDS
#: An announcement older than this is removed (by the next announcement of any worker of the queue).
PRUNE_AFTER = 3600.0
#: Longest host name kept (a DNS name is at most 253 characters).
MAX_HOST_CHARS = 255
#: Most kinds one announcement lists.
MAX_ANNOUNCED_KINDS = 256
#: Most announcements one listing returns (a queue with more workers is listed in part).
MAX_WORKERS_LISTED = 1000
#: Largest announcement, as JSON, a reader accepts (a bigger file is not one we wrote).
MAX_ANNOUNCE_BYTES = 96 * 1024
#: A worker id: what a storage files the announcement under (hex: a safe file name).
WORKER_ID_CHARS = 16


@dataclass(frozen=True)
class WorkerInfo:
    """One Worker as it announced itself. ``kinds`` None: it takes every kind."""

    id: str
    name: str
    host: str
    pid: int
    kinds: tuple[str, ...] | None
    concurrency: int
    started_at: float
    running: int
    heartbeat_at: float

    def gone(self, now: float) -> bool:
        """Has it stopped heartbeating (its last heartbeat GONE_AFTER old or more)?"""
        return now - self.heartbeat_at >= GONE_AFTER

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["kinds"] = None if self.kinds is None else list(self.kinds)
        if now is not None:
            out["gone"] = self.gone(now)
        return out


def new_worker_id() -> str:
    return secrets.token_hex(WORKER_ID_CHARS // 2)


def _text(value: Any, what: str, longest: int) -> str:
    if not isinstance(value, str) or not value or len(value) > longest or "\x00" in value:
        raise SerializationError(f"a worker's {what} must be text of 1 to {longest} characters, got {value!r:.80}")
    return value


def _count(value: Any, what: str, low: int) -> int:
    if type(value) is not int or not low <= value <= 2**31 - 1:
        raise SerializationError(f"a worker's {what} must be an integer from {low}, got {value!r:.80}")
    return value


def _time(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SerializationError(f"a worker's {what} must be a time (seconds since the epoch), got {value!r:.80}")
    return float(value)


def checked(info: WorkerInfo) -> WorkerInfo:
    """``info`` if every field is one a storage keeps; SerializationError naming the first that is not."""
    if not isinstance(info.id, str) or len(info.id) != WORKER_ID_CHARS or not all(c in "0123456789abcdef" for c in info.id):
        raise SerializationError(f"a worker id is {WORKER_ID_CHARS} hex digits (new_worker_id()), got {info.id!r:.80}")
    _text(info.name, "name", MAX_NAME_CHARS)
    _text(info.host, "host", MAX_HOST_CHARS)
    _count(info.pid, "pid", 0)
    _count(info.concurrency, "concurrency", 1)
    _count(info.running, "running", 0)
    _time(info.started_at, "started_at")
    _time(info.heartbeat_at, "heartbeat_at")
    if info.kinds is not None:
        if not isinstance(info.kinds, tuple) or len(info.kinds) > MAX_ANNOUNCED_KINDS:
            raise SerializationError(f"a worker's kinds must be a tuple of at most {MAX_ANNOUNCED_KINDS} kinds")
        for kind in info.kinds:
            _text(kind, "kind", MAX_NAME_CHARS)
    return info


def from_dict(value: Any) -> WorkerInfo:
    """The WorkerInfo a JSON object describes; SerializationError (or KeyError, TypeError) if it is not one."""
    if not isinstance(value, dict):
        raise SerializationError("an announcement is a JSON object")
    kinds = value["kinds"]
    if kinds is not None and not isinstance(kinds, list):
        raise SerializationError("an announcement's kinds are a list or null")
    return checked(WorkerInfo(
        id=value["id"], name=value["name"], host=value["host"], pid=value["pid"],
        kinds=None if kinds is None else tuple(kinds), concurrency=value["concurrency"],
        started_at=value["started_at"], running=value["running"], heartbeat_at=value["heartbeat_at"],
    ))  # fmt: skip


__all__ = [
    "WorkerInfo", "new_worker_id", "checked", "from_dict",
    "ANNOUNCE_SECONDS", "GONE_AFTER", "PRUNE_AFTER", "MAX_WORKERS_LISTED",
]  # fmt: skip
