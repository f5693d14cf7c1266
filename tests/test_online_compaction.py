"""Compaction runs beside other processes: they keep working, and nothing they write is lost.

The compactor holds the queue's file lock only for short moments; the rest of
a compaction (streaming the live jobs, copying what peers append meanwhile)
runs without it. These tests prove it with real OS processes: a peer enqueues
and acks during a compaction; a compactor is SIGKILLed while it works outside
the lock; records appended during a compaction (every record type) come out
of it exactly, in the compactor's memory, in the peer's and after a reopen.
Imports: the standard library, nobroker and tests.support.

Child processes run as ``python -m tests.test_online_compaction child MODE DIR``.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
from typing import Any
from unittest import mock

from nobroker import NobrokerError, Queue, StorageError
from nobroker.filestore import compactor as compactor_module
from nobroker.filestore.forward import READ_AGAIN_BYTES
from nobroker.filestore.storage import FileStorage
from nobroker.filestore.fs import RealFileSystem
from nobroker.filestore.admin import verify
from tests.support import FakeClock, TempDirTestCase, file_bytes, slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Jobs in the queue being compacted: enough that streaming them takes a while.
BIG = 12_000


def build(directory: str, n: int, done_every: int = 3) -> tuple[set[str], set[str]]:
    """A queue of ``n`` jobs, one in ``done_every`` acked (the oldest); returns (live ids, done ids)."""
    n_done = n // done_every
    with Queue(directory, fsync=False, auto_compact=None, visibility_timeout=3600) as q:
        ids = []
        for start in range(0, n, 5_000):
            ids += [j.id for j in q.enqueue_many([{"i": i, "pad": "x" * 100} for i in range(start, min(n, start + 5_000))])]
        q.ack_many(q.lease(n_done))
    os.sync()
    return set(ids[n_done:]), set(ids[:n_done])


def storage(q: Queue) -> FileStorage:
    s = q._open_storage()  # noqa: SLF001 - the tests reach the file storage's compaction hook
    assert isinstance(s, FileStorage)
    return s


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


class ExactTail(TempDirTestCase):
    """Records a peer appends while the compactor streams (every record type) come out exactly."""

    def test_records_appended_during_compaction_survive_exactly(self) -> None:
        build(self.dir, 20_000)
        compactor = Queue(self.dir, auto_compact=None, visibility_timeout=3600)
        peer = Queue(self.dir, auto_compact=None, visibility_timeout=3600)
        self.addCleanup(compactor.close)
        self.addCleanup(peer.close)
        calls = [0]

        def act(written: int) -> None:
            # Runs inside the compaction, while the compactor holds no file lock.
            calls[0] += 1
            n = calls[0]
            fresh = peer.enqueue({"tail": n, "pad": "z" * (n * 37 % 500)}, priority=n % 3, job_id=f"t{n}")
            peer.enqueue({"later": n}, delay=600)
            peer.enqueue_many([{"many": n, "k": k} for k in range(3)])
            jobs = peer.lease(4)
            if len(jobs) >= 4:
                peer.ack(jobs[0], result={"ok": n})
                peer.nack(jobs[1], error=f"boom {n}")
                peer.extend(jobs[2], 900)
                peer.set_stage(jobs[3], f"stage {n}")
            gone = peer.lease_one()
            if gone is not None:
                peer.nack(gone, error="fatal", permanent=True)
            if n % 2 == 0:
                peer.requeue_dead()
            peer.get(fresh.id)

        result = storage(compactor).compact(progress=act)
        self.assertGreater(calls[0], 1, "the hook never ran inside the compaction")
        self.assertEqual(result.new_generation, 1)
        mine = {j.id: j.to_dict() for j in compactor.list_jobs()}  # offsets moved in memory, payloads re-read
        theirs = {j.id: j.to_dict() for j in peer.list_jobs()}  # followed the flip by replay
        with Queue(self.dir, auto_compact=None) as fresh:
            reopened = {j.id: j.to_dict() for j in fresh.list_jobs()}
        self.assertEqual(mine, reopened)
        self.assertEqual(theirs, reopened)
        self.assertTrue(any(j["id"].startswith("t") for j in reopened.values()))
        self.assertTrue(any(j["stage"] for j in reopened.values()))
        self.assertTrue(any(j["state"] == "dead" or j["last_error"] == "fatal" for j in reopened.values()))
        # Both handles keep working on the new generation.
        job = compactor.enqueue({"after": 1})
        self.assertEqual(peer.get(job.id).payload, {"after": 1})
        self.assertTrue(verify(self.dir).ok)


class ReadWithoutTheLock(TempDirTestCase):
    """What peers appended is read by the compactor without the file lock; under it, only what came since.

    The peer here is another object of the queue in this thread, appending
    at moments when the compactor holds no file lock (before the compaction,
    while it streams, before each copy of the peers' records, before the
    flip): so nothing is left for its locked reads, whose bytes are counted.
    """

    def test_the_compactors_locked_reads_find_nothing_a_peer_appended_before_them(self) -> None:
        build(self.dir, 3_000)
        compactor = Queue(self.dir, auto_compact=None, visibility_timeout=3600)
        peer = Queue(self.dir, auto_compact=None, visibility_timeout=3600)
        self.addCleanup(compactor.close)
        self.addCleanup(peer.close)
        compactor.enqueue({"caught": "up"})
        s = storage(compactor)
        held = [False]
        read: dict[bool, int] = {False: 0, True: 0}  # bytes of records applied, without and with the lock
        appended, injected = [0], [0]

        def append(n: int) -> None:
            for i in range(n):
                peer.enqueue({"meanwhile": appended[0], "i": i})
            appended[0] += n

        read_forward, copy_appended = s._read_forward, s._copy_appended  # type: ignore[attr-defined]

        def counted_read_forward(log, state, start, **kw):  # type: ignore[no-untyped-def]
            end, torn = read_forward(log, state, start, **kw)
            read[held[0]] += end - start
            if not held[0] and end - start >= READ_AGAIN_BYTES and not injected[0]:
                injected[0] += 1
                append(40)  # appended while it read (more than READ_AGAIN_BYTES): it reads again
            return end, torn

        def copy_after_a_peer(new, old, lock, **kw):  # type: ignore[no-untyped-def]
            append(20)
            return copy_appended(new, old, lock, **kw)

        acquire, release = compactor_module.Holds.acquire, compactor_module.Holds.release
        prepare_flip = compactor_module.prepare_flip

        def prepared_after_a_peer(*args, **kw):  # type: ignore[no-untyped-def]
            append(10)  # the last moment without the lock before the flip
            return prepare_flip(*args, **kw)

        def holding(lock):  # type: ignore[no-untyped-def]
            acquire(lock)
            held[0] = True

        def letting_go(lock):  # type: ignore[no-untyped-def]
            held[0] = False
            release(lock)

        s._read_forward, s._copy_appended = counted_read_forward, copy_after_a_peer  # type: ignore[attr-defined]
        append(50)  # while the compactor is idle: read when the compaction starts
        with mock.patch.object(compactor_module.Holds, "acquire", holding), \
                mock.patch.object(compactor_module.Holds, "release", letting_go), \
                mock.patch.object(compactor_module, "prepare_flip", prepared_after_a_peer):  # fmt: skip
            result = s.compact(progress=lambda written: append(5))
        self.assertEqual(result.new_generation, 1)
        self.assertGreater(appended[0], 50 + 2 * 20 + 10, "the peer did not append during the compaction")
        self.assertGreater(read[False], 0, "nothing was read without the lock")
        self.assertEqual(injected[0], 1, "no read without the lock found enough to read again")
        self.assertEqual(read[True], 0, "the compactor read under the lock what it could have read before it")
        mine = {j.id: j.to_dict() for j in compactor.list_jobs()}
        theirs = {j.id: j.to_dict() for j in peer.list_jobs()}
        with Queue(self.dir, auto_compact=None) as fresh:
            reopened = {j.id: j.to_dict() for j in fresh.list_jobs()}
        self.assertEqual(mine, reopened)
        self.assertEqual(theirs, reopened)
        self.assertEqual(sum(1 for j in reopened.values() if "meanwhile" in j["payload"]), appended[0])
        self.assertTrue(verify(self.dir).ok)


class FailingReads(RealFileSystem):
    """The real disk, but the read ``fail_at`` reads from now fails with EIO (``arm``)."""

    def __init__(self) -> None:
        super().__init__()
        self.countdown: int | None = None

    def arm(self, fail_at: int) -> None:
        self.countdown = fail_at

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if self.countdown is not None:
            self.countdown -= 1
            if self.countdown == 0:
                self.countdown = None
                raise OSError(errno.EIO, "injected read error")
        return super().pread(fd, size, offset)


class AReadWithoutTheLockFails(TempDirTestCase):
    """A read error while the compactor reads a peer's records without the lock: the compaction
    fails, changes nothing, and the compactor's next operation sees every record again."""

    def test_the_compaction_fails_cleanly_and_the_queue_goes_on(self) -> None:
        for fail_at in (1, 2):  # the look at what follows, then the reading of the records
            with self.subTest(fail_at=fail_at):
                directory = os.path.join(self.dir, f"q{fail_at}")
                build(directory, 2_000)
                disk = FailingReads()
                compactor = Queue(directory, auto_compact=None, visibility_timeout=3600, filesystem=disk)
                peer = Queue(directory, auto_compact=None, visibility_timeout=3600)
                self.addCleanup(compactor.close)
                self.addCleanup(peer.close)
                compactor.enqueue({"caught": "up"})
                s = storage(compactor)
                copy_appended = s._copy_appended  # type: ignore[attr-defined]

                def copy_after_a_peer(new, old, lock, **kw):  # type: ignore[no-untyped-def]
                    for i in range(30):
                        peer.enqueue({"meanwhile": i})
                    disk.arm(fail_at)  # the next reads are the ones without the lock
                    return copy_appended(new, old, lock, **kw)

                read_unlocked, failed = s._read_unlocked, []  # type: ignore[attr-defined]

                def noting_failures(log, **kw):  # type: ignore[no-untyped-def]
                    try:
                        return read_unlocked(log, **kw)
                    except BaseException as exc:
                        failed.append(exc)
                        raise

                s._copy_appended, s._read_unlocked = copy_after_a_peer, noting_failures  # type: ignore[attr-defined]
                with self.assertRaises(NobrokerError):
                    s.compact()
                s._copy_appended, s._read_unlocked = copy_appended, read_unlocked  # type: ignore[attr-defined]
                self.assertEqual(len(failed), 1, "the error did not come from the read without the lock")
                self.assertFalse([n for n in os.listdir(directory) if ".000001." in n], "the failed compaction left files")
                expected = {j.id: j.to_dict() for j in peer.list_jobs()}
                self.assertEqual({j.id: j.to_dict() for j in compactor.list_jobs()}, expected)
                self.assertEqual(sum(1 for j in expected.values() if "meanwhile" in j["payload"]), 30)
                self.assertEqual(compactor.compact().new_generation, 1)  # and the next one goes through
                self.assertEqual({j.id: j.to_dict() for j in peer.list_jobs()}, {j.id: j.to_dict() for j in compactor.list_jobs()})
                self.assertTrue(verify(directory).ok)


