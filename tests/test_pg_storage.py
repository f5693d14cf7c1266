"""The PostgreSQL queue's options and properties, and what it does that the shared semantic suite does not reach.

Owns: the part of ``PostgresStorageTests`` about options (durable and fsync,
huge values refused, the password hidden), retention, queues sharing one
table, requeue_dead under an active dedupe key, ack_many's partial
refusal, reads that show an expired lease as its reclaim, and the Worker
run unchanged. Imports: the standard library, psycopg (through
tests.pgsupport), the public ``nobroker`` API, nobroker.postgres
(redact_dsn) and tests.pgstoragesupport.
"""

from __future__ import annotations

import time
import unittest
from typing import Any

from nobroker import JobState, NotLeasedError, PermanentError, Queue, Worker
from tests.pgsupport import connect, fresh_name
from tests.pgstoragesupport import NO_BACKOFF, PostgresStorageCase


class PostgresStorageTests(PostgresStorageCase):
    """Behaviour of the PostgreSQL storage beyond the shared semantic suite: options and properties."""

    def test_options_and_properties(self) -> None:
        with self.assertRaises(ValueError):
            Queue(self.dsn, schema=self.schema, clock=time.time)
        q = self.open_queue()
        self.assertIs(q.durable, True)
        self.assertTrue(q.path.startswith("postgres"))
        fast = self.open_queue(fsync=False)
        self.assertIs(fast.durable, False)
        setting = fast.storage._link._conn.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[attr-defined]
        self.assertEqual(setting, "off")
        self.assertIn("NOT durable", repr(fast))

    def test_huge_integer_seconds_options_raise_value_error(self) -> None:
        for option in ("retention", "reconnect_timeout", "clock_offset"):
            with self.subTest(option=option), self.assertRaises(ValueError) as caught:
                Queue(self.dsn, schema=self.schema, **{option: 10**400})
            self.assertNotIsInstance(caught.exception, OverflowError)

    def test_location_hides_the_password(self) -> None:
        from nobroker.postgres import redact_dsn

        self.assertEqual(redact_dsn("postgresql://app:s3cret@db:5432/jobs"), "postgresql://app@db:5432/jobs")
        self.assertEqual(
            redact_dsn("postgres://db/jobs?sslmode=require&password=s3cret"), "postgres://db/jobs?sslmode=require"
        )
        self.assertEqual(redact_dsn(self.dsn), self.dsn)

    def test_compact_keeps_done_jobs_younger_than_the_retention(self) -> None:
        q = self.open_queue(retention=3600)
        q.enqueue_many(["a", "b"])
        for job in q.lease(2):
            q.ack(job)
        self.assertEqual(q.compact().jobs_dropped, 0)
        self.assertEqual(q.stats().done, 2)
        q.storage.clock_offset = 3601  # type: ignore[attr-defined]
        result = q.compact()
        self.assertEqual((result.jobs_dropped, result.jobs_kept), (2, 0))

    def test_queues_share_the_table_but_nothing_else(self) -> None:
        a, b = self.open_queue(fresh_name("a")), self.open_queue(fresh_name("b"))
        a.enqueue("for a", job_id="same", dedupe_key="k")
        b.enqueue("for b", job_id="same", dedupe_key="k")
        self.assertEqual((a.get("same").payload, b.get("same").payload), ("for a", "for b"))
        self.assertEqual(b.purge(), 1)
        self.assertEqual((len(a), len(b)), (1, 0))

    def test_requeue_dead_respects_an_active_dedupe_key(self) -> None:
        q = self.open_queue()
        first = q.enqueue("first", dedupe_key="k", max_attempts=1)
        q.nack(q.lease_one(), error="boom")  # type: ignore[arg-type]
        second = q.enqueue("second", dedupe_key="k")
        self.assertNotEqual(second.id, first.id)
        with self.assertRaises(ValueError):
            q.requeue_dead(first.id)
        self.assertEqual(q.requeue_dead(), 0)
        self.assertIs(q.get(first.id).state, JobState.DEAD)
        q.ack(q.lease_one())  # type: ignore[arg-type]
        self.assertEqual(q.requeue_dead(), 1)
        self.assertEqual(q.enqueue("third", dedupe_key="k").id, first.id)

    def test_ack_many_acks_what_it_can_and_names_the_rest(self) -> None:
        q = self.open_queue()
        q.enqueue_many(["a", "b", "c"])
        a, b, c = q.lease(3)
        stale = (b.id, "not-the-token", None)
        with self.assertRaises(NotLeasedError):
            q.storage.ack_many([(a.id, a.lease_token, '"ra"'), stale, (c.id, None, None)])  # type: ignore[attr-defined]
        self.assertEqual([q.get(j.id).state for j in (a, b, c)], [JobState.DONE, JobState.LEASED, JobState.DONE])
        self.assertEqual(q.get(a.id).result, "ra")
        q.storage.ack_many([(a.id, a.lease_token, None), (b.id, b.lease_token, None)])  # type: ignore[attr-defined]
        self.assertIs(q.get(b.id).state, JobState.DONE)

    def test_reads_show_an_expired_lease_as_its_reclaim_and_change_no_row(self) -> None:
        q = self.open_queue(max_attempts=1, visibility_timeout=10)
        job = q.enqueue("work")
        q.lease()
        q.storage.clock_offset = 11  # type: ignore[attr-defined]
        self.assertEqual((q.stats().dead, q.stats().leased), (1, 0))
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        self.assertIs(q.get(job.id).state, JobState.DEAD)
        with connect() as conn:
            row = conn.execute(
                f'SELECT state, lease_token IS NOT NULL FROM "{self.schema}".jobs WHERE queue = %s AND id = %s',
                (self.name, job.id),
            ).fetchone()
        self.assertEqual(tuple(row), ("leased", True), "a read changed the row")

    def test_the_worker_runs_unchanged(self) -> None:
        q = self.open_queue(max_attempts=2, backoff=NO_BACKOFF)
        jobs = q.enqueue_many([{"n": n} for n in range(20)])
        bad = q.enqueue({"n": -1})
        flaky = q.enqueue({"n": -2})

        def handler(job: Any) -> Any:
            n = job.payload["n"]
            if n == -1:
                raise PermanentError("negative")
            if n == -2:
                raise RuntimeError("flaky")
            q.set_stage(job, "squaring")
            return n * n

        stats = Worker(q, handler, concurrency=4, idle_timeout=0.5, poll_interval=0.05, handle_signals=False).run()
        self.assertEqual((stats.succeeded, stats.dead, stats.failed, stats.lost_leases), (20, 2, 1, 0))
        self.assertEqual([q.get(j.id).result for j in jobs], [n * n for n in range(20)])
        self.assertEqual([j.id for j in q.dlq()], [bad.id, flaky.id])
        self.assertEqual(q.get(jobs[0].id).stage, "squaring")


if __name__ == "__main__":
    unittest.main()
