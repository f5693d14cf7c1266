"""Batch enqueue on PostgreSQL under contention: a fixed insert order, FIFO kept, conflicts retried.

Imports: the standard library, psycopg (through tests.pgsupport), the public
``nobroker`` API and nobroker.postgres.enqueueing. The contention is real:
two processes enqueue the same dedupe keys in opposite orders at the same
moment, with retries turned off, so a deadlock would surface as an error.
"""

from __future__ import annotations

import multiprocessing
import unittest
from typing import Any
from unittest import mock

from nobroker import Queue, StorageError
from tests.pgsupport import PostgresQueueCase, connect

PATIENCE = 60.0
#: Rounds of the race, and keys per batch.
ROUNDS, KEYS = 30, 20

_fork = multiprocessing.get_context("fork")


def _race(dsn: str, schema: str, name: str, reverse: bool, barrier: Any, out: Any) -> None:
    """A process: each round, one batch of the round's keys (in the given order), at the barrier's signal."""
    from nobroker.postgres import enqueueing

    failures: list[str] = []
    enqueueing.CONFLICT_TRIES = 1  # a deadlock is an error here, not a retry
    with Queue(dsn, name, schema=schema, migrate=False) as q:
        for r in range(ROUNDS):
            keys = [f"r{r}-k{k:02d}" for k in range(KEYS)]
            if reverse:
                keys.reverse()
            barrier.wait(PATIENCE)
            try:
                q.enqueue_many([{"key": key} for key in keys], dedupe_keys=keys)
            except Exception as exc:
                failures.append(f"round {r}: {exc}")
    out.put(failures)


class BatchEnqueueTests(PostgresQueueCase):
    def test_two_batches_of_the_same_keys_in_opposite_orders_never_deadlock(self) -> None:
        barrier, out = _fork.Barrier(2), _fork.Queue()
        procs = [
            _fork.Process(target=_race, args=(self.dsn, self.schema, self.name, reverse, barrier, out))
            for reverse in (False, True)
        ]
        for p in procs:
            p.start()
        failures = [out.get(timeout=PATIENCE * 4) for _ in procs]
        for p in procs:
            p.join(PATIENCE)
        self.assertEqual(failures, [[], []])
        q = self.open_queue()
        self.assertEqual(len(q), ROUNDS * KEYS, "one job per key")

    def test_a_batch_that_may_conflict_stays_fifo(self) -> None:
        q = self.open_queue()
        keys = ["zz", "mm", "aa", "qq"]
        jobs = q.enqueue_many(keys, dedupe_keys=keys)
        again = q.enqueue_many(["new", "aa"], dedupe_keys=["bb", "aa"], job_ids=["j-new", "j-aa"])
        self.assertEqual(again[1].id, jobs[2].id, "the job holding the key is returned")
        self.assertEqual([job.payload for job in q.lease(10)], keys + ["new"])
        dup = q.enqueue_many(["first", "second"], job_ids=["same", "same"])
        self.assertEqual([job.payload for job in dup], ["first", "first"])

    def test_a_deadlock_on_our_own_connection_is_retried(self) -> None:
        from nobroker.postgres import enqueueing
        from nobroker.postgres.driver import pg_errors

        q = self.open_queue()
        real = enqueueing.enqueue
        calls: list[int] = []

        def once_deadlocked(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                raise pg_errors.DeadlockDetected("deadlock detected (simulated)")
            return real(*args, **kwargs)

        with mock.patch.object(enqueueing, "enqueue", once_deadlocked):
            jobs = q.enqueue_many(["a", "b"], dedupe_keys=["a", "b"])
        self.assertEqual(len(calls), 2)
        self.assertEqual([job.payload for job in jobs], ["a", "b"])

    def test_in_the_callers_transaction_a_deadlock_is_the_callers_to_handle(self) -> None:
        from nobroker.postgres import enqueueing
        from nobroker.postgres.driver import pg_errors

        q = self.open_queue()
        with mock.patch.object(enqueueing, "enqueue", side_effect=pg_errors.DeadlockDetected("simulated")):
            with connect(autocommit=False) as conn, self.assertRaises(StorageError):
                q.enqueue_many(["a", "b"], dedupe_keys=["a", "b"], conn=conn)


if __name__ == "__main__":
    unittest.main()
