"""The PostgreSQL storage's connections: work never waits behind operator reads; settings; dead backends; old snapshots.

Imports: the standard library, psycopg (through tests.pgsupport), the public
``nobroker`` API and nobroker.postgres (queue_ops, statements, steps, turns). A slow read is made slow
for real (pg_sleep on the read's own connection); a terminated backend is
terminated by the server (pg_terminate_backend); a long transaction is held
open by a second connection for the whole test.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import unittest
from typing import Any
from unittest import mock

from nobroker import BackoffPolicy
from tests.pgsupport import PostgresQueueCase, connect
from tests.support import wait_until

PATIENCE = 60.0
#: How long each batch of the made-slow compaction sleeps, holding its connection.
SLOW_BATCH = 0.3
#: How long the made-slow read sleeps: far longer than a heartbeat may take.
SLOW_READ = 3.0


class TurnsTest(unittest.TestCase):
    """The connection's mutex lets a waiting thread go first between two runs of one operation (no server needed)."""

    def test_a_thread_that_waits_has_the_mutex_before_the_holder_takes_it_again(self) -> None:
        from nobroker.postgres.turns import Turns

        turns = Turns()
        took, let_go = threading.Event(), threading.Event()

        def waiter() -> None:
            with turns:
                took.set()
                let_go.wait(PATIENCE)

        turns.acquire()
        thread = threading.Thread(target=waiter)
        thread.start()
        self.assertTrue(wait_until(lambda: turns._waiting == 1, PATIENCE), "the other thread waits")
        turns.release()
        turns.let_others_in(PATIENCE)
        self.assertTrue(took.is_set(), "let_others_in returned before the waiting thread had the mutex")
        let_go.set()
        thread.join(PATIENCE)
        with turns:  # free again once the other let go
            pass

    def test_with_no_one_waiting_it_returns_at_once(self) -> None:
        from nobroker.postgres.turns import Turns

        turns = Turns()
        started = time.monotonic()
        turns.let_others_in(PATIENCE)
        with turns:
            pass
        turns.let_others_in(PATIENCE)
        self.assertLess(time.monotonic() - started, PATIENCE / 2, "it waited for no one")


