"""A compaction rewrites each job's record from the one before it: a field the job no longer has stays gone.

Owns: ``FieldsDroppedSinceTheLastCompaction``: a job whose record a
compaction wrote while it had a traceback (or a stage), and which has lost
it since (a lease that expired at the last attempt replaces the error and
drops its traceback; the next lease clears the stage), reads the same after
the next compaction when the queue is replayed from the log alone, with no
snapshot or checkpoint to hide what the records say. Imports: the standard
library, nobroker, tests.support.

Found by the model check's long run (seed 2876): the rewrite kept every key
of the older record that it did not write itself, so a traceback written by
one compaction came back after the next.
"""

from __future__ import annotations

import os
import unittest
from typing import Any

from nobroker import BackoffPolicy, JobState, Queue
from tests.support import FakeClock, TempDirTestCase


class FieldsDroppedSinceTheLastCompaction(TempDirTestCase):
    def open(self, clock: FakeClock) -> Queue:
        return Queue(self.dir, auto_compact=None, visibility_timeout=10, backoff=BackoffPolicy(base=0), clock=clock)

    def replayed(self, clock: FakeClock) -> Queue:
        """The queue opened from its log alone: every snapshot and checkpoint removed first."""
        for name in os.listdir(self.dir):
            if name.endswith(".snap"):
                os.unlink(os.path.join(self.dir, name))
        return self.open(clock)

    def assert_same_after_replay(self, q: Queue, clock: FakeClock) -> list[dict[str, Any]]:
        before = [job.to_dict() for job in q.list_jobs()]
        q.close()
        with self.replayed(clock) as again:
            self.assertEqual([job.to_dict() for job in again.list_jobs()], before)
        return before

    def test_a_traceback_dropped_by_an_expired_last_attempt_stays_dropped(self) -> None:
        clock = FakeClock(1000.0)
        q = self.open(clock)
        job = q.enqueue({"resize": "photo.jpg"}, max_attempts=2)
        q.nack(q.lease_one(), error="ValueError: first", traceback="Traceback ...\nValueError: first\n")
        q.compact()  # the job's record now carries the traceback
        q.lease_one()
        clock.advance(11)  # the last attempt's lease expires
        q.lease()  # the reclaim is written: dead, with the expiry's error and no traceback
        q.compact()
        (shown,) = self.assert_same_after_replay(q, clock)
        self.assertEqual(shown["id"], job.id)
        self.assertEqual(
            (shown["state"], shown["last_error"], shown["traceback"]),
            (JobState.DEAD.value, "lease expired on attempt 2 of 2", None),
        )

    def test_a_stage_cleared_by_the_next_lease_stays_cleared(self) -> None:
        clock = FakeClock(1000.0)
        q = self.open(clock)
        q.enqueue({"resize": "photo.jpg"}, max_attempts=3)
        q.set_stage(q.lease_one(), "fetch")
        q.compact()  # the job's record now carries the stage
        clock.advance(11)  # the lease expires: ready again
        q.lease_one()  # a new attempt, no stage yet
        q.compact()
        (shown,) = self.assert_same_after_replay(q, clock)
        self.assertEqual((shown["state"], shown["stage"]), (JobState.LEASED.value, None))


if __name__ == "__main__":
    unittest.main()
