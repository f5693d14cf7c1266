"""Simulated power loss at every mutating disk call, many surviving states per call.

Owns: ``PowerLoss``: the sweeps of tests/power_loss_sweep.py (every cut of
seeded workloads recovers the acknowledged state; process kills between
power cuts; two handles taking turns on one queue) and the cases they found
(a crash while a new queue opens, compaction writing exactly the live state,
a folder a killed process made, an ack answered from a dead writer's bytes);
the totals printed at the end of the module. Imports: the standard library,
nobroker's public API, tests.simdisk, tests.support and
tests.power_loss_sweep.
"""

from __future__ import annotations

import random
import unittest

from nobroker import Queue
from tests.power_loss_sweep import SEEDS, TOTALS, ProcessKilled, Sweep, snapshot
from tests.simdisk import POWER_CUT_MODES, SimDisk, fresh_queue_path
from tests.support import FakeClock


class PowerLoss(unittest.TestCase):
    def test_every_cut_recovers_the_acknowledged_state(self) -> None:
        for seed in range(SEEDS):
            with self.subTest(seed=seed):
                violations = Sweep(seed).run()
                self.assertEqual(violations.total(), 0, violations.summary())
        print(
            f"\npower loss: {TOTALS['crash states checked']} crash states checked at "
            f"{TOTALS['mutating calls cut']} mutating calls ({SEEDS} workloads)"
        )

    def test_process_kills_between_power_cuts(self) -> None:
        """A process dies mid-call (the disk keeps its unsynced state); the next one must make that state safe."""
        for seed in range(2_000, 2_000 + SEEDS // 2):
            with self.subTest(seed=seed):
                violations = Sweep(seed, kill_rate=0.04, handles=1 + seed % 2).run()
                self.assertEqual(violations.total(), 0, violations.summary())

    def test_two_handles_take_turns_on_one_queue(self) -> None:
        """Peers catch up with each other's appends and compactions; cuts land in between."""
        for seed in range(1_000, 1_000 + SEEDS // 3):
            with self.subTest(seed=seed):
                violations = Sweep(seed, handles=2).run()
                self.assertEqual(violations.total(), 0, violations.summary())

    def test_a_crash_in_the_middle_of_opening_a_new_queue(self) -> None:
        """Cuts inside the very first Queue(): the folder, the lock, generation 0's header."""
        disk = SimDisk()
        path = fresh_queue_path(disk, random.Random(3))
        cuts: list[SimDisk] = []
        disk.before_mutation = lambda d, op: cuts.extend(d.power_cut(m, random.Random(i)) for i, m in enumerate(POWER_CUT_MODES * 3))
        Queue(path, filesystem=disk).close()
        self.assertGreater(len(cuts), 10)
        for cut in cuts:
            with Queue(path, filesystem=cut) as q:
                self.assertEqual(len(q), 0)
                q.enqueue("works")

    def test_compaction_writes_exactly_the_live_state(self) -> None:
        """Found by the sweep (seed 25): a stage cleared by a new lease must not come back after compaction."""
        disk = SimDisk()
        path = fresh_queue_path(disk, random.Random(25))
        q = Queue(path, filesystem=disk, clock=FakeClock())
        q.enqueue("x")
        job = q.lease_one()
        assert job is not None
        q.set_stage(job, "b")
        q.compact()
        q.nack(job, delay=0)
        job = q.lease_one()
        assert job is not None
        live = snapshot(q)
        self.assertIsNone(live[job.id]["stage"])
        q.compact()
        self.assertEqual(snapshot(q), live)
        q.close()
        with Queue(path, filesystem=disk.power_cut("drop"), clock=FakeClock()) as reopened:
            self.assertEqual(snapshot(reopened), live, "the compacted generation differs from the live state")

    def test_a_queue_folder_made_by_a_killed_process_becomes_durable(self) -> None:
        """Found by the kill sweep (long, seeds 2042 and 2049): the folder's own name must reach the disk."""
        disk = SimDisk()
        path = fresh_queue_path(disk, random.Random(2042))

        def die_after_mkdir(d: SimDisk, op: str) -> None:
            if op == "fsync_dir":
                raise ProcessKilled(op)  # mkdir done, the parent's fsync never runs

        disk.before_mutation = die_after_mkdir
        with self.assertRaises(ProcessKilled):
            Queue(path, filesystem=disk, clock=FakeClock())
        disk.before_mutation = None
        second = Queue(path, filesystem=disk, clock=FakeClock())
        job = second.enqueue("acknowledged")
        cut = disk.power_cut("drop")
        second.close()
        with Queue(path, filesystem=cut, clock=FakeClock()) as after_cut:
            self.assertEqual([j.id for j in after_cut.list_jobs()], [job.id], "an acknowledged enqueue vanished")

    def test_an_ack_answered_from_a_dead_writers_bytes_is_durable(self) -> None:
        """Found by the kill sweep (seed 2002): "already done" must not rest on bytes nobody fsynced."""
        disk = SimDisk()
        path = fresh_queue_path(disk, random.Random(2002))
        first = Queue(path, filesystem=disk, clock=FakeClock())
        first.enqueue("x")
        job = first.lease_one()
        assert job is not None

        def die_at_fsync(d: SimDisk, op: str) -> None:
            if op == "fsync":
                raise ProcessKilled(op)  # the ACK is written, its fsync never runs

        disk.before_mutation = die_at_fsync
        with self.assertRaises(ProcessKilled):
            first.ack(job)
        disk.before_mutation = None
        second = Queue(path, filesystem=disk, clock=FakeClock())
        second.ack(job)  # returns: the job is done
        cut = disk.power_cut("drop")  # while `second` is still open (closing it would fsync)
        second.close()
        with Queue(path, filesystem=cut, clock=FakeClock()) as after_cut:
            self.assertEqual(after_cut.get(job.id).state.value, "done", "an ack that returned was undone by a power cut")


def tearDownModule() -> None:
    print(
        f"\npower loss, whole module: {TOTALS['crash states checked']} crash states checked at "
        f"{TOTALS['mutating calls cut']} mutating calls, {TOTALS['process kills']} process kills"
    )


if __name__ == "__main__":
    unittest.main()
