"""The cost of a lease under limits: lease + ack on a queue with limits set, beside the same on one without.

Owns: the figures (durable, and with ``fsync=False``, where the lease's
own CPU is all there is to measure) and their same-run ratios, for limits
per kind and for a group limit with fair share. Imports: nobroker
(Queue), plan.

Each run fills two fresh queues with the same jobs of the same kinds,
one with limits on them (a concurrency limit and a rate limit on the
leased kind that never run out, and LIMITED_KINDS more limited kinds), and
times lease_one + ack of every job on each, in alternating blocks so both
see the same machine. The ratio is the median of the runs' ratios.
The group figure does the same with the jobs spread over GROUPS groups
and a group_concurrency limit on their kind that never runs out (so every
lease rotates between the groups), beside the same jobs without groups or
limits. Target: at most 1.2 times the cost without limits (the file storage).
"""

from __future__ import annotations

import statistics
import time

from nobroker import Queue
from tools.bench.plan import Figure, Plan, fresh, progress

#: Lease + ack pairs timed per queue per run (each a durable write): a quarter of the plan's jobs.
SHARE = 4
#: Jobs timed in one block before the other queue's turn.
BLOCK = 50
#: Limited kinds beside the leased one: every lease looks at every limit.
LIMITED_KINDS = 8
#: The ratio a lease under limits may cost, at most.
TARGET_RATIO = 1.2
NO_LIMIT = 1_000_000  # a limit that never runs out within a run
#: Groups the group figure spreads its jobs over (every lease picks among them).
GROUPS = 8


def figures(root: str, plan: Plan) -> list[Figure]:
    out = []
    for durable in (True, False):
        progress(f"lease under limits ({'durable' if durable else 'fsync=False'})")
        plain, limited, ratio = measure(root, plan, durable=durable)
        label = "" if durable else ", fsync=False"
        out.append(Figure(f"lease + ack without limits{label}", plain, "us", "", None))
        out.append(Figure(f"lease + ack under limits{label} ({ratio:.2f} x the same run's)", limited, "us",
                          f"<= {TARGET_RATIO} x", ratio <= TARGET_RATIO))  # fmt: skip
        progress(f"lease under a group limit ({'durable' if durable else 'fsync=False'})")
        plain, grouped, ratio = measure(root, plan, durable=durable, groups=True)
        out.append(Figure(f"lease + ack without groups or limits{label} (beside the next)", plain, "us", "", None))
        out.append(Figure(f"lease + ack under a group limit, {GROUPS} groups{label} ({ratio:.2f} x the same run's)",
                          grouped, "us", f"<= {TARGET_RATIO} x", ratio <= TARGET_RATIO))  # fmt: skip
    return out


def _fill(plain: Queue, limited: Queue, n: int, groups: bool) -> None:
    """The same ``n`` jobs of kind "work" in both; ``limited`` gets the limits (and, with ``groups``, the groups)."""
    if groups:
        limited.set_limit("work", group_concurrency=NO_LIMIT)
        plain.enqueue_many([{"n": i} for i in range(n)], kind="work")
        for g in range(GROUPS):
            limited.enqueue_many([{"n": i} for i in range(g, n, GROUPS)], kind="work", group=f"tenant-{g}")
        return
    for kind in range(LIMITED_KINDS):
        limited.set_limit(f"other-{kind}", concurrency=2, rate=10, per=1.0)
    limited.set_limit("work", concurrency=NO_LIMIT, rate=NO_LIMIT, per=1.0, burst=NO_LIMIT)
    for q in (plain, limited):
        q.enqueue_many([{"n": i} for i in range(n)], kind="work")
    # The worst case of a lease under limits: a spent kind with ready jobs, left out of every pick.
    limited.enqueue_many([{"n": i} for i in range(LIMITED_KINDS)], kind="other-0", priority=1)
    assert len(limited.lease(LIMITED_KINDS, kinds=["other-0"])) == 2, "other-0's concurrency limit is spent"


def measure(root: str, plan: Plan, *, durable: bool, groups: bool = False) -> tuple[float, float, float]:
    """(microseconds per lease + ack without limits, under limits, the median of the runs' ratios)."""
    n = max(plan.jobs // SHARE if durable else plan.jobs, BLOCK)  # at least one timed block each
    plains, limiteds, ratios = [], [], []
    for _ in range(plan.runs):
        with Queue(fresh(root), fsync=durable) as plain, Queue(fresh(root), fsync=durable) as limited:
            _fill(plain, limited, n, groups)
            spent = {id(plain): 0.0, id(limited): 0.0}
            for block in range(n // BLOCK):
                for q in (plain, limited) if block % 2 == 0 else (limited, plain):
                    start = time.perf_counter()
                    for _ in range(BLOCK):
                        job = q.lease_one()
                        assert job is not None and job.kind == "work", "every timed lease takes a job of the kind"
                        q.ack(job)
                    spent[id(q)] += time.perf_counter() - start
        done = (n // BLOCK) * BLOCK
        plains.append(spent[id(plain)] / done * 1e6)
        limiteds.append(spent[id(limited)] / done * 1e6)
        ratios.append(limiteds[-1] / plains[-1])
    return statistics.median(plains), statistics.median(limiteds), statistics.median(ratios)


__all__ = ["figures"]
