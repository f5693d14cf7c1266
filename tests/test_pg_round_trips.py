"""The PostgreSQL storage's cost per operation: statements and round trips, and counts kept without triggers.

Imports: the standard library, psycopg (through tests.pgsupport), the public
``nobroker`` API and nobroker.postgres.operations. Statements are counted by
wrapping psycopg's Cursor.execute and Connection.pipeline while an
operation runs (every statement goes through the first; a pipeline block is
one round trip). Nothing here is timed.
"""

from __future__ import annotations

import random
import threading
import time
import unittest
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from nobroker import JobState, NotLeasedError, Queue
from tests.pgsupport import PostgresTestCase, connect, fresh_name

#: Running jobs whose leases one heartbeat renews (the issue's figure), and the jobs a Worker runs at once.
HEARTBEAT_JOBS, WORKER_JOBS = 50, 5
#: Random operations in the counts test, and its seed (a failure replays from it).
STEPS, SEED = 300, 19


class Sent:
    """The statements one block sent (texts), and its round trips."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.by_thread: list[tuple[str, str]] = []  # (the sending thread's name, the statement)
        self.round_trips = 0
        self.piped: dict[int, int] = {}  # pipelines open, by thread: another thread's statement meanwhile is its own trip

    def work(self) -> list[str]:
        """The statements of the work itself: without an owed NOTIFY sent meanwhile by the notify thread."""
        return [s for s in self.statements if not s.startswith("SELECT pg_notify(")]


@contextmanager
def counted() -> Iterator[Sent]:
    import psycopg

    sent = Sent()
    execute, pipeline = psycopg.Cursor.execute, psycopg.Connection.pipeline

    def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.statements.append(str(query).strip())
        sent.by_thread.append((threading.current_thread().name, str(query).strip()))
        if not sent.piped.get(threading.get_ident()):
            sent.round_trips += 1
        return execute(self, query, *args, **kwargs)

    @contextmanager
    def counted_pipeline(self: Any) -> Iterator[Any]:
        me = threading.get_ident()
        sent.piped[me] = sent.piped.get(me, 0) + 1
        try:
            with pipeline(self) as pipe:
                yield pipe
        finally:
            sent.piped[me] -= 1
            sent.round_trips += 1

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Connection.pipeline = counted_pipeline  # type: ignore[method-assign, assignment]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Connection.pipeline = pipeline  # type: ignore[method-assign]


class RoundTripTests(PostgresTestCase):
    """Each operation is one statement and one round trip where a hand-written queue's is."""

    def setUp(self) -> None:
        super().setUp()
        self.q = Queue(self.dsn, fresh_name("q"), schema=self.schema, migrate=False)
        self.addCleanup(self.q.close)

    def sent_by(self, operation: Callable[[], Any]) -> tuple[Any, Sent]:
        with counted() as sent:
            result = operation()
        return result, sent

    def assert_one_statement(self, operation: Callable[[], Any], what: str) -> Any:
        result, sent = self.sent_by(operation)
        self.assertEqual(len(sent.work()), 1, f"{what}: {sent.work()}")
        self.assertEqual(sent.round_trips - (len(sent.statements) - len(sent.work())), 1, what)
        return result

    def test_enqueue_lease_ack_and_their_batches_are_one_statement_each(self) -> None:
        self.q.enqueue("warm")  # the queue's connections are open before counting starts:
        len(self.q)  # the side one too, where an owed NOTIFY goes out meanwhile
        self.assert_one_statement(lambda: self.q.enqueue("one"), "enqueue")
        self.assert_one_statement(lambda: self.q.enqueue_many(list(range(100))), "enqueue_many")
        job = self.assert_one_statement(self.q.lease_one, "lease")
        self.assert_one_statement(lambda: self.q.ack(job), "ack")
        jobs = self.assert_one_statement(lambda: self.q.lease(50), "lease of a batch")
        self.assertEqual(len(jobs), 50)
        self.assert_one_statement(lambda: self.q.ack_many(jobs), "ack_many")
        job = self.assert_one_statement(lambda: self.q.lease_one(kinds=["default"]), "lease of some kinds")
        self.assert_one_statement(lambda: self.q.extend(job, 60), "extend")
        self.assert_one_statement(lambda: self.q.nack(job, delay=0), "nack")
        self.assert_one_statement(lambda: self.q.lease(5, kinds=["other"]), "a lease that finds nothing")

    def test_a_batch_of_one_job_sends_the_one_job_statement_and_an_empty_one_nothing(self) -> None:
        # The batch's statement costs the server more for one job (arrays, a join): a Worker
        # running one job at a time acks and renews one at a time.
        self.q.enqueue_many(list(range(2)))
        jobs = self.q.lease(2)
        for call, alone, one in (
            (lambda: self.q.extend_many(jobs[:1], 60), lambda: self.q.extend(jobs[1], 60), "extend"),
            (lambda: self.q.ack_many(jobs[:1]), lambda: self.q.ack(jobs[1]), "ack"),
        ):  # fmt: skip
            with self.subTest(one):
                _, batch = self.sent_by(call)
                _, single = self.sent_by(alone)
                self.assertEqual(batch.work(), single.work(), f"a batch of one sends what {one} sends")
                self.assertNotIn("unnest(", batch.work()[0])
        self.assertEqual(self.q.stats().done, 2)
        storage = self.q.storage  # the facade skips an empty batch; the storage sends nothing for one either
        self.assertEqual(self.sent_by(lambda: storage.ack_many([]))[1].work(), [])
        self.assertEqual(self.sent_by(lambda: storage.extend_many([], 60))[0], [])

    def test_a_heartbeat_of_fifty_running_jobs_is_one_statement(self) -> None:
        self.q.enqueue_many(list(range(HEARTBEAT_JOBS)))
        jobs = self.q.lease(HEARTBEAT_JOBS)
        self.assertEqual(len(jobs), HEARTBEAT_JOBS)
        renewed = self.assert_one_statement(lambda: self.q.extend_many(jobs, 60), "extend_many of 50 leases")
        self.assertEqual([job.id for job in renewed], [job.id for job in jobs])
        _, one_by_one = self.sent_by(lambda: [self.q.extend(job, 60) for job in jobs])
        self.assertEqual(one_by_one.round_trips, HEARTBEAT_JOBS, "what a tick cost before extend_many")

    def test_a_workers_heartbeat_tick_is_one_statement_whatever_it_runs(self) -> None:
        from nobroker import Worker

        q = Queue(self.q.storage.dsn, fresh_name("q"), schema=self.schema, migrate=False, visibility_timeout=3.0)  # type: ignore[attr-defined]
        self.addCleanup(q.close)
        extend_many, extend = q.storage._target.sql["extend_many"].strip(), q.storage._target.sql["extend"].strip()  # type: ignore[attr-defined]
        q.enqueue_many(list(range(WORKER_JOBS)))
        release, running = threading.Event(), threading.Semaphore(0)

        def handler(job: Any) -> None:
            running.release()
            release.wait(60)

        worker = Worker(q, handler, concurrency=WORKER_JOBS, max_jobs=WORKER_JOBS, handle_signals=False, name="hb")
        thread = threading.Thread(target=worker.run)
        with counted() as sent:
            thread.start()
            self.addCleanup(thread.join, 60)
            self.addCleanup(release.set)
            for _ in range(WORKER_JOBS):
                self.assertTrue(running.acquire(timeout=60), "every job runs at once")
            deadline = time.monotonic() + 60
            while sum(1 for who, _ in sent.by_thread if who == "hb-heartbeat") < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            release.set()
            thread.join(60)
        ticks = [text for who, text in sent.by_thread if who == "hb-heartbeat"]
        self.assertGreaterEqual(len(ticks), 4, "four heartbeat ticks while every job ran")
        self.assertEqual([text for text in ticks if text != extend_many], [], "a tick sends one extend_many, nothing else")
        self.assertNotIn(extend, ticks)
        self.assertEqual(q.stats().done, WORKER_JOBS)

    def test_a_delayed_job_that_came_due_is_moved_first_in_one_more_round_trip(self) -> None:
        plain = self.q.enqueue("plain")
        high = self.q.enqueue("high", delay=5, priority=9)
        self.q.storage.clock_offset = 10  # type: ignore[attr-defined]
        jobs, sent = self.sent_by(lambda: self.q.lease(1))
        self.assertEqual([job.id for job in jobs], [high.id], "the job that came due competes by priority")
        self.assertEqual((len(sent.work()), sent.round_trips), (3, 2), sent.work())
        self.assert_one_statement(self.q.lease_one, "the next lease, nothing due")
        self.assertEqual(self.q.get(plain.id).state, JobState.LEASED)

    def test_an_expired_lease_is_reclaimed_before_the_claim(self) -> None:
        job = self.q.enqueue("x")
        self.assertIsNotNone(self.q.lease_one(visibility_timeout=1))
        self.q.storage.clock_offset = 600  # past the deadline and the backoff after it
        jobs, sent = self.sent_by(lambda: self.q.lease(1))
        self.assertEqual([(j.id, j.attempts) for j in jobs], [(job.id, 2)])
        self.assertEqual(sent.round_trips, 2)


    def test_a_lease_under_limits_sends_the_upkeep_only_when_a_lease_expired_or_a_job_came_due(self) -> None:
        upkeep = self.q.storage._target.sql["upkeep"].strip()  # type: ignore[attr-defined]
        self.q.set_limit("default", concurrency=1)
        first = self.q.enqueue("first")
        self.q.enqueue("second")
        jobs, sent = self.sent_by(lambda: self.q.lease(2, visibility_timeout=1))
        self.assertEqual([job.id for job in jobs], [first.id], "one slot")
        self.assertNotIn(upkeep, sent.work(), "nothing was due")
        self.assertEqual(self.q.lease(2), [], "the slot is held")
        self.q.storage.clock_offset = 600  # type: ignore[attr-defined]  # the lease expired, and its backoff
        jobs, sent = self.sent_by(lambda: self.q.lease(2))
        self.assertIn(upkeep, sent.work(), "the expired lease is reclaimed first: its slot is free")
        self.assertEqual([(job.id, job.attempts) for job in jobs], [(first.id, 2)])

    def test_a_lease_in_a_queue_with_a_paused_kind_goes_kind_by_kind_in_three_round_trips_and_locks_no_limit(self) -> None:
        limit_sql = self.q.storage.limit_sql  # type: ignore[attr-defined]
        self.q.pause("other")
        self.q.enqueue("held", kind="other", priority=9)
        mine = self.q.enqueue("mine")
        jobs, sent = self.sent_by(lambda: self.q.lease(2))
        self.assertEqual([job.id for job in jobs], [mine.id], "the paused kind's job stays")
        notified = len(sent.statements) - len(sent.work())  # an owed NOTIFY the enqueues above left, sent meanwhile
        # The claim that found the pause, the kinds, and their claim (piped after the generic-plan setting).
        self.assertEqual(sent.round_trips - notified, 3, sent.work())
        self.assertIn(limit_sql.text["leased"].strip(), sent.work())
        self.assertNotIn(limit_sql.text["lock"].strip(), sent.work(), "no limit to lock, no transaction")
        self.q.set_limit("default", concurrency=5)
        self.q.nack(mine, delay=0)
        jobs, sent = self.sent_by(lambda: self.q.lease(2))
        self.assertEqual([job.id for job in jobs], [mine.id])
        self.assertIn(limit_sql.text["lock"].strip(), sent.work(), "with limits too, the limits are locked")


