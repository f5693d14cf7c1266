"""The Queue's limits per kind: set_limit, clear_limit, limits.

Owns: LimitMethods (the limit checked by calls.py, then stored; AsyncQueue
has the same methods, awaited). Imports: checks, limits, calls, base.
"""

from __future__ import annotations

from typing import Any

from .. import checks
from ..limits import Limit
from . import calls
from .base import QueueBase


class LimitMethods(QueueBase):
    """Limits that hold for the whole queue, across processes and hosts (see Queue)."""

    def set_limit(
        self, kind: str, *, concurrency: int | None = None, rate: int | None = None, per: float = 1.0,
        burst: int | None = None, group_concurrency: int | None = None, weights: dict[str, int] | None = None,
    ) -> Limit | None:  # fmt: skip
        """Limit the jobs of ``kind``: at most ``concurrency`` leased at once, at most ``rate`` leases per ``per`` seconds.

        Stored in the queue: every process, on every host, obeys it from its
        next lease, and it survives restarts. Enforced inside the lease
        itself, so it holds with any number of workers; a lease that expired
        frees its slot. ``burst``: how many leases the rate lets through at
        once (a token bucket of that size, refilled at ``rate / per`` a
        second; default ``rate``). Other kinds are never held back, and
        priorities still order the jobs of the kind. Setting the same limit
        again changes nothing; a different one replaces it (a rate keeps the
        tokens it had, up to the new burst). Neither ``concurrency`` nor
        ``rate``: the kind's limit is cleared (as ``clear_limit``), and None
        is returned. Bad input raises TypeError or ValueError, and nothing
        is written.

        Groups (``enqueue(..., group=)``): ``group_concurrency`` allows at
        most that many leased jobs of each group of the kind at once (jobs
        without a group are not counted by it), and a kind with
        ``group_concurrency`` or ``weights`` shares its leases between its
        groups: weighted round-robin (start-time fair queueing), each group's
        share its weight (``weights={"vip": 3}``; default 1; ``weights={}``:
        equal shares, no cap), jobs without a group one group of their own,
        priorities ordering the jobs inside a group. The rotation is stored
        in the queue, so every process and host shares one.
        """
        kind, limit = calls.limit(kind, concurrency, rate, per, burst, group_concurrency, weights)
        if limit is None:
            self._open_storage().remove_limit(kind)
            return None
        return self._open_storage().put_limit(limit)

    def clear_limit(self, kind: str) -> bool:
        """Remove the limit of ``kind``; False if it had none."""
        return self._open_storage().remove_limit(calls.limit_kind(kind))

    def limits(self) -> list[Limit]:
        """Every limit of the queue, by kind."""
        return self._open_storage().list_limits()

    def seconds_to_slot(self, kinds: Any = None) -> float | None:
        """Seconds until a ready job of a rate-limited kind (of these ``kinds``) may be leased: 0 now; None: no such wait.

        None also when no job of a rate-limited kind waits, or when its
        concurrency limit is spent (the end of a lease frees the slot, not
        the clock). An idle Worker's wait ends then.
        """
        return self._open_storage().seconds_to_slot(checks.kind_set(kinds))
