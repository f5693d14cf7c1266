"""The power-loss sweep: seeded workloads on a simulated disk, cut at every mutating call, each state checked.

Owns: the seeded crash workloads and the per-cut checks (``Sweep``,
``Violations``, ``ProcessKilled``, the sweep sizes SEEDS, OPS_PER_WORKLOAD
and STATES_PER_CALL, larger with ``--long``, and the TOTALS they count).
tests/test_power_loss.py runs them; tests/test_fsync_teeth.py runs them
again with each fsync site switched off: they must fail.
Imports: the standard library, nobroker's public API, tests.simdisk and
tests.support.

How one sweep works: a seeded workload (enqueue, enqueue_many, lease, ack,
nack, extend, extend_many, set_stage, cancel, snooze, pause and resume, run_now, delete,
compact, purge, requeue_dead, limits, clock ticks) runs on
a SimDisk. Before every mutating call (write, truncate, fsync, rename,
unlink, folder fsync, mkdir, create) the hook builds several power-cut
disks (modes drop, prefix, garbage, reorder), opens a fresh Queue on each
and records the jobs it finds. When the operation in flight returns, each
recovered state is checked against the states before and after it:

  * recovery raised nothing,
  * no acknowledged enqueue is lost (a job held before and after the
    operation is held after the cut),
  * no acked job came back (acked before the operation → done or gone),
  * no job that was never enqueued appears (payloads carry a unique tag),
  * every job is exactly as it was before or after the operation (or half
    way through a lease reclaim written in the same batch), or as it was
    before a lease that no fsync has covered yet (a lease becomes durable
    with the next fsync of the log, its ack's at the latest).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from nobroker import JobNotFoundError, JobStateError, NotLeasedError, Queue
from tests.simdisk import POWER_CUT_MODES, SimDisk, SiteSwitch, fresh_queue_path
from tests.support import LONG, FakeClock

#: Workloads (seeds) in the main sweep, operations per workload, cut states per mutating call.
SEEDS = 200 if LONG else 30
OPS_PER_WORKLOAD = 80 if LONG else 50
STATES_PER_CALL = 16 if LONG else 8
#: Totals across the module, printed at the end (the closing note quotes them).
TOTALS: Counter[str] = Counter()


@dataclass
class Violations:
    lost_enqueues: list[str] = field(default_factory=list)
    acked_back: list[str] = field(default_factory=list)
    never_enqueued: list[str] = field(default_factory=list)
    recovery_exceptions: list[str] = field(default_factory=list)
    inexact: list[str] = field(default_factory=list)

    def total(self) -> int:
        return sum(len(v) for v in vars(self).values())

    def summary(self) -> str:
        parts = [f"{k}={len(v)}" for k, v in vars(self).items()]
        first = next((v[0] for v in vars(self).values() if v), "")
        return ", ".join(parts) + (f"; first: {first}" if first else "")


class ProcessKilled(BaseException):
    """The process running the queue died at this disk call (SIGKILL): no cleanup, no power cut."""


def snapshot(q: Queue) -> dict[str, dict[str, Any]]:
    return {j.id: j.to_dict() for j in q.list_jobs()}


def schedule_view(q: Queue) -> dict[str, dict[str, Any]]:
    """Every schedule with its cursor (periodic jobs: SCHEDULE, UNSCHEDULE and TICK records), every limit
    (``limit:<kind>``: LIMIT and UNLIMIT records), and the pauses, each checked as the schedules are.

    The paused kinds (PAUSE and RESUME records) are checked as one more
    schedule would be: as before the operation or after it, never lost.
    """
    view = {s.name: s.to_dict() for s in q.schedules()}
    view.update({f"limit:{lim.kind}": lim.to_dict() for lim in q.limits()})
    paused = q.paused()
    if paused:  # absent while nothing is paused, as a schedule never defined is
        view["(paused)"] = {"kinds": paused}
    return view


#: How much sooner a written reclaim may make a job ready than a read showed: the
#: workload's backoff (the default) after its one retriable attempt of two is 1 s, half jittered.
RECLAIM_JITTER_SPAN = 0.5


def reclaim_intermediate(before: dict[str, Any] | None, got: dict[str, Any], now: float) -> bool:
    """Is ``got`` the job ``before`` after only a reclaim of its expired lease (same batch, cut short)?"""
    if before is not None and before["state"] == "ready" and got["state"] == "ready":
        # A read shows an expired lease as its reclaim with the backoff before jitter;
        # the reclaim written later draws the jitter: the same job, ready sooner.
        others = [k for k in before if k != "available_at"]
        sooner = before["available_at"] - got["available_at"]
        return all(got[k] == before[k] for k in others) and 0 <= sooner <= RECLAIM_JITTER_SPAN
    if before is None or before["state"] != "leased" or before["lease_deadline"] > now:
        return False
    if got["state"] not in ("ready", "dead", "cancelled") or got["lease_deadline"] is not None or got["lease_token"] is not None:
        return False
    same = ("id", "payload", "priority", "attempts", "max_attempts", "enqueued_at", "seq", "kind", "dedupe_key")
    return all(got[k] == before[k] for k in same)


class Sweep:
    """One seeded workload, cut at every mutating call."""

    def __init__(self, seed: int, *, states_per_call: int = STATES_PER_CALL, switch: SiteSwitch | None = None,
                 stop_at_first: bool = False, record_sites: bool = False, handles: int = 1,
                 kill_rate: float = 0.0) -> None:  # fmt: skip
        self.handles = handles
        self.kill_rate = kill_rate
        self.kill_rng = random.Random(seed * 31 + 7)
        self.process_kills = 0
        self.kills_paused = False
        # After a process dies, the next one sees its unsynced bytes: until an fsync covers them, each
        # job may still fall back to its state before any of the dead processes' calls since the last fsync.
        self.unsynced_fallbacks: list[dict[str, dict[str, Any]]] = []
        self.seed = seed
        self.rng = random.Random(seed)
        self.cut_rng = random.Random(seed * 7919 + 1)
        self.states_per_call = states_per_call
        self.disk = SimDisk()
        self.disk.record_sites = record_sites
        if switch is not None:
            self.disk.switches.append(switch)
        self.path = fresh_queue_path(self.disk, self.rng)
        self.clock = FakeClock()
        self.stop_at_first = stop_at_first
        self.violations = Violations()
        self.states_checked = 0
        self.calls_cut = 0
        # What the workload knows: acknowledged facts, and the operation in flight.
        self.acked_enqueue: dict[str, Any] = {}  # id -> payload
        self.acked_done: set[str] = set()
        self.invoked_tags: dict[str, Any] = {}  # tag -> payload of every enqueue ever invoked
        self.before: dict[str, dict[str, Any]] = {}
        self.pending_cuts: list[tuple[str, dict[str, dict[str, Any]] | None]] = []
        self.schedule_cuts: list[tuple[str, dict[str, dict[str, Any]]]] = []
        self.counter_cuts: list[tuple[str, dict[str, dict[str, int]]]] = []
        self.counters_before: dict[str, dict[str, int]] = {}
        self.schedules_before: dict[str, dict[str, Any]] = {}
        self.schedule_fallbacks: list[dict[str, dict[str, Any]]] = []  # as unsynced_fallbacks, for the schedules
        self.tag = 0

    # ---------------------------------------------------------------- cutting
    def on_mutation(self, disk: SimDisk, op: str) -> None:
        if self.stop_at_first and self.violations.total():
            return
        self.calls_cut += 1
        seen: set[tuple[tuple[str, bytes], ...]] = set()
        for i in range(self.states_per_call):
            mode = POWER_CUT_MODES[i % len(POWER_CUT_MODES)]
            cut = disk.power_cut(mode, self.cut_rng)
            key = tuple(sorted(cut.files(self.path).items())) if cut.exists(self.path) else ()
            if key in seen:
                continue
            seen.add(key)
            self.states_checked += 1
            try:
                q = Queue(self.path, filesystem=cut, clock=self.clock, auto_compact=None)
                try:
                    state = snapshot(q)
                    scheds = schedule_view(q)
                    counted = q.counters()
                    # A recovered queue must also take new work.
                    q.enqueue({"tag": "after-recovery"})
                finally:
                    q.close()
            except Exception as exc:  # noqa: BLE001 - any exception in recovery is the failure
                self.violations.recovery_exceptions.append(f"seed {self.seed}, {mode} cut before {op}: {type(exc).__name__}: {exc}")
                continue
            self.pending_cuts.append((f"seed {self.seed}, {mode} cut before {op}", state))
            self.schedule_cuts.append((f"seed {self.seed}, {mode} cut before {op}", scheds))
            self.counter_cuts.append((f"seed {self.seed}, {mode} cut before {op}", counted))
        if self.kill_rate and not self.kills_paused and self.kill_rng.random() < self.kill_rate:
            # The process dies here; the disk (and its page cache) lives on.
            self.process_kills += 1
            raise ProcessKilled(op)

    def settle(
        self, what: str, after: dict[str, dict[str, Any]], inflight_tags: set[str],
        schedules_after: dict[str, dict[str, Any]] | None = None, counters_after: dict[str, dict[str, int]] | None = None,
    ) -> None:  # fmt: skip
        """The operation ``what`` returned: check every state cut while it ran."""
        now = self.clock()
        self.settle_counters(what, counters_after)
        self.settle_schedules(what, self.schedules_before if schedules_after is None else schedules_after)
        for where, state in self.pending_cuts:
            assert state is not None
            where = f"{where} during {what}"
            for job_id, got in state.items():
                tag = got["payload"].get("tag") if isinstance(got["payload"], dict) else None
                if tag not in self.invoked_tags or got["payload"] != self.invoked_tags[tag]:
                    self.violations.never_enqueued.append(f"{where}: job {job_id} with payload {got['payload']!r}")
                    continue
                if job_id in self.acked_enqueue and got["payload"] != self.acked_enqueue[job_id]:
                    self.violations.never_enqueued.append(f"{where}: job {job_id} has another job's payload")
                if job_id in self.acked_done and got["state"] != "done":
                    self.violations.acked_back.append(f"{where}: acked job {job_id} is {got['state']}")
                b, a = self.before.get(job_id), after.get(job_id)
                fallbacks = [f.get(job_id) for f in self.unsynced_fallbacks]
                if (
                    got != b
                    and got != a
                    and got not in fallbacks
                    and not any(reclaim_intermediate(x, got, now) for x in [b, *fallbacks])
                ):
                    self.violations.inexact.append(f"{where}: job {job_id} is {got}, before {b}, after {a}")
            for job_id in self.before:
                if job_id in after and job_id not in state and job_id in self.acked_enqueue:
                    self.violations.lost_enqueues.append(f"{where}: job {job_id} is gone")
            for job_id, a in after.items():
                if job_id not in self.before and job_id not in state and job_id in self.acked_enqueue:
                    if a["payload"].get("tag") not in inflight_tags:
                        self.violations.lost_enqueues.append(f"{where}: job {job_id} is gone")
        self.pending_cuts.clear()
        self.before = after

    def settle_counters(self, what: str, after: dict[str, dict[str, int]] | None) -> None:
        """A cut never counts what did not happen: each counter at most what the queue counts after the operation.

        Counters only grow, so a cut (which can only lose records) shows each at
        most its value after the operation; a compaction that counted its live
        jobs again, or lost the carried counts, shows as more, or as less than before.
        """
        for where, cut in self.counter_cuts if after is not None else ():
            for kind, row in cut.items():
                for name, value in row.items():
                    if value > after.get(kind, {}).get(name, 0):  # type: ignore[union-attr]
                        self.violations.inexact.append(
                            f"{where} during {what}: counter {name} of kind {kind} is {value}, after {after.get(kind)}"  # type: ignore[union-attr]
                        )  # fmt: skip
            if what == "compact" and not self.unsynced_fallbacks and cut not in (self.counters_before, after):
                # Compaction counts nothing (its reclaim of expired leases aside): exactly before or after.
                self.violations.inexact.append(f"{where} during {what}: counters {cut}, before {self.counters_before}, after {after}")
        self.counter_cuts.clear()
        if after is not None:
            self.counters_before = after

    def settle_schedules(self, what: str, after: dict[str, dict[str, Any]]) -> None:
        """Each schedule a cut shows is as it was before the operation or after it; none acknowledged is lost."""
        before = self.schedules_before
        for where, cut in self.schedule_cuts:
            where = f"{where} during {what}"
            for name, got in cut.items():
                fallbacks = [f.get(name) for f in self.schedule_fallbacks]
                if got != before.get(name) and got != after.get(name) and got not in fallbacks:
                    self.violations.inexact.append(f"{where}: schedule {name} is {got}, before {before.get(name)}, after {after.get(name)}")
            for name in before:
                if name in after and name not in cut and not any(name not in f for f in self.schedule_fallbacks):
                    self.violations.lost_enqueues.append(f"{where}: schedule {name} is gone")
        self.schedule_cuts.clear()
        self.schedules_before = after

    # ---------------------------------------------------------------- the workload
    def payload(self) -> dict[str, Any]:
        self.tag += 1
        tag = f"s{self.seed}-{self.tag}"
        value = {"tag": tag, "n": self.rng.randrange(10**6), "pad": "p" * self.rng.choice((0, 3, 40, 300))}
        self.invoked_tags[tag] = value
        return value

    def open_queue(self) -> Queue:
        while True:
            try:
                return Queue(self.path, filesystem=self.disk, clock=self.clock, visibility_timeout=20, max_attempts=2,
                             auto_compact=None)  # fmt: skip
            except ProcessKilled:
                continue  # killed while opening: the next process tries again

    def run(self, ops: int = OPS_PER_WORKLOAD) -> Violations:
        disk, rng = self.disk, self.rng
        disk.before_mutation = self.on_mutation
        queues = []
        for _ in range(self.handles):
            queues.append(self.open_queue())
            self.settle("opening the queue", snapshot(queues[-1]), set())
        q = queues[0]
        held: dict[str, Any] = {}
        choices = (
            ["enqueue"] * 6 + ["enqueue_many"] * 2 + ["lease"] * 5 + ["ack"] * 4 + ["nack"] * 2 + ["extend", "set_stage"]
            + ["extend_many"] + ["compact"] * 2 + ["requeue_dead", "tick", "tick", "purge", "cancel", "cancel"] + ["schedule", "enqueue_due", "enqueue_due"]
            + ["limit"]
            + ["snooze", "pause", "run_now", "delete"]
        )  # fmt: skip
        for _ in range(ops):
            op = rng.choice(choices)
            if op == "purge" and rng.random() < 0.6:
                op = "tick"
            if len(queues) > 1:
                q = rng.choice(queues)  # another handle (think: another process) on the same queue
            inflight: set[str] = set()
            newly_done = None
            killed = False
            try:
                if op == "enqueue":
                    payload = self.payload()
                    inflight.add(payload["tag"])
                    job_id = f"j{self.tag}" if rng.random() < 0.3 else None
                    job = q.enqueue(payload, priority=rng.choice((0, 1)), job_id=job_id,
                                    delay=rng.choice((0.0, 0.0, 30.0)), timeout=rng.choice((None, None, 2.5)),
                                    group=rng.choice((None, None, "acme", "bolt")))  # fmt: skip
                    self.acked_enqueue[job.id] = job.payload
                elif op == "enqueue_many":
                    payloads = [self.payload() for _ in range(rng.randint(2, 5))]
                    inflight.update(p["tag"] for p in payloads)
                    for job in q.enqueue_many(payloads, group=rng.choice((None, "acme"))):
                        self.acked_enqueue[job.id] = job.payload
                elif op == "lease":
                    for job in q.lease(rng.randint(1, 3)):
                        held[job.id] = job
                elif op in ("ack", "nack", "extend", "set_stage") and held:
                    job_id = rng.choice(sorted(held))
                    job = held[job_id]
                    if op == "ack":
                        q.ack(job, result={"ok": True} if rng.random() < 0.5 else None)
                        newly_done = job_id
                        del held[job_id]
                    elif op == "nack":
                        q.nack(job, error="boom", permanent=rng.random() < 0.2)
                        del held[job_id]
                    elif op == "extend":
                        held[job_id] = q.extend(job, 40)
                    else:
                        held[job_id] = q.set_stage(job, rng.choice(("a", "b")))
                elif op == "extend_many" and held:
                    job_id = None  # a refusal names one job of many: the others were renewed, and stay held
                    batch = rng.sample(sorted(held), min(len(held), rng.randint(2, 4)))
                    for renewed in q.extend_many([held[j] for j in batch], 40):
                        held[renewed.id] = renewed
                elif op == "cancel":
                    job_id = rng.choice(sorted(held)) if held and rng.random() < 0.6 else None
                    if job_id is not None and rng.random() < 0.5:
                        q.cancel(held.pop(job_id), stopped=True)  # the holder ends the attempt cancelled
                    elif job_id is not None:
                        q.cancel(job_id)  # marked: its later ack or nack is refused (and dropped from held)
                    elif self.acked_enqueue:
                        job_id = rng.choice(sorted(self.acked_enqueue))
                        q.cancel(job_id)
                elif op == "snooze" and held:
                    job_id = rng.choice(sorted(held))
                    q.snooze(held.pop(job_id), rng.choice((0.0, 20.0)))
                elif op == "pause":
                    kind = rng.choice((None, "default", "other"))
                    (q.resume if rng.random() < 0.6 else q.pause)(kind)
                elif op in ("run_now", "delete") and self.acked_enqueue:
                    job_id = rng.choice(sorted(self.acked_enqueue))
                    if op == "run_now":
                        q.run_now(job_id)
                    else:
                        q.delete(job_id)
                        self.acked_enqueue.pop(job_id, None)
                        self.acked_done.discard(job_id)
                        held.pop(job_id, None)
                elif op == "compact":
                    q.compact()
                elif op == "requeue_dead":
                    q.requeue_dead()
                elif op == "purge":
                    q.purge()
                    held.clear()
                    self.acked_done.clear()
                    self.acked_enqueue.clear()
                elif op == "tick":
                    self.clock.advance(rng.choice((1.0, 5.0, 25.0)))
                elif op == "schedule":
                    name = rng.choice(("s1", "s2"))
                    if rng.random() < 0.2:
                        q.unschedule(name)
                    else:
                        q.schedule(name, self.payload(), every=rng.choice((2.0, 10.0)),
                                   catch_up=rng.choice(("all", "last", "none")))  # fmt: skip
                elif op == "limit":  # limits that never hold a lease back here: what is checked is the records
                    kind = rng.choice(("default", "other"))
                    if rng.random() < 0.3:
                        q.clear_limit(kind)
                    else:
                        q.set_limit(kind, concurrency=rng.choice((500, 1000)), rate=rng.choice((None, 10_000)),
                                    group_concurrency=rng.choice((None, 500)))  # fmt: skip
                elif op == "enqueue_due":
                    inflight.update(s.payload["tag"] for s in q.schedules())
                    for job in q.enqueue_due():
                        self.acked_enqueue[job.id] = job.payload
            except (NotLeasedError, JobNotFoundError, JobStateError):
                held.pop(job_id, None)  # our lease expired: a normal outcome, nothing was changed
            except ProcessKilled:
                # A new process opens the queue where the dead one left the disk.
                killed = True
                self.unsynced_fallbacks.append(dict(self.before))
                self.schedule_fallbacks.append(dict(self.schedules_before))
                index = queues.index(q)
                q = queues[index] = self.open_queue()
                op = f"{op} (process killed, then a new one opened the queue)"
            before_op = self.before
            self.kills_paused = True  # the workload's own look at the queue is not part of the test
            try:
                self.settle(op, snapshot(q), inflight, schedule_view(q), q.counters())
            finally:
                self.kills_paused = False
            if op == "lease":
                # A lease is durable with the next fsync of the log, not before it returns: until
                # then a cut may bring back the jobs as they were before it (ready again).
                self.unsynced_fallbacks.append(dict(before_op))
            if not killed and not any(n.endswith(".log") for n in disk.unsynced_files(self.path)):
                self.unsynced_fallbacks = []  # fsyncs covered every byte the dead processes left
                self.schedule_fallbacks = []
            if newly_done is not None:
                self.acked_done.add(newly_done)
            if self.stop_at_first and self.violations.total():
                break
        disk.before_mutation = None
        for q in queues:
            q.close()
        TOTALS["crash states checked"] += self.states_checked
        TOTALS["mutating calls cut"] += self.calls_cut
        TOTALS["process kills"] += self.process_kills
        return self.violations
