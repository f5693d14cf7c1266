"""Control of jobs in the log: the SNOOZE, PAUSE, RESUME, RUN_NOW and DELETE records.

Owns: one encoder per record type, their decoders (each checks every field
it returns before replay changes anything, and raises KeyError, TypeError or
ValueError for a wrong one, which replay turns into CorruptLogError),
``fold_pause`` (a PAUSE or RESUME folded into the set of paused kinds),
``ordered`` and ``replayed`` (the PAUSE records a new generation starts with). Imports:
framing, entry.

Bodies:

- SNOOZE (12) ``{"id", "at", "attempts", "available_at"}``: a leased job is
  ready again at ``available_at`` with ``attempts`` (what it had before the
  lease: the attempt is given back);
- PAUSE (13) and RESUME (14) ``{"at", "kind"}``: ``kind`` (null: the whole
  queue) is paused, or no longer; leases hand out no job of a paused kind,
  nor any job while the whole queue is paused;
- RUN_NOW (15) ``{"id", "at", "available_at"}``: a ready job whose time had
  not come is runnable from ``available_at`` (the record's ``at``); it reads
  as a RECLAIM does;
- DELETE (16) ``{"id", "at"}``: the job is gone (its dedupe key free again).

Like every record, these carry each time as an absolute value chosen by the
writer: replay never reads the clock.
"""

from __future__ import annotations

from typing import Any

from .entry import check_int, check_time
from .framing import RecordType

Record = tuple[RecordType, dict[str, Any]]
#: The records that change the paused kinds rather than a job.
PAUSE_TYPES = frozenset({RecordType.PAUSE, RecordType.RESUME})


def snooze(job_id: str, at: float, attempts: int, available_at: float) -> Record:
    return RecordType.SNOOZE, {"id": job_id, "at": at, "attempts": attempts, "available_at": available_at}


def pause(at: float, kind: str | None, *, resume: bool = False) -> Record:
    """PAUSE (RESUME with ``resume``) of ``kind``; None is the whole queue."""
    return (RecordType.RESUME if resume else RecordType.PAUSE), {"at": at, "kind": kind}


def run_now(job_id: str, at: float) -> Record:
    return RecordType.RUN_NOW, {"id": job_id, "at": at, "available_at": at}


def delete(job_id: str, at: float) -> Record:
    return RecordType.DELETE, {"id": job_id, "at": at}


def decode_snooze(body: dict[str, Any]) -> tuple[float, float, int]:
    """(available_at, at, attempts)."""
    attempts = check_int(body["attempts"], "attempts")
    if attempts < 0:
        raise ValueError(f"field attempts is {attempts}, expected 0 or more")
    return check_time(body["available_at"], "available_at"), check_time(body["at"], "at"), attempts


def decode_pause(body: dict[str, Any]) -> str | None:
    """The kind a PAUSE or RESUME names (None: the whole queue)."""
    kind = body["kind"]
    if kind is not None and (type(kind) is not str or not kind):
        raise TypeError(f"field kind is {kind!r}, expected a kind's name or null (the whole queue)")
    return kind


def fold_pause(paused: set[str | None], rtype: int, body: dict[str, Any]) -> None:
    kind = decode_pause(body)
    if rtype == RecordType.PAUSE:
        paused.add(kind)
    else:
        assert rtype == RecordType.RESUME, "fold_pause takes PAUSE and RESUME only"
        paused.discard(kind)


def ordered(paused: set[str | None]) -> list[str | None]:
    """The paused kinds: the whole queue (None) first, then by name."""
    return sorted(paused, key=lambda kind: (kind is not None, kind or ""))


def replayed(paused: set[str | None], at: float) -> list[Record]:
    """One PAUSE record per paused kind: what a new generation starts with."""
    return [pause(at, kind) for kind in ordered(paused)]
