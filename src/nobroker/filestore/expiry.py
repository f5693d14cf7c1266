"""Which leases have run out: the writer's walk of the lease heap.

Owns: ``expired(state, now)``, the leased jobs whose deadline has passed,
read from QueueState's lazy lease heap without changing what it means (the
reclaim records the writer then appends make the heap's items stale).
Imports: entry, replay.
"""

from __future__ import annotations

import heapq

from .entry import LEASED, Entry
from .replay import QueueState


def expired(state: QueueState, now: float) -> list[Entry]:
    """Leased jobs whose deadline has passed, earliest first.

    Non-destructive: the heap items go stale once the caller records the
    reclaim, so a failed write leaves the index intact for the next try.
    """
    leases, jobs = state.leases, state.hot  # a leased job is always hot
    while leases:  # drop stale items at the top so the walk below stays short
        deadline, _seq, job_id = leases[0]
        entry = jobs.get(job_id)
        if entry is not None and entry.state is LEASED and entry.lease_deadline == deadline:
            break
        heapq.heappop(leases)
    found: dict[str, Entry] = {}
    stack = [0]
    while stack:
        i = stack.pop()
        if i >= len(leases) or leases[i][0] > now:
            continue  # heap order: nothing below an item later than now is due
        deadline, _seq, job_id = leases[i]
        entry = jobs.get(job_id)
        if entry is not None and entry.state is LEASED and entry.lease_deadline == deadline:
            found[job_id] = entry
        stack.append(2 * i + 1)
        stack.append(2 * i + 2)
    return sorted(found.values(), key=lambda e: (e.lease_deadline, e.seq))