class ConnectionTests(PostgresQueueCase):
    def test_a_heartbeat_and_an_ack_never_wait_behind_a_long_operator_read(self) -> None:
        from nobroker.postgres import queue_ops as operations
        from nobroker.postgres.steps import run

        q = self.open_queue()
        q.enqueue_many(["a", "b"])
        first, second = q.lease(2)
        real = operations.stats
        reading = threading.Event()

        def slow_stats(t: Any) -> Any:
            reading.set()
            yield run("SELECT pg_sleep(%s)", (SLOW_READ,))
            return (yield from real(t))

        with mock.patch.object(operations, "stats", slow_stats):
            reader = threading.Thread(target=q.stats)
            reader.start()
            self.assertTrue(reading.wait(PATIENCE))
            q.extend(first, 30)
            q.ack(second)
            self.assertTrue(reader.is_alive(), "the heartbeat and the ack waited for the read to finish")
            reader.join(PATIENCE)
        self.assertEqual(q.stats().done, 1)

    def _beside_a_lease_in_flight(self, q: Any, work: Any) -> list[Any]:
        """Run ``work()`` while another thread's lease holds the work's connection; what that lease got."""
        from nobroker.postgres import limit_ops
        from nobroker.postgres.steps import run

        real = limit_ops.claim
        leasing, let_go = threading.Event(), threading.Event()

        def held_claim(*args: Any) -> Any:
            yield run("SELECT 1", None)  # the work's connection is in use from here
            leasing.set()
            let_go.wait(PATIENCE)  # ... and stays in use until the test has done its part
            return (yield from real(*args))

        got: list[Any] = []
        with mock.patch.object(limit_ops, "claim", held_claim):
            leaser = threading.Thread(target=lambda: got.append(q.lease(1)))
            leaser.start()
            try:
                self.assertTrue(leasing.wait(PATIENCE))
                work()
                self.assertTrue(leaser.is_alive(), "the work waited for the lease in flight")
            finally:
                let_go.set()
                leaser.join(PATIENCE)
        return got[0]

    def test_the_work_of_another_thread_runs_beside_a_lease_in_flight(self) -> None:
        q = self.open_queue(backoff=BackoffPolicy(base=3600, jitter=0))
        q.enqueue_many(["a", "b", "c", "d"])
        first, second, third = q.lease(3)

        def work() -> None:  # every kind of work a Worker's threads or its handlers send
            q.extend(first, 30)
            q.extend_many([first, second], 30)
            q.set_stage(second, "half way")
            q.ack(second)
            q.ack_many([third])
            q.nack(first, error="again later")
            q.enqueue("e")

        self.assertEqual([job.payload for job in self._beside_a_lease_in_flight(q, work)], ["d"])
        stats = q.stats()
        self.assertEqual((stats.done, stats.delayed, stats.ready, stats.leased), (2, 1, 1, 1))
        spare = q.storage._spare._conn.info.backend_pid  # type: ignore[attr-defined]
        with connect() as admin:  # the spare connection dies while idle: the next that needs it opens a new one
            admin.execute("SELECT pg_terminate_backend(%s)", (spare,))
            self.assertTrue(wait_until(
                lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (spare,)).fetchone()[0] == 0,
                PATIENCE,
            ))  # fmt: skip
        self.assertEqual([job.payload for job in self._beside_a_lease_in_flight(q, lambda: q.enqueue("f"))], ["e"])
        self.assertEqual(len(q), 6)

    def test_a_spare_that_cannot_open_sends_the_work_to_wait_its_turn(self) -> None:
        from nobroker import StorageError

        q = self.open_queue()
        q.enqueue_many(["a", "b", "c", "d"])
        first, second = q.lease(2)
        storage: Any = q.storage
        waiting = storage._link._mutex  # the work's connection: who waits for it
        outcomes: list[Any] = []
        threads: list[threading.Thread] = []

        def waits_its_turn(call: Any) -> Any:
            def work() -> None:
                thread = threading.Thread(target=lambda: outcomes.append(call()))
                thread.start()
                threads.append(thread)
                self.assertTrue(wait_until(lambda: waiting._waiting == 1, PATIENCE), "it waits for the work's connection")
            return work

        def went_through(count: int) -> None:
            # The waiting thread finishes before the next round: else the next lease could take the
            # connection first (a lock is not fair), and two threads would wait for it.
            threads[-1].join(PATIENCE)
            self.assertFalse(threads[-1].is_alive())
            self.assertEqual(len(outcomes), count, "it went through once the work's connection was free")

        with mock.patch.object(storage._spare, "_connect", side_effect=StorageError("too many clients")) as opening:
            got = self._beside_a_lease_in_flight(q, waits_its_turn(lambda: q.ack(first)))
            self.assertEqual(opening.call_count, 1, "the spare was tried once, at once")
            went_through(1)
            # Within SPARE_PAUSE the spare is not tried again: the work waits its turn at once.
            got += self._beside_a_lease_in_flight(q, waits_its_turn(lambda: q.extend(second, 30)))
            self.assertEqual(opening.call_count, 1)
            went_through(2)
        self.assertEqual(sorted(job.payload for job in got), ["c", "d"])
        self.assertIsNone(storage._spare._current())
        q.ack(second)
        self.assertEqual(q.stats().done, 2)

    def test_a_queue_used_from_one_thread_opens_no_spare_connection(self) -> None:
        q = self.open_queue()
        q.enqueue_many(["a", "b"])
        job, other = q.lease(2)
        q.extend(job, 30)
        q.extend_many([job, other], 30)
        q.ack(job)
        q.nack(other, error="again")
        q.ack_many(q.lease(1))
        self.assertIsNone(q.storage._spare._current(), "one thread's work opened a second working connection")  # type: ignore[attr-defined]

    def test_an_operator_read_waits_for_one_batch_of_a_compaction_not_the_whole(self) -> None:
        from nobroker.postgres import queue_ops as operations
        from nobroker.postgres.fragments import PRUNE_BATCH
        from nobroker.postgres.steps import run

        q = self.open_queue(done_retention=None)
        total = PRUNE_BATCH * 3 + 10  # four batches of done jobs
        for start in range(0, total, 1000):
            q.enqueue_many(list(range(start, min(start + 1000, total))))
        while jobs := q.lease(1000):
            q.ack_many(jobs)
        real = operations.prune_batch
        batches = 0
        first_batch = threading.Event()

        def slow_batch(t: Any, state: str, keep: float, after: int, span: int) -> Any:
            nonlocal batches
            batches += 1
            first_batch.set()
            yield run("SELECT pg_sleep(%s)", (SLOW_BATCH,))  # on the compaction's connection, holding it
            return (yield from real(t, state, keep, after, span))

        got: list[tuple[int, int]] = []
        side = q.storage._side._mutex  # type: ignore[attr-defined]
        with mock.patch.object(operations, "prune_batch", slow_batch):
            compactor = threading.Thread(target=q.compact)
            compactor.start()
            self.assertTrue(first_batch.wait(PATIENCE))
            # The read shares the compaction's connection: it waits for it from here.
            reader = threading.Thread(target=lambda: got.append((q.stats().done, batches)))
            reader.start()
            self.assertTrue(wait_until(lambda: side._waiting > 0 or bool(got), PATIENCE), "the read waits")
            waiting_from = batches
            reader.join(PATIENCE)
            compactor.join(PATIENCE)
        done, returned_at = got[0]
        # Batches count as they start: the one in flight when the read began waiting, and at most
        # one more that started between its answer and its look at the count.
        self.assertLessEqual(returned_at - waiting_from, 2, f"the read waited from batch {waiting_from} to {returned_at}")
        self.assertLess(done, total, "the read came after a batch")
        self.assertEqual(batches, 5, "four batches of done jobs, one that found no cancelled job")
        self.assertEqual(q.stats().done, 0)

    def test_sessions_carry_the_timeouts_and_keepalives(self) -> None:
        q = self.open_queue(statement_timeout=7.5, tcp_user_timeout=12)
        len(q)
        q.enqueue("x")
        for link in (q.storage._link, q.storage._side):  # type: ignore[attr-defined]
            conn = link._connection()
            self.assertEqual(conn.execute("SHOW statement_timeout").fetchone()[0], "7500ms")
            params = conn.info.get_parameters()
            self.assertEqual(params.get("tcp_user_timeout"), "12000")
            self.assertEqual(params.get("keepalives_idle"), "10")
        for bad in (-1, float("nan"), 10**400):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                self.open_queue(statement_timeout=bad)

    def test_a_statement_past_statement_timeout_fails_and_the_queue_carries_on(self) -> None:
        from nobroker import StorageError
        from nobroker.postgres import queue_ops as operations
        from nobroker.postgres.steps import run

        q = self.open_queue(statement_timeout=0.2)
        q.enqueue("x")
        def slow_count(t: Any) -> Any:
            yield run("SELECT pg_sleep(5)", ())

        with mock.patch.object(operations, "count", slow_count):
            with self.assertRaises(StorageError) as caught:
                len(q)
        self.assertIn("statement timeout", str(caught.exception))
        self.assertEqual(len(q), 1)

    def test_every_connection_comes_back_after_its_backend_is_terminated(self) -> None:
        q = self.open_queue(backoff=BackoffPolicy(base=0, jitter=0))
        q.enqueue("x")
        self.assertEqual(q.stats().ready, 1)
        q.wait_for_jobs(0.01)  # the listening connection is open too
        pids = [
            q.storage._link._conn.info.backend_pid,  # type: ignore[attr-defined]
            q.storage._side._conn.info.backend_pid,  # type: ignore[attr-defined]
            q.storage._listener._conn.info.backend_pid,  # type: ignore[attr-defined]
        ]
        with connect() as admin:
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            self.assertTrue(wait_until(
                lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0] == 0,
                PATIENCE,
            ))  # fmt: skip
        self.assertTrue(q.wait_for_jobs(PATIENCE), "a dead listening connection wakes the waiter")
        job = q.lease_one()
        self.assertIsNotNone(job)
        self.assertEqual(q.stats().leased, 1)
        q.ack(job)  # type: ignore[arg-type]
        self.assertEqual(q.stats().done, 1)

    def test_a_long_held_transaction_neither_blocks_the_work_nor_compaction(self) -> None:
        q = self.open_queue()
        held = connect(autocommit=False)
        self.addCleanup(held.close)
        held.execute("SELECT txid_current()")  # an old snapshot, held open: vacuum keeps every dead row for it
        held.execute(f'SELECT count(*) FROM "{self.schema}".jobs')
        for _round in range(5):
            q.enqueue_many(list(range(200)))
            for _ in range(2):
                jobs = q.lease(100)
                q.ack_many(jobs)
        self.assertEqual(q.stats().done, 1000)
        result = q.compact()
        self.assertEqual((result.jobs_dropped, result.jobs_kept), (1000, 0))
        self.assertEqual(len(q), 0)
        held.rollback()


class AfterFork(PostgresQueueCase):
    @unittest.skipUnless(hasattr(os, "fork"), "needs os.fork")
    def test_a_forked_child_is_not_stopped_by_a_lock_a_thread_of_its_parent_held(self) -> None:
        """A Worker's pool forks while another thread of the parent is inside a call on the same queue
        (its announcement, a caller's read): the child must get locks of its own, not that held one."""
        q = self.open_queue()
        q.stats()
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with q.storage._link._mutex:  # type: ignore[attr-defined]
                held.set()
                release.wait(PATIENCE)

        thread = threading.Thread(target=hold)
        thread.start()
        self.addCleanup(thread.join, PATIENCE)
        self.addCleanup(release.set)
        self.assertTrue(held.wait(PATIENCE))
        pid = os.fork()
        if pid == 0:  # the child: one call on the queue its parent's thread holds the lock of
            code = 1
            try:
                q.enqueue("from the child", job_id="child")
                code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + PATIENCE
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                self.fail("the forked child waited for a lock its parent's thread held at the fork")
            time.sleep(0.05)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        release.set()
        self.assertEqual(q.get("child").payload, "from the child")


if __name__ == "__main__":
    unittest.main()
