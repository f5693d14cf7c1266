"""Crashes of real processes: SIGKILL at random moments, death inside a write
and inside a compaction. Nothing acknowledged is lost; nothing acked comes back.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import unittest

from nobroker import JobState, Queue
from tests.support import TempDirTestCase, slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + ROOT)


def start_child(directory: str, mode: str, seed: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.crashchild", directory, mode, str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        cwd=ROOT,
        text=True,
    )


def promises(output: str) -> tuple[set[str], set[str], set[str]]:
    """(enqueued, acked, ack attempted) as the child reported them."""
    enqueued, acked, acking = set(), set(), set()
    for line in output.splitlines():
        kind, _, job_id = line.partition(" ")
        if kind == "enq":
            enqueued.add(job_id)
        elif kind == "ack":
            acked.add(job_id)
        elif kind == "acking":
            acking.add(job_id)
    return enqueued, acked, acking


class CrashTests(TempDirTestCase):
    def check_promises(self, enqueued: set[str], acked: set[str], acking: set[str]) -> None:
        with Queue(self.dir, visibility_timeout=0.5) as q:
            held = {job.id: job for job in q.list_jobs()}
            # Compaction drops done jobs, so only a job nobody tried to ack must be there.
            lost = sorted(j for j in enqueued - acking if j not in held)
            self.assertEqual(lost, [], "acknowledged enqueues were lost")
            back = sorted(j for j in acked if j in held and held[j].state is not JobState.DONE)
            self.assertEqual(back, [], "acked jobs are runnable again")
            # Drain: an acked job must never be delivered again.
            time.sleep(0.6)  # leases the dead child held expire
            while True:
                jobs = q.lease(100, visibility_timeout=30)
                if not jobs:
                    break
                for job in jobs:
                    self.assertFalse(job.id in acked, f"acked job {job.id} was delivered again")
                    q.ack(job)

    def test_sigkill_at_random_moments(self) -> None:
        rng = random.Random(1234)
        rounds = 12 if os.environ.get("NOBROKER_QUICK") == "1" else 40
        enqueued: set[str] = set()
        acked: set[str] = set()
        acking: set[str] = set()
        for round_no in range(rounds):
            child = start_child(self.dir, "loop", rng.randrange(1 << 30))
            assert child.stdout is not None
            first = child.stdout.readline().strip()
            if first != "ready":
                child.kill()
                self.fail(f"child did not start: {child.communicate()[1]}")
            # Kill only once the child has done work (its first enqueue returned),
            # then at a random moment: a loaded machine slows the child, never the proof.
            seen = [child.stdout.readline()]
            while seen[-1] and not seen[-1].startswith("enq "):
                seen.append(child.stdout.readline())
            time.sleep(rng.uniform(0.0, 0.15))
            child.send_signal(signal.SIGKILL)
            # Read through the same buffered stream readline() used: communicate()
            # reads the raw pipe and would drop lines readline() had buffered.
            out = "".join(seen) + child.stdout.read()
            err = child.stderr.read() if child.stderr else ""
            child.wait()
            self.assertEqual(child.returncode, -signal.SIGKILL, err)
            e, a, t = promises(out)
            enqueued |= e
            acked |= a
            acking |= t
        self.assertGreaterEqual(len(enqueued), rounds, "every child was killed only after its first enqueue")
        self.check_promises(enqueued, acked, acking)

    def test_death_in_the_middle_of_a_write(self) -> None:
        for n in (1, 2, 3, 5, 8, 13, 21):
            child = start_child(self.dir, f"die-in-write:{n}", n)
            out, err = child.communicate(timeout=60)
            self.assertEqual(child.returncode, 9, err)
            self.check_promises(*promises(out))
            with Queue(self.dir) as q:
                # The half-written record was a torn tail: recovery cut it, or an
                # earlier open already did.
                self.assertGreaterEqual(q.recovery.torn_bytes, 0)

    @slow
    def test_death_at_every_step_of_a_compaction(self) -> None:
        survived = False
        n = 1
        while not survived:
            child = start_child(self.dir, f"die-in-compact:{n}", n)
            out, err = child.communicate(timeout=60)
            survived = "survived" in out
            if not survived:
                self.assertEqual(child.returncode, 9, err)
            self.check_promises(*promises(out))
            Queue(self.dir).close()  # opening removes what the dead compaction left
            gens = sorted(f for f in os.listdir(self.dir) if f.endswith(".log"))
            self.assertEqual(len(gens), 1, f"leftover generations after death at step {n}: {gens}")
            n += 1
        self.assertGreater(n, 4)


if __name__ == "__main__":
    unittest.main()
