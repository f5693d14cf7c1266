"""Automatic compaction decides on bytes superseded, so the disk stays bounded whatever the job sizes.

Owns: promise 16's bound with mixed job sizes (many small waiting jobs, big
ones coming and going) and its converse (a log that is mostly live bytes is
not rewritten again and again, however many small records pile up). Imports:
the standard library, nobroker and tests.support.

The bound: a log is compacted after the batch that takes it past both
AUTO_COMPACT_MIN_BYTES and twice what a compaction keeps, so no log file
outgrows the larger of those two by more than a batch or two.
"""

from __future__ import annotations

import os
import unittest

from nobroker import Queue
from nobroker.filestore.commit import AUTO_COMPACT_MIN_BYTES
from tests.support import TempDirTestCase, records_end

#: The job sizes of the case that once grew a log to 60.9 MB, 99 % superseded, never compacted.
SMALL_JOBS = 3_000
BIG_JOBS = 300
BIG_PAYLOAD_BYTES = 200_000


def log_bytes(directory: str) -> int:
    """Bytes of the records of every generation file of the default queue in ``directory`` (not their room)."""
    return sum(
        records_end(os.path.join(directory, name))
        for name in os.listdir(directory)
        if name.startswith("default.") and name.endswith(".log")
    )


class AutoCompaction(TempDirTestCase):
    def test_big_jobs_done_among_many_small_waiting_ones_are_compacted_away(self) -> None:
        blob = "x" * BIG_PAYLOAD_BYTES
        bound = AUTO_COMPACT_MIN_BYTES + 3 * (BIG_PAYLOAD_BYTES + 1_000)  # a batch or two past the trigger
        largest = 0
        with Queue(self.dir, fsync=False) as q:
            q.enqueue_many([{"small": i} for i in range(SMALL_JOBS)])
            for i in range(BIG_JOBS):
                q.enqueue({"big": i, "blob": blob}, kind="big")
                job = q.lease_one(kinds=["big"])
                assert job is not None
                q.ack(job)
                largest = max(largest, log_bytes(self.dir))
            generation = q.storage.generation  # type: ignore[attr-defined]
            stats = q.stats()
        self.assertGreater(generation, 1, "300 jobs of 200 KB came and went: the log must have been compacted")
        self.assertLessEqual(largest, bound, f"the log grew to {largest:,} bytes; the bound is {bound:,}")
        self.assertEqual((stats.ready, stats.leased, stats.dead), (SMALL_JOBS, 0, 0), "a live job was lost")
        with Queue(self.dir, fsync=False) as again:
            self.assertEqual(again.stats().ready, SMALL_JOBS)
            self.assertEqual(len(again.list_jobs(kind="big")), again.stats().done)

    def test_a_log_of_mostly_live_bytes_is_not_rewritten_for_its_small_records(self) -> None:
        """Counting records would call this log 99 % superseded: 50 big live jobs, and many heartbeats."""
        blob = "y" * BIG_PAYLOAD_BYTES
        with Queue(self.dir, fsync=False, visibility_timeout=600) as q:
            q.enqueue_many([{"big": i, "blob": blob} for i in range(50)])
            self.assertGreater(log_bytes(self.dir), AUTO_COMPACT_MIN_BYTES)
            leased = q.lease(50)
            for _round in range(4):
                for job in leased:
                    q.extend(job, 600)
            self.assertEqual(q.storage.generation, 0, "a log of live jobs was rewritten")  # type: ignore[attr-defined]
            for job in leased:
                q.ack(job)  # once half of them are done, half the bytes are superseded: that compacts
            self.assertGreater(q.storage.generation, 0)  # type: ignore[attr-defined]
            self.assertEqual((q.stats().leased, q.stats().ready), (0, 0))
        self.assertLess(log_bytes(self.dir), AUTO_COMPACT_MIN_BYTES)


if __name__ == "__main__":
    unittest.main()
