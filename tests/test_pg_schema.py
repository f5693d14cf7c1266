"""The PostgreSQL schema: migrations (idempotent, upgraded, concurrent), the rules of a row, the trigger of waits, the SQL backoff, row level security, the driver.

Owns: ``PostgresSchemaTests`` (each test in a schema of its own),
``migrate_names`` and the helpers of its child processes and roles
(``_migrate_child``, ``_with_user``, ``_drop_roles``). Imports: the standard
library, psycopg (through tests.pgsupport), the public ``nobroker`` API,
nobroker.postgres (migrate, latest_version, schema, the channel of
finished jobs) and tests.pgstoragesupport. Four processes migrate at once for real.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unittest
from typing import Any
from unittest import mock

from nobroker import BackoffPolicy, Job, NobrokerError, NotLeasedError, Queue
from tests.pgsupport import connect, drop_schema, fresh_name, require_postgres
from tests.pgstoragesupport import PATIENCE, SRC_DIR, _fork


def _migrate_child(dsn: str, schema: str, start: Any, out: Any) -> None:
    from nobroker.postgres import migrate

    start.wait(PATIENCE)
    try:
        out.put(("ok", migrate(dsn, schema=schema)))
    except BaseException as exc:
        out.put(("error", repr(exc)))


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
             "011_groups.sql", "012_job_rules_in_one_call.sql", "013_waited_end_tested_in_its_trigger.sql"],
        )
        self.assertEqual(migrate(self.dsn, schema=self.schema), [])
        with connect() as conn:
            rows = conn.execute(f'SELECT version FROM "{self.schema}".schema_migrations').fetchall()
        self.assertEqual([r[0] for r in rows], list(range(1, 14)))
        self.assertEqual(latest_version(), 13)
        other = fresh_name("nbmig")
        self.addCleanup(drop_schema, other)
        with Queue(self.dsn, schema=other) as q:  # migrate=True by default
            q.enqueue("x")
            self.assertEqual(len(q), 1)

    def test_upgrading_from_version_1_takes_the_lease_token_off_done_jobs(self) -> None:
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

    def test_every_rule_of_a_jobs_row_is_kept_by_one_check_that_calls_a_function(self) -> None:
        from psycopg import errors as pg_errors

        from nobroker.postgres import schema as postgres

        files = postgres._migration_files()
        before = [name for _, name, _ in files].index("012_job_rules_in_one_call.sql")
        with mock.patch.object(postgres, "_migration_files", lambda: files[:before]):
            postgres.migrate(self.dsn, schema=self.schema)
        table = f'"{self.schema}".jobs'
        # A row in every state the rules allow, written under the six checks of version 11.
        rows = [("r", "ready", False, False, None), ("s", "ready", True, False, None), ("l", "leased", False, False, 1.5),
                ("c", "leased", False, True, None), ("d", "done", False, False, None), ("x", "dead", False, False, None),
                ("k", "cancelled", False, False, None)]  # fmt: skip
        with connect() as conn:
            for job_id, state, scheduled, cancel, timeout in rows:
                conn.execute(
                    f"INSERT INTO {table} (queue, id, state, max_attempts, available_at, enqueued_at, lease_deadline,"
                    " lease_token, payload, scheduled, cancel_requested, timeout) VALUES ('rules', %s, %s, 5, now(),"
                    " now(), CASE WHEN %s = 'leased' THEN now() + interval '1 hour' END,"
                    " CASE WHEN %s = 'leased' THEN 'tok' END, '1', %s, %s, %s)",
                    (job_id, state, state, state, scheduled, cancel, timeout),
                )
        self.assertEqual(postgres.migrate(self.dsn, schema=self.schema)[0], "012_job_rules_in_one_call.sql")
        with connect() as conn:
            checks = conn.execute(
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass"
                " AND contype = 'c'", (table,),
            ).fetchall()
            self.assertEqual(len(checks), 1, checks)
            self.assertEqual(checks[0][0], "jobs_row_valid")
            self.assertIn("job_row_valid(state, cancel_requested, lease_deadline, lease_token, scheduled, timeout)",
                          checks[0][1])
            broken = {  # each rule of the six, broken by one write to a ready row
                "an unknown state": "state = 'lost'",
                "a lease without a deadline": "state = 'leased', lease_token = 'tok'",
                "a deadline without a lease": "lease_deadline = now()",
                "a lease without a token": "state = 'leased', lease_deadline = now()",
                "a cancel asked of a job not leased": "cancel_requested = true",
                "a finished job waiting for its time": "state = 'done', scheduled = true",
                "a time limit of zero": "timeout = 0",
                "a negative time limit": "timeout = -1",
            }
            for what, change in broken.items():
                with self.subTest(what), self.assertRaises(pg_errors.CheckViolation) as caught:
                    with conn.transaction():
                        conn.execute(f"UPDATE {table} SET {change} WHERE queue = 'rules' AND id = 'r'")
                self.assertEqual(caught.exception.diag.constraint_name, "jobs_row_valid")
            conn.execute(f"UPDATE {table} SET timeout = 2.5, priority = 3 WHERE queue = 'rules' AND id = 'r'")
        with Queue(self.dsn, "rules", schema=self.schema, migrate=False) as q:
            states = {job_id: q.get(job_id).state.value for job_id, *_ in rows}  # type: ignore[union-attr]
            self.assertEqual(states, {"r": "ready", "s": "ready", "l": "leased", "c": "leased", "d": "done",
                                      "x": "dead", "k": "cancelled"}, "every row as the migration found it")
            job = q.lease_one()
            assert job is not None
            self.assertEqual((job.id, job.priority, job.timeout), ("r", 3, 2.5))
            q.ack(job)

    def test_only_the_end_of_a_waited_job_wakes_its_waiters(self) -> None:
        import time

        from nobroker.postgres import migrate
        from nobroker.postgres.control_ops import finished_channel

        migrate(self.dsn, schema=self.schema)
        with connect() as conn:
            trigger = conn.execute(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'jobs_waited_finishes'"
                " AND tgrelid = %s::regclass", (f'"{self.schema}".jobs',),
            ).fetchone()[0]
        self.assertIn("WHEN (new.waited) EXECUTE", trigger, "one column to read back at each update of state")
        channel = finished_channel(self.schema, "waits")
        heard: list[str] = []
        with connect() as listener, Queue(self.dsn, "waits", schema=self.schema) as q:
            listener.add_notify_handler(lambda n: heard.append(n.payload) if n.channel == channel else None)
            listener.execute(f'LISTEN "{channel}"')
            for name in "abc":
                q.enqueue(name, job_id=name)
            d = q.enqueue("d", job_id="d")
            listener.execute(f"UPDATE \"{self.schema}\".jobs SET waited = true WHERE id IN ('a', 'c', 'd')")
            for job in q.lease(3):  # a, b and c claimed: no end
                if job.id == "c":
                    q.nack(job, error="again", delay=0)  # back to ready: no end
                else:
                    q.ack(job)  # a ends (waited), b ends (nobody waits)
            again = q.lease_one()
            assert again is not None and again.id == "c", again
            q.nack(again, error="no more", permanent=True)  # c ends dead
            q.cancel(d)  # d ends cancelled, from ready
            deadline = time.monotonic() + PATIENCE
            while len(heard) < 3 and time.monotonic() < deadline:
                listener.execute("SELECT 1")  # takes in what was sent meanwhile
                time.sleep(0.01)
        # Each end was committed after the one before it, and the NOTIFYs arrive in that order.
        self.assertEqual(heard, ["a", "c", "d"])

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

        with self.assertRaises(StorageError) as caught, Queue(self.dsn, schema=self.schema, migrate=False) as q:
            q.enqueue("x")
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
            # The role writes through the row check's function by its own grant, not PUBLIC's.
            admin.execute(f'REVOKE EXECUTE ON FUNCTION "{self.schema}".job_row_valid FROM PUBLIC')
            admin.execute(f'SET ROLE "{worker_role}"')
            self.assertEqual(admin.execute(f'SELECT count(*) FROM "{self.schema}".jobs').fetchone()[0], 2)
            self.assertEqual(admin.execute(f'UPDATE "{self.schema}".jobs SET priority = 1').rowcount, 2)
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
