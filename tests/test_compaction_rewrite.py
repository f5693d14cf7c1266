"""A compaction rewrites each job's record from the one before it: a field the job no longer has stays gone.

Owns: ``FieldsDroppedSinceTheLastCompaction``: a job whose record a
compaction wrote while it had a traceback (or a stage), and which has lost
it since (a lease that expired at the last attempt replaces the error and
drops its traceback; the next lease clears the stage), reads the same after
the next compaction when the queue is replayed from the log alone, with no
snapshot or checkpoint to hide what the records say; and the rule beneath:
the keys a rewrite takes from the job (records.JOB_FIELD_KEYS) are every
key job_fields writes, and only a newer nobroker's keys are kept from the
older record. Imports: the standard library, nobroker, tests.support.

Found by the model check's long run (seed 2876): the rewrite kept every key
of the older record that a hand-kept list did not name, and the list had
no traceback, so a traceback written by one compaction came back after the
next (the power-loss sweep had found the same for a stage, seed 25).
"""

from __future__ import annotations

import os
import unittest
from typing import Any

from nobroker import BackoffPolicy, JobState, Queue
from nobroker.filestore.entry import Entry
from nobroker.filestore.records import JOB_FIELD_KEYS, job_fields, rewritten_job
from tests.support import FakeClock, TempDirTestCase

#: A job's record with every field job_fields may write away from its default, and a key of a newer nobroker.
EVERY_FIELD_SET: dict[str, Any] = {
    "id": "j", "payload": {"n": 1}, "priority": 3, "state": "leased", "attempts": 2, "max_attempts": 4,
    "available_at": 5.0, "enqueued_at": 1.0, "lease_deadline": 9.0, "lease_token": "t", "last_error": "e", "seq": 7,
    "kind": "mail", "dedupe_key": "d", "stage": "s", "result": {"r": 1}, "traceback": "tb", "cancel_requested": True,
    "timeout": 3.0, "group": "g", "attempt_history": [[1, 1.0, 2.0, "h:1", "failed"]], "leased_at": 4.0,
    "leased_by": "h:2", "a_later_key": [1],
}  # fmt: skip


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

    def test_a_rewrite_takes_every_key_job_fields_writes_from_the_job_and_keeps_only_newer_keys(self) -> None:
        entry = Entry(dict(EVERY_FIELD_SET), 0)
        self.assertEqual(set(job_fields(entry)), JOB_FIELD_KEYS, "JOB_FIELD_KEYS must name every key job_fields writes")
        bare = Entry({"id": "j", "payload": {"n": 1}, "enqueued_at": 1.0, "seq": 7}, 0)  # every field at its default
        _rtype, lean = rewritten_job(bare, dict(EVERY_FIELD_SET), lean=True)
        self.assertEqual(lean, {"id": "j", "payload": {"n": 1}, "enqueued_at": 1.0, "seq": 7, "a_later_key": [1]})
        _rtype, full = rewritten_job(bare, dict(EVERY_FIELD_SET))  # format versions 1 and 2 write every available_at
        self.assertEqual(full, {"id": "j", "payload": {"n": 1}, "available_at": 1.0, "enqueued_at": 1.0, "seq": 7,
                                "a_later_key": [1]})  # fmt: skip

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
