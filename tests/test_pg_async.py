"""AsyncQueue on PostgreSQL: the shared AsyncQueue semantics, and the caller's AsyncConnection transaction.

Owns: ``PostgresAsyncQueueTests`` (``AsyncSemantics`` on a migrated schema
per class, the clock moved by ``clock_offset``; an enqueue joins the
caller's async transaction; the wrong kind of connection is refused by
name; a call cancelled mid-statement leaves no broken connection; an async
lease is one statement). Imports: the standard library, the public
``nobroker`` API, tests.pgsupport (psycopg only inside the tests, which skip
with the reason where psycopg or the server is missing) and
tests.semantics_async.
"""

from __future__ import annotations

import asyncio
import unittest
from typing import Any

from nobroker import AsyncQueue, JobNotFoundError, JobState, Queue
from tests.pgsupport import PostgresTestCase, connect, fresh_name
from tests.semantics_async import PATIENCE, AsyncSemantics


class PostgresAsyncQueueTests(AsyncSemantics, unittest.IsolatedAsyncioTestCase, PostgresTestCase):
    """AsyncQueue on PostgreSQL: the Queue's statements awaited on AsyncConnections (a schema per class)."""

    def setUp(self) -> None:
        self.offset = 0.0
        self.queues: list[Any] = []

    async def make_queue(self, **options: Any) -> AsyncQueue:
        q = AsyncQueue(self.dsn, fresh_name("q"), schema=self.schema, migrate=False, **options)
        self.addAsyncCleanup(q.close)
        await q.open()
        self.queues.append(q.storage)
        return q

    def advance(self, seconds: float) -> None:
        self.offset += seconds
        for storage in self.queues:
            storage.clock_offset = self.offset

    def sync_twin(self, q: AsyncQueue) -> Queue:
        twin = Queue(self.dsn, q.name, schema=self.schema, migrate=False, clock_offset=self.offset)
        self.addCleanup(twin.close)
        self.queues.append(twin.storage)
        return twin

    async def test_enqueue_joins_the_callers_async_transaction(self) -> None:
        import psycopg

        q = await self.make_queue()
        twin = self.sync_twin(q)
        async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
            job = await q.enqueue({"order": 1}, conn=conn)
            many = await q.enqueue_many(["a", "b"], conn=conn, job_ids=["ja", "jb"])
            self.assertEqual(twin.lease(5), [], "invisible to others before the commit")
            with self.assertRaises(JobNotFoundError):
                twin.get(job.id)
            await conn.commit()
        self.assertEqual({j.id for j in twin.lease(5)}, {job.id, many[0].id, many[1].id})
        async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
            gone = await q.enqueue("rolled back", conn=conn)
            await conn.rollback()
        with self.assertRaises(JobNotFoundError):
            await q.get(gone.id)
        self.assertEqual(await q.count(), 3)

    async def test_the_wrong_kind_of_connection_is_refused_by_name(self) -> None:
        import psycopg

        q = await self.make_queue()
        with psycopg.connect(self.dsn) as sync_conn, self.assertRaises(ValueError) as caught:
            await q.enqueue("x", conn=sync_conn)
        self.assertIn("AsyncConnection", str(caught.exception))
        twin = self.sync_twin(q)
        async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
            with self.assertRaises(ValueError) as caught:
                twin.enqueue("x", conn=conn)
        self.assertIn("AsyncQueue", str(caught.exception))
        self.assertEqual(await q.count(), 0)

    async def test_a_call_cancelled_mid_statement_leaves_no_broken_connection(self) -> None:
        q = await self.make_queue(lock_timeout=PATIENCE)
        await q.enqueue("held")
        job = await q.lease_one()
        assert job is not None
        work = q.storage._work.first  # the work's connection (not the spare: nothing else holds it)
        backend = work._conn.info.backend_pid  # the connection the ack will wait on
        locker = connect(autocommit=False)
        self.addCleanup(locker.close)
        locker.execute(f'SELECT 1 FROM "{self.schema}".jobs WHERE queue = %s FOR UPDATE', (q.name,))
        acking = asyncio.create_task(q.ack(job))
        # Cancel only once the ack is seen waiting for the row lock in the server.
        watcher = connect()
        self.addCleanup(watcher.close)
        for _ in range(int(PATIENCE / 0.05)):
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid = %s", (backend,)
            ).fetchone()
            if row[0]:
                break
            await asyncio.sleep(0.05)
        else:
            self.fail("the ack never waited for the lock")
        held = work._conn
        acking.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await acking
        locker.rollback()
        self.assertIsNone(work._conn, "the connection a cancelled call left mid-statement is not kept")
        self.assertTrue(held.closed)
        extended = await q.extend_many([job], 60) if (await q.get(job.id)).state is JobState.LEASED else None
        await q.ack(job)  # harmless if the cancelled statement went through when the lock was released
        self.assertIs((await q.get(job.id)).state, JobState.DONE)
        self.assertIsNot(work._conn, held)
        if extended is not None:
            self.assertEqual(extended[0].id, job.id)
        self.assertEqual((await q.stats()).done, 1)

    async def test_a_call_that_finds_the_work_busy_runs_on_a_spare_connection(self) -> None:
        q = await self.make_queue()
        await q.enqueue_many(["a", "b"])
        first, second = await q.lease(2)
        lanes = q.storage._work
        async with lanes.first._lock:  # a call of another task holds the work's connection
            await asyncio.wait_for(q.ack(first), PATIENCE)
            await asyncio.wait_for(q.extend_many([second], 60), PATIENCE)
            await asyncio.wait_for(q.enqueue("c"), PATIENCE)
        self.assertIsNotNone(lanes.spare._conn)
        await q.ack(second)
        stats = await q.stats()
        self.assertEqual((stats.done, stats.ready), (2, 1))

    async def test_a_spare_that_cannot_open_sends_the_call_to_wait_its_turn(self) -> None:
        from unittest import mock

        from nobroker import StorageError

        q = await self.make_queue()
        await q.enqueue("a")
        job = await q.lease_one()
        assert job is not None
        lanes = q.storage._work
        with mock.patch.object(lanes.spare, "_connect", side_effect=StorageError("too many clients")) as opening:
            await lanes.first._lock.acquire()
            acking = asyncio.create_task(q.ack(job))
            try:
                for _ in range(int(PATIENCE / 0.01)):  # until the ack waits for the work's connection
                    if acking.done() or lanes.first._lock._waiters:
                        break
                    await asyncio.sleep(0.01)
                self.assertFalse(acking.done(), "the ack failed, or ran, with no connection to run on")
                self.assertTrue(lanes.first._lock._waiters, "the ack waits for the work's connection")
            finally:
                lanes.first._lock.release()
            await asyncio.wait_for(acking, PATIENCE)
        self.assertEqual(opening.call_count, 1)
        self.assertIsNone(lanes.spare._conn)
        self.assertEqual((await q.stats()).done, 1)

    async def test_an_async_lease_is_one_statement(self) -> None:
        import psycopg

        q = await self.make_queue()
        await q.enqueue_many(list(range(5)))
        await q.stats()
        sent: list[str] = []
        execute = psycopg.AsyncCursor.execute

        async def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(str(query))
            return await execute(cursor, query, *args, **kwargs)

        psycopg.AsyncCursor.execute = counted  # type: ignore[method-assign]
        each: list[tuple[str, int]] = []

        async def one(what: str, call: Any) -> Any:
            before = len(sent)
            result = await call
            each.append((what, len(sent) - before))
            return result

        try:
            jobs = await q.lease(5)
            await q.extend_many(jobs, 60)
            await q.ack_many(jobs)
            self.assertEqual(len(sent), 3, sent)
            await one("enqueue", q.enqueue("single"))
            job = await one("lease", q.lease_one())
            await one("extend", q.extend(job, 60))
            await one("nack", q.nack(job, delay=0))
            job = await one("lease again", q.lease_one())
            await one("ack", q.ack(job))
        finally:
            psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]
        self.assertEqual(each, [(what, 1) for what, _ in each], "one statement each, as the Queue's")


if __name__ == "__main__":
    unittest.main()
