"""What a peer appends while a compaction streams comes out of it exactly, read without the lock where it can be.

Owns: ``ExactTail`` (every record type a peer appends during a compaction:
the same jobs in the compactor's memory, in the peer's and after a reopen),
``ReadWithoutTheLock`` (the compactor reads what peers appended before each
of its holds without the file lock, also while it reads; under the lock
nothing), ``FailingReads`` and ``AReadWithoutTheLockFails`` (a read error
there fails the compaction cleanly, and the queue goes on). The peer is
another Queue object in the same thread. Imports: the standard library,
nobroker, tests.support and tests.compactionsupport.
"""

from __future__ import annotations

import errno
import os
import unittest
from unittest import mock

from nobroker import NobrokerError, Queue
from nobroker.filestore import compactor as compactor_module
from nobroker.filestore.forward import READ_AGAIN_BYTES
from nobroker.filestore.fs import RealFileSystem
from nobroker.filestore.admin import verify
from tests.compactionsupport import build, storage
from tests.support import TempDirTestCase


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


if __name__ == "__main__":
    unittest.main()