class UntouchedJobsCopiedAsTheyAre(TempDirTestCase):
    """A job untouched since it was enqueued keeps its record's bytes through a compaction (recovery._record_as_is):
    the same bytes a rewrite gives, a damaged one still refused, a failed read changing nothing."""

    def workload(self, directory: str) -> Queue:
        q = Queue(directory, auto_compact=None, visibility_timeout=3600, clock=FakeClock(1000.0))
        q.enqueue_many([{"i": i} for i in range(40)])
        q.enqueue({"alone": 1})
        q.enqueue({"urgent": 1}, priority=2)
        q.enqueue({"tries": 3}, max_attempts=3)
        q.enqueue({"named": 1}, job_id="a name of its own")
        q.enqueue({"later": 1}, delay=60)
        q.ack(q.lease_one())
        q.lease_one()  # leased at the compaction
        q.nack(q.lease_one(), error="once", delay=0)  # back, one attempt spent
        return q

    def as_is(self) -> tuple[Any, list[bytes]]:
        from nobroker.filestore.log import LogFile

        read, copied = LogFile.read_job_record, []

        def noting(log: LogFile, offset: int, size: int, prefix: bytes) -> bytes | None:
            data = read(log, offset, size, prefix)
            if data is not None:
                copied.append(data)
            return data

        return mock.patch.object(LogFile, "read_job_record", noting), copied

    def test_the_copied_records_are_the_bytes_a_rewrite_gives(self) -> None:
        import shutil

        first = os.path.join(self.dir, "copied")
        self.workload(first).close()
        second = os.path.join(self.dir, "rewritten")
        shutil.copytree(first, second)
        noting, copied = self.as_is()
        with Queue(first, auto_compact=None, clock=FakeClock(2000.0)) as q, noting:
            q.compact()
            jobs = [j.to_dict() for j in q.list_jobs()]
        # Untouched: 38 of the batch (two were leased), "alone" and "tries" ("urgent" was leased first);
        # the named job and the delayed one are kept apart from the start, and rewritten.
        self.assertEqual(len(copied), 40, "the untouched jobs were not copied as they are")
        with Queue(second, auto_compact=None, clock=FakeClock(2000.0)) as q:
            with mock.patch.object(FileStorage, "_record_as_is", lambda self, entry: None):
                q.compact()
        names = [n for n in os.listdir(first) if n.endswith(".000001.log")]
        self.assertEqual(names, ["default.000001.log"])
        self.assertEqual(file_bytes(os.path.join(first, names[0])), file_bytes(os.path.join(second, names[0])))
        with Queue(first, clock=FakeClock(2000.0)) as q:  # the leased job's lease has not expired
            self.assertEqual([j.to_dict() for j in q.list_jobs()], jobs)
        self.assertTrue(verify(first).ok)

    def test_only_the_named_jobs_whole_record_checks_out(self) -> None:
        from nobroker.filestore.records import id_prefix

        with Queue(self.dir, auto_compact=None) as q:
            first, second = q.enqueue_many([{"n": 1}, {"n": 2}])  # two records of the same size
            s = storage(q)
            log, rows = s._log, [s._state._entry_of(row) for row in range(2)]  # type: ignore[attr-defined]
            at, size = rows[0].offset, rows[0].size
            self.assertEqual(rows[1].size, size)
            self.assertIsNotNone(log.read_job_record(at, size, id_prefix(first.id)))
            self.assertIsNone(log.read_job_record(at, size, id_prefix(second.id)), "another job's record")
            self.assertIsNone(log.read_job_record(at, size - 1, id_prefix(first.id)), "cut short")
            self.assertIsNone(log.read_job_record(at + 1, size, id_prefix(first.id)), "not at a record's start")

    def test_a_damaged_record_of_an_untouched_job_is_refused_not_copied(self) -> None:
        q = self.workload(self.dir)
        self.addCleanup(q.close)
        victim = q.list_jobs()[5]
        log = os.path.join(self.dir, "default.000000.log")
        with open(log, "r+b") as f:
            data = f.read()
            at = data.index(b'{"i":5}')
            f.seek(at + 5)
            f.write(b"6")  # a flipped digit in its payload: the crc no longer matches
        with self.assertRaises(NobrokerError) as caught:
            q.compact()
        self.assertIn(victim.id, str(caught.exception))
        self.assertFalse([n for n in os.listdir(self.dir) if ".000001." in n], "the failed compaction left files")

    def test_a_failed_read_fails_the_compaction_and_the_next_one_goes_through(self) -> None:
        from nobroker.filestore.log import LogFile

        q = self.workload(self.dir)
        self.addCleanup(q.close)
        before = [j.to_dict() for j in q.list_jobs()]

        def fail(log: LogFile, offset: int, size: int, prefix: bytes) -> bytes | None:
            raise StorageError(f"reading the record at offset {offset}: [Errno 5] Input/output error (injected)")

        with mock.patch.object(LogFile, "read_job_record", fail), self.assertRaises(NobrokerError) as caught:
            q.compact()
        self.assertIn("(injected)", str(caught.exception))
        self.assertFalse([n for n in os.listdir(self.dir) if ".000001." in n], "the failed compaction left files")
        self.assertEqual([j.to_dict() for j in q.list_jobs()], before)
        self.assertEqual(q.compact().new_generation, 1)
        live = [job for job in before if job["state"] != "done"]
        self.assertEqual([j.to_dict() for j in q.list_jobs()], live)
        with Queue(self.dir, clock=FakeClock(1000.0)) as again:
            self.assertEqual([j.to_dict() for j in again.list_jobs()], live)


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