class HistoryTests(PostgresTestCase):
    """An attempt's end writes sql/009's attempt_appended's history without calling it (its cost was an ack's)."""

    def test_the_history_written_inline_is_the_functions_for_every_length(self) -> None:
        from nobroker.postgres.fragments import KEPT_ATTEMPTS, appended
        from nobroker.postgres.naming import quote_schema

        schema = quote_schema(self.schema)
        finished = "(now() + interval '2 seconds')"
        statement = (
            f"SELECT a.inline::text IS NOT DISTINCT FROM a.function::text, jsonb_array_length(a.inline), a.inline -> -1 ->> 0, "
            "a.function IS NOT DISTINCT FROM a.history FROM ("
            f"SELECT ({appended(finished, '%(outcome)s::text')}) AS inline, {schema}.attempt_appended(j.attempt_history, "
            f"j.attempts, j.leased_at, {finished}, j.leased_by, %(outcome)s::text) AS function, "
            "j.attempt_history AS history "
            "FROM (SELECT CASE WHEN %(length)s::int IS NOT NULL THEN coalesce((SELECT jsonb_agg(jsonb_build_array("
            "i, 1.5, 2.5, 'w', 'failed') ORDER BY i) FROM generate_series(1, %(length)s::int) AS i), '[]') END "
            "AS attempt_history, 7 AS attempts, "
            "CASE WHEN %(running)s THEN now() - interval '5 seconds' END AS leased_at, 'w-1' AS leased_by) AS j) AS a"
        ).replace("{schema}", schema)
        lengths = [None, 0, 1, KEPT_ATTEMPTS - 1, KEPT_ATTEMPTS, KEPT_ATTEMPTS + 1, KEPT_ATTEMPTS + 5]
        with connect(self.dsn) as conn:
            for length, running in [(n, True) for n in lengths] + [(3, False), (None, False)]:
                params = {"length": length, "running": running, "outcome": "done"}
                with self.subTest(length=length, running=running):
                    same, kept, last, unchanged = conn.execute(statement, params).fetchone()
                    self.assertTrue(same, "the history written inline is the function's")
                    self.assertEqual(unchanged, not running, "only a running attempt is appended")
                    if running:
                        self.assertEqual(kept, min((length or 0) + 1, KEPT_ATTEMPTS))
                        self.assertEqual(last, "7", "the attempt that ended comes last")

    def test_an_ack_a_nack_and_a_reclaim_call_no_function_for_the_history(self) -> None:
        import psycopg

        q = Queue(self.dsn, fresh_name("q"), schema=self.schema, migrate=False)
        self.addCleanup(q.close)
        q.enqueue_many(["a", "b", "c"])
        acked, nacked, lapsed = q.lease(3, visibility_timeout=30)
        t = q.storage._target  # type: ignore[attr-defined]
        function = f"{self.schema}.attempt_appended"
        with connect(self.dsn) as conn, conn.transaction():
            try:
                conn.execute("SET LOCAL track_functions = 'all'")
            except psycopg.errors.InsufficientPrivilege:
                self.skipTest("counting function calls needs a role that may set track_functions")
            calls = "SELECT coalesce(pg_stat_get_xact_function_calls(%s::regproc), 0)"
            conn.execute(t.sql["ack"], t.params(id=acked.id, token=acked.lease_token, result=None))
            nack = t.with_backoff(id=nacked.id, token=nacked.lease_token, chan=t.channel, error="x", traceback=None,
                                  delay=0, perm=False, notify=False)  # fmt: skip
            conn.execute(t.sql["nack"], nack)
            reclaim = t.with_backoff()
            reclaim["off"] = 60.0  # past the last lease's deadline
            self.assertEqual(conn.execute(t.sql["upkeep"], reclaim).fetchone()[0], 1, "the lapsed lease reclaimed")
            self.assertEqual(conn.execute(calls, (function,)).fetchone()[0], 0, "three attempts ended inline")
            conn.execute(f"SELECT {function}(NULL, 1, now(), now(), 'w', 'done')")
            self.assertEqual(conn.execute(calls, (function,)).fetchone()[0], 1, "a call is counted")
        histories = [q.get(job.id).attempt_history for job in (acked, nacked, lapsed)]
        self.assertEqual([[a["outcome"] for a in h] for h in histories], [["done"], ["failed"], ["expired"]])


