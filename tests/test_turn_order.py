"""The turn order of a fair kind's groups (filestore/ready.py's TurnOrder) picks what limits.choose picks from every group.

Owns: ``TurnOrderTests``: seeded random runs of pushes, leases, ends of
leases, jobs gone stale, a rotation object replaced and a limit changed,
each lease's pick by ``Groups.pick`` checked against limits.choose over
every group's best runnable job, computed here without the heaps; a
lease's cost that does not grow with the groups; and one mark per group
however many jobs are pushed and leases end between two leases. Imports: the standard
library and nobroker.limits, nobroker.filestore.entry and
nobroker.filestore.ready.
"""

from __future__ import annotations

import contextlib
import heapq
import random
import unittest
from collections.abc import Iterator
from typing import Any

from nobroker.filestore.entry import IN_READY, LEASED, NOWHERE, Entry
from nobroker.filestore.ready import Groups
from nobroker.limits import Limit, Turns, choose, turned

#: Seeded runs, and the operations in each.
RUNS, STEPS = 30, 400


class _Run:
    """One run: a Groups of one fair kind, the jobs it indexes, and what each lease took."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.groups = Groups()
        self.hot: dict[str, Entry] = {}
        self.plain: list[tuple[int, int, str]] = []  # the kind's jobs without a group: a sorted list (the group None)
        self.leased: list[Entry] = []
        self.turns: Turns | None = None
        self.limit = Limit("t", group_concurrency=2)
        self.seq = 0

    def push(self, group: str | None) -> None:
        self.seq += 1
        entry = Entry({"id": f"j{self.seq}", "priority": self.rnd.choice((0, 0, 1, 5)), "seq": self.seq,
                       "kind": "t", "group": group}, 0)  # fmt: skip
        entry.heap = IN_READY
        self.hot[entry.id] = entry
        if group is None:
            self.plain.append((-entry.priority, entry.seq, entry.id))
            self.plain.sort()
        else:
            self.groups.push(entry)

    def runnable(self, entry: Entry | None) -> bool:
        return entry is not None and entry.heap == IN_READY

    def expected(self) -> tuple[Any, ...] | None:
        """limits.choose over every group's best runnable job (and the best job without a group)."""
        candidates: list[tuple[str | None, Any, int]] = []
        if self.plain:
            candidates.append((None, self.plain[0], 0))
        for name, items in self.groups.ready.get("t", {}).items():
            live = [item for item in items if self.runnable(self.hot.get(item[2])) and self.hot[item[2]].seq == item[1]]
            if live:
                candidates.append((name, min(live), self.groups.leased_of("t", name)))
        chosen = choose(self.limit, self.turns, candidates)
        return None if chosen is None else candidates[chosen][1]

    def lease(self, test: unittest.TestCase, checked: list[str] | None = None) -> None:
        """One lease, checked against ``expected``; ``checked`` gets the groups whose leased count the pick read."""
        expected = self.expected()
        plain = (self.plain[0], self.plain) if self.plain else None
        with _counting_checks() as seen:
            pick = self.groups.pick("t", plain, self.limit, self.turns, self.hot)
        if checked is not None:
            checked.extend(seen)
        test.assertEqual(None if pick is None else pick[0], expected)
        if pick is None:
            return
        entry = self.hot[pick[0][2]]
        if pick[1] is self.plain:
            self.plain.remove(pick[0])
        else:
            heapq.heappop(pick[1])
        entry.heap, entry.state = NOWHERE, LEASED
        if entry.group is not None:
            self.groups.count(entry, 1)
        if self.turns is None:
            self.turns = Turns()
        turned(self.limit, self.turns, entry.group)
        self.leased.append(entry)

    def step(self, test: unittest.TestCase) -> None:
        rnd = self.rnd
        roll = rnd.random()
        if roll < 0.35:
            self.push(rnd.choice((None, *(f"g{n}" for n in range(12)))))
        elif roll < 0.7:
            self.lease(test)
        elif roll < 0.85 and self.leased:
            entry = self.leased.pop(rnd.randrange(len(self.leased)))
            if entry.group is not None:
                self.groups.count(entry, -1)
        elif roll < 0.9:
            ready = [e for e in self.hot.values() if e.heap == IN_READY and e.group is not None]
            if ready:
                rnd.choice(ready).heap = NOWHERE  # gone (deleted, cancelled): its heap item is stale
        elif roll < 0.95 and self.turns is not None:
            # Read again (another object), or replaced by a LIMIT record: turns that may start earlier.
            passes = dict(self.turns.passes or {}) if rnd.random() < 0.5 else {}
            self.turns = Turns(self.turns.clock, passes)
            self.lease(test)
        else:
            cap = rnd.choice((None, 1, 2, 3))
            weights = rnd.choice((None, (("g1", 3), ("g2", 2))))
            self.limit = Limit("t", group_concurrency=cap, weights=weights if weights or cap else (("g1", 1),))
            self.lease(test)  # a group its old group concurrency held may lease at once


