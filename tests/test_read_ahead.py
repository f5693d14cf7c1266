"""Reading what peers append without the file lock: before taking it, and while it is busy.

An operation looks before the lock (commit.Committer._read_ahead) and keeps
reading while a peer holds it (QueueLock.acquire's ``meanwhile``), so the
lock is held only for what came in the last moments. Either reading stops at
a record still being written and cuts nothing; one that fails leaves memory
to be rebuilt under the lock.
"""

from __future__ import annotations

import errno
import os
import threading
import unittest
from typing import Any

from nobroker import LockTimeoutError, Queue
from nobroker.filestore.fs import RealFileSystem
from tests.support import TempDirTestCase, records_end, wait_until


class ReadAhead(TempDirTestCase):
    """Catching up without the lock: before taking it (commit._read_ahead) and while it is busy (the lock's ``meanwhile``).

    Either stops at a record a peer is still writing, and cuts nothing.
    """

    def two_writers(self, log_format: int, filesystem: Any = None) -> tuple[Queue, str, int]:
        """A queue that has seen a peer's record (so it looks before the lock), its log, and where the records end."""
        folder = os.path.join(self.dir, str(log_format))
        mine = Queue(folder, log_format=log_format, filesystem=filesystem)
        peer = Queue(folder, log_format=log_format)
        self.addCleanup(mine.close)
        self.addCleanup(peer.close)
        mine.enqueue("first")
        peer.enqueue("a peer's")
        mine.stats()  # its catch-up finds the peer's record: it looks before the lock from now on
        log = os.path.join(folder, "default.000000.log")
        return mine, log, records_end(log)

    def held_lock(self, log: str) -> Any:
        """The queue's file lock, taken as a peer in the middle of an operation would hold it."""
        from nobroker.filestore.fs import OS_FILESYSTEM
        from nobroker.filestore.lock import QueueLock

        lock = QueueLock(OS_FILESYSTEM, os.path.join(os.path.dirname(log), "default.lock"), 30.0)
        lock.acquire()
        self.addCleanup(lock.close)
        return lock

    @staticmethod
    def record(job_id: str, payload: str, seq: int) -> bytes:
        from nobroker.filestore.framing import RecordType, encode_record

        fields = {"id": job_id, "payload": payload, "max_attempts": 5, "available_at": 1.0, "enqueued_at": 1.0, "seq": seq}
        return encode_record(RecordType.ENQUEUE, fields)

    @staticmethod
    def write_at(log: str, offset: int, data: bytes) -> None:
        with open(log, "r+b") as f:
            f.seek(offset)
            f.write(data)

    def test_a_record_half_written_by_a_peer_is_read_whole_under_the_lock(self) -> None:
        for log_format in (1, 2):
            with self.subTest(log_format=log_format):
                mine, log, end = self.two_writers(log_format)
                whole = self.record("whole", "whole", 98)
                record = self.record("written-by-hand", "half, then whole", 99)
                lock = self.held_lock(log)  # a writer that appended one record and is in the middle of the next
                self.write_at(log, end, whole + record[: len(record) // 2])
                enqueued: list[Any] = []
                thread = threading.Thread(target=lambda: enqueued.append(mine.enqueue("mine, after it")))
                thread.start()
                read_to = end + len(whole)  # the whole record read before the lock, the half one not
                self.assertTrue(wait_until(lambda: mine.storage._offset == read_to), "no look before the lock")  # type: ignore[attr-defined]
                self.assertTrue(thread.is_alive(), "it wrote without the lock")
                self.write_at(log, read_to + len(record) // 2, record[len(record) // 2 :])
                lock.release()
                thread.join(30)
                self.assertEqual(len(enqueued), 1)
                self.assertEqual(mine.get("written-by-hand").payload, "half, then whole")
                with Queue(os.path.dirname(log)) as again:
                    self.assertEqual(sorted(job.payload for job in again.list_jobs()),
                                     ["a peer's", "first", "half, then whole", "mine, after it", "whole"])  # fmt: skip

    def test_a_writer_waiting_for_the_lock_reads_what_its_holder_appends_meanwhile(self) -> None:
        """So the lock, once it has it, is held only for what came in the last moments."""
        for log_format in (1, 2):
            with self.subTest(log_format=log_format):
                mine, log, end = self.two_writers(log_format)
                lock = self.held_lock(log)
                enqueued: list[Any] = []
                thread = threading.Thread(target=lambda: enqueued.append(mine.enqueue("mine, after it")))
                thread.start()
                self.assertTrue(wait_until(lambda: mine.storage._offset == end), "no look before the lock")  # type: ignore[attr-defined]
                record = self.record("appended-meanwhile", "appended while it waited", 98)
                self.write_at(log, end, record)  # by the lock's holder, after the waiter's look
                self.assertTrue(wait_until(lambda: mine.storage._offset == end + len(record)),  # type: ignore[attr-defined]
                                "the waiter did not read on while the lock was busy")  # fmt: skip
                self.assertTrue(thread.is_alive(), "it wrote without the lock")
                lock.release()
                thread.join(30)
                self.assertEqual(len(enqueued), 1)
                with Queue(os.path.dirname(log)) as again:
                    self.assertEqual(sorted(job.payload for job in again.list_jobs()),
                                     ["a peer's", "appended while it waited", "first", "mine, after it"])  # fmt: skip


    def test_a_read_that_fails_while_it_waits_leaves_memory_to_be_rebuilt_under_the_lock(self) -> None:
        class ReadsFail(RealFileSystem):
            failing, failed = False, 0

            def pread(self, fd: int, size: int, offset: int) -> bytes:
                if ReadsFail.failing:
                    ReadsFail.failed += 1
                    raise OSError(errno.EIO, "Input/output error (injected)")
                return super().pread(fd, size, offset)

        for log_format in (1, 2):
            with self.subTest(log_format=log_format):
                mine, log, end = self.two_writers(log_format, ReadsFail())
                storage: Any = mine.storage
                lock = self.held_lock(log)
                enqueued: list[Any] = []
                thread = threading.Thread(target=lambda: enqueued.append(mine.enqueue("mine, after it")))
                thread.start()
                self.assertTrue(wait_until(lambda: storage._offset == end), "no look before the lock")
                # Reads fail from before the record is there: a waiter that reads it at once
                # (it looks thousands of times a second) would otherwise read it whole.
                ReadsFail.failed, ReadsFail.failing = 0, True
                self.write_at(log, end, self.record("appended-meanwhile", "appended while it waited", 98))
                self.assertTrue(wait_until(lambda: ReadsFail.failed > 0 and storage._stale), "no failed read while it waited")
                ReadsFail.failing = False
                self.assertTrue(thread.is_alive(), "it wrote without the lock")
                lock.release()
                thread.join(30)
                self.assertEqual(len(enqueued), 1)
                self.assertFalse(storage._stale, "memory was not rebuilt under the lock")
                self.assertEqual(mine.get("appended-meanwhile").payload, "appended while it waited")
                self.assertEqual(sorted(job.payload for job in mine.list_jobs()),
                                 ["a peer's", "appended while it waited", "first", "mine, after it"])  # fmt: skip


    def test_a_pointer_that_cannot_be_looked_at_stops_the_look_and_leaves_memory_as_it_is(self) -> None:
        """The look without the lock asks whether a peer flipped (the pointer) before it reads on.

        An error there is not a reason to rebuild memory: the look reads
        nothing, and the operation under the lock, which looks at the
        pointer too, meets the error (or not, once it has passed).
        """

        class PointerFails(RealFileSystem):
            failing = False

            def lstat_or_none(self, path: str) -> Any:
                if PointerFails.failing and path.endswith(".current"):
                    raise OSError(errno.EIO, "Input/output error (injected)")
                return super().lstat_or_none(path)

        for log_format in (1, 4):
            with self.subTest(log_format=log_format):
                mine, log, end = self.two_writers(log_format, PointerFails())
                storage: Any = mine.storage
                self.write_at(log, end, self.record("appended", "by a peer", 98))
                PointerFails.failing = True
                try:
                    self.assertFalse(storage._read_unlocked_quietly(), "it read on without looking at the pointer")
                finally:
                    PointerFails.failing = False
                self.assertFalse(storage._stale, "memory was marked for a rebuild")
                self.assertEqual(storage._offset, end)
                mine.enqueue("mine, after it")
                self.assertEqual(sorted(job.payload for job in mine.list_jobs()),
                                 ["a peer's", "by a peer", "first", "mine, after it"])  # fmt: skip

    def test_a_record_seen_while_a_peer_writes_it_stops_the_reading_and_is_read_whole_later(self) -> None:
        """In a file with room after its records, a read without the lock can see part of a write.

        The record then fails its check, and by the time anyone looks
        further the peer has finished it and appended more: that is not
        damage. Reading stops there (memory stays as it is, nothing is
        judged) and goes on from it. A compaction copying what peers append
        failed on this with CorruptLogError.
        """

        class TearsOnce(RealFileSystem):
            at = -1  # where the record being written starts, and how long it is (-1: no tearing)
            length = 0

            def pread(self, fd: int, size: int, offset: int) -> bytes:
                data = super().pread(fd, size, offset)
                at, end = TearsOnce.at, TearsOnce.at + TearsOnce.length
                if at >= 0 and offset <= at and offset + len(data) >= end:
                    TearsOnce.at = -1  # once: the write is done by the next read
                    half = at - offset + TearsOnce.length // 2
                    data = data[:half] + bytes(end - offset - half) + data[end - offset :]
                return data

        for log_format in (2, 4):
            with self.subTest(log_format=log_format):
                mine, log, end = self.two_writers(log_format, TearsOnce())
                storage: Any = mine.storage
                whole, being_written = self.record("whole", "whole", 98), self.record("torn", "seen half written", 99)
                after = self.record("after", "appended after it", 100)
                self.write_at(log, end, whole + being_written + after)
                TearsOnce.at, TearsOnce.length = end + len(whole), len(being_written)
                storage._read_unlocked(storage._log)  # a compaction's copying, or an operation's look ahead
                self.assertEqual(TearsOnce.at, -1, "the record was never read half written")
                self.assertFalse(storage._stale)
                self.assertEqual(storage._offset, end + len(whole), "reading did not stop at the record being written")
                storage._read_unlocked(storage._log)
                self.assertEqual(storage._offset, end + len(whole) + len(being_written) + len(after))
                mine.enqueue("mine, after them")
                self.assertEqual(sorted(job.payload for job in mine.list_jobs()), [
                    "a peer's", "appended after it", "first", "mine, after them", "seen half written", "whole"])


class LockWaits(TempDirTestCase):
    """lock.QueueLock.acquire: the work it is given to do while the lock is busy, and the timeout over it."""

    def locks(self, timeout: float, name: str = "some") -> tuple[Any, Any]:
        from nobroker.filestore.fs import OS_FILESYSTEM
        from nobroker.filestore.lock import QueueLock

        path = os.path.join(self.dir, f"{name}.lock")
        holder, waiter = QueueLock(OS_FILESYSTEM, path, 30.0), QueueLock(OS_FILESYSTEM, path, timeout)
        self.addCleanup(waiter.close)
        self.addCleanup(holder.close)
        holder.acquire()
        return holder, waiter

    def test_work_meanwhile_runs_until_the_lock_comes_free(self) -> None:
        holder, waiter = self.locks(60.0)
        calls: list[int] = []

        def meanwhile() -> bool:
            calls.append(1)
            if len(calls) == 3:
                holder.release()
            return True

        waiter.acquire(meanwhile=meanwhile)
        self.assertTrue(waiter.held)
        self.assertEqual(len(calls), 3, "tried again at once after each piece of work, and took it once free")

    def test_work_meanwhile_never_outlasts_the_timeout(self) -> None:
        for found in (True, False):  # always something to do; never anything (the sleeps)
            with self.subTest(found=found):
                _holder, waiter = self.locks(0.05, str(found))
                calls: list[int] = []
                with self.assertRaises(LockTimeoutError):
                    waiter.acquire(meanwhile=lambda: calls.append(1) is None and found)
                self.assertFalse(waiter.held)
                self.assertGreater(len(calls), 1)


if __name__ == "__main__":
    unittest.main()
