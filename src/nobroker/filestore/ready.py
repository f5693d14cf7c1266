"""The runnable jobs, and which one a lease takes next: by priority and age, and by turns between groups.

Owns: ReadyJobs (the layer of QueueState between JobRows and replay: the
ready heaps by kind, the delayed heap, the leases heap, ``promote``,
``pop_ready``, ``unpop``, ``expired``, and ``tidy``, which drops their stale
items when they pile up), Groups (per kind, one heap of runnable jobs per group, and how
many jobs of each group are leased) and ``Groups.pick`` (a kind's best
runnable job: by priority and age across its groups, or, under a limit with
``group_concurrency`` or ``weights``, from the group whose turn starts
first, none of a group at its group concurrency, found in the kind's
TurnOrder: a lease reads a few of its items, not every group). Imports:
jobs, limits, entry, index.

Jobs without a group stay where they always were (the kind's ready heap
above, the cold rows in index.py); only jobs with a group live in Groups, as
hot Entries. Everything is proportional to the groups that have runnable or
leased jobs, never to the jobs: a group's heap is dropped when it empties,
a kind's dict when its last group goes, so a queue without groups leaves
``Groups.ready`` empty and its leases take the path they took before
groups existed (QueueState.pop_ready checks that once).

The rotation itself (limits.Turns) is the limits' state, kept by
limit_records.py as each LEASE record is applied: a pure function of the
log, shared by every process that reads it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any

from ..limits import Limit, Turns, start
from ..jobs import JobState
from .entry import IN_DELAYED, IN_READY, LEASED, NOWHERE, READY, Entry
from .index import Fifo, JobRows

#: Stale items a heap may hold beyond twice its live ones before ``ReadyJobs.tidy`` rebuilds it.
STALE_SLACK = 4096
#: A ready heap item: (-priority, seq, id).
Item = tuple[int, int, str]
#: A kind's candidate for a lease: its ready-heap key, and where it sits (a heap, or a cold fifo).
Pick = tuple[Item, Any]
#: A fair kind's turn order item: (where the group's next turn starts, its best job's key, the group).
#: A mark that a group may have moved ahead sorts first: (STIRRED, (), group).
Turn = tuple[float, tuple[Any, ...], str]
STIRRED = float("-inf")


class TurnOrder:
    """A fair kind's groups by where their next turn starts, then their best job: a heap checked as it is read.

    Its items may be stale. One is checked when it reaches the top: a group
    with no runnable job, or at its group concurrency, is dropped (a push to
    it, or the end of one of its leases, marks it again: ``Groups.stir``); one
    whose start or best job changed goes back in its new place. A group's
    start never moves back while the rotation object is the same (its clock
    and each pass only grow: limits.turned), nor does its best job's key
    without a mark (a push), so no item ranks a group later than it stands:
    the first item that checks out is the group limits.choose would take
    from all of them. Built again when the kind's limit or rotation object
    is another, or when stale items outnumber the groups. A group has one
    mark at most waiting in the heap (``stirred``), however many jobs are
    pushed and leases end between two leases, and one placed item
    (``placed``: the rank it was last put in with). Any older item of the
    group is a leftover, popped without a check when it surfaces: a lease
    reads the runnable job and the leased count of a few groups, not of a
    copy per lease that ended (a group placed again while it stands far
    back leaves one each time, until it comes up or the order is rebuilt).
    """

    __slots__ = ("limit", "turns", "heap", "stirred", "placed")

    def __init__(self, limit: Limit, turns: Turns | None, groups: dict[str, list[Item]]) -> None:
        self.limit, self.turns = limit, turns
        self.stirred: set[str] = set()
        self.heap: list[Turn] = [(start(turns, name), items[0], name) for name, items in groups.items() if items]
        self.placed: dict[str, tuple[float, tuple[Any, ...]]] = {name: (at, key) for at, key, name in self.heap}
        heapq.heapify(self.heap)

    def fits(self, limit: Limit, turns: Turns | None, groups: int) -> bool:
        """Is this still the order of ``limit`` under rotation ``turns``, with few stale items for ``groups`` groups?"""
        return self.turns is turns and self.limit == limit and len(self.heap) <= 2 * groups + STALE_SLACK

    def drop(self) -> None:
        """The top item's group leaves the order until a mark brings it back."""
        self.placed.pop(heapq.heappop(self.heap)[2], None)

    def place(self, name: str, rank: tuple[float, Item]) -> None:
        """The top item's group stands at ``rank`` now: the top is replaced, any other item of the group is a leftover."""
        self.placed[name] = rank
        heapq.heapreplace(self.heap, (rank[0], rank[1], name))


