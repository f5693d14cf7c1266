"""A Worker's leases: what one may take, and which thread makes it.

Owns: Leasing: the lock every lease of a Worker is made under (by its
leasing loop, or by a handler thread for its own next job), what max_jobs
and a pool's shared budget allow a lease (``allowed``), the lease call and
its counting (``lease``), the entries the heartbeat renews (``entries``),
and the lease a handler thread makes for its own next job when the Worker
runs one job at a time (``keep_slot``, ``lease_next``: a busy one-slot
worker then wakes no other thread per job but the settling one).
Imports: jobs, protocol, budget, heartbeat, settle, slots.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..jobs import Job
from .budget import LeaseBudget
from .heartbeat import Heartbeat, Running
from .protocol import QueueAccess
from .settle import Settler
from .slots import Slots

logger = logging.getLogger("nobroker.worker")


class Leasing:
    """The leases of one Worker; ``lock`` is held around each, with what it was allowed and how it was counted."""

    def __init__(
        self, access: QueueAccess, kinds: list[str] | None, name: str, max_jobs: int | None,
        budget: LeaseBudget | None, settler: Settler, heartbeat: Heartbeat, slots: Slots,
        stop: Callable[[], None], fail: Callable[[BaseException, str], None], asked_to_stop: Callable[[], bool],
    ) -> None:  # fmt: skip
        self.lock = threading.Lock()
        self._access = access
        self._kinds = kinds
        self._name = name
        self._max_jobs = max_jobs
        self._budget = budget
        self._settler = settler
        self._heartbeat = heartbeat
        self._slots = slots
        self._stop = stop
        self._fail = fail
        self._asked_to_stop = asked_to_stop

    def allowed(self, free: int) -> int | None:
        """How many of ``free`` slots the next lease may fill under max_jobs (or a pool's shared one); None: no more."""
        if self._max_jobs is not None:
            remaining = self._max_jobs - self._settler.leased_so_far()
            if remaining <= 0:
                logger.info("%s leased its max_jobs (%d); finishing", self._name, self._max_jobs)
                return None
            free = min(free, remaining)
        if self._budget is not None:
            granted = self._budget.take(free)
            if granted is None:
                logger.info("%s: the pool's max_jobs are all leased; finishing", self._name)
            return granted
        return free

    def lease(self, allowed: int) -> list[Job] | None:
        """Lease up to ``allowed`` jobs (what ``allowed()`` granted) and count them; None: it failed. Under ``lock``."""
        try:
            jobs = self._access.lease(allowed, self._kinds)
        except Exception as exc:
            self._fail(exc, "lease")
            return None
        if self._budget is not None:
            self._budget.keep(allowed - len(jobs))
        self._settler.add_leased(len(jobs))
        return jobs

    def entries(self, jobs: list[Job], leased_at_wall: float, leased_at: float) -> list[Running]:
        """What the heartbeat renews for ``jobs``, registered with it before any handler can settle one."""
        entries = [Running(job, self._access.lease_length_of(job, leased_at_wall), leased_at) for job in jobs]
        self._heartbeat.add(entries)
        return entries

    def keep_slot(self, done: Running) -> bool:
        """On a handler thread, before ``done``'s ack is handed over: keep its slot for a job it leases itself?

        The steady state of a busy worker (``lease_next``): no other thread's
        turn in it, so a job costs no wake-up of the leasing loop and then of
        a handler thread. Not while stopping, or while another thread leases.
        """
        if self._asked_to_stop() or self._settler.aborted or self.lock.locked():
            return False
        self._slots.pass_on(done)
        return True

    def lease_next(self) -> Running | None:
        """After ``keep_slot``: lease one job for the kept slot; None: nothing leased, and the slot is free."""
        entry = None
        try:
            if self.lock.acquire(blocking=False):
                try:
                    allowed = 0 if self._asked_to_stop() else self.allowed(1)
                    if allowed is None:  # max_jobs leased (logged): stop here, or the leasing loop would say it again
                        self._stop()
                    leased_at_wall, leased_at = time.time(), time.monotonic()
                    jobs = self.lease(allowed) if allowed else None
                    if jobs:
                        (entry,) = self.entries(jobs, leased_at_wall, leased_at)
                except Exception as exc:  # a bug: stop first, so the leasing loop does not fill the slot freed below
                    self._fail(exc, "leasing a handler thread's next job")
                finally:
                    self.lock.release()
        finally:  # whatever happened, the kept slot is settled: a drain must never wait for it forever
            self._slots.passed_on(entry is not None)
        return entry
