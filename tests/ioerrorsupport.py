"""The I/O fault sweep's workload and its run: one injected fault on a simulated disk, then every check.

Owns: the fixed workload (a step for every writing path: appends, batches,
schedules, limits, leases, compaction, cancel, pause, snooze, purge),
``snapshot`` (every job, schedule and limit, and the pauses),
``open_queue``, FaultRun (the workload under one fault, then the checks
tests/test_io_errors.py lists: the error raised and its message, a queue
that refuses writes after its log's fsync failed, the state after a power
cut and after a reopen, no torn record), and TOTALS, what the sweep counts.
tests/test_io_errors.py and tests/test_fsync_teeth.py run it. Imports: the
standard library, nobroker's public API and filestore.admin, tests.simdisk
and tests.support.
"""

from __future__ import annotations

import errno
import os
import re
import random
import unittest
from collections import Counter
from collections.abc import Callable
from typing import Any

from nobroker import BackoffPolicy, CompactionError, CorruptLogError, NobrokerError, NotLeasedError, Queue, StorageError
from nobroker.filestore.admin import repair, verify
from tests.simdisk import Fault, SimDisk, fresh_queue_path
from tests.support import FakeClock

TOTALS: Counter[str] = Counter()
BACKOFF = BackoffPolicy(jitter=0.0)

Step = tuple[str, Callable[[Queue, dict[str, Any]], Any]]


def _lease(q: Queue, held: dict[str, Any], n: int = 1) -> None:
    for job in q.lease(n):
        held[job.id] = job


def _first(held: dict[str, Any]) -> Any:
    return held[sorted(held)[0]]


def _ack(q: Queue, held: dict[str, Any]) -> None:
    job = _first(held)
    q.ack(job, result={"done": job.id})
    held.pop(job.id)


def _nack(q: Queue, held: dict[str, Any]) -> None:
    job = _first(held)
    q.nack(job, error="retry me", delay=0)
    held.pop(job.id)


def _snooze(q: Queue, held: dict[str, Any]) -> None:
    job = held.pop(_first(held).id)
    try:
        q.snooze(job, 5)
    except NotLeasedError:  # a step that failed on a read after its write (nack dead) finished it already
        pass


def _extend(q: Queue, held: dict[str, Any]) -> None:
    job = _first(held)
    held[job.id] = q.extend(job, 60)


def workload() -> list[Step]:
    """A fixed sequence touching every writing path: appends, batches, compaction, purge."""
    return [
        ("enqueue a", lambda q, h: q.enqueue({"n": "a"}, job_id="a")),
        ("enqueue b", lambda q, h: q.enqueue({"n": "b"}, job_id="b", priority=2)),
        ("enqueue_many c-e", lambda q, h: q.enqueue_many([{"n": x} for x in "cde"], job_ids=list("cde"), group="acme")),
        ("schedule", lambda q, h: q.schedule("beat", {"n": "tick"}, every=1.5, catch_up="all")),
        ("set_limit", lambda q, h: q.set_limit("default", concurrency=10, rate=100, per=3600.0, group_concurrency=5)),
        ("lease 2", lambda q, h: _lease(q, h, 2)),
        ("ack", _ack),
        ("extend", _extend),
        ("nack", _nack),
        ("ticks", lambda q, h: q.enqueue_due()),
        ("compact", lambda q, h: q.compact()),
        ("enqueue f", lambda q, h: q.enqueue({"n": "f" * 500}, job_id="f")),
        ("lease 1", lambda q, h: _lease(q, h, 1)),
        ("set_stage", lambda q, h: q.set_stage(_first(h), "sending")),
        ("ack 2", _ack),
        ("compact 2", lambda q, h: q.compact()),
        ("enqueue g", lambda q, h: q.enqueue({"n": "g"}, job_id="g", delay=10)),
        ("lease 3", lambda q, h: _lease(q, h, 3)),
        ("cancel x", lambda q, h: q.cancel(q.enqueue({"n": "x"}, job_id="x"))),
        ("cancel mark", lambda q, h: q.cancel(_first(h).id)),
        ("cancel stopped", lambda q, h: q.cancel(h.pop(_first(h).id), stopped=True)),
        ("nack dead", lambda q, h: q.nack(_first(h), permanent=True) and h.pop(_first(h).id)),
        ("pause", lambda q, h: q.pause("default")),
        ("snooze", _snooze),
        ("run_now", lambda q, h: q.run_now(q.enqueue({"n": "r"}, job_id="r", delay=60))),
        ("resume", lambda q, h: q.resume("default")),
        ("delete", lambda q, h: q.delete(q.enqueue({"n": "y"}, job_id="y"))),
        ("ticks 2", lambda q, h: q.enqueue_due()),
        ("unschedule", lambda q, h: q.unschedule("beat")),
        ("clear_limit", lambda q, h: q.clear_limit("default")),
        ("requeue", lambda q, h: q.requeue_dead()),
        ("purge", lambda q, h: q.purge()),
        ("enqueue h", lambda q, h: q.enqueue({"n": "h"}, job_id="h")),
    ]


