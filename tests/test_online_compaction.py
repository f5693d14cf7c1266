"""Compaction runs beside other processes: they keep working, and nothing they write is lost.

The compactor holds the queue's file lock only for short moments; the rest of
a compaction (streaming the live jobs, copying what peers append meanwhile)
runs without it. These tests prove it with real OS processes: a peer enqueues
and acks during a compaction; a compactor is SIGKILLed while it works outside
the lock. Owns: the child processes (compactor, peer, a compactor paused for
good), ``PeersDuringCompaction`` and ``CompactorKilled``; the records appended
during a compaction are tests/test_online_compaction_tail.py's, the jobs
copied as they are tests/test_compaction_as_is.py's.
Imports: the standard library, nobroker, tests.support and
tests.compactionsupport.

Child processes run as ``python -m tests.test_online_compaction child MODE DIR``.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
from typing import Any

from nobroker import Queue
from nobroker.filestore.fs import RealFileSystem
from nobroker.filestore.admin import verify
from tests.compactionsupport import build, storage
from tests.support import TempDirTestCase, slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Jobs in the queue being compacted: enough that streaming them takes a while.
BIG = 12_000


# ====================================================================== children
#: Operations the peer must finish while the compaction streams (outside the lock) to prove it is not blocked.
PEER_OPERATIONS = 5
#: Seconds the compactor waits, mid-stream, for them: generous, since a loaded machine is slow, not wrong.
PEER_PATIENCE = 120.0


def child_compact(directory: str, out: Any, go: Any, streaming: Any, peer_worked: Any) -> None:
    """Compact once when told to; in the middle of streaming, wait until the peer has done work; report."""
    waited: list[bool] = []

    def progress(written: int) -> None:
        if not waited:  # the first batch of jobs is written: the lock is not held now
            streaming.set()
            waited.append(peer_worked.wait(PEER_PATIENCE))

    with Queue(directory, auto_compact=None, visibility_timeout=3600) as q:
        go.wait()
        result = storage(q).compact(progress=progress)
        out.put({"kept": result.jobs_kept, "dropped": result.jobs_dropped, "generation": result.new_generation,
                 "peer_worked_while_streaming": waited == [True]})  # fmt: skip


def child_peer(directory: str, out: Any, ready: Any, stop: Any, streaming: Any, peer_worked: Any) -> None:
    """Enqueue and lease+ack until told to stop; say when it finished PEER_OPERATIONS during the streaming."""
    enqueued: list[str] = []
    acked: list[str] = []
    with Queue(directory, auto_compact=None, visibility_timeout=3600, lock_timeout=PEER_PATIENCE) as q:
        ready.set()
        n = 0
        during = 0
        while not stop.is_set():
            n += 1
            seen_streaming = streaming.is_set()  # before the call: the whole call ran while it streamed
            enqueued.append(q.enqueue({"peer": n}).id)
            if n % 2 == 0:
                job = q.lease_one()
                if job is not None:
                    q.ack(job)
                    acked.append(job.id)
            during += seen_streaming
            if during >= PEER_OPERATIONS:
                peer_worked.set()
        out.put({"enqueued": enqueued, "acked": acked})


class PausingFileSystem(RealFileSystem):
    """The real disk; prints a line and sleeps forever at one moment of a compaction."""

    def __init__(self, at: str) -> None:
        self.at = at

    def replace(self, src: str, dst: str) -> None:
        super().replace(src, dst)
        if self.at == "installed" and dst.endswith(".log"):
            pause("installed")


def pause(what: str) -> None:
    sys.stdout.write(what + "\n")
    sys.stdout.flush()
    while True:
        time.sleep(1)


def child_main(mode: str, directory: str) -> None:
    """``paused-writing``: stop while streaming jobs; ``installed``: stop after the new file got its name."""
    q = Queue(directory, auto_compact=None, filesystem=PausingFileSystem(mode))
    progress = (lambda written: pause("writing")) if mode == "paused-writing" else None
    storage(q).compact(progress=progress)
    print("compacted", flush=True)


# ====================================================================== tests
class PeersDuringCompaction(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.ctx = multiprocessing.get_context("spawn")

    @slow
    def test_a_peer_enqueues_and_acks_while_another_process_compacts(self) -> None:
        live, done = build(self.dir, BIG)
        out, peer_out = self.ctx.Queue(), self.ctx.Queue()
        go, ready, stop = self.ctx.Event(), self.ctx.Event(), self.ctx.Event()
        streaming, peer_worked = self.ctx.Event(), self.ctx.Event()
        compactor = self.ctx.Process(target=child_compact, args=(self.dir, out, go, streaming, peer_worked))
        peer = self.ctx.Process(target=child_peer, args=(self.dir, peer_out, ready, stop, streaming, peer_worked))
        compactor.start()
        peer.start()
        self.assertTrue(ready.wait(PEER_PATIENCE))
        go.set()
        result = out.get(timeout=300 + PEER_PATIENCE)
        stop.set()
        peer_result = peer_out.get(timeout=120)
        for p in (compactor, peer):
            p.join(timeout=60)
            self.assertEqual(p.exitcode, 0)
        enqueued, acked = set(peer_result["enqueued"]), set(peer_result["acked"])
        self.assertTrue(result["peer_worked_while_streaming"],
                        f"the peer did not finish {PEER_OPERATIONS} operations while the compaction streamed its jobs")
        self.assertEqual(result["generation"], 1)
        self.assertGreaterEqual(result["dropped"], len(done))
        with Queue(self.dir, auto_compact=None) as q:
            jobs = {j.id: j for j in q.list_jobs()}
            stats = q.stats()
        self.assertTrue(verify(self.dir).ok)
        self.assertFalse(done & set(jobs), "a job done before the compaction came back")
        expected_ready = (live | enqueued) - acked
        ready_now = {i for i, j in jobs.items() if j.state.value == "ready"}
        self.assertEqual(ready_now, expected_ready, "a job was lost, or an acked one is ready again")
        self.assertFalse(set(jobs) - live - enqueued, "a job nobody enqueued")
        for job_id in acked:
            if job_id in jobs:
                self.assertEqual(jobs[job_id].state.value, "done")
        self.assertEqual(stats.ready, len(expected_ready))
        self.assertEqual(stats.leased + stats.dead, 0)
        self.assertEqual(stats.total, len(jobs))

    def test_two_compactions_at_once_run_one_after_the_other(self) -> None:
        live, done = build(self.dir, 6_000)
        a = Queue(self.dir, auto_compact=None)
        b = Queue(self.dir, auto_compact=None)
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        results: list[Any] = []
        threads = [threading.Thread(target=lambda q=q: results.append(q.compact())) for q in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(sorted((r.old_generation, r.new_generation) for r in results), [(0, 1), (1, 2)])
        self.assertEqual(sum(r.jobs_dropped for r in results), len(done))
        self.assertEqual(len(b), len(live))
        self.assertEqual(sorted(n for n in os.listdir(self.dir) if n.endswith(".log")), ["default.000002.log"])

    def test_automatic_compaction_does_not_wait_for_a_running_one(self) -> None:
        build(self.dir, 2_000)
        with Queue(self.dir, auto_compact=None) as a, Queue(self.dir, auto_compact=None) as b:
            entered = threading.Event()
            release = threading.Event()
            done: list[Any] = []

            def progress(written: int) -> None:
                entered.set()
                release.wait(120)

            big = [{"pad": "y" * 1000} for _ in range(1500)]
            a.enqueue_many(big)  # enough bytes for a progress call
            t = threading.Thread(target=lambda: done.append(storage(a).compact(progress=progress)))
            t.start()
            self.assertTrue(entered.wait(120))
            self.assertIsNone(storage(b)._compaction(None, wait=False))  # noqa: SLF001
            # Had it waited, it would have returned only once the held compaction finished.
            self.assertEqual(done, [], "the automatic compaction waited for the running one")
            b.enqueue({"while": "compacting"})  # and the peer is not blocked meanwhile
            release.set()
            t.join(timeout=60)
            self.assertEqual(done[0].new_generation, 1)
            self.assertIn({"while": "compacting"}, [j.payload for j in a.list_jobs()])


class CompactorKilled(TempDirTestCase):
    """SIGKILL of a compactor while it works outside the lock: the queue is intact, peers never notice."""

    def run_child(self, mode: str) -> subprocess.Popen[str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT])
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.test_online_compaction", "child", mode, self.dir],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        return proc

    def check_kill(self, mode: str) -> None:
        live, done = build(self.dir, 12_000)
        proc = self.run_child(mode)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        self.assertEqual(line, "writing" if mode == "paused-writing" else "installed")
        added = []
        # The compactor is paused for good: had it kept the lock, these would end in LockTimeoutError.
        with Queue(self.dir, auto_compact=None, lock_timeout=60) as peer:
            for i in range(20):
                added.append(peer.enqueue({"peer": i}).id)
            job = peer.lease_one()
            assert job is not None
            peer.ack(job)
            # A process opening now must leave the compactor's files alone (it still runs).
            Queue(self.dir, auto_compact=None).close()
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=120)
            for i in range(20, 40):
                added.append(peer.enqueue({"peer": i}).id)
        self.assertIn("default.compactor", os.listdir(self.dir))
        with Queue(self.dir, auto_compact=None) as q:  # the next opener removes the leftovers
            jobs = {j.id: j.state.value for j in q.list_jobs()}
        leftovers = sorted(n for n in os.listdir(self.dir) if n.endswith((".tmp", ".log")))
        self.assertEqual(leftovers, ["default.000000.log"])
        expected = live | done | set(added)
        self.assertEqual(set(jobs), expected)
        self.assertEqual(sorted(i for i, s in jobs.items() if s == "done"), sorted(done | {job.id}))
        with Queue(self.dir, auto_compact=None) as q:
            result = q.compact()  # and compaction works again
            self.assertEqual(result.jobs_dropped, len(done) + 1)
            self.assertEqual(len(q), len(expected) - len(done) - 1)
        self.assertTrue(verify(self.dir).ok)

    def test_killed_while_streaming_jobs(self) -> None:
        self.check_kill("paused-writing")

    def test_killed_after_the_new_generation_got_its_name(self) -> None:
        self.check_kill("installed")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "child":
        child_main(sys.argv[2], sys.argv[3])
    else:
        unittest.main()
