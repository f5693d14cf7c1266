"""Limits in the log: the LIMIT and UNLIMIT records, and what replay makes of them and of a limited lease.

Owns: one encoder per record type (``limit``, ``unlimit``), ``apply`` (fold
one of them into the state's limits, a dict by kind), ``leased`` (what a
LEASE of a rate-limited kind takes from its bucket) and ``replayed`` (the
records a compaction or a repair writes to carry every limit, with its
bucket, into a new generation). Imports: limits, framing.

Bodies:

- LIMIT (23) ``{"at", "kind", "concurrency", "rate", "per", "burst"}`` and,
  for a rate limit, ``"tokens", "tokens_at"`` (the bucket as the writer set
  it): the kind's limit from now on, replacing one it had;
- UNLIMIT (24) ``{"at", "kind"}``: the kind has no limit any more.

A rate limit's bucket changes with every LEASE of its kind, and no record of
its own says so: replay takes the token at the LEASE record's ``at``, the
writer's time, exactly as the writer did when it decided the lease (it
applies the same record to its state), so the bucket stays a pure function
of the bytes.
"""

from __future__ import annotations

from typing import Any

from ..limits import Bucket, Limit, from_fields, taken, to_fields
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


def apply(limits: dict[str, Held], rtype: int, body: dict[str, Any]) -> None:
    """Fold one limit record into ``limits``; KeyError, TypeError or ValueError (nothing changed) if it is wrong."""
    if rtype == RecordType.LIMIT:
        held, bucket = from_fields(body)
        limits[held.kind] = (held, bucket)
        return
    assert rtype == RecordType.UNLIMIT, "apply takes the limit record types only"
    kind = body["kind"]
    if not isinstance(kind, str):
        raise TypeError("UNLIMIT names its kind by a string")
    limits.pop(kind, None)


def leased(limits: dict[str, Held], kind: str, body: dict[str, Any]) -> None:
    """A LEASE of ``kind`` at ``body["at"]``: one token from the kind's bucket, if it has a rate limit."""
    held = limits.get(kind)
    if held is None or held[1] is None:
        return
    at = body.get("at")
    # A writer always records its time (a clock= that gives ints too); a record without one takes nothing.
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        limits[kind] = (held[0], taken(held[0], held[1], float(at)))


def replayed(limits: dict[str, Held], at: float) -> list[Record]:
    """One LIMIT record per limited kind, with its bucket as it is: what a new generation starts with."""
    return [limit(held, bucket, at) for held, bucket in limits.values()]
