"""The writer's decisions for periodic jobs: define, remove, and enqueue the due ticks.

Owns: ``put`` (a schedule defined, or redefined when its definition
changed), ``remove``, ``fire`` (every due schedule's ticks enqueued with
their deterministic ids, then its TICK record) and ``listed``. Each decision
runs under the file lock, after the read forward, like those in leases.py.
Imports: jobs, schedules, storage, leases, schedule_records.

Exactly once, on this storage: ``fire`` runs under the exclusive file lock,
with the state as every earlier write left it, and appends the ticks'
ENQUEUE records and then the TICK that moves the cursor in one batch; the
next writer, in any process, sees the cursor moved. A crash can cut that
batch only at a record boundary: if the TICK is lost, the next ``fire``
starts from the old cursor and makes the same job ids, which the queue still
holds (a compaction runs only after the batch is durable, and carries the
cursor), so enqueue returns them and writes nothing.
"""

from __future__ import annotations

from typing import Any

from ..jobs import Job
from ..schedules import MAX_SCHEDULES, Schedule, ScheduleSpec, first_run, plan, tick_id
from ..storage import EnqueueSpec
from . import leases, schedule_records


def put(batch: leases.Batch, now: float, spec: ScheduleSpec) -> Schedule:
    """Define ``spec``: the same definition again changes nothing (its cursor stays); a new one starts afresh."""
    schedules = batch.state.schedules
    old = schedules.get(spec.name)
    if old is not None and old.spec.same_definition(spec):
        return old
    if old is None and len(schedules) >= MAX_SCHEDULES:
        raise ValueError(f"a queue holds at most {MAX_SCHEDULES:,} schedules; remove one first")
    sched = first_run(spec, now)
    batch.add(schedule_records.schedule(sched, now))
    return sched


def remove(batch: leases.Batch, now: float, name: str) -> bool:
    """Remove the schedule ``name``; False if there is none (nothing written)."""
    if name not in batch.state.schedules:
        return False
    batch.add(schedule_records.unschedule(name, now))
    return True


def fire(batch: leases.Batch, now: float, max_attempts: int, job_of: Any) -> list[Job]:
    """Enqueue every due tick (by each schedule's catch_up rule); returns the jobs this call added."""
    state = batch.state
    added: list[Job] = []
    for sched in sorted(state.schedules.values(), key=lambda s: s.name):
        if sched.next_run > now:
            continue
        ticks = plan(sched, now)
        spec = sched.spec
        specs = [
            EnqueueSpec(spec.payload, spec.payload_json, spec.priority, 0.0, max_attempts, tick_id(spec.name, due),
                        spec.kind, None)  # fmt: skip
            for due in ticks.dues
        ]
        fresh = [s for s in specs if s.job_id is not None and s.job_id not in state]  # the rest were enqueued before a crash cut the TICK
        added.extend(leases.enqueue(batch, now, fresh, job_of))
        batch.add(schedule_records.tick(spec.name, now, ticks.next_run))
    return added


def listed(schedules: dict[str, Schedule]) -> list[Schedule]:
    """Every schedule, by name."""
    return sorted(schedules.values(), key=lambda s: s.name)


def any_due(schedules: dict[str, Schedule], now: float) -> bool:
    return any(sched.next_run <= now for sched in schedules.values())