class Groups:
    """The runnable jobs of groups by kind and group, and the leased count of each group (see the module)."""

    __slots__ = ("ready", "leased", "orders")

    def __init__(self) -> None:
        self.ready: dict[str, dict[str, list[Item]]] = {}
        self.leased: dict[str, dict[str, int]] = {}
        self.orders: dict[str, TurnOrder] = {}  # the turn order of each fair kind leased from (TurnOrder)

    def stir(self, kind: str, group: str) -> None:
        """The group may stand earlier in its kind's turn order now (a job pushed, a lease ended)."""
        order = self.orders.get(kind)
        if order is not None and group not in order.stirred:
            order.stirred.add(group)
            heapq.heappush(order.heap, (STIRRED, (), group))

    def push(self, entry: Entry) -> None:
        """Index a runnable job of a group (its ``heap`` already says IN_READY)."""
        assert entry.group is not None, "only a job with a group lives here"
        groups = self.ready.get(entry.kind)
        if groups is None:
            groups = self.ready[entry.kind] = {}
        heap = groups.get(entry.group)
        if heap is None:
            heap = groups[entry.group] = []
        heapq.heappush(heap, (-entry.priority, entry.seq, entry.id))
        self.stir(entry.kind, entry.group)

    def count(self, entry: Entry, delta: int) -> None:
        """A job of a group became leased (+1) or stopped being leased (-1)."""
        assert entry.group is not None, "only a job with a group is counted by group"
        counts = self.leased.setdefault(entry.kind, {})
        n = counts.get(entry.group, 0) + delta
        assert n >= 0, "a group never has fewer than no leased jobs"
        if n:
            counts[entry.group] = n
        else:
            del counts[entry.group]
            if not counts:
                del self.leased[entry.kind]
        if delta < 0:
            self.stir(entry.kind, entry.group)

    def leased_of(self, kind: str, group: str) -> int:
        counts = self.leased.get(kind)
        return 0 if counts is None else counts.get(group, 0)

    def pick(
        self, kind: str, plain: Pick | None, held: Limit | None, turns: Turns | None, hot: dict[str, Entry]
    ) -> Pick | None:
        """The kind's next job as (key, its heap or ``plain``'s source): ``plain`` is the best job without a group.

        Without a fair limit: the best key of all. Under one: the group
        (jobs without one are the group None) whose turn starts first, ties
        to the best key; a group at ``group_concurrency`` is passed over.
        """
        if held is not None and held.fair:
            return self._turn(kind, plain, held, turns, hot)
        self.orders.pop(kind, None)
        groups = self.ready.get(kind)
        candidates: list[Pick] = [] if plain is None else [plain]
        if groups is not None:
            for name, heap in list(groups.items()):
                if not live_top(heap, hot):
                    del groups[name]
                    continue
                candidates.append((heap[0], heap))
            if not groups:
                del self.ready[kind]
        return min(candidates, key=_key, default=None)

    def _turn(self, kind: str, plain: Pick | None, held: Limit, turns: Turns | None, hot: dict[str, Entry]) -> Pick | None:
        """A fair kind's pick: the first group in its turn order (TurnOrder), or ``plain`` (the group None) if earlier."""
        first = self._first(kind, held, turns, hot)
        if plain is not None and (first is None or (start(turns, None), plain[0]) < first[0]):
            return plain
        return None if first is None else (first[0][1], first[1])

    def _first(
        self, kind: str, held: Limit, turns: Turns | None, hot: dict[str, Entry]
    ) -> tuple[tuple[float, Item], list[Item]] | None:
        """The group whose turn starts first, not at its group concurrency: ((start, best key), its heap)."""
        groups = self.ready.get(kind)
        if groups is None:
            self.orders.pop(kind, None)
            return None
        order = self.orders.get(kind)
        if order is None or not order.fits(held, turns, len(groups)):
            order = self.orders[kind] = TurnOrder(held, turns, groups)
        cap, heap, placed = held.group_concurrency, order.heap, order.placed
        while heap:
            at, key, name = heap[0]
            if at == STIRRED:
                order.stirred.discard(name)
            elif placed.get(name) != (at, key):
                heapq.heappop(heap)  # a leftover: the group was placed again since
                continue
            items = groups.get(name)
            if items is None or not live_top(items, hot):
                order.drop()  # nothing runnable: a push stirs it again
                if items is not None:
                    del groups[name]
                continue
            if cap is not None and self.leased_of(kind, name) >= cap:
                order.drop()  # at its group concurrency: the end of a lease stirs it again
                continue
            now = (start(turns, name), items[0])
            if (at, key) == now:
                return now, items
            if at == STIRRED and placed.get(name) == now:
                heapq.heappop(heap)  # a mark for a group already in its place
                continue
            order.place(name, now)
        if not groups:
            del self.ready[kind]
            del self.orders[kind]
        return None


