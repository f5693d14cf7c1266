"""The writer's decisions for limits, and what a lease under limits may take.

Owns: ``put`` (a kind's limit set, or changed), ``remove``, ``listed``;
``lease_kinds`` (the kinds a lease may take from now, with every spent
limit's kind left out), ``frees_slot`` (does the end of this lease free a
slot someone may be waiting for), ``seconds_to_slot`` (when a runnable job
of a rate-limited kind may be leased again: the end of an idle wait) and ``holding`` (the
limit holding a kind back, in words). Each runs under the file lock, after
the read forward, with the state as every earlier write left it, like the
decisions in leases.py. Imports: limits, entry, limit_records, replay.

Exact across processes: a lease is decided under the exclusive file lock
with every lease of the queue applied to ``state`` (``leased_kinds`` counts
them, and the reclaim of expired leases ran first in the same batch, so an
expired lease's slot is free), and each LEASE record it adds is applied at
once: the next pick of the same lease sees its slot taken and its token
spent.
"""

from __future__ import annotations

from typing import Any

from ..limits import MAX_LIMITS, Limit, carried, spent
from .. import limits as _limits
from .entry import Entry
from .limit_records import limit, unlimit
from .replay import QueueState


def put(batch: Any, now: float, spec: Limit) -> Limit:
    """Limit ``spec.kind``; the same limit again writes nothing (its bucket keeps its tokens)."""
    held = batch.state.limits
    old = held.get(spec.kind)
    if old is not None and old[0] == spec:
        return spec
    if old is None and len(held) >= MAX_LIMITS:
        raise ValueError(f"a queue limits at most {MAX_LIMITS:,} kinds; clear one first")
    batch.add(limit(spec, carried(spec, old, now), now))
    return spec


def remove(batch: Any, now: float, kind: str) -> bool:
    """The kind's limit gone; False if it had none (nothing written)."""
    if kind not in batch.state.limits:
        return False
    batch.add(unlimit(kind, now))
    batch.wakes = True  # its waiting jobs may run now
    return True


def listed(state: QueueState) -> list[Limit]:
    """Every limit, by kind."""
    return [state.limits[kind][0] for kind in sorted(state.limits)]


def lease_kinds(state: QueueState, now: float, kinds: frozenset[str] | None) -> frozenset[str] | None:
    """The kinds a lease may take now: ``kinds`` (None: all) without those whose limit is spent."""
    leased = state.leased_kinds
    out = [
        kind for kind, (held, bucket) in state.limits.items()
        if (kinds is None or kind in kinds) and spent(held, leased.get(kind, 0), bucket, now)
    ]  # fmt: skip
    if not out:
        return kinds
    present = kinds if kinds is not None else state.ready.keys() | state.cold_kinds() | state.groups.ready.keys()
    return frozenset(present).difference(out)


def frees_slot(state: QueueState, entry: Entry) -> bool:
    """Does the end of this job's lease free a slot of a concurrency limit, its kind's or its group's (worth waking a waiter)?"""
    held = state.limits.get(entry.kind)
    return held is not None and (
        held[0].concurrency is not None or (held[0].group_concurrency is not None and entry.group is not None)
    )


def seconds_to_slot(state: QueueState, now: float, kinds: frozenset[str] | None) -> float | None:
    """Seconds until a runnable job of a rate-limited kind (of ``kinds``) may be leased (0: now); None: no such wait."""
    leased = state.leased_kinds
    waits = []
    for kind, (held, bucket) in state.limits.items():
        if bucket is not None and (kinds is None or kind in kinds):
            wait = _limits.seconds_to_slot(held, bucket, leased.get(kind, 0), state.has_runnable(kind), now)
            if wait is not None:
                waits.append(wait)
    return min(waits) if waits else None


def holding(state: QueueState, kind: str, now: float, group: str | None = None) -> str | None:
    """The limit holding a ready job of ``kind`` (and ``group``) back now, in words (for explain); None if none does."""
    held = state.limits.get(kind)
    if held is None:
        return None
    words = _limits.holding(held[0], held[1], state.leased_kinds.get(kind, 0), now)
    if words is None and group is not None:
        words = _limits.holding_group(held[0], group, state.groups.leased_of(kind, group))
    return words
