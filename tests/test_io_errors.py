"""I/O errors and full disks: EIO and ENOSPC on the N-th write, fsync, rename and folder fsync.

Owns: the fault sweep over a fixed workload (every N, once and persistent),
the fsync-poisoning check, short writes, and the real-filesystem checks
(a tiny tmpfs for a real ENOSPC, a read-only remount for EROFS; root only).
Imports: the standard library, nobroker's public API and maintenance,
tests.simdisk and tests.support.

Pass, for every injected fault:
  * the failing call raises StorageError or CompactionError, and its
    message names the failure ("Input/output error", "No space left ...");
  * after a failed fsync of the log the same Queue refuses every write
    (the kernel may have dropped the pages; a retried fsync would lie);
  * nothing was reported done that is not durable: after a power cut that
    keeps only durable bytes, the queue holds exactly the state after the
    last acknowledged operation (or, for a failed operation after it, the
    state with that operation applied: a failed call is "unknown", never
    "half done"; or, for leases no later fsync covered, the state before
    them: a lease becomes durable with the next fsync of the log);
  * after the fault clears, reopening (without a power cut) gives the same;
  * no torn record is ever left in the middle of the log.
"""

from __future__ import annotations

import errno
import os
import re
import random
import shutil
import subprocess
import tempfile
import unittest
from collections import Counter
from collections.abc import Callable
from typing import Any

from nobroker import BackoffPolicy, CompactionError, CorruptLogError, NobrokerError, NotLeasedError, Queue, StorageError
from nobroker.filestore.admin import repair, verify
from tests.simdisk import FAULTABLE, Fault, SimDisk, fresh_queue_path
from tests.support import LONG, FakeClock, file_bytes

TOTALS: Counter[str] = Counter()
ERRNOS = (errno.EIO, errno.ENOSPC)
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


class RetryingDisk(SimDisk):
    """Stands in for a core that retries a failed fsync (the fsync-gate mistake): the retry "succeeds"."""

    def fsync(self, fd: int) -> None:
        try:
            super().fsync(fd)
        except OSError:
            super().fsync(fd)