def live_top(heap: list[Item], hot: dict[str, Entry]) -> bool:
    """Pop the stale items off the top of a ready heap; does a runnable job remain?"""
    while heap:
        top = heap[0]
        entry = hot.get(top[2])
        if entry is not None and entry.heap == IN_READY and entry.seq == top[1]:
            return True
        heapq.heappop(heap)  # stale
    return False


def without_stale(heap: list[Any], hot: dict[str, Entry], live: Callable[[Entry, Any], bool]) -> list[Any]:
    """``heap``'s items whose job (item[2]) is hot and ``live(entry, item)``, as a heap; the same list when at least half are."""
    valid = [e is not None and live(e, item) for item in heap for e in (hot.get(item[2]),)]
    if sum(valid) * 2 >= len(heap):
        return heap  # mostly live: popping the stale ones as they surface costs less than a rebuild
    kept = list(compress(heap, valid))
    heapq.heapify(kept)
    return kept


def _lease_live(entry: Entry, item: tuple[float, int, str]) -> bool:
    return entry.state is LEASED and entry.lease_deadline == item[0]


def _delayed_live(entry: Entry, item: tuple[float, int, str]) -> bool:
    return entry.heap == IN_DELAYED and entry.available_at == item[0]


def _ready_live(entry: Entry, item: Item) -> bool:
    return entry.heap == IN_READY and entry.seq == item[1]


def _key(pick: Pick) -> Item:
    return pick[0]