class TurnOrderTests(unittest.TestCase):
    def test_each_lease_picks_what_choose_picks_from_every_group(self) -> None:
        for seed in range(RUNS):
            with self.subTest(seed=seed):
                run = _Run(seed)
                for _ in range(STEPS):
                    run.step(self)
                while run.plain or run.groups.ready.get("t"):  # drain: every job comes out, in turn
                    before = len(run.leased)
                    run.lease(self)
                    if len(run.leased) == before:
                        run.leased.clear()
                        run.groups.leased.clear()
                        for name in run.groups.ready.get("t", {}):
                            run.groups.stir("t", name)
                        if run.expected() is None:
                            break

    def test_jobs_pushed_between_two_leases_leave_one_mark_per_group(self) -> None:
        # Memory per pending job stays bounded: a mark per push would add a tuple per job.
        run = _Run(1)
        for n in range(10):
            run.push(f"g{n}")
        run.lease(self)  # the kind's turn order exists from here on
        for _ in range(10_000):
            run.push(f"g{run.rnd.randrange(10)}")
        self.assertLessEqual(len(run.groups.orders["t"].heap), 2 * 10)
        run.lease(self)

    def test_a_lease_weighs_a_few_groups_not_all_of_them(self) -> None:
        # 10,000 groups with runnable jobs: limits.choose over all of them at each
        # lease was 18 ms of CPU a lease and ack (the file storage, fsync off).
        run = _Run(0)
        for n in range(10_000):
            run.push(f"g{n}")
        run.lease(self)  # builds the order once
        with _counting_checks() as checked:
            for _ in range(100):
                pick = run.groups.pick("t", None, run.limit, run.turns, run.hot)
                assert pick is not None
                entry = run.hot[pick[0][2]]
                heapq.heappop(pick[1])
                entry.heap, entry.state = NOWHERE, LEASED
                run.groups.count(entry, 1)
                turned(run.limit, run.turns, entry.group)  # type: ignore[arg-type]
        self.assertLessEqual(len(checked), 100 * 3, "each lease looks at a few groups")

    def test_leases_that_end_between_two_leases_leave_a_few_items_per_group(self) -> None:
        # Each end of a lease marks its group; a mark placed beside the group's
        # item left a copy behind, so the heap grew by an item per lease and
        # every lease re-checked the copies (125 a lease over 2,000 leases and
        # acks of 8 groups: 2.8 times a lease without groups, fsync off).
        run = _Run(2)
        for n in range(800):
            run.push(f"g{n % 8}")
        checked: list[str] = []
        for _ in range(800):
            run.lease(self, checked)
            self.groups_end(run)
            self.assertLessEqual(len(run.groups.orders["t"].heap), 2 * 8)
        self.assertLessEqual(len(checked), 800 * 3, "each lease looks at a few groups")

    def groups_end(self, run: _Run) -> None:
        """Every lease of ``run`` ends (an ack)."""
        while run.leased:
            run.groups.count(run.leased.pop(), -1)


@contextlib.contextmanager
def _counting_checks() -> Iterator[list[str]]:
    """The groups whose leased count a pick reads (Groups.leased_of), in order, while the block runs."""
    checked: list[str] = []
    original = Groups.leased_of

    def counting(groups: Groups, kind: str, group: str) -> int:
        checked.append(group)
        return original(groups, kind, group)

    Groups.leased_of = counting  # type: ignore[method-assign, assignment]
    try:
        yield checked
    finally:
        Groups.leased_of = original  # type: ignore[method-assign]

if __name__ == "__main__":
    unittest.main()