class IOErrors(unittest.TestCase):
    def counts(self) -> dict[str, int]:
        run = FaultRun(self, None)
        run.run()
        self.assertEqual(run.errors, [])
        return dict(run.disk.fault_counts)

    def test_every_nth_call_failing_once_and_persistently(self) -> None:
        counts = self.counts()
        for op in FAULTABLE:
            self.assertGreater(counts[op], 0, f"the workload never calls {op}")
        runs = 0
        for op in FAULTABLE:
            for err in ERRNOS:
                for persistent in (False, True):
                    for nth in range(1, counts[op] + 1):
                        with self.subTest(op=op, errno=errno.errorcode[err], persistent=persistent, nth=nth):
                            FaultRun(self, Fault(op, nth, err, persistent)).run()
                            runs += 1
        TOTALS["fault runs"] += runs
        print(f"\nI/O errors: {runs} runs, {TOTALS['faults injected']} faults injected ({counts})")

    def test_two_handles_take_turns_under_faults(self) -> None:
        """Two Queue objects (think: two processes) alternate; a fault seen by one must not fool the other."""
        counts = self.counts()
        for op in FAULTABLE:
            for persistent in (False, True):
                for nth in range(1, counts[op] + 1):
                    with self.subTest(op=op, persistent=persistent, nth=nth):
                        FaultRun(self, Fault(op, nth, errno.EIO, persistent), handles=2).run()
                        TOTALS["fault runs"] += 1

    def test_a_failed_switch_to_a_new_generation_is_retried(self) -> None:
        """Found by the two-handle sweep: a handle that failed to follow a flip must not append to the old file."""
        disk = SimDisk()
        path = fresh_queue_path(disk, random.Random(7))
        qa, qb = open_queue(disk, path, FakeClock()), open_queue(disk, path, FakeClock())
        qa.enqueue("x", job_id="x")
        qa.compact()  # qb still holds generation 0
        disk.faults.append(Fault("fsync_dir", disk.fault_counts["fsync_dir"] + 1, errno.EIO))
        with self.assertRaises(StorageError):
            qb.enqueue("y", job_id="y")  # following the flip, the folder fsync fails
        disk.faults.clear()
        qb.enqueue("z", job_id="z")
        self.assertIn("z", [j.id for j in qa.list_jobs()], "the peer does not see an acknowledged enqueue")
        qa.close()
        qb.close()
        with open_queue(disk.power_cut("drop"), path, FakeClock()) as reopened:
            self.assertIn("z", [j.id for j in reopened.list_jobs()], "an acknowledged enqueue was lost")

    def test_the_fault_sweep_has_teeth(self) -> None:
        """A queue that retries a failed fsync and carries on must be caught by the sweep."""
        caught = 0
        for nth in range(1, self.counts()["fsync"] + 1):
            try:
                FaultRun(self, Fault("fsync", nth, errno.EIO), disk=RetryingDisk()).run()
            except Exception:  # noqa: BLE001 - a failed check or a queue that no longer opens: caught
                caught += 1
        self.assertGreater(caught, 0, "retrying failed fsyncs went unnoticed")

    def test_every_nth_read_failing(self) -> None:
        """EIO on a read (opening, catching up, reading a payload back) is a StorageError too, never a bare OSError."""
        reads = self.counts()["read"]
        self.assertGreater(reads, 20)
        for nth in range(1, reads + 1):
            with self.subTest(op="read", nth=nth):
                FaultRun(self, Fault("read", nth, errno.EIO)).run()
                TOTALS["fault runs"] += 1

    def test_read_errors_while_opening_an_existing_queue(self) -> None:
        run = FaultRun(self, None)
        run.run()
        disk = run.disk
        with open_queue(disk, run.path, run.clock) as q:
            expected = snapshot(q)
        before = dict(disk.fault_counts)
        open_queue(disk, run.path, run.clock).close()
        reads = disk.fault_counts["read"] - before["read"]
        self.assertGreater(reads, 0)
        for nth in range(1, reads + 1):
            with self.subTest(nth=nth):
                disk.reset_counts()
                disk.faults = [Fault("read", nth, errno.EIO)]
                try:
                    open_queue(disk, run.path, run.clock).close()
                except Exception as exc:  # noqa: BLE001
                    self.assertIsInstance(exc, StorageError, f"read #{nth} failing while opening raised {exc!r}")
                    self.assertIn("Input/output error", str(exc))
                disk.faults = []
                with open_queue(disk, run.path, run.clock) as q:
                    self.assertEqual(snapshot(q), expected)

    def test_short_writes_are_completed(self) -> None:
        expected = None
        for seed in range(20 if not LONG else 200):
            run = FaultRun(self, None, short_writes=seed)
            run.run()
            self.assertEqual(run.errors, [])
            # Same acknowledged history as a disk that never writes short.
            self.assertEqual(run.acknowledged, expected or run.acknowledged)
            expected = run.acknowledged

    def test_a_short_write_then_a_full_disk_is_rolled_back(self) -> None:
        for seed in range(10):
            for nth in range(2, 12):
                run = FaultRun(self, Fault("write", nth, errno.ENOSPC), short_writes=seed)
                run.run()

    def test_failed_fsync_is_never_retried_into_success(self) -> None:
        """The disk dropped the pages: the op fails, the queue refuses, a reopen shows the truth."""
        disk = SimDisk()
        path = fresh_queue_path(disk, random.Random(2))
        q = open_queue(disk, path, FakeClock())
        q.enqueue("kept", job_id="kept")
        disk.faults.append(Fault("fsync", disk.fault_counts["fsync"] + 1, errno.EIO))
        with self.assertRaises(StorageError) as caught:
            q.enqueue("lost", job_id="lost")
        self.assertIn("Input/output error", str(caught.exception))
        with self.assertRaises(StorageError) as refused:
            q.enqueue("refused", job_id="refused")
        self.assertIn("open the queue again", str(refused.exception))
        with self.assertRaises(StorageError):
            q.lease_one()
        cut = disk.power_cut("drop")
        with open_queue(cut, path, FakeClock()) as reopened:
            self.assertEqual(sorted(snapshot(reopened)), ["kept"])
        q.close()


