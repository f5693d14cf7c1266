"""The Queue's periodic jobs: schedule, unschedule, schedules, enqueue_due.

Owns: ScheduleMethods (the definition checked in schedules.py, then stored).
Imports: checks, jobs, schedules, base.
"""

from __future__ import annotations

from typing import Any

from .. import checks
from ..jobs import DEFAULT_KIND, Job
from .. import schedules as _schedules
from ..schedules import DEFAULT_CATCH_UP, Schedule
from .base import QueueBase


class ScheduleMethods(QueueBase):
    """Periodic jobs (see Queue)."""

    def schedule(
        self, name: str, payload: Any = None, *, every: float | None = None, cron: str | None = None,
        kind: str = DEFAULT_KIND, priority: int = 0, tz: str | None = None, catch_up: str = DEFAULT_CATCH_UP,
    ) -> Schedule:  # fmt: skip
        """Enqueue ``payload`` every ``every`` seconds, or at the times of a five-field ``cron`` expression.

        Stored in the queue: every process sees it, and it survives restarts.
        Every running Worker enqueues the due ticks (no separate process),
        each exactly once: a tick's job id is ``tick:<name>@<due time in ms>``.
        ``tz``: the IANA zone whose wall clock a cron expression follows (UTC
        when None). ``catch_up`` says what becomes of ticks that came due
        while no worker ran: ``"all"`` enqueues every one, ``"last"`` only the
        most recent, ``"none"`` none that is more than a minute late.
        Defining a schedule again with the same fields changes nothing (call
        it at every start); different fields replace it, counting from now.
        Returns the schedule with its next run. Bad input raises TypeError or
        ValueError, and nothing is written.
        """
        spec = _schedules.define(name, payload, every=every, cron=cron, kind=kind, priority=priority, tz=tz,
                                 catch_up=catch_up)  # fmt: skip
        return self._open_storage().put_schedule(spec)

    def unschedule(self, name: str) -> bool:
        """Remove the schedule ``name`` (ticks already enqueued stay). False if there was none."""
        return self._open_storage().remove_schedule(checks.text(name, "schedule name", _schedules.MAX_SCHEDULE_NAME_CHARS))

    def schedules(self) -> list[Schedule]:
        """Every schedule of the queue, by name, each with its ``next_run`` (epoch seconds)."""
        return self._open_storage().list_schedules()

    def enqueue_due(self) -> list[Job]:
        """Enqueue every schedule's due ticks now; returns the jobs this call added (a Worker calls it).

        Safe from any number of processes at once: each tick is enqueued once.
        """
        return self._open_storage().fire_schedules()