class CountsTests(PostgresTestCase):
    """stats() and len() agree with a count of the jobs table after every kind of move."""

    def setUp(self) -> None:
        super().setUp()
        self.name = fresh_name("q")
        self.q = Queue(self.dsn, self.name, schema=self.schema, migrate=False, max_attempts=3, done_retention=None)
        self.addCleanup(self.q.close)

    def recount(self) -> tuple[int, int, int, int, int]:
        """(ready, delayed, leased, done, dead) from the rows themselves, at the queue's clock."""
        storage = self.q.storage
        statement = f"""
            SELECT count(*) FILTER (WHERE state = 'ready' AND available_at <= now() + %(off)s * interval '1 second'),
                   count(*) FILTER (WHERE state = 'ready' AND available_at > now() + %(off)s * interval '1 second'),
                   count(*) FILTER (WHERE state = 'leased'), count(*) FILTER (WHERE state = 'done'),
                   count(*) FILTER (WHERE state = 'dead')
            FROM "{self.schema}".jobs WHERE queue = %(q)s"""
        with storage._side.held() as conn:  # type: ignore[attr-defined]
            row = conn.execute(statement, {"q": self.name, "off": storage.clock_offset}).fetchone()  # type: ignore[attr-defined]
        return tuple(int(n) for n in row)  # type: ignore[return-value]

    def test_counts_match_a_recount_after_every_kind_of_move(self) -> None:
        rng = random.Random(SEED)
        q, held = self.q, []
        finishing = ["ack", "ack_many", "nack", "nack_later", "fail"]
        moves = ["enqueue", "enqueue_later", "enqueue_many", "lease", "lease", "expire", "requeue", "compact", "time"]
        for step in range(STEPS):
            move = rng.choice(moves + finishing * 2)
            if move in finishing:
                if held:
                    self._finish(move, held.pop(rng.randrange(len(held))), held, rng)
            elif move == "enqueue":
                q.enqueue(step, dedupe_key=rng.choice([None, "k1", "k2"]))
            elif move == "enqueue_later":
                q.enqueue(step, delay=rng.choice([1, 30]))
            elif move == "enqueue_many":
                q.enqueue_many(list(range(rng.randint(1, 20))), delay=rng.choice([0, 0, 5]))
            elif move == "lease":
                held += q.lease(rng.randint(1, 5), visibility_timeout=rng.choice([2, 300]))
            elif move == "time":
                q.storage.clock_offset += rng.choice([1, 3, 40])  # type: ignore[attr-defined]
            elif move == "expire":
                q.storage.clock_offset += 400  # type: ignore[attr-defined]  # past every deadline held
            elif move == "requeue":
                q.requeue_dead()
            elif move == "compact":
                q.compact()
            with self.subTest(step=step, move=move):
                self.assert_counts_agree()
        held_in_table = sum(self.recount())
        self.assertGreater(held_in_table, 0)
        self.assertEqual(q.purge(), held_in_table)
        self.assertEqual((len(q), q.stats().total), (0, 0))

    def assert_counts_agree(self) -> None:
        """stats() and len() against a recount, once the leases that expired are reclaimed.

        A delayed job may come due (by the real clock) between the recount and
        stats(): then the two differ by that job, and the next try agrees.
        """
        from nobroker.postgres import operations
        from nobroker.postgres.steps import drive

        storage = self.q.storage
        for _try in range(3):
            storage._link.run("upkeep", lambda c: drive(c, operations.upkeep(storage._target)), retry=False)  # type: ignore[attr-defined]
            expected = self.recount()
            stats = self.q.stats()
            got = (stats.ready, stats.delayed, stats.leased, stats.done, stats.dead)
            if got == expected:
                break
        self.assertEqual(got, expected)
        self.assertEqual(len(self.q), sum(expected))

    def _finish(self, move: str, job: Any, held: list[Any], rng: random.Random) -> None:
        """Finish one held job (and, for ack_many, a few more); a lease that expired meanwhile is refused."""
        q = self.q
        try:
            if move == "ack":
                q.ack(job)
            elif move == "ack_many":
                q.ack_many([job] + [held.pop() for _ in range(min(len(held), rng.randint(0, 3)))])
            elif move == "nack":
                q.nack(job, delay=0)
            elif move == "nack_later":
                q.nack(job)  # the backoff's delay, or dead on the last attempt
            else:  # a handler's PermanentError: straight to dead
                q.storage.nack(job.id, job.lease_token, "permanent", None, True)  # type: ignore[attr-defined]
        except NotLeasedError:
            pass


if __name__ == "__main__":
    unittest.main()