def tearDownModule() -> None:
    print(f"\nI/O errors, whole module: {TOTALS['fault runs']} runs, {TOTALS['faults injected']} faults injected")


def _root_mount(args: list[str]) -> str | None:
    """Run mount/umount; None on success, else why not."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")


class RealFilesystem(unittest.TestCase):
    """A real tiny tmpfs (real ENOSPC) and a read-only remount (real EROFS). Root only."""

    def setUp(self) -> None:
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            self.skipTest("needs root to mount a tmpfs")
        if not shutil.which("mount"):
            self.skipTest("no mount command")
        self.mnt = tempfile.mkdtemp(prefix="nobroker-tmpfs-")
        why = _root_mount(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", self.mnt])
        if why is not None:
            os.rmdir(self.mnt)
            self.skipTest(f"cannot mount a tmpfs here: {why}")
        self.addCleanup(self._unmount)

    def _unmount(self) -> None:
        _root_mount(["umount", "-l", self.mnt])
        shutil.rmtree(self.mnt, ignore_errors=True)

    def test_a_full_disk_raises_and_loses_nothing(self) -> None:
        path = os.path.join(self.mnt, "q")
        acknowledged = []
        blob = "x" * 20_000
        ballast = os.path.join(self.mnt, "ballast")
        with open(ballast, "wb") as f:  # the space a user frees once the disk is full
            f.write(bytes(256 * 1024))
        with Queue(path, auto_compact=None) as q:
            with self.assertRaises(StorageError) as caught:
                for i in range(1_000):
                    acknowledged.append(q.enqueue({"i": i, "blob": blob}).id)
            self.assertEqual(caught.exception.errno, errno.ENOSPC)
            self.assertIn("disk is full", str(caught.exception))
            self.assertGreater(len(acknowledged), 5)
            os.remove(ballast)
            # The failed append was rolled back, so the queue keeps working once space is freed.
            for job_id in acknowledged[:10]:
                job = q.lease_one()
                assert job is not None
            TOTALS["faults injected"] += 1
        with Queue(path, auto_compact=None) as q:
            self.assertEqual({j.id for j in q.list_jobs()}, set(acknowledged))
            self.assertTrue(verify(path).ok)
            self.assertGreater(q.purge(), 0)
            q.compact()
            q.enqueue({"after": "space freed"})

    def remount(self, mode: str) -> None:
        why = _root_mount(["mount", "-o", f"remount,{mode}", self.mnt])
        if why is not None:
            self.skipTest(f"cannot remount {mode}: {why}")
        if mode == "ro":
            self.addCleanup(_root_mount, ["mount", "-o", "remount,rw", self.mnt])

    def fill(self, path: str) -> dict[str, Any]:
        """A queue with a job in every state; returns what reading it shows."""
        with Queue(path, auto_compact=None) as q:
            q.enqueue("kept", job_id="kept")
            q.enqueue_many(["a", "b", "c"])
            done, dead, leased = q.lease(3)
            q.ack(done, result={"ok": True})
            q.nack(dead, error="boom", permanent=True)
            return {"stats": q.stats().to_dict(), "jobs": [j.to_dict() for j in q.list_jobs()], "leased": leased.id}

    def test_a_read_only_filesystem_is_read_and_every_write_refused_in_one_line(self) -> None:
        path = os.path.join(self.mnt, "q")
        before = self.fill(path)
        self.remount("ro")
        with Queue(path) as q:
            self.assertEqual(q.stats().to_dict(), before["stats"])
            self.assertEqual([j.to_dict() for j in q.list_jobs()], before["jobs"])
            self.assertEqual(q.get("kept").payload, "kept")
            self.assertEqual((len(q), len(q.dlq())), (4, 1))
            self.assertIsInstance(q.wait_for_jobs(0.01), bool)  # polls: no pipe can be made there
            writes: dict[str, Callable[[], Any]] = {
                "enqueue": lambda: q.enqueue("more"), "lease": lambda: q.lease(1),
                "ack": lambda: q.ack(before["leased"]), "nack": lambda: q.nack(before["leased"]),
                "extend": lambda: q.extend(before["leased"], 5), "set_stage": lambda: q.set_stage(before["leased"], "x"),
                "requeue_dead": q.requeue_dead, "purge": q.purge, "compact": q.compact,
            }  # fmt: skip
            for name, write in writes.items():
                with self.subTest(write=name):
                    with self.assertRaises(StorageError) as caught:
                        write()
                    message = str(caught.exception)
                    self.assertEqual(caught.exception.errno, errno.EROFS)
                    self.assertIn("read-only", message)
                    self.assertNotIn("\n", message)
            self.assertEqual([j.to_dict() for j in q.list_jobs()], before["jobs"], "a refused write changed something")
        report = verify(path)
        self.assertTrue(report.ok, report.problems)
        self.assertEqual(report.jobs, 4)
        self.remount("rw")
        with Queue(path) as q:
            self.assertEqual([j.to_dict() for j in q.list_jobs()], before["jobs"])
            q.enqueue("writable again")

    def test_the_cli_reads_a_read_only_queue(self) -> None:
        from tests.clisupport import run_main

        path = os.path.join(self.mnt, "q")
        before = self.fill(path)
        self.remount("ro")
        stats = run_main(["--dir", path, "--json", "stats"])
        self.assertEqual(stats.code, 0, stats.err)
        self.assertEqual(stats.json(), before["stats"])
        listing = run_main(["--dir", path, "--json", "list"])
        self.assertEqual(listing.code, 0, listing.err)
        self.assertEqual(len(listing.json()), 4)  # type: ignore[arg-type]
        got = run_main(["--dir", path, "--json", "get", "kept"])
        self.assertEqual(got.code, 0, got.err)
        self.assertEqual(got.json()["payload"], "kept")  # type: ignore[index]
        refused = run_main(["--dir", path, "enqueue", "more"])
        self.assertEqual(refused.code, 1)
        self.assertEqual(len(refused.err.strip().splitlines()), 1, refused.err)
        self.assertIn("read-only", refused.err)

    def test_a_torn_tail_on_a_read_only_filesystem_is_read_around_not_cut(self) -> None:
        path = os.path.join(self.mnt, "q")
        self.fill(path)
        log = os.path.join(path, "default.000000.log")
        with open(log, "ab") as f:
            f.write(b"\x05\x00\x00")
        size = os.path.getsize(log)
        self.remount("ro")
        with Queue(path) as q:
            self.assertEqual(len(q), 4)
            self.assertEqual(q.recovery.torn_bytes, 0, "a reader cannot cut, and says it cut nothing")
        self.assertEqual(os.path.getsize(log), size)

    def test_without_a_lock_file_it_reads_and_says_the_view_may_be_stale(self) -> None:
        path = os.path.join(self.mnt, "q")
        before = self.fill(path)
        os.unlink(os.path.join(path, "default.lock"))
        self.remount("ro")
        with self.assertLogs("nobroker", "WARNING") as logs, Queue(path) as q:
            self.assertEqual(q.stats().to_dict(), before["stats"])
        self.assertIn("stale", " ".join(logs.output))
        with self.assertRaises(StorageError) as caught:
            Queue(path, "missing")
        self.assertIn("no queue named 'missing'", str(caught.exception))

    def test_a_read_only_bind_mount_follows_a_writer_on_the_other_side(self) -> None:
        view = tempfile.mkdtemp(prefix="nobroker-ro-view-")
        self.addCleanup(os.rmdir, view)
        for args in (["mount", "--bind", self.mnt, view], ["mount", "-o", "remount,bind,ro", view]):
            why = _root_mount(args)
            if why is not None:
                self.skipTest(f"cannot make a read-only bind mount: {why}")
        self.addCleanup(_root_mount, ["umount", "-l", view])
        path = os.path.join(self.mnt, "q")
        self.fill(path)
        with Queue(path) as writer, Queue(os.path.join(view, "q")) as reader:
            self.assertEqual(len(reader), 4)
            writer.enqueue("seen through the view", job_id="new")
            self.assertEqual(reader.get("new").payload, "seen through the view")
            writer.compact()  # the reader follows the new generation too
            self.assertEqual(len(reader), 4)
            with self.assertRaises(StorageError):
                reader.enqueue("not here")


class InterruptedDecision(unittest.TestCase):
    def test_an_interrupt_after_a_decision_took_records_leaves_memory_no_further_than_the_disk(self) -> None:
        """Batch.add applies a record in memory at once; a KeyboardInterrupt before the write must not keep it."""
        from unittest import mock

        from nobroker.filestore import leases

        real = leases.enqueue

        def then_interrupted(*args: object, **kwargs: object) -> object:
            real(*args, **kwargs)  # type: ignore[arg-type]
            raise KeyboardInterrupt

        with tempfile.TemporaryDirectory() as folder, Queue(os.path.join(folder, "q")) as q:
            q.enqueue("written", job_id="written")
            with mock.patch.object(leases, "enqueue", then_interrupted):
                with self.assertRaises(KeyboardInterrupt):
                    q.enqueue("never written", job_id="ghost")
            self.assertEqual([job.id for job in q.list_jobs()], ["written"], "memory kept a record never written")
            self.assertEqual(len(q), 1)
            with Queue(os.path.join(folder, "q")) as other:
                self.assertEqual(len(other), 1)


class PayloadReadFailure(unittest.TestCase):
    """A decision reads a job's payload before it adds a record: a failed read writes and changes nothing."""

    def _failing_reads(self) -> Any:
        from unittest import mock

        from nobroker.filestore.log import LogFile

        def fail(self: object, offset: int, job_id: str) -> dict[str, Any]:
            raise StorageError(f"reading job {job_id}: [Errno 5] Input/output error (injected)")

        return mock.patch.object(LogFile, "read_job_body", fail)

    def _sizes(self, folder: str) -> dict[str, bytes]:
        """Every log's bytes (a write into a version 2 file's room changes no size)."""
        return {name: file_bytes(os.path.join(folder, name)) for name in sorted(os.listdir(folder)) if name.endswith(".log")}

    def _check(self, name: str, setup: Callable[[Queue], Any], call: Callable[[Queue, Any], Any]) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "q")
            with Queue(path, visibility_timeout=60) as q:
                held = setup(q)
                before = [job.to_dict() for job in q.list_jobs()]
                sizes = self._sizes(path)
                with self._failing_reads(), self.assertRaises(StorageError, msg=name):
                    call(q, held)
                self.assertEqual(self._sizes(path), sizes, f"{name}: a failed payload read still wrote a record")
                self.assertEqual([job.to_dict() for job in q.list_jobs()], before, f"{name}: memory changed")
                if name == "lease":  # the job it popped is runnable again, in this process
                    self.assertEqual(q.lease_one().id, "a")  # type: ignore[union-attr]
            with Queue(path) as again:
                self.assertEqual(len(again.list_jobs()), len(before), name)

    def test_every_decision_that_reads_a_payload(self) -> None:
        def leased(q: Queue) -> Any:
            q.enqueue({"n": 1}, job_id="a")
            return q.lease_one()

        def ready(q: Queue) -> Any:
            q.enqueue({"n": 1}, job_id="a")

        def delayed(q: Queue) -> Any:
            q.enqueue({"n": 1}, job_id="a", delay=3600)

        cases: list[tuple[str, Callable[[Queue], Any], Callable[[Queue, Any], Any]]] = [
            ("lease", ready, lambda q, job: q.lease_one()),
            ("extend", leased, lambda q, job: q.extend(job, 30)),
            ("extend_many", leased, lambda q, job: q.extend_many([job], 30)),
            ("set_stage", leased, lambda q, job: q.set_stage(job, "half")),
            ("nack", leased, lambda q, job: q.nack(job, error="boom")),
            ("snooze", leased, lambda q, job: q.snooze(job, 5)),
            ("cancel a leased job", leased, lambda q, job: q.cancel(job)),
            ("cancel a ready job", ready, lambda q, job: q.cancel("a")),
            ("run_now", delayed, lambda q, job: q.run_now("a")),
            ("enqueue_many naming a held job", ready, lambda q, job: q.enqueue_many([{"n": 2}, {"n": 3}], job_ids=["b", "a"])),
        ]
        for name, setup, call in cases:
            with self.subTest(name):
                self._check(name, setup, call)


