"""Limits in the log: the LIMIT and UNLIMIT records, and what replay makes of them and of a limited lease.

Owns: one encoder per record type (``limit``, ``unlimit``), ``apply`` (fold
one of them into the state's limits, a dict by kind, and the turns of its
fair kinds), ``leased`` (what a LEASE of a limited kind takes: a token from
its bucket, a turn in its rotation between groups) and ``replayed`` (the
records a compaction or a repair writes to carry every limit, with its
bucket and its turns, into a new generation). Imports: limits, framing,
entry.

Bodies:

- LIMIT (23) ``{"at", "kind", "concurrency", "rate", "per", "burst"}``;
  ``"group_concurrency"`` and ``"weights"`` (a dict of group to weight) when
  set; for a rate limit, ``"tokens", "tokens_at"`` (the bucket as the writer
  set it); and in a LIMIT a compaction writes, ``"turns"`` (the rotation:
  ``{"clock", "passes": [[group, pass], ...]}``, limits.turns_to_fields):
  the kind's limit from now on, replacing one it had (its turns kept unless
  the record carries its own);
- UNLIMIT (24) ``{"at", "kind"}``: the kind has no limit (and no turns) any more.

A rate limit's bucket changes with every LEASE of its kind, and no record of
its own says so: replay takes the token at the LEASE record's ``at``, the
writer's time, exactly as the writer did when it decided the lease (it
applies the same record to its state), so the bucket stays a pure function
of the bytes. The turns of a fair kind (one with ``group_concurrency`` or
``weights``) move the same way, by the group of the leased job, which its
ENQUEUE record names: every process that reads the log shares one rotation.
"""

from __future__ import annotations

from typing import Any

from ..limits import Bucket, Limit, Turns, from_fields, taken, to_fields, turned, turns_from_fields, turns_to_fields
from .entry import Entry
from .framing import RecordType

Record = tuple[RecordType, dict[str, Any]]
#: The record types this module owns.
LIMIT_TYPES = frozenset({RecordType.LIMIT, RecordType.UNLIMIT})
#: A kind's limit and, for a rate limit, its bucket.
Held = tuple[Limit, Bucket | None]


def limit(held: Limit, bucket: Bucket | None, at: float) -> Record:
    body: dict[str, Any] = {"at": at}
    body.update(to_fields(held, bucket))
    return RecordType.LIMIT, body


def unlimit(kind: str, at: float) -> Record:
    return RecordType.UNLIMIT, {"at": at, "kind": kind}


def apply(limits: dict[str, Held], rtype: int, body: dict[str, Any], turns: dict[str, Turns]) -> None:
    """Fold one limit record into ``limits`` and ``turns``; KeyError, TypeError or ValueError (nothing changed) if it is wrong."""
    if rtype == RecordType.LIMIT:
        held, bucket = from_fields(body)
        rotation = None if body.get("turns") is None else turns_from_fields(body["turns"])
        limits[held.kind] = (held, bucket)
        if rotation is not None:
            turns[held.kind] = rotation
        return
    assert rtype == RecordType.UNLIMIT, "apply takes the limit record types only"
    kind = body["kind"]
    if not isinstance(kind, str):
        raise TypeError("UNLIMIT names its kind by a string")
    limits.pop(kind, None)
    turns.pop(kind, None)


def leased(limits: dict[str, Held], turns: dict[str, Turns], entry: Entry, body: dict[str, Any]) -> None:
    """A LEASE of ``entry`` at ``body["at"]``: a turn of its group if its kind is fair, a token if it has a rate."""
    held = limits.get(entry.kind)
    if held is None:
        return
    if held[0].fair:
        rotation = turns.get(entry.kind)
        if rotation is None:
            rotation = turns[entry.kind] = Turns()
        turned(held[0], rotation, entry.group)
    if held[1] is None:
        return
    kind = entry.kind
    at = body.get("at")
    # A writer always records its time (a clock= that gives ints too); a record without one takes nothing.
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        limits[kind] = (held[0], taken(held[0], held[1], float(at)))


def replayed(limits: dict[str, Held], at: float, turns: dict[str, Turns]) -> list[Record]:
    """One LIMIT record per limited kind, with its bucket and turns as they are: what a new generation starts with."""
    out = []
    for held, bucket in limits.values():
        record = limit(held, bucket, at)
        rotation = turns.get(held.kind)
        if rotation is not None:
            record[1]["turns"] = turns_to_fields(rotation)
        out.append(record)
    return out