class ReadyJobs(JobRows):
    """The runnable and delayed jobs' heaps over JobRows (replay.py's QueueState builds on it)."""

    #: QueueState's (replay.py): the limits by kind, and the turns of the fair ones; jobs per state (hot ones).
    limits: dict[str, tuple[Limit, Any]]
    turns: dict[str, Turns]
    _counts: dict[JobState, int]

    def __init__(self) -> None:
        super().__init__()
        self.ready: dict[str, list[Item]] = {}
        self.delayed: list[tuple[float, int, str]] = []
        self.n_delayed = 0
        self.leases: list[tuple[float, int, str]] = []  # (deadline, seq, id) of leased jobs, for reclaiming
        self.groups = Groups()

    def _warm(self, row: int, heap: int) -> Entry:
        raise NotImplementedError  # QueueState's: moving a cold row's job to hot

    def tidy(self) -> None:
        """Outside the file lock: JobRows.tidy, and each heap rebuilt once its stale items far outnumber its live ones.

        A job leased, acked, removed or moved leaves its old item behind,
        popped only when it reaches the top; a long replay (opening, a
        follower's catch-up) can leave hundreds of thousands, and the first
        operation after it would pop them all under the file lock. Here they
        are dropped in one pass instead. O(kinds) when none is due.
        """
        super().tidy()
        # Sizes first: this runs after every operation, and a count by state costs an Enum hash.
        leases, delayed = self.leases, self.delayed
        hot = self.hot
        if len(leases) > STALE_SLACK and len(leases) > STALE_SLACK + 2 * self._counts[LEASED]:
            self.leases = without_stale(leases, hot, _lease_live)
        if len(delayed) > STALE_SLACK + 2 * self.n_delayed:
            self.delayed = without_stale(delayed, hot, _delayed_live)
        queued = sum(map(len, self.ready.values())) if self.ready else 0
        if queued > STALE_SLACK and queued > STALE_SLACK + 2 * (self._counts[READY] - self.n_delayed):
            for kind, heap in self.ready.items():
                self.ready[kind] = without_stale(heap, hot, _ready_live)

    def expired(self, now: float) -> Sequence[Entry]:
        """Leased jobs whose deadline has passed, earliest first.

        Non-destructive: the heap items go stale once the caller records the
        reclaim, so a failed write leaves the index intact for the next try.
        Every write asks first, and the answer is nearly always "none": that
        answer allocates nothing.
        """
        leases, jobs = self.leases, self.hot  # a leased job is always hot
        while leases:  # drop stale items at the top so the walk below stays short
            deadline, _seq, job_id = leases[0]
            entry = jobs.get(job_id)
            if entry is not None and entry.state is LEASED and entry.lease_deadline == deadline:
                break
            heapq.heappop(leases)
        if not leases or leases[0][0] > now:
            return ()  # the earliest live lease is not due: nothing is
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
            stack += (2 * i + 1, 2 * i + 2)
        return sorted(found.values(), key=lambda e: (e.lease_deadline, e.seq))

    def is_delayed(self, entry: Entry) -> bool:
        """Does stats() count this job as delayed (after ``promote(now)``)? Cold jobs never are."""
        return entry.heap == IN_DELAYED

    def _push_ready(self, entry: Entry, at: float) -> None:
        """Index a READY job: runnable at ``at`` (the record's own time) or later."""
        if entry.available_at > at:
            entry.heap = IN_DELAYED
            self.n_delayed += 1
            heapq.heappush(self.delayed, (entry.available_at, entry.seq, entry.id))
        else:
            self._index_ready(entry)

    def _index_ready(self, entry: Entry) -> None:
        """Index a job runnable now: in its kind's ready heap, or its group's (Groups)."""
        entry.heap = IN_READY
        if entry.group is None:
            heapq.heappush(self.ready.setdefault(entry.kind, []), (-entry.priority, entry.seq, entry.id))
        else:
            self.groups.push(entry)

    def promote(self, now: float) -> None:
        """Move delayed jobs whose time has come into the ready heaps."""
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            available_at, _seq, job_id = heapq.heappop(delayed)
            entry = self.hot.get(job_id)
            if entry is None or entry.heap != IN_DELAYED or entry.available_at != available_at:
                continue
            self.n_delayed -= 1
            self._index_ready(entry)

    def pop_ready(self, now: float, kinds: frozenset[str] | None, skip: frozenset[str] = frozenset()) -> Entry | None:
        """Remove and return the best runnable job (highest priority, then oldest) of ``kinds``, none of ``skip``."""
        if self.groups.ready:  # some runnable jobs have a group: a fair kind takes turns (Groups)
            return self._pop_grouped(now, kinds, skip)
        while True:
            best_heap = None
            for kind, heap in self.ready.items():
                if (kinds is not None and kind not in kinds) or kind in skip:
                    continue
                while heap:
                    entry = self.hot.get(heap[0][2])
                    if entry is not None and entry.heap == IN_READY and entry.seq == heap[0][1]:
                        break
                    heapq.heappop(heap)  # stale
                if heap and (best_heap is None or heap[0] < best_heap[0]):
                    best_heap = heap
            cold = self._best_cold(kinds, skip)
            if cold is not None and (best_heap is None or cold[0] < best_heap[0]):
                entry = self.taken(cold[1], now)
            elif best_heap is not None:
                entry = self.taken(best_heap, now)
            else:
                return None
            if entry is not None:
                return entry

    def taken(self, source: Fifo | list[tuple[int, int, str]], now: float) -> Entry | None:
        """Take the best job of a cold fifo or a ready heap; None if it is not runnable yet (indexed again)."""
        if isinstance(source, Fifo):
            row = source.rows[source.head]
            source.head += 1
            entry = self._warm(row, NOWHERE)
        else:
            entry = self.hot[heapq.heappop(source)[2]]
            entry.heap = NOWHERE
        if entry.available_at > now:  # a peer's clock ran ahead of ours: not yet
            self._push_ready(entry, now)
            return None
        return entry

    def unpop(self, entry: Entry, now: float) -> None:
        """A job ``pop_ready`` returned that was not leased after all (its payload could not be read): runnable again."""
        assert entry.state is READY and entry.heap == NOWHERE, "only a popped ready job goes back"
        self._push_ready(entry, now)

    def has_runnable(self, kind: str) -> bool:
        """Is a job of ``kind`` runnable (after ``promote``)? A hint: a stale heap item may say yes once."""
        return bool(self.ready.get(kind)) or kind in self.groups.ready or self.has_cold(kind)


    def _pop_grouped(self, now: float, kinds: frozenset[str] | None, skip: frozenset[str]) -> Entry | None:
        """pop_ready while some runnable jobs have a group: each kind's pick (Groups.pick), the best of them."""
        groups, hot = self.groups, self.hot
        while True:
            best: Pick | None = None
            for kind in self.ready.keys() | groups.ready.keys() | self.cold_kinds():
                if (kinds is not None and kind not in kinds) or kind in skip:
                    continue
                plain: Pick | None = self.cold_pick(kind)
                heap = self.ready.get(kind)
                if heap and live_top(heap, hot) and (plain is None or heap[0] < plain[0]):
                    plain = heap[0], heap
                held = self.limits.get(kind)
                pick = groups.pick(kind, plain, None if held is None else held[0], self.turns.get(kind), hot)
                if pick is not None and (best is None or pick[0] < best[0]):
                    best = pick
            if best is None:
                return None
            entry = self.taken(best[1], now)
            if entry is not None:
                return entry
