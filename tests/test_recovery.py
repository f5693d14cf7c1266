"""Exact recovery: a log cut at every byte, and a bit flipped in every byte.

A crash can only cut the log at a byte boundary, so recovery that is right
at every cut of a real log is right for any crash that log could suffer.
The log here holds every record type (the schedule and limit records too), and a compaction: both generations
are swept. Expected states are snapshots the live queue reported as each
record was written (full Job dicts), not totals.

Owns: ``snapshot`` and ``LogBuilder`` (the log, with the state after each
record), the truncation sweeps (``TruncationSweep``; ``TruncationSweepVersion2``
and ``TruncationSweepVersion4`` for format versions 2 and 4) and the bit-flip
sweeps (``BitFlipSweep``, ``BitFlipSweepVersion2``, ``BitFlipSweepVersion4``).
What opening leaves behind is tests/test_open_leftovers.py's, what repair
reports tests/test_repair_report.py's. Imports: the standard library,
nobroker and tests.support.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest

from nobroker import CorruptLogError, Queue
from nobroker.filestore.framing import FRAME_SIZE, HEADER_SIZE
from nobroker.jobs import BackoffPolicy
from nobroker.filestore.layout import log_path
from tests.support import FakeClock, TempDirTestCase, slow


def snapshot(q: Queue) -> dict[str, dict]:
    """Every job, every schedule with its cursor (as ``schedule:<name>``), every limit and when its rate frees,
    and the pauses (``paused``).

    The reader's clock is the writer's last, so "when" is an absolute time
    (now + seconds_to_slot), the same whenever it is asked (the rate here is
    one an hour: no token comes back while the test runs).
    """
    state = {job.id: job.to_dict() for job in q.list_jobs()}
    state.update({f"schedule:{s.name}": s.to_dict() for s in q.schedules()})
    now = q.storage.clock()  # type: ignore[attr-defined]
    for lim in q.limits():
        slot = q.seconds_to_slot([lim.kind])
        at = slot if not slot else round(now + slot, 6)  # None (no wait), 0 (a token now), or when one is due
        state[f"limit:{lim.kind}"] = dict(lim.to_dict(), slot_at=at)
    if q.paused():
        state["paused"] = {"kinds": q.paused()}
    return state


class LogBuilder:
    """Runs single-record operations and remembers (where the records end, state) after each."""

    def __init__(self, directory: str, log_format: int) -> None:
        self.dir = directory
        self.clock = FakeClock()
        # Leases long beside the whole build: the reader, at the last write's time, sees them as they were.
        self.q = Queue(
            directory, clock=self.clock, backoff=BackoffPolicy(base=5, jitter=0), max_attempts=2, visibility_timeout=300,
            log_format=log_format,
        )  # fmt: skip
        self.points: dict[int, list[tuple[int, dict]]] = {}
        self.mark()

    def size(self) -> tuple[int, int]:
        """Where the records of the current generation end (version 2: its room follows), and the generation."""
        storage = self.q.storage
        return storage._offset, storage.generation  # type: ignore[attr-defined]

    def mark(self) -> None:
        size, gen = self.size()
        self.points.setdefault(gen, []).append((size, snapshot(self.q)))

    def reader_clock(self) -> FakeClock:
        """A clock for reopening: the time the log was written, as its snapshots were taken.

        Much later, a read would show the leases as reclaimed (their deadlines passed).
        """
        return FakeClock(self.clock())

    def do(self, fn, *args, **kwargs):
        result = fn(*args, **kwargs)
        self.clock.advance(0.25)
        self.mark()
        return result

    def fire(self) -> None:
        """enqueue_due: one batch of records (each tick's ENQUEUE, then the TICK); a point after each record.

        A cut inside the batch keeps the ticks whose records are whole, with
        the schedule's cursor as it was before: the next look enqueues the
        same ids again, which then exist already.
        """
        from nobroker.filestore.admin import inspect_log

        start, gen = self.size()
        before = self.points[gen][-1][1]
        self.q.enqueue_due()
        after = snapshot(self.q)
        state = dict(before)
        for view in inspect_log(self.dir, "default", generation=gen):
            if view.offset < start or view.type_name == "HEADER":
                continue
            end = view.offset + FRAME_SIZE + view.length
            if view.type_name == "ENQUEUE":
                state[view.body["id"]] = after[view.body["id"]]
                self.points[gen].append((end, dict(state)))
        self.clock.advance(0.25)
        self.mark()

    def build(self) -> None:
        q, do = self.q, self.do
        a = do(q.enqueue, {"name": "a", "text": "caf\u00e9 \u2603"}, priority=5)
        do(q.enqueue, ["b", 2, None, True], job_id="order-42")
        c = do(q.enqueue, "c", delay=1000.0, kind="mail", dedupe_key="user-1")
        d = do(q.enqueue, {"d": 4.5})
        leased = do(q.lease_one)
        assert leased.id == a.id
        do(q.set_stage, leased, "encoding")
        do(q.extend, leased, 60)
        do(q.ack, leased, result={"ok": True})
        lb = do(q.lease_one)
        do(q.nack, lb, error="boom")
        self.clock.advance(10)
        ld = do(q.lease_one)  # d: b is backing off until +5 s... both ready now; b is older
        do(q.nack, ld, error="fatal", permanent=True)
        do(q.requeue_dead)
        do(q.schedule, "beat", {"tick": True}, every=2.0, catch_up="all")
        do(q.schedule, "gone", "x", cron="*/5 * * * *")
        self.clock.advance(5)
        self.fire()  # two ticks of beat, then its TICK record
        do(q.unschedule, "gone")
        e = do(q.enqueue, {"e": "after requeue"})
        x = do(q.enqueue, {"x": "cancelled while ready"}, priority=-1)
        do(q.cancel, x)  # CANCEL (issue 15): ready to cancelled
        do(q.pause, "mail")  # PAUSE
        do(q.pause)
        ls = do(q.lease_one)
        assert ls is None, "the whole queue is paused"
        do(q.resume)  # RESUME
        ls = do(q.lease_one)
        do(q.snooze, ls, 30)  # SNOOZE: ready later, its attempt given back
        do(q.run_now, ls.id)  # RUN_NOW
        y = do(q.enqueue, {"y": "deleted"})
        do(q.delete, y.id)  # DELETE
        do(q.set_limit, "api", rate=1, per=3600.0, burst=1)  # LIMIT (issue 16)
        do(q.set_limit, "spare", concurrency=2)
        do(q.enqueue, {"api": 1}, kind="api")
        la = do(q.lease_one, kinds=["api"])  # a LEASE that spends the rate limit's one token
        do(q.ack, la)
        do(q.clear_limit, "spare")  # UNLIMIT
        do(q.set_limit, "tenant", group_concurrency=1, weights={"vip": 2})  # a LIMIT with the group keys
        do(q.enqueue_many, [{"t": 1}], kind="tenant", group="acme")  # ENQUEUEs with a group (one record per do)
        do(q.enqueue, {"t": 2}, kind="tenant", group="acme")
        do(q.enqueue, {"t": 3}, kind="tenant", group="vip")
        lt = do(q.lease_one, kinds=["tenant"])  # a LEASE that takes a turn
        do(q.ack, lt)
        del c, d, e, x, y, ls
        with open(log_path(self.dir, "default", 0), "rb") as f:
            self.generation_zero = f.read()  # compaction deletes it; the sweep needs it
        do(q.compact)
        f = do(q.enqueue, {"f": "in generation one"})
        lf = do(q.lease_one)
        do(q.ack, lf)
        self.clock.advance(2)
        self.fire()
        lg = do(q.enqueue, {"g": "cancelled while it runs"}, priority=9)
        lg = do(q.lease_one)
        do(q.cancel, lg.id)  # a CANCEL that marks the lease
        do(q.extend, lg, 30)
        do(q.cancel, lg, stopped=True)  # and the one that ends it cancelled
        do(q.resume, "mail")  # a pause carried over by the compaction, lifted in generation one
        do(q.enqueue, {"t": "with a time limit"}, timeout=2.5)  # an ENQUEUE's optional timeout key
        lt = do(q.lease_one, kinds=["tenant"])  # a turn after the compaction's LIMIT carried the rotation
        do(q.nack, lt, error="again", delay=0)
        do(q.enqueue, {"t": 4}, kind="tenant", group="acme")
        do(q.set_limit, "api", rate=1, per=3600.0, burst=2)  # a LIMIT that carries the spent bucket over
        do(q.enqueue, {"g": "tail"})
        del f
        q.close()


def cuts(data: bytes, end: int, step: int) -> list[int]:
    """Every ``step``-th byte up to just past where the records end, then a few in a version 2 file's room."""
    return [*range(0, min(len(data), end + 2 * FRAME_SIZE) + 1, step), *range(end + 2 * FRAME_SIZE + 1, len(data) + 1, ROOM_STEP)]


#: One cut (or flipped bit) in this many bytes of a version 2 file's room: it is only zeros.
ROOM_STEP = 4099


class TruncationSweep(TempDirTestCase):
    """Format version 1 (a file ends where its records do); TruncationSweepVersion2 sweeps version 2."""

    log_format = 1

    def setUp(self) -> None:
        super().setUp()
        self.builder = LogBuilder(self.dir, self.log_format)
        self.builder.build()

    def expected_at(self, gen: int, cut: int) -> dict:
        best = None
        for size, snap in self.builder.points[gen]:
            if size <= cut:
                best = snap
        assert best is not None
        return best

    def sweep(self, gen: int, step: int = 1) -> int:
        if gen == 0:
            data = self.builder.generation_zero
        else:
            with open(log_path(self.dir, "default", gen), "rb") as f:
                data = f.read()
        compacted_end = self.builder.points[gen][0][0]
        checked = 0
        scratch = tempfile.mkdtemp(prefix="nobroker-cut-")
        self.addCleanup(shutil.rmtree, scratch, True)
        end = self.builder.points[gen][-1][0]
        for cut in cuts(data, end, step):
            target = os.path.join(scratch, str(cut))
            os.mkdir(target, 0o700)
            if gen:
                with open(os.path.join(target, "default.current"), "w") as f:
                    f.write(f"{gen}\n")
            with open(log_path(target, "default", gen), "wb") as f:
                f.write(data[:cut])
            if cut < HEADER_SIZE:
                with self.assertRaises(CorruptLogError, msg=f"cut at {cut}"):
                    Queue(target, clock=self.builder.reader_clock())
            elif cut < compacted_end:
                # Inside the block compaction writes before its rename: no crash can
                # expose it, but recovery must still be sound: every job it shows
                # is exactly the job compaction wrote.
                with Queue(target, clock=self.builder.reader_clock()) as q:
                    full = self.builder.points[gen][0][1]
                    for job_id, job in snapshot(q).items():
                        self.assertEqual(job, full[job_id], f"generation {gen} cut at byte {cut}")
            else:
                q = Queue(target, clock=self.builder.reader_clock())
                boundary = max(s for s, _ in self.builder.points[gen] if s <= cut)
                room = not data[boundary:cut].strip(b"\0") and self.log_format >= 2  # only zeros after the records
                try:
                    got = snapshot(q)
                    self.assertEqual(got, self.expected_at(gen, cut), f"generation {gen} cut at byte {cut}")
                    # Version 2 counts a torn tail up to its last byte that is not zero (zeros may be its room).
                    torn = len(data[boundary:cut].rstrip(b"\0")) if self.log_format >= 2 else cut - boundary
                    self.assertEqual(q.recovery.torn_bytes, torn)
                finally:
                    q.close()
                # The cut tail was truncated: the file now ends at a record boundary (or in its room of zeros).
                size = os.path.getsize(log_path(target, "default", gen))
                self.assertEqual(size, cut) if room else self.assertIn(size, {s for s, _ in self.builder.points[gen]})
            shutil.rmtree(target)
            checked += 1
        return checked

    @slow
    def test_every_cut_of_generation_zero(self) -> None:
        checked = self.sweep(0)
        self.assertGreater(checked, 2000)

    @slow
    def test_every_cut_of_the_compacted_generation(self) -> None:
        self.assertGreater(self.sweep(1), 500)

    def test_every_seventh_cut(self) -> None:  # the quick run's taste of the sweep
        self.assertGreater(self.sweep(0, step=7), 250)


class TruncationSweepVersion2(TruncationSweep):
    log_format = 2


class TruncationSweepVersion4(TruncationSweep):
    log_format = 4  # the default: a new job's record leaves out an available_at equal to its enqueued_at


class BitFlipSweep(TempDirTestCase):
    """One flipped bit in every byte: never a wrong job, never valid records dropped silently (BitFlipSweepVersion2: version 2)."""

    log_format = 1

    @slow
    def test_every_byte(self) -> None:
        self.flip_sweep(step=1)

    def test_every_ninth_byte(self) -> None:
        self.flip_sweep(step=9)

    def flip_sweep(self, step: int) -> None:
        builder = LogBuilder(self.dir, self.log_format)
        q, do = builder.q, builder.do
        for i in range(6):
            do(q.enqueue, {"i": i, "pad": "x" * i})
        do(q.schedule, "beat", None, every=1.0, catch_up="all")
        builder.clock.advance(2)
        builder.fire()
        do(q.unschedule, "beat")
        do(q.ack, do(q.lease_one))
        do(q.nack, do(q.lease_one), error="e")
        q.close()
        points = builder.points[0]
        boundaries = [s for s, _ in points]
        path = log_path(self.dir, "default", 0)
        with open(path, "rb") as f:
            data = f.read()
        scratch = tempfile.mkdtemp(prefix="nobroker-flip-")
        self.addCleanup(shutil.rmtree, scratch, True)
        for pos in cuts(data, boundaries[-1], step):
            if pos >= len(data):
                continue
            damaged = bytearray(data)
            damaged[pos] ^= 1 << (pos % 8)
            target = os.path.join(scratch, str(pos))
            os.mkdir(target, 0o700)
            with open(log_path(target, "default", 0), "wb") as f:
                f.write(damaged)
            if pos < HEADER_SIZE:
                with self.assertRaises(CorruptLogError):
                    Queue(target, clock=builder.reader_clock())
            elif pos >= boundaries[-1]:
                # A bit in a version 2 file's room: not zeros after the records, and nothing valid: a torn tail.
                with Queue(target, clock=builder.reader_clock()) as q2:
                    self.assertEqual(snapshot(q2), points[-1][1], f"flip at {pos}")
            elif (record_start := max(b for b in boundaries if b <= pos)) == boundaries[-2]:
                # Damage in the last record is indistinguishable from a torn write:
                # the record was never acknowledged as far as recovery can tell.
                with Queue(target, clock=builder.reader_clock()) as q2:
                    self.assertEqual(snapshot(q2), points[-2][1], f"flip at {pos}")
            else:
                with self.assertRaises(CorruptLogError, msg=f"flip at {pos}") as ctx:
                    Queue(target, clock=builder.reader_clock())
                self.assertEqual(ctx.exception.offset, record_start)
                self.assertIn(str(record_start), str(ctx.exception))
                with open(log_path(target, "default", 0), "rb") as f:
                    self.assertEqual(f.read(), bytes(damaged), "a refused open must not change the file")
            shutil.rmtree(target)


class BitFlipSweepVersion2(BitFlipSweep):
    log_format = 2


class BitFlipSweepVersion4(BitFlipSweep):
    log_format = 4


if __name__ == "__main__":
    unittest.main()