class PeersOfARollBack(unittest.TestCase):
    """A writer whose fsync failed takes its records back out; a peer that read them must start over.

    The peer read the records between the writer's append and its failed
    fsync. Once the writer cut them, a third process appends over the place
    they held: the peer must not read on from where they ended (the middle
    of someone else's record), or it sees damage that is not there, or cuts
    an acknowledged record as a "torn tail".
    """

    def _scene(self, folder: str, padding: int) -> tuple[Queue, list[Any]]:
        from nobroker.filestore.fs import RealFileSystem

        class FsyncFailsOnce(RealFileSystem):
            before_failing: Callable[[], Any] | None = None

            def fsync(self, fd: int) -> None:
                hook, FsyncFailsOnce.before_failing = FsyncFailsOnce.before_failing, None
                if hook is None:
                    return super().fsync(fd)
                hook()
                raise OSError(errno.EIO, "Input/output error (injected)")

        writer = Queue(folder, filesystem=FsyncFailsOnce(), auto_compact=None)
        peer, third = Queue(folder, auto_compact=None), Queue(folder, auto_compact=None)
        self.addCleanup(lambda: [q.close() for q in (writer, peer, third)])
        writer.enqueue({"first": True})
        FsyncFailsOnce.before_failing = peer.stats  # the peer reads the records before the fsync fails
        with self.assertRaises(StorageError):
            writer.enqueue_many([{"taken back": i, "pad": "x" * 50} for i in range(3)])
        acknowledged = [third.enqueue({"third": i, "pad": "y" * padding}) for i in range(1 if padding > 500 else 6)]
        return peer, acknowledged

    def test_a_peer_that_read_the_records_taken_back_never_reads_on_from_their_end(self) -> None:
        # One long record over the place the peer had read to (the peer would cut it as a torn tail),
        # and many short ones (the peer would see damage with valid records after it).
        for padding in (1000, 50):
            with self.subTest(padding=padding), tempfile.TemporaryDirectory() as folder:
                peer, acknowledged = self._scene(folder, padding)
                mine = peer.enqueue({"peer": True})
                self.assertEqual(len(peer), 2 + len(acknowledged))
                with Queue(folder) as again:
                    held = {job.id: job.payload for job in again.list_jobs()}
                    self.assertEqual(len(held), 2 + len(acknowledged))
                    for job in [mine, *acknowledged]:
                        self.assertEqual(held.get(job.id), job.payload, "an acknowledged job is gone")


if __name__ == "__main__":
    unittest.main()
