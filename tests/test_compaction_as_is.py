"""A compaction copies the record of a job untouched since its enqueue as it is, and only a whole, checked one.

Owns: ``UntouchedJobsCopiedAsTheyAre``: the copied records are the bytes a
rewrite gives, only the named job's whole record checks out, a damaged one
is refused (not copied), a failed read fails the compaction and the next one
goes through. Imports: the standard library, nobroker, tests.support and
tests.compactionsupport.
"""

from __future__ import annotations

import os
import unittest
from typing import Any
from unittest import mock

from nobroker import NobrokerError, Queue, StorageError
from nobroker.filestore.storage import FileStorage
from nobroker.filestore.admin import verify
from tests.compactionsupport import storage
from tests.support import FakeClock, TempDirTestCase, file_bytes


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


if __name__ == "__main__":
    unittest.main()
