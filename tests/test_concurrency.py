"""Many processes, many threads, one queue: every job to exactly one of them.

Real OS processes race on one folder; each reports the ids it leased; the
sets must be disjoint and together complete. Also: a process that slept
through everything catches up; a queue object used after fork gets its own
lock instead of silently sharing the parent's.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import unittest
from typing import Any
from unittest import mock

from nobroker import LockTimeoutError, Queue
from tests.support import TempDirTestCase

JOBS = 400
#: Seconds a process waits for the others at the starting line (generous: a loaded machine starts them slowly).
BARRIER_SECONDS = 120.0


def drain(directory: str, out: multiprocessing.Queue, first_leases: Any) -> None:
    got = []
    with Queue(directory, visibility_timeout=300) as q:
        while True:
            jobs = q.lease(3)
            if not jobs:
                break
            if not got:
                # Everyone holds a lease before anyone goes on: however slowly the
                # processes start, they all race for the rest.
                first_leases.wait(BARRIER_SECONDS)
            for job in jobs:
                got.append(job.id)
                q.ack(job)
    out.put(got)


def produce(directory: str, start: int, count: int) -> None:
    with Queue(directory) as q:
        for i in range(start, start + count):
            q.enqueue({"i": i})


class ProcessRaces(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.ctx = multiprocessing.get_context("spawn")

    def test_four_processes_lease_disjoint_complete_sets(self) -> None:
        with Queue(self.dir) as q:
            ids = {job.id for job in q.enqueue_many([{"i": i} for i in range(JOBS)])}
        out = self.ctx.Queue()
        first_leases = self.ctx.Barrier(4)
        procs = [self.ctx.Process(target=drain, args=(self.dir, out, first_leases)) for _ in range(4)]
        for p in procs:
            p.start()
        results = [out.get(timeout=BARRIER_SECONDS + 120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            self.assertEqual(p.exitcode, 0)
        seen: list[str] = [job_id for got in results for job_id in got]
        self.assertEqual(len(seen), len(set(seen)), "a job was leased by two processes")
        self.assertEqual(set(seen), ids, "some jobs were never leased")
        self.assertEqual(sum(1 for got in results if got), 4, "a process got no work: no race happened")

    def test_producers_in_four_processes_lose_nothing(self) -> None:
        procs = [self.ctx.Process(target=produce, args=(self.dir, k * 100, 100)) for k in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
            self.assertEqual(p.exitcode, 0)
        with Queue(self.dir) as q:
            got = sorted(job.payload["i"] for job in q.list_jobs())
            seqs = [job.seq for job in q.list_jobs()]
        self.assertEqual(got, list(range(400)))
        self.assertEqual(len(set(seqs)), 400, "two jobs got the same sequence number")

    def test_a_late_process_catches_up(self) -> None:
        late = Queue(self.dir)
        self.addCleanup(late.close)
        procs = [self.ctx.Process(target=produce, args=(self.dir, k * 50, 50)) for k in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        with Queue(self.dir) as q:
            q.ack(q.lease_one())
            q.compact()  # the late reader must also follow a generation flip
            q.enqueue({"i": "after compaction"})
        stats = late.stats()
        self.assertEqual((stats.ready, stats.done), (100, 0))
        self.assertEqual(late.list_jobs()[-1].payload, {"i": "after compaction"})
        job = late.lease_one()
        self.assertIsNotNone(job)
        late.ack(job)

    def test_threads_share_one_queue(self) -> None:
        q = Queue(self.dir)
        self.addCleanup(q.close)
        q.enqueue_many([{"i": i} for i in range(JOBS)])
        seen: list[str] = []
        lock = threading.Lock()

        def worker() -> None:
            while True:
                job = q.lease_one()
                if job is None:
                    return
                q.ack(job)
                with lock:
                    seen.append(job.id)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(seen), JOBS)
        self.assertEqual(len(set(seen)), JOBS)
        self.assertEqual(q.stats().done, JOBS)


@unittest.skipUnless(hasattr(os, "fork"), "os.fork is POSIX only")
class AfterFork(TempDirTestCase):
    def test_child_gets_its_own_lock(self) -> None:
        q = Queue(self.dir, lock_timeout=0.3)
        self.addCleanup(q.close)
        q.enqueue("before fork")
        r, w = os.pipe()
        # The parent holds the queue's cross-process lock while the child works.
        q.storage._lock.acquire(exclusive=True)  # type: ignore[attr-defined]
        pid = os.fork()
        if pid == 0:  # child
            code = 1
            try:
                os.close(r)
                try:
                    q.enqueue("from the child while the parent holds the lock")
                    os.write(w, b"shared")  # it got in: the lock was shared. Wrong.
                except LockTimeoutError:
                    os.write(w, b"waited")
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            answer = f.read()
        _, status = os.waitpid(pid, 0)
        q.storage._lock.release()  # type: ignore[attr-defined]
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(answer, b"waited", "a forked child shared its parent's file lock")

    def test_child_writes_and_parent_sees_them(self) -> None:
        q = Queue(self.dir)
        self.addCleanup(q.close)
        q.enqueue("parent 1")
        pid = os.fork()
        if pid == 0:
            try:
                job = q.lease_one()
                q.ack(job)
                q.enqueue("child")
                os._exit(0)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        stats = q.stats()
        self.assertEqual((stats.ready, stats.done), (1, 1))
        self.assertEqual(q.lease_one().payload, "child")



class WakeUpsFromManyThreads(TempDirTestCase):
    @unittest.skipUnless(hasattr(os, "mkfifo"), "wake-ups need named pipes")
    def test_threads_notifying_at_once_never_write_or_close_the_pipe_together(self) -> None:
        """One thread may find every reader gone and close the writer while another is about to
        write to it: its descriptor number may be a log's by then. Notifies take turns."""
        from nobroker.filestore import wake

        channel = wake.WakeChannel(os.path.join(self.dir, "q.wake"))
        self.assertTrue(channel.open_reader())
        self.addCleanup(channel.close)
        inside = [0, 0]  # now, most at once
        guard = threading.Lock()
        real_write = os.write

        def write(fd: int, data: bytes) -> int:
            with guard:
                inside[0] += 1
                inside[1] = max(inside)
            try:
                threading.Event().wait(0.001)  # a write that takes a moment: overlap, were it allowed
                return real_write(fd, data)
            finally:
                with guard:
                    inside[0] -= 1

        def notify_many() -> None:
            for _ in range(20):
                channel.notify()

        with mock.patch.object(wake.os, "write", write):
            threads = [threading.Thread(target=notify_many) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
        self.assertEqual(inside[1], 1, "two threads wrote to the wake pipe at once")


    @unittest.skipUnless(hasattr(os, "mkfifo"), "wake-ups need named pipes")
    def test_a_wait_whose_channel_another_thread_closes_returns(self) -> None:
        """The close lands between the wait's poll and its read of the byte: the wait returns, it does not raise."""
        from nobroker.filestore import wake

        channel = wake.WakeChannel(os.path.join(self.dir, "q.wake"))
        self.assertTrue(channel.open_reader())
        self.addCleanup(channel.close)

        def closed_meanwhile(fds: list[int], timeout: float) -> set[int]:
            channel.close()  # as another thread's Queue.close() would, just after the poll
            return set(fds)

        with mock.patch.object(wake, "readable", closed_meanwhile):
            self.assertTrue(channel.wait(60.0))


class GroupCommit(TempDirTestCase):
    """The operations of this process's threads share one batch: one lock, one append, one fsync (commit._run_pending)."""

    def test_an_operation_queued_while_the_batch_waits_for_the_file_lock_joins_it(self) -> None:
        from nobroker.filestore.fs import OS_FILESYSTEM, RealFileSystem
        from nobroker.filestore.lock import QueueLock
        from tests.support import wait_until

        appends: list[int] = []

        class CountingAppends(RealFileSystem):
            def pwrite(self, fd: int, data: Any, offset: int) -> int:
                appends.append(len(data))
                return super().pwrite(fd, data, offset)

        q = Queue(self.dir, filesystem=CountingAppends())
        self.addCleanup(q.close)
        q.enqueue("before")
        storage: Any = q.storage
        peer = QueueLock(OS_FILESYSTEM, os.path.join(self.dir, "default.lock"), 30.0)
        peer.acquire()  # another process, in the middle of an operation
        self.addCleanup(peer.close)
        appends.clear()
        threads = [threading.Thread(target=q.enqueue, args=(payload,)) for payload in ("first", "second")]
        threads[0].start()
        self.assertTrue(wait_until(storage._mutex.locked), "the first never ran its batch")
        waiting = {id(op) for op in storage._pending}  # the first's own operation, unless it took it already
        threads[1].start()
        self.assertTrue(wait_until(lambda: any(id(op) not in waiting for op in storage._pending)),
                        "the second never queued its operation")  # fmt: skip
        self.assertTrue(threads[0].is_alive(), "the first wrote without the file lock")
        peer.release()
        for thread in threads:
            thread.join(60)
            self.assertFalse(thread.is_alive())
        self.assertEqual(len(appends), 1, "the second waited for a batch of its own")
        self.assertEqual(sorted(job.payload for job in q.list_jobs()), ["before", "first", "second"])

    def in_one_batch(self, first: Any, second: Any) -> list[Any]:
        """``first(q)`` and ``second(q)`` from two threads, decided in one batch in that order; their answers."""
        from nobroker.filestore.fs import OS_FILESYSTEM
        from nobroker.filestore.lock import QueueLock
        from tests.support import wait_until

        q = Queue(self.dir, visibility_timeout=300)
        self.addCleanup(q.close)
        q.stats()  # the queue exists
        storage: Any = q.storage
        peer = QueueLock(OS_FILESYSTEM, os.path.join(self.dir, "default.lock"), 30.0)
        peer.acquire()
        self.addCleanup(peer.close)
        answers: list[Any] = [None, None]
        errors: list[BaseException] = []

        def run(index: int, call: Any) -> None:
            try:
                answers[index] = call(q)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate((first, second))]
        threads[0].start()
        self.assertTrue(wait_until(lambda: len(storage._pending) == 1 and storage._mutex.locked()))
        threads[1].start()
        self.assertTrue(wait_until(lambda: len(storage._pending) == 2), "the second never queued its operation")
        peer.release()
        for thread in threads:
            thread.join(60)
        self.assertEqual(errors, [])
        return answers

    def test_a_lease_takes_a_job_enqueued_earlier_in_its_batch(self) -> None:
        """Its payload is read from the batch: the record is not in the file yet."""
        enqueued, leased = self.in_one_batch(lambda q: q.enqueue({"fresh": 1}), lambda q: q.lease_one())
        self.assertIsNotNone(leased)
        self.assertEqual((leased.id, leased.payload), (enqueued.id, {"fresh": 1}))

    def test_a_repeated_id_gets_the_job_enqueued_earlier_in_its_batch(self) -> None:
        first, again = self.in_one_batch(
            lambda q: q.enqueue({"n": 1}, job_id="once"), lambda q: q.enqueue({"n": 2}, job_id="once")
        )  # fmt: skip
        self.assertEqual((again.id, again.payload, again.seq), ("once", {"n": 1}, first.seq))


if __name__ == "__main__":
    unittest.main()