def snapshot(q: Queue) -> dict[str, dict[str, Any]]:
    """Every job, every schedule with its cursor (as ``schedule:<name>``), every limit, and the pauses (``paused``)."""
    state = {j.id: j.to_dict() for j in q.list_jobs()}
    state.update({f"schedule:{s.name}": s.to_dict() for s in q.schedules()})
    state.update({f"limit:{lim.kind}": lim.to_dict() for lim in q.limits()})
    paused = q.paused()
    if paused:
        state["paused"] = {"kinds": paused}
    return state


def open_queue(disk: SimDisk, path: str, clock: FakeClock) -> Queue:
    return Queue(path, filesystem=disk, clock=clock, backoff=BACKOFF, auto_compact=None)


class FaultRun:
    """The workload on a disk with one injected fault; collects what the checks need."""

    def __init__(self, test: unittest.TestCase, fault: Fault | None, short_writes: int | None = None,
                 disk: SimDisk | None = None, handles: int = 1) -> None:  # fmt: skip
        self.test = test
        self.handles = handles
        self.fault = fault
        self.disk = disk or SimDisk()
        self.path = fresh_queue_path(self.disk, random.Random(1))
        self.clock = FakeClock()
        if fault is not None:
            self.disk.faults.append(fault)
        if short_writes is not None:
            self.disk.short_writes = random.Random(short_writes)
        self.errors: list[BaseException] = []
        self.candidates: list[dict[str, dict[str, Any]]] = [{}]
        self.acked_state: dict[str, dict[str, Any]] = {}
        self.acknowledged: list[str] = []

    def label(self) -> str:
        f = self.fault
        return "no fault" if f is None else f"{errno.errorcode[f.errno]} on {f.op} #{f.nth}{' and after' if f.persistent else ''}"

    def check_error(self, exc: BaseException, what: str) -> None:
        self.test.assertIsInstance(exc, (StorageError, CompactionError), f"{self.label()}: {what} raised {exc!r}")
        if self.fault is not None and self.fault.fired:
            self.test.assertIn(os.strerror(self.fault.errno), str(exc), f"{self.label()}: {what}: message {exc}")

    def run(self) -> None:
        clock = self.clock
        queues: list[Queue] = []
        for _ in range(self.handles):
            try:
                queues.append(open_queue(self.disk, self.path, clock))
            except Exception as exc:  # noqa: BLE001 - check_error says which kinds are allowed
                self.check_error(exc, "opening")
                self.errors.append(exc)
        held: dict[str, Any] = {}
        poisoned: set[int] = set()
        for k, (what, step) in enumerate(workload() if queues else []):
            clock.advance(1.0)
            if not held and what in ("ack", "extend", "nack", "set_stage", "ack 2", "nack dead", "cancel mark",
                                     "cancel stopped", "snooze"):
                continue
            index = k % len(queues)  # with two handles (think: two processes) they take turns
            q = queues[index]
            try:
                step(q, held)
            except Exception as exc:  # noqa: BLE001 - check_error says which kinds are allowed
                self.check_error(exc, what)
                if index in poisoned:
                    self.test.assertIn("refuses further writes", str(exc), f"{self.label()}: {what} after a failed fsync")
                self.errors.append(exc)
                if isinstance(exc, StorageError) and re.search(r"fsync of \S+\.log\b", str(exc)):
                    poisoned.add(index)  # the log's own fsync failed: this object must refuse from now on
                try:
                    self.candidates.append(self.snapshot(q))
                except NobrokerError:
                    pass
                continue
            if index in poisoned:
                self.test.fail(f"{self.label()}: {what} succeeded on a queue whose fsync failed")
            self.acknowledged.append(what)
            if what.startswith("lease"):
                # A lease becomes durable with the next fsync of the log, not before it returns.
                self.candidates = [self.snapshot(q), *self.candidates]
            else:
                self.candidates = [self.snapshot(q)]
            self.acked_state = self.candidates[0]
        TOTALS["faults injected"] += self.fault.fired if self.fault else 0
        self.disk.faults = []  # the fault clears
        # Nothing reported done that is not durable: cut the power, keep only durable bytes.
        durable = self.disk.power_cut("drop")
        self.open_after_cut(durable, "a power cut")
        with open_queue(durable, self.path, clock) as after_cut:
            self.check_state(snapshot(after_cut), "after a power cut")
            self.check_log(durable)
        for q in queues:
            q.close()
        reopened = open_queue(self.disk, self.path, clock)
        state = snapshot(reopened)
        self.check_state(state, "after reopening")
        reopened.enqueue({"n": "still works"}, job_id="still-works")
        self.check_log(self.disk)
        # What the reopened queue acknowledged must survive a power cut too, and so must what it
        # served from the log: a failed fsync may have left unsynced bytes under later synced ones.
        later = self.disk.power_cut("drop")
        reopened.close()
        self.open_after_cut(later, "the fault cleared, a reopen, one enqueue and a power cut")
        with open_queue(later, self.path, clock) as again:
            final = snapshot(again)
        self.test.assertIn("still-works", final, f"{self.label()}: an enqueue acknowledged after the reopen was lost")

    def open_after_cut(self, disk: SimDisk, when: str) -> None:
        """The queue must open after ``when``. If it refuses, say whether `repair` gets everything back."""
        try:
            open_queue(disk, self.path, self.clock).close()
            return
        except CorruptLogError as exc:
            refused = str(exc)
        probe = disk.clone()
        repair(self.path, fs=probe)
        with open_queue(probe, self.path, self.clock) as repaired:
            state = snapshot(repaired)
        wanted = set(self.acked_state) | ({"still-works"} if "reopen" in when else set())
        missing = wanted - set(state)
        kept = "everything acknowledged" if not missing else f"NOT everything (missing {sorted(missing)})"
        self.test.fail(f"{self.label()}: after {when} the queue refuses to open ({refused[:160]}); repair gets {kept} back")

    def snapshot(self, q: Queue) -> dict[str, dict[str, Any]]:
        """The queue as this process sees it, read with the fault held back (reads can fail too)."""
        faults, self.disk.faults = self.disk.faults, []
        try:
            return snapshot(q)
        finally:
            self.disk.faults = faults

    def check_state(self, state: dict[str, dict[str, Any]], when: str) -> None:
        if state not in self.candidates:
            expected = self.candidates[0]
            diff = {
                k: (state.get(k, {}).get("state"), expected.get(k, {}).get("state"))
                for k in set(state) | set(expected)
                if state.get(k) != expected.get(k)
            }
            self.test.fail(
                f"{self.label()}: {when} the queue is not the acknowledged state "
                f"(acknowledged: {self.acknowledged[-3:]}, errors: {[str(e)[:100] for e in self.errors]}); "
                f"jobs that differ (found, expected): {diff}"
            )

    def check_log(self, disk: SimDisk) -> None:
        report = verify(self.path, fs=disk)
        self.test.assertTrue(report.ok, f"{self.label()}: verify found {report.problems}")
        self.test.assertEqual(report.torn_bytes, 0, f"{self.label()}: a torn record was left in the log")
