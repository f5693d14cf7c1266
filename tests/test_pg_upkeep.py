"""The PostgreSQL table stays small: pruning by retention, compaction in bounded batches, vacuum settings.

Imports: the standard library, psycopg (through tests.pgsupport), the public
``nobroker`` API and nobroker.postgres.statements. The clock moves by the
storage's clock_offset (added to the database clock in every statement).
"""

from __future__ import annotations

import threading
import time
import unittest
from unittest import mock
from typing import Any

from nobroker import JobNotFoundError
from nobroker.postgres import queue_ops
from nobroker.postgres import storage as postgres_storage
from nobroker.postgres.connection import Session
from nobroker.postgres.fragments import MAX_PRUNE_SPAN, PRUNE_BATCH
from nobroker.postgres.steps import drive
from nobroker.postgres.storage import PRUNE_CATCH_UP
from tests.pgsupport import PostgresQueueCase, connect
from tests.support import wait_until

PATIENCE = 60.0


class UpkeepTests(PostgresQueueCase):
    def test_done_and_dead_jobs_past_their_retention_are_pruned_by_the_work_itself(self) -> None:
        q = self.open_queue(done_retention=5, dead_retention=50, max_attempts=1)
        q.enqueue_many(list(range(30)))
        jobs = q.lease(30)
        q.ack_many(jobs[:20])
        for job in jobs[20:]:
            q.nack(job, error="no")
        q.storage.clock_offset = 6  # type: ignore[attr-defined]
        young = q.enqueue("young")
        q.ack(q.lease_one())  # type: ignore[arg-type]
        q.storage._prune_at = 0  # type: ignore[attr-defined]  # the next lease starts a round now
        q.lease()
        self.assertTrue(wait_until(lambda: q.stats().done == 1, PATIENCE), q.stats())
        self.assertEqual(q.stats().dead, 10, "dead jobs younger than dead_retention stay")
        self.assertEqual(q.get(young.id).payload, "young")
        with self.assertRaises(JobNotFoundError):
            q.get(jobs[0].id)
        q.storage._pruning.join(PATIENCE)  # type: ignore[attr-defined]  # the round ends (a round never starts beside one)
        q.storage.clock_offset = 60  # type: ignore[attr-defined]
        q.storage._prune_at = 0  # type: ignore[attr-defined]
        q.lease()
        self.assertTrue(wait_until(lambda: len(q) == 0, PATIENCE), q.stats())

    def test_a_round_that_finds_a_backlog_brings_the_next_round_near(self) -> None:
        # A round prunes at most PRUNE_BATCHES batches: jobs finishing faster than that every
        # PRUNE_INTERVAL would pile up for ever. One that deleted at least half of what it may
        # is followed by the next within PRUNE_CATCH_UP; one that found little, in PRUNE_INTERVAL.
        q = self.open_queue(done_retention=5)
        total = 3 * PRUNE_BATCH + 10
        for start in range(0, total, 1000):
            q.enqueue_many(list(range(start, min(start + 1000, total))))
        while jobs := q.lease(1000):
            q.ack_many(jobs)
        storage: Any = q.storage
        storage.clock_offset = 6
        rounds = 0

        def round_of_pruning() -> None:
            nonlocal rounds
            storage._prune_at = 0  # the next lease starts a round now
            q.lease()
            storage._pruning.join(PATIENCE)
            self.assertFalse(storage._pruning.is_alive())
            rounds += 1

        with mock.patch.object(postgres_storage, "PRUNE_BATCHES", 1):  # a round: one batch per retention
            while q.stats().done:
                self.assertLess(rounds, total // PRUNE_BATCH + 1, "each round of a backlog deletes a batch")
                round_of_pruning()
                self.assertEqual(q.stats().done, max(0, total - rounds * PRUNE_BATCH))
                if rounds * PRUNE_BATCH <= total:
                    self.assertLessEqual(storage._prune_at - time.monotonic(), PRUNE_CATCH_UP, "the next round soon")
            round_of_pruning()  # nothing left: the next round in PRUNE_INTERVAL (30 s)
            self.assertGreater(storage._prune_at - time.monotonic(), PRUNE_CATCH_UP, "no backlog: not soon")
        self.assertEqual(len(q), 0)

    def test_without_retentions_nothing_is_pruned(self) -> None:
        q = self.open_queue(done_retention=None)
        q.enqueue("x")
        q.ack(q.lease_one())  # type: ignore[arg-type]
        q.storage.clock_offset = 10**9  # type: ignore[attr-defined]
        q.storage._prune_at = 0  # type: ignore[attr-defined]
        q.lease()
        q.storage._pruning.join(PATIENCE)  # type: ignore[attr-defined]
        self.assertEqual(q.stats().done, 1)

    def test_compaction_deletes_in_bounded_batches_and_counts_stay_exact(self) -> None:
        q = self.open_queue()
        total = PRUNE_BATCH * 2 + 10
        for start in range(0, total, 1000):
            q.enqueue_many(list(range(start, min(start + 1000, total))))
        while True:
            jobs = q.lease(500)
            if not jobs:
                break
            q.ack_many(jobs)
        q.enqueue("live")
        statements: list[str] = []
        real = Session.execute

        def recorded(session: Session, query: Any, params: Any = None) -> Any:
            statements.append(str(query))
            return real(session, query, params)

        with mock.patch.object(Session, "execute", recorded):  # every statement an operation sends
            result = q.compact()
        self.assertEqual((result.jobs_dropped, result.jobs_kept), (total, 1))
        deletes = [s for s in statements if s == q.storage._target.sql["prune"]]  # type: ignore[attr-defined]
        # One bounded DELETE per batch of done jobs (2 full, 1 short), then one that finds no cancelled job.
        self.assertEqual(len(deletes), 4, "one bounded DELETE per batch")
        self.assertEqual((len(q), q.stats().ready, q.stats().done), (1, 1, 0))

    def test_a_batch_that_meets_a_job_changed_meanwhile_still_goes_on_from_its_last_job(self) -> None:
        # Another transaction changes one of the jobs a batch took while the batch waits for its
        # row lock: the DELETE checks it again and leaves it. The batch still took a full batch,
        # so the next one starts after the last job it took. Counted by what it deleted, it
        # looked short, and the next batch started past its span: the rest of the span stayed.
        q = self.open_queue(done_retention=None)
        total = PRUNE_BATCH + 1000
        for start in range(0, total, 1000):
            q.enqueue_many(list(range(start, min(start + 1000, total))))
        while jobs := q.lease(1000):
            q.ack_many(jobs)
        seqs = sorted(job.seq for job in q.list_jobs("done", limit=None))
        self.assertEqual(len(seqs), total)
        pruner, blocker = connect(), connect(autocommit=False)
        batch = queue_ops.prune_batch(q.storage._target, "done", 0.0, 0, MAX_PRUNE_SPAN)  # type: ignore[attr-defined]
        got: list[tuple[int, int | None, int]] = []
        thread = threading.Thread(target=lambda: got.append(drive(Session(pruner), batch)))

        def let_go() -> None:  # in this order, also when the test failed half way: the batch is let go first
            blocker.close()
            if thread.ident is not None:
                thread.join(PATIENCE)
            pruner.close()

        self.addCleanup(let_go)
        blocker.execute(  # a new version of the job (as a requeue makes), its lock held until commit
            f'UPDATE "{self.schema}".jobs SET finished_at = finished_at WHERE queue = %s AND seq = %s',
            (self.name, seqs[10]),
        )
        thread.start()
        pid = pruner.info.backend_pid
        with connect() as watcher:
            waiting = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
            self.assertTrue(wait_until(lambda: watcher.execute(waiting, (pid,)).fetchone()[0], PATIENCE))
        blocker.commit()
        thread.join(PATIENCE)
        self.assertEqual(len(got), 1, "the batch ended")
        deleted, after, span = got[0]
        self.assertEqual(deleted, PRUNE_BATCH - 1, "the changed job stays")
        self.assertEqual(after, seqs[PRUNE_BATCH - 1], "the next batch starts after the last job this one took")
        self.assertEqual(span, MAX_PRUNE_SPAN // 2)
        self.assertEqual(q.stats().done, total - deleted)
        self.assertEqual(q.compact().jobs_dropped, total - deleted)

    def test_the_migration_sets_vacuum_and_fillfactor(self) -> None:
        with connect() as conn:
            options = conn.execute(
                "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (f'"{self.schema}".jobs',)
            ).fetchone()[0]
        self.assertIn("fillfactor=90", options)
        self.assertIn("autovacuum_vacuum_scale_factor=0.02", options)


if __name__ == "__main__":
    unittest.main()
