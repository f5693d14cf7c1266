"""What only the PostgreSQL storage can show: many processes, transactions, dead connections, RLS.

Imports: the standard library, psycopg (through tests.pgsupport), the public
``nobroker`` API, nobroker.postgres (migrate and the storage's helpers) and
tests.support. Concurrency and crash tests use real processes; every test
uses its own queue name (and a schema of its own where it changes the schema).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest
from typing import Any

from nobroker import (
    BackoffPolicy,
    Job,
    JobNotFoundError,
    JobState,
    NobrokerError,
    NotLeasedError,
    PermanentError,
    Queue,
    Worker,
)
from tests.pgsupport import PostgresTestCase, PrivateCluster, connect, drop_schema, fresh_name, pg_dsn, require_postgres
from tests.support import slow, wait_until

SRC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
#: Generous bound for anything that should happen "soon" on a busy shared machine.
PATIENCE = 60.0
NO_BACKOFF = BackoffPolicy(base=0, jitter=0)
#: Text that would break SQL built by pasting strings together.
NASTY = "it's \"quoted\"; DROP TABLE jobs; -- a comment\n/* and */ $$dollar$$ \\backslash %s %(x)s {schema}"

_fork = multiprocessing.get_context("fork")


def _claim_all(dsn: str, schema: str, name: str, start: Any, out: Any, batch: int) -> None:
    """A worker process: lease and ack until the queue is empty; report what it took."""
    taken: list[str] = []
    with Queue(dsn, name, schema=schema, migrate=False) as q:
        start.wait(PATIENCE)
        while True:
            jobs = q.lease(batch)
            if not jobs:
                break
            for job in jobs:
                q.ack(job)
                taken.append(job.id)
    out.put(taken)


def _migrate_child(dsn: str, schema: str, start: Any, out: Any) -> None:
    from nobroker.postgres import migrate

    start.wait(PATIENCE)
    try:
        out.put(("ok", migrate(dsn, schema=schema)))
    except BaseException as exc:
        out.put(("error", repr(exc)))


def _enqueue_same_key(dsn: str, schema: str, name: str, start: Any, out: Any) -> None:
    with Queue(dsn, name, schema=schema, migrate=False) as q:
        start.wait(PATIENCE)
        out.put(sorted({q.enqueue({"pid": os.getpid()}, dedupe_key="one").id for _ in range(20)}))


def _use_inherited_queue(q: Queue, job_id: str, out: Any) -> None:
    """A forked child: read through the queue object it inherited, wait on it, close it; report its backend."""
    try:
        payload = q.get(job_id).payload
        pid = q.storage._side._conn.info.backend_pid  # type: ignore[attr-defined]
        q.wait_for_jobs(0.01)
        q.close()
        out.put((payload, pid))
    except BaseException as exc:
        out.put((repr(exc), None))


class PostgresStorageTests(PostgresTestCase):
    """Behaviour of the PostgreSQL storage beyond the shared semantic suite."""

    def open_queue(self, name: str | None = None, **options: Any) -> Queue:
        q = Queue(self.dsn, name or self.name, schema=self.schema, **options)
        self.addCleanup(q.close)
        return q

    def setUp(self) -> None:
        super().setUp()
        self.name = fresh_name("q")

    # ------------------------------------------------------------ many processes
    def test_four_processes_claim_disjoint_complete_sets(self) -> None:
        q = self.open_queue()
        ids = [job.id for job in q.enqueue_many(list(range(400)))]
        for batch in (1, 7):
            with self.subTest(batch=batch):
                if batch != 1:
                    ids = [job.id for job in q.enqueue_many(list(range(400)))]
                start, out = _fork.Event(), _fork.Queue()
                procs = [_fork.Process(target=_claim_all, args=(self.dsn, self.schema, self.name, start, out, batch))
                         for _ in range(4)]  # fmt: skip
                for p in procs:
                    p.start()
                start.set()
                taken = [out.get(timeout=PATIENCE * 4) for _ in procs]
                for p in procs:
                    p.join(PATIENCE)
                    self.assertEqual(p.exitcode, 0)
                every = [job_id for part in taken for job_id in part]
                self.assertEqual(len(every), len(set(every)), "a job was delivered to two processes")
                self.assertEqual(sorted(every), sorted(ids), "a job was never delivered")
                self.assertEqual(q.stats().done, len(ids) * (1 if batch == 1 else 2))

    def test_concurrent_enqueues_with_one_dedupe_key_make_one_job(self) -> None:
        start, out = _fork.Event(), _fork.Queue()
        procs = [_fork.Process(target=_enqueue_same_key, args=(self.dsn, self.schema, self.name, start, out))
                 for _ in range(4)]  # fmt: skip
        for p in procs:
            p.start()
        start.set()
        seen = [out.get(timeout=PATIENCE * 2) for _ in procs]
        for p in procs:
            p.join(PATIENCE)
        self.assertEqual(len({job_id for ids in seen for job_id in ids}), 1)
        self.assertEqual(len(self.open_queue()), 1)

    # ------------------------------------------------------------ transactions
    def test_transactional_enqueue_commits_and_rolls_back_with_the_caller(self) -> None:
        q = self.open_queue()
        with connect(autocommit=False) as conn:
            with conn.transaction():
                conn.execute("SELECT 1")  # the caller's own business write would go here
                kept = q.enqueue({"order": 1}, conn=conn)
                self.assertIs(kept.state, JobState.READY)
                # Not visible to anyone else before the caller commits.
                self.assertEqual(q.lease(), [])
                with self.assertRaises(JobNotFoundError):
                    q.get(kept.id)
            self.assertEqual(q.get(kept.id).payload, {"order": 1})

            class Rollback(Exception):
                pass

            with self.assertRaises(Rollback):
                with conn.transaction():
                    gone = q.enqueue_many([{"order": 2}, {"order": 3}], conn=conn)
                    raise Rollback
            for job in gone:
                with self.assertRaises(JobNotFoundError):
                    q.get(job.id)
            conn.rollback()
            gone = q.enqueue({"order": 4}, conn=conn)  # an implicit transaction, then rolled back
            conn.rollback()
            with self.assertRaises(JobNotFoundError):
                q.get(gone.id)
        self.assertEqual([job.id for job in q.lease(10)], [kept.id])
        self.assertEqual(len(q), 1)

    def test_transactional_enqueue_keeps_job_id_and_dedupe_rules(self) -> None:
        q = self.open_queue()
        first = q.enqueue("first", job_id="same", dedupe_key="k")
        with connect(autocommit=False) as conn:
            with conn.transaction():
                again = q.enqueue("second", job_id="same", conn=conn)
                by_key = q.enqueue("third", dedupe_key="k", conn=conn)
        self.assertEqual((again.id, again.payload), (first.id, "first"))
        self.assertEqual(by_key.id, first.id)
        self.assertEqual(len(q), 1)

    def test_conn_must_be_a_psycopg_connection(self) -> None:
        q = self.open_queue()
        with self.assertRaises(ValueError):
            q.enqueue("x", conn=object())
        self.assertEqual(len(q), 0)

    # ------------------------------------------------------------ crashes and dead connections
    def test_a_sigkilled_worker_process_loses_its_job_after_the_lease(self) -> None:
        q = self.open_queue(visibility_timeout=60, backoff=NO_BACKOFF)
        job = q.enqueue({"work": 1})
        script = (
            "import json, sys, time\n"
            "from nobroker import Queue, Worker\n"
            "q = Queue(sys.argv[1], sys.argv[2], schema=sys.argv[3], visibility_timeout=60, migrate=False)\n"
            "def handler(job):\n"
            "    print(json.dumps({'id': job.id, 'token': job.lease_token}), flush=True)\n"
            "    time.sleep(600)\n"
            "Worker(q, handler, poll_interval=0.05).run()\n"
        )
        env = dict(os.environ, PYTHONPATH=SRC_DIR)
        proc = subprocess.Popen([sys.executable, "-c", script, self.dsn, self.name, self.schema],
                                stdout=subprocess.PIPE, env=env, text=True)  # fmt: skip
        self.addCleanup(proc.stdout.close)  # type: ignore[union-attr]
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        line = proc.stdout.readline()  # type: ignore[union-attr]
        held = json.loads(line)
        self.assertEqual(held["id"], job.id)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(PATIENCE)
        self.assertEqual(q.lease(), [], "the lease outlives its holder until the deadline")
        self.assertIs(q.get(job.id).state, JobState.LEASED)
        q.storage.clock_offset = 61  # type: ignore[attr-defined]
        again = q.lease_one()
        assert again is not None
        self.assertEqual((again.id, again.attempts), (job.id, 2))
        stale = q.get(job.id)
        stale.lease_token = held["token"]
        with self.assertRaises(NotLeasedError):
            q.ack(stale)
        q.ack(again, result="second try")
        self.assertEqual(q.get(job.id).result, "second try")

    def test_a_worker_whose_connection_is_killed_reconnects_and_is_refused_late(self) -> None:
        worker = self.open_queue(visibility_timeout=30, backoff=NO_BACKOFF)
        other = self.open_queue(backoff=NO_BACKOFF)
        job = worker.enqueue("work")
        held = worker.lease_one()
        assert held is not None
        pid = worker.storage._link._conn.info.backend_pid  # type: ignore[attr-defined]
        with connect() as admin:
            self.assertTrue(admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0])
        self.assertTrue(wait_until(lambda: not _backend_alive(pid), PATIENCE))
        # Its lease stands until the deadline, then the job is delivered again.
        self.assertEqual(other.lease(), [])
        other.storage.clock_offset = 31  # type: ignore[attr-defined]
        again = other.lease_one()
        assert again is not None
        self.assertEqual((again.id, again.attempts), (job.id, 2))
        # The old holder's next call reconnects by itself and is refused.
        with self.assertRaises(NotLeasedError):
            worker.ack(held)
        self.assertNotEqual(worker.storage._link._conn.info.backend_pid, pid)  # type: ignore[attr-defined]
        self.assertIs(worker.get(job.id).state, JobState.LEASED)
        other.ack(again)
        self.assertIs(worker.get(job.id).state, JobState.DONE)

    def test_reads_and_idempotent_writes_survive_a_killed_connection(self) -> None:
        q = self.open_queue()
        job = q.enqueue("x")
        for action in ("get", "lease", "ack", "stats"):
            with self.subTest(action=action):
                pid = q.storage._link._conn.info.backend_pid  # type: ignore[attr-defined]
                with connect() as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                wait_until(lambda: not _backend_alive(pid), PATIENCE)
                if action == "get":
                    self.assertEqual(q.get(job.id).payload, "x")
                elif action == "lease":
                    self.assertEqual([j.id for j in q.lease()], [job.id])
                elif action == "ack":
                    q.ack(job.id)
                    self.assertIs(q.get(job.id).state, JobState.DONE)
                else:
                    self.assertEqual(q.stats().done, 1)

    def test_a_connection_lost_while_it_is_set_up_is_replaced_within_reconnect_timeout(self) -> None:
        # A server restarting between the connect and the session settings: the
        # queue keeps trying, as it does while the server cannot be reached at all.
        from unittest import mock

        import psycopg

        real_connect = psycopg.connect
        lost: list[int] = []

        def connect_then_lose_it(*args: Any, **kwargs: Any) -> Any:
            conn = real_connect(*args, **kwargs)
            if not lost:
                lost.append(conn.info.backend_pid)
                with real_connect(pg_dsn(), autocommit=True) as admin:  # waits until that backend is gone
                    admin.execute("SELECT pg_terminate_backend(%s, %s)", (lost[0], int(PATIENCE * 1000)))
            return conn

        with mock.patch.object(psycopg, "connect", connect_then_lose_it):
            with self.assertLogs("nobroker.postgres", "WARNING") as logs:
                q = self.open_queue()
        self.assertEqual(len(lost), 1)
        self.assertIn("trying again", "\n".join(logs.output))
        self.assertNotEqual(q.storage._link._conn.info.backend_pid, lost[0])  # type: ignore[attr-defined]
        q.enqueue("x")
        self.assertEqual(len(q), 1)

    def test_a_forked_child_opens_its_own_connections_and_leaves_the_parents_alone(self) -> None:
        q = self.open_queue()
        job = q.enqueue("x")
        self.assertEqual(q.get(job.id).payload, "x")  # the second connection (reads) is open too
        self.assertFalse(q.wait_for_jobs(0.01))  # listening as well
        conn, listener = q.storage._side._conn, q.storage._listener._conn  # type: ignore[attr-defined]
        out = _fork.Queue()
        child = _fork.Process(target=_use_inherited_queue, args=(q, job.id, out))
        child.start()
        self.addCleanup(child.join, PATIENCE)
        got = out.get(timeout=PATIENCE)
        self.assertEqual(got[0], "x", got)
        self.assertNotEqual(got[1], conn.info.backend_pid, "the child spoke on the parent's connection")
        # Neither the child's work nor its close() touched the parent's sockets.
        self.assertEqual(q.get(job.id).payload, "x")
        self.assertIs(q.storage._side._conn, conn)  # type: ignore[attr-defined]
        self.assertFalse(q.wait_for_jobs(0.01))
        self.assertIs(q.storage._listener._conn, listener)  # type: ignore[attr-defined]

    def test_wait_for_jobs_wakes_when_another_connection_enqueues(self) -> None:
        idle = self.open_queue()
        producer = self.open_queue()
        self.assertFalse(idle.wait_for_jobs(0.05))  # now listening
        woke: list[bool] = []
        started = threading.Event()

        def wait() -> None:
            started.set()
            woke.append(idle.wait_for_jobs(PATIENCE))

        thread = threading.Thread(target=wait)
        thread.start()
        started.wait(PATIENCE)
        t0 = time.monotonic()
        producer.enqueue("wake up")
        thread.join(PATIENCE)
        self.assertEqual(woke, [True])
        self.assertLess(time.monotonic() - t0, PATIENCE / 2)
        self.assertEqual(len(idle.lease()), 1)

    def test_idle_waits_end_when_the_next_job_or_lease_comes_due(self) -> None:
        # No NOTIFY announces a delayed job or an expiring lease: the wait asks when the next comes due.
        q = self.open_queue(visibility_timeout=0.6, backoff=NO_BACKOFF)
        self.assertIs(q.wakes_waiters(), True)
        q.enqueue("later", delay=0.6)
        started = time.monotonic()
        self.assertTrue(q.wait_for_jobs(PATIENCE))
        self.assertGreaterEqual(time.monotonic() - started, 0.3, "woke long before the job came due")
        job = q.lease_one()
        self.assertIsNotNone(job)
        started = time.monotonic()
        self.assertTrue(q.wait_for_jobs(PATIENCE), "the lease's deadline ends the wait")
        self.assertGreaterEqual(time.monotonic() - started, 0.3)
        self.assertEqual([j.id for j in q.lease()], [job.id])  # type: ignore[union-attr]

    def test_an_idle_wait_sees_a_job_another_process_delays_meanwhile(self) -> None:
        idle, other = self.open_queue(), self.open_queue()
        self.assertFalse(idle.wait_for_jobs(0.01))  # nothing due: listening, and it said so
        woke: list[bool] = []
        thread = threading.Thread(target=lambda: woke.append(idle.wait_for_jobs(PATIENCE)))
        thread.start()
        time.sleep(0.05)
        other.enqueue("soon", delay=0.2)  # no NOTIFY: the wait's next look at the due time finds it
        thread.join(PATIENCE)
        self.assertEqual(woke, [True])
        self.assertEqual(len(idle.lease()), 1)

    def test_wait_for_jobs_is_not_woken_by_other_queues(self) -> None:
        idle = self.open_queue()
        elsewhere = self.open_queue(fresh_name("other"))
        self.assertFalse(idle.wait_for_jobs(0.01))
        elsewhere.enqueue("not for you")
        self.assertFalse(idle.wait_for_jobs(0.3))

    # ------------------------------------------------------------ SQL safety
    def test_nasty_text_round_trips_everywhere_and_breaks_nothing(self) -> None:
        q = self.open_queue(name=NASTY, backoff=NO_BACKOFF)
        payload = {NASTY: [NASTY, "-- not a comment", "a; b; c", "'; DROP SCHEMA x CASCADE; --"]}
        job = q.enqueue(payload, job_id=NASTY, kind=NASTY, dedupe_key=NASTY)
        self.assertEqual(q.get(NASTY).payload, payload)
        self.assertEqual(q.enqueue("dup", kind=NASTY, dedupe_key=NASTY).id, NASTY)
        leased = q.lease_one(kinds=[NASTY])
        assert leased is not None
        self.assertEqual((leased.id, leased.payload), (NASTY, payload))
        self.assertEqual(q.set_stage(leased, NASTY).stage, NASTY)
        back = q.nack(leased, error=NASTY, delay=0)
        self.assertEqual(back.last_error, NASTY)
        leased = q.lease_one(kinds=[NASTY])
        q.ack(leased, result={"r": NASTY})  # type: ignore[arg-type]
        done = q.get(job.id)
        self.assertEqual((done.result, done.kind, done.dedupe_key, q.name), ({"r": NASTY}, NASTY, NASTY, NASTY))
        self.assertEqual([j.id for j in q.list_jobs(kind=NASTY)], [NASTY])
        self.assertEqual(self.open_queue().stats().total, 0, "another queue saw the rows")

    def test_bad_schema_and_role_names_are_refused_before_any_sql(self) -> None:
        from nobroker.postgres import migrate

        for bad in ("x; DROP TABLE jobs", "1abc", "", "a" * 64, 'quo"te', "sp ace"):
            with self.subTest(name=bad):
                with self.assertRaises(ValueError):
                    Queue(self.dsn, schema=bad)
                with self.assertRaises(ValueError):
                    migrate(self.dsn, schema=bad)
                with self.assertRaises(ValueError):
                    migrate(self.dsn, schema=self.schema, worker_role=bad)

    # ------------------------------------------------------------ options and properties
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

    def test_single_job_statements_use_the_primary_key_even_with_generic_plans(self) -> None:
        # A generic plan is made once and kept: one that walked the index of
        # leases (or of the queue) instead of the primary key would make every
        # ack cost as much as the queue is long.
        q = self.open_queue()
        conn = q.storage._link._conn  # type: ignore[attr-defined]
        try:
            conn.execute("LOAD 'auto_explain'")
        except Exception as exc:  # not a superuser, or no contrib modules: nothing to look through
            self.skipTest(f"auto_explain is not available here ({exc})")
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_level = notice",
                        "client_min_messages = notice", "plan_cache_mode = force_generic_plan"):  # fmt: skip
            conn.execute(f"SET {setting}")
        plans: list[str] = []
        conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
        q.enqueue_many(list(range(200)))
        with connect() as admin:  # what autovacuum does once a table has grown: statistics
            admin.execute(f'ANALYZE "{self.schema}".jobs')
        jobs = q.lease(20)
        for job in jobs[:5]:  # past psycopg's prepare threshold: the server keeps a generic plan
            q.extend(job, 60)
        plans.clear()
        q.extend(jobs[5], 60)
        q.set_stage(jobs[6], "s")
        q.ack(jobs[7])
        q.nack(jobs[8], delay=0)
        single = [plan for plan in plans if "WHERE j.queue = $" in plan and "j.id = $" in plan]
        self.assertEqual(len(single), 4, plans)
        for plan in single:
            self.assertIn("jobs_pkey", plan)
            self.assertNotIn("jobs_leases", plan.split("Query Text")[0] + plan[plan.find("Update on"):])

    def fill_and_watch_plans(self, q: Queue, state: str, *, side: bool = False) -> list[str]:
        """100,000 rows in ``state``, then every plan ``q`` runs from here on (generic plans, via auto_explain).

        ``side``: watch the connection of reads (listings, stats) rather than the one of the work.
        """
        len(q)  # both connections are open
        conn = (q.storage._side if side else q.storage._link)._connection()  # type: ignore[attr-defined]
        try:
            conn.execute("LOAD 'auto_explain'")
        except Exception as exc:
            self.skipTest(f"auto_explain is not available here ({exc})")
        with connect() as admin:
            admin.execute(
                f'INSERT INTO "{self.schema}".jobs (queue, id, state, max_attempts, available_at, enqueued_at, payload) '
                "SELECT %s, 'b' || i, %s, 5, now(), now(), '1' FROM generate_series(1, 100000) AS i",
                (self.name, state),
            )
            admin.execute(f'ANALYZE "{self.schema}".jobs')
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_level = notice",
                        "client_min_messages = notice", "plan_cache_mode = force_generic_plan"):  # fmt: skip
            conn.execute(f"SET {setting}")
        plans: list[str] = []
        conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
        return plans

    def test_claims_keep_the_index_plan_over_a_large_backlog(self) -> None:
        q = self.open_queue()
        plans = self.fill_and_watch_plans(q, "ready")
        for count in (1, 1, 1, 1, 1, 1, 10, 10, 10, 10, 10, 10):
            self.assertEqual(len(q.lease(count)), count)
        claims = [plan for plan in plans if "SKIP LOCKED" in plan and "gen_random_uuid" in plan]  # not the reclaims
        self.assertEqual(len(claims), 12)
        for plan in claims:
            self.assertIn("jobs_claim", plan)
            self.assertNotIn("Seq Scan", plan)

    @slow
    def test_the_dlq_listing_keeps_the_index_plan_over_a_large_dlq(self) -> None:
        q = self.open_queue()
        plans = self.fill_and_watch_plans(q, "dead", side=True)
        for _ in range(6):  # past psycopg's prepare threshold: the server keeps a generic plan
            self.assertEqual(len(q.dlq(limit=50)), 50)
        listings = [plan for plan in plans if "UNION ALL" in plan]
        self.assertEqual(len(listings), 6)
        for plan in listings:
            self.assertIn("jobs_finished", plan)
            self.assertNotIn("Seq Scan", plan)

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


class StatementTextTests(unittest.TestCase):
    """The statements as text, built for one schema (no server needed)."""

    def test_every_statement_names_its_schema_and_leaves_only_a_claims_batch_size_open(self) -> None:
        from nobroker.postgres.statements import Statements, build

        for name, text in build("nb_text").items():
            with self.subTest(name):
                self.assertRegex(text, r'"nb_text"\.(jobs|counts|counters)')
                self.assertNotIn("{schema}", text)
                holes = set(re.findall(r"\{[a-z_]+\}", text))
                # A claim's: its batch size, and how the update finds the batch (joined or by key).
                self.assertEqual(holes, {"{count}", "{batch}", "{batch_end}"} if name.startswith("claim") else set())
        statements = Statements("nb_text")
        self.assertIn("LIMIT 7 FOR UPDATE SKIP LOCKED", statements.claim(7, kinds=False))
        self.assertNotIn("k.kind", statements.claim(7, kinds=False))
        self.assertIn("kind = k.kind", statements.claim(7, kinds=True))
        statements.claim(1, kinds=False)
        for bad in (0, -1, True, 2.0, "3"):
            with self.subTest(count=bad), self.assertRaises(ValueError):
                statements.claim(bad, kinds=False)  # type: ignore[arg-type]

    def test_a_schema_name_that_could_leave_its_quotes_is_refused(self) -> None:
        from nobroker.postgres.statements import Statements

        for bad in ('x"; DROP TABLE jobs; --', "1abc", "", "a" * 64, "nb\n", NASTY):
            with self.subTest(schema=bad), self.assertRaises(ValueError):
                Statements(bad)


def migrate_names() -> list[str]:
    """The migration files shipped, in order."""
    from nobroker.postgres.schema import _migration_files

    return [name for _, name, _ in _migration_files()]


class PostgresSchemaTests(unittest.TestCase):
    """Migrations and row level security, each in a schema of its own."""

    def setUp(self) -> None:
        self.dsn = require_postgres(self)
        self.schema = fresh_name("nbmig")
        self.addCleanup(drop_schema, self.schema)

    def test_migrate_is_idempotent_and_queue_open_migrates(self) -> None:
        from nobroker.postgres import latest_version, migrate

        self.assertEqual(
            migrate(self.dsn, schema=self.schema),
            ["001_init.sql", "002_retries_and_finished_jobs.sql", "003_claim_paths_counts_and_upkeep.sql",
             "004_counts_kept_by_the_statements.sql", "005_schedules.sql", "006_control_of_jobs.sql", "007_limits.sql",
             "008_snooze_pause_and_wait.sql", "009_time_limits_and_attempts.sql", "010_counters_and_workers.sql",
             "011_groups.sql"],
        )
        self.assertEqual(migrate(self.dsn, schema=self.schema), [])
        with connect() as conn:
            rows = conn.execute(f'SELECT version FROM "{self.schema}".schema_migrations').fetchall()
        self.assertEqual([r[0] for r in rows], list(range(1, 12)))
        self.assertEqual(latest_version(), 11)
        other = fresh_name("nbmig")
        self.addCleanup(drop_schema, other)
        with Queue(self.dsn, schema=other) as q:  # migrate=True by default
            q.enqueue("x")
            self.assertEqual(len(q), 1)

    def test_upgrading_from_version_1_takes_the_lease_token_off_done_jobs(self) -> None:
        from unittest import mock

        from nobroker.postgres import schema as postgres

        files = postgres._migration_files()
        with mock.patch.object(postgres, "_migration_files", lambda: files[:1]):
            postgres.migrate(self.dsn, schema=self.schema)
        with connect() as conn:
            for job_id, state, token in (("d", "done", "tok-d"), ("r", "ready", None), ("l", "leased", "tok-l")):
                conn.execute(
                    f'INSERT INTO "{self.schema}".jobs (queue, id, state, max_attempts, available_at, enqueued_at,'
                    " lease_deadline, lease_token, payload) VALUES ('up', %s, %s, 5, now(), now(),"
                    " CASE WHEN %s = 'leased' THEN now() + interval '1 hour' END, %s, '1')",
                    (job_id, state, state, token),
                )
        self.assertIn("002_retries_and_finished_jobs.sql", postgres.migrate(self.dsn, schema=self.schema))
        with Queue(self.dsn, "up", schema=self.schema) as q:
            self.assertIsNone(q.get("d").lease_token)
            self.assertEqual(q.get("l").lease_token, "tok-l", "a lease still held keeps its token")
            q.ack(Job("d", 1, lease_token="tok-d"))  # the lease that finished it: harmless
            with self.assertRaises(NotLeasedError):
                q.ack(Job("d", 1, lease_token="someone-else"))

    def test_the_sql_backoff_is_delay_for_without_jitter(self) -> None:
        from nobroker.postgres import migrate

        migrate(self.dsn, schema=self.schema)
        policies = [BackoffPolicy(), BackoffPolicy(base=10, factor=3, max_delay=1000), BackoffPolicy(base=0), BackoffPolicy(factor=1)]
        attempts = [-5, -1, 0, 1, 2, 3, 7, 40, 2000]
        with connect() as conn:
            for policy in policies:
                for n in attempts:
                    got = conn.execute(
                        f'SELECT "{self.schema}".backoff_delay(%s, %s, %s, %s)',
                        (n, policy.base, policy.factor, policy.max_delay),
                    ).fetchone()[0]
                    with self.subTest(policy=policy, attempts=n):
                        self.assertAlmostEqual(got, policy.nominal_delay(n), places=9)

    def test_a_queue_on_an_unmigrated_schema_says_what_to_run(self) -> None:
        from nobroker import StorageError

        with self.assertRaises(StorageError) as caught:
            Queue(self.dsn, schema=self.schema, migrate=False).enqueue("x")
        self.assertIn("nobroker pg migrate", str(caught.exception))

    def test_concurrent_migrations_from_four_processes(self) -> None:
        start, out = _fork.Event(), _fork.Queue()
        procs = [_fork.Process(target=_migrate_child, args=(self.dsn, self.schema, start, out)) for _ in range(4)]
        for p in procs:
            p.start()
        start.set()
        results = [out.get(timeout=PATIENCE * 2) for _ in procs]
        for p in procs:
            p.join(PATIENCE)
        self.assertEqual([r[0] for r in results], ["ok"] * 4, results)

        from nobroker.postgres import latest_version
        from nobroker.postgres.schema import _migration_files

        applied = sorted(len(r[1]) for r in results)
        self.assertEqual(applied, [0, 0, 0, len(_migration_files())], "exactly one process applied the schema")
        self.assertEqual(latest_version(), int(migrate_names()[-1][:3]))

    def test_row_level_security_hides_rows_from_roles_outside_the_policy(self) -> None:
        from nobroker.postgres import migrate

        worker_role, login, outsider = fresh_name("nbwork"), fresh_name("nbapp"), fresh_name("nbout")
        self.addCleanup(_drop_roles, [login, outsider, worker_role])
        migrate(self.dsn, schema=self.schema, worker_role=worker_role)
        migrate(self.dsn, schema=self.schema, worker_role=worker_role)  # idempotent, role and all
        with connect() as admin:
            admin.execute(f'CREATE ROLE "{login}" LOGIN IN ROLE "{worker_role}"')
            admin.execute(f'CREATE ROLE "{outsider}" LOGIN')
            # Even with every table privilege, a role outside the policy sees nothing.
            admin.execute(f'GRANT USAGE ON SCHEMA "{self.schema}" TO "{outsider}"')
            admin.execute(f'GRANT SELECT, UPDATE, DELETE ON "{self.schema}".jobs TO "{outsider}"')
        as_worker = _with_user(self.dsn, login)
        try:
            with Queue(as_worker, "rls", schema=self.schema, migrate=False) as q:
                q.enqueue_many(["a", "b"])
                job = q.lease_one()
                assert job is not None
                q.ack(job)
                self.assertEqual(q.stats().total, 2)
        except NobrokerError as exc:
            self.skipTest(f"cannot log in as a new role here ({exc}); RLS checked through SET ROLE below")
        with connect() as admin:
            admin.execute(f'SET ROLE "{outsider}"')
            self.assertEqual(admin.execute(f'SELECT count(*) FROM "{self.schema}".jobs').fetchone()[0], 0)
            self.assertEqual(admin.execute(f'DELETE FROM "{self.schema}".jobs').rowcount, 0)
            admin.execute("RESET ROLE")
            admin.execute(f'SET ROLE "{worker_role}"')
            self.assertEqual(admin.execute(f'SELECT count(*) FROM "{self.schema}".jobs').fetchone()[0], 2)
            admin.execute("RESET ROLE")
            forced = admin.execute(
                "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = %s::regclass",
                (f'"{self.schema}".jobs',),
            ).fetchone()
            self.assertEqual(forced, (True, True))

    def test_missing_driver_says_what_to_install(self) -> None:
        code = (
            "import sys\n"
            "sys.modules['psycopg'] = None\n"
            "from nobroker import Queue, NobrokerError\n"
            "try:\n"
            "    Queue('postgresql:///nowhere')\n"
            "except NobrokerError as exc:\n"
            "    print(exc)\n"
        )
        env = dict(os.environ, PYTHONPATH=SRC_DIR)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=PATIENCE)
        self.assertIn('pip install "nobroker[postgres]"', out.stdout, out.stderr)


@slow
class PostgresRestartTests(unittest.TestCase):
    """A real server restart under running Worker processes.

    The server restarted is a private one (tests.pgsupport.PrivateCluster), so
    PostgreSQL tests running in parallel against the shared server are not
    disturbed. NOBROKER_PG_RESTART_SHARED=1 restarts the shared local cluster
    instead (``pg_ctlcluster --skip-systemctl-redirect <version> main restart``).
    """

    def setUp(self) -> None:
        require_postgres(self)
        if os.environ.get("NOBROKER_PG_RESTART_SHARED") == "1":
            self.dsn = require_postgres(self)
            self.restart = self._restart_shared
        else:
            reason = PrivateCluster.unavailable()
            if reason is not None:
                self.skipTest(f"cannot run a private PostgreSQL server to restart: {reason}")
            cluster = PrivateCluster()
            self.addCleanup(cluster.close)
            self.dsn, self.restart = cluster.dsn, cluster.restart
        self.schema = fresh_name("nbrestart")
        from nobroker.postgres import migrate

        migrate(self.dsn, schema=self.schema)
        self.addCleanup(_drop_schema_at, self.dsn, self.schema)

    @staticmethod
    def _restart_shared() -> None:
        clusters = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=True).stdout.split()
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", clusters[0], clusters[1], "restart"], check=True, timeout=120
        )

    def test_workers_reconnect_and_carry_on_after_a_server_restart(self) -> None:
        script = (
            "import sys\n"
            "from nobroker import Queue, Worker\n"
            "q = Queue(sys.argv[1], 'restart', schema=sys.argv[2], migrate=False, reconnect_timeout=60)\n"
            "stats = Worker(q, lambda job: job.payload * 2, concurrency=2, poll_interval=0.05).run()\n"
            "print(stats.succeeded, flush=True)\n"
        )
        env = dict(os.environ, PYTHONPATH=SRC_DIR)
        workers = [
            subprocess.Popen([sys.executable, "-c", script, self.dsn, self.schema], stdout=subprocess.PIPE, env=env,
                             text=True)
            for _ in range(2)
        ]  # fmt: skip
        for proc in workers:
            self.addCleanup(proc.stdout.close)  # type: ignore[union-attr]
            self.addCleanup(proc.wait)
            self.addCleanup(proc.kill)
        q = Queue(self.dsn, "restart", schema=self.schema, migrate=False, reconnect_timeout=60)
        self.addCleanup(q.close)
        first = q.enqueue_many(list(range(20)), job_ids=[f"before-{i}" for i in range(20)])
        self.assertTrue(wait_until(lambda: q.stats().done == 20, PATIENCE), q.stats())
        # Both workers are running (each LISTENs once it idles) before the restart, so the
        # SIGTERM below meets a Worker's handler, not a process still starting up.
        self.assertTrue(wait_until(lambda: _listening_on(self.dsn) == 2, PATIENCE))
        self.restart()
        second = q.enqueue_many(list(range(20)), job_ids=[f"after-{i}" for i in range(20)])
        self.assertTrue(wait_until(lambda: q.stats().done == 40, PATIENCE * 2), q.stats())
        self.assertEqual([q.get(j.id).result for j in first + second], [i * 2 for i in range(20)] * 2)
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        succeeded = [int(proc.communicate(timeout=PATIENCE)[0].strip() or -1) for proc in workers]
        self.assertEqual(sum(succeeded), 40)
        self.assertEqual([proc.returncode for proc in workers], [0, 0])


@slow
class PostgresBenchTests(unittest.TestCase):
    """The PostgreSQL benchmark runs end to end (tiny sizes: this checks it works, not speed)."""

    def test_a_tiny_run_reports_every_figure(self) -> None:
        from tools.bench import pg as bench_pg

        dsn = require_postgres(self)
        rows = bench_pg.run(dsn, jobs=40, batch=10, workers=2, samples=5, rounds=1, progress=lambda text: None)
        keys = [row["key"] for row in rows]
        self.assertEqual(keys, ["enqueue_single", "enqueue_batch", "drain_1_one", "drain_1_batch", "drain_2_one",
                                "drain_2_batch", "pickup_median", "pickup_p99"])  # fmt: skip
        for row in rows:
            self.assertGreater(row["value"], 0, row)
            self.assertGreater(row["baseline"], 0, row)
        table = bench_pg.render(rows)
        self.assertIn("hand-written", table)
        self.assertIn("| figure |", bench_pg.render(rows, markdown=True))

    def test_a_tiny_run_at_scale_reports_every_figure(self) -> None:
        from tools.bench import pg_scale

        dsn = require_postgres(self)
        rows = pg_scale.run(
            dsn, progress=lambda text: None, size=3000, ahead=600, retrying=100, wanted=200, churned=1000, leases=10,
            reads=2,
        )  # fmt: skip
        keys = [row["key"] for row in rows]
        self.assertEqual(keys, [
            "lease_p50", "lease_p99", "lease_kinds_p50", "lease_kinds_p99", "stats", "len",
            *(f"list_{listing}" for listing in pg_scale.LISTINGS), "size_start", "size_churned", "size_ratio",
            "extend_p50", "extend_p99",
        ])  # fmt: skip
        for row in rows:
            self.assertGreater(row["value"], 0, row)
        self.assertIn("beside", rows[-2]["figure"])
        self.assertIn("| figure |", pg_scale.render(rows, markdown=True))

    def test_a_tiny_run_of_what_notify_costs_reports_each_way(self) -> None:
        from tools.bench import pg_notify

        dsn = require_postgres(self)
        rates = pg_notify.run(dsn, progress=lambda text: None, processes=2, jobs=5, rounds=1)
        self.assertEqual(list(rates), [key for key, _ in pg_notify.WAYS] + ["gate/none", "each/none"])
        for way, rate in rates.items():
            self.assertGreater(rate, 0, way)
        self.assertIn("as shipped / no NOTIFY:", pg_notify.render(rates, processes=2))


class BenchWaysOfNotifying(PostgresTestCase):
    """The NOTIFY figure's two ways the library does not ship send what they say: none, and one per enqueue."""

    def test_none_sends_no_notify_and_each_one_per_enqueue(self) -> None:
        from nobroker.postgres.connection import channel_name
        from tools.bench import pg_notify

        heard: dict[str, int] = {}
        for way in ("none", "each"):
            name = fresh_name("q")
            with connect() as ear, Queue(self.dsn, name, schema=self.schema, migrate=False) as q:
                channel = channel_name(self.schema, name)
                ear.execute(f'LISTEN "{channel}"')
                pg_notify.set_way(q, way)
                for i in range(5):
                    q.enqueue({"i": i})
                with connect() as other:
                    other.execute("SELECT pg_notify(%s, 'marker')", (channel,))
                count = 0
                for note in ear.notifies(timeout=PATIENCE):
                    if note.payload == "marker":
                        break
                    count += 1
                heard[way] = count
        self.assertEqual(heard, {"none": 0, "each": 5})


def _drop_schema_at(dsn: str, schema: str) -> None:
    try:
        with connect(dsn) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except Exception:  # the private server may already be gone, and the schema with it
        pass


def _listening_on(dsn: str) -> int:
    """How many connections an idle Worker listens on (its waits also ask when the next job is due)."""
    with connect(dsn) as conn:
        statement = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'nobroker-listen' AND datname = current_database()"
        )
        return int(conn.execute(statement).fetchone()[0])


def _backend_alive(pid: int) -> bool:
    with connect() as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] > 0


def _with_user(dsn: str, user: str) -> str:
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}user={user}"


def _drop_roles(roles: list[str]) -> None:
    with connect() as conn:
        for role in roles:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            if exists:
                conn.execute(f'DROP OWNED BY "{role}"')  # its grants and policies in this database
                conn.execute(f'DROP ROLE "{role}"')


if __name__ == "__main__":
    unittest.main()
