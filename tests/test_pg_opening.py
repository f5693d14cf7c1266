"""Opening a PostgreSQL queue takes no lock on the jobs table: it reads the schema's version, nothing more.

Imports: the standard library, psycopg (through tests.pgsupport), the public
``nobroker`` API and nobroker.postgres (migrate, latest_version, schema).
The lock that an older open waited behind is held for real: an application
transaction that read the table and stays open.
"""

from __future__ import annotations

import threading
import unittest
from unittest import mock

from nobroker import Queue, StorageError
from tests.pgsupport import connect, drop_schema, fresh_name, require_postgres

PATIENCE = 60.0


def _drop_role(role: str) -> None:
    with connect() as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


class OpeningTests(unittest.TestCase):
    def setUp(self) -> None:
        self.dsn = require_postgres(self)
        self.schema = fresh_name("nbopen")
        self.addCleanup(drop_schema, self.schema)

    def test_opening_with_a_worker_role_does_not_wait_behind_an_open_transaction(self) -> None:
        from nobroker.postgres import migrate

        role = fresh_name("nbrole")
        self.addCleanup(_drop_role, role)
        migrate(self.dsn, schema=self.schema, worker_role=role)
        with Queue(self.dsn, "app", schema=self.schema) as q:
            q.enqueue("before")
        app = connect(autocommit=False)
        self.addCleanup(app.close)
        app.execute(f'SELECT count(*) FROM "{self.schema}".jobs')  # the transaction holds ACCESS SHARE from here
        opened: list[object] = []

        def open_and_lease() -> None:
            try:
                # lock_timeout 0.5 s: an open that asked for a stronger lock would fail here, not wait.
                with Queue(self.dsn, "app", schema=self.schema, worker_role=role, lock_timeout=0.5) as q:
                    opened.append(q.lease_one())
            except Exception as exc:
                opened.append(exc)

        thread = threading.Thread(target=open_and_lease)
        thread.start()
        thread.join(PATIENCE)
        self.assertFalse(thread.is_alive(), "opening waited behind the open transaction")
        self.assertEqual(len(opened), 1)
        self.assertNotIsInstance(opened[0], Exception, opened)
        self.assertEqual(getattr(opened[0], "payload", None), "before")
        locks = app.execute(
            "SELECT mode FROM pg_locks WHERE relation = %s::regclass AND pid = pg_backend_pid()",
            (f'"{self.schema}".jobs',),
        ).fetchall()
        self.assertEqual([row[0] for row in locks], ["AccessShareLock"], "the application still holds its lock")
        app.rollback()

    def test_a_schema_behind_is_refused_on_open_with_what_to_run(self) -> None:
        from nobroker.postgres import latest_version, migrate
        from nobroker.postgres import schema as postgres

        files = postgres._migration_files()
        with mock.patch.object(postgres, "_migration_files", lambda: files[:2]):
            postgres.migrate(self.dsn, schema=self.schema)
        with self.assertRaises(StorageError) as caught:
            Queue(self.dsn, "app", schema=self.schema)
        self.assertIn("nobroker pg migrate", str(caught.exception))
        self.assertIn(f"version 2, this nobroker needs {latest_version()}", str(caught.exception))
        migrate(self.dsn, schema=self.schema)
        with Queue(self.dsn, "app", schema=self.schema) as q:
            q.enqueue("after")
            self.assertEqual(len(q), 1)

    def test_a_worker_role_without_its_policies_is_refused_on_open(self) -> None:
        from nobroker.postgres import migrate

        role = fresh_name("nbrole")
        self.addCleanup(_drop_role, role)
        migrate(self.dsn, schema=self.schema)
        with self.assertRaises(StorageError) as caught:
            Queue(self.dsn, "app", schema=self.schema, worker_role=role)
        self.assertIn(f"--worker-role {role}", str(caught.exception))
        migrate(self.dsn, schema=self.schema, worker_role=role)
        Queue(self.dsn, "app", schema=self.schema, worker_role=role).close()

    def test_a_refused_open_keeps_no_connection(self) -> None:
        from nobroker.postgres import connection, migrate

        migrate(self.dsn, schema=self.schema)
        made: list[object] = []
        real = connection.psycopg.connect

        def connect_and_note(*args: object, **kwargs: object) -> object:
            made.append(real(*args, **kwargs))
            return made[-1]

        with mock.patch.object(connection.psycopg, "connect", connect_and_note):
            for _ in range(3):
                with self.assertRaises(StorageError):
                    Queue(self.dsn, "app", schema=self.schema, worker_role=fresh_name("nbrole"))
        self.assertTrue(made, "the opens connected")
        self.assertEqual([conn.closed for conn in made], [True] * len(made), "each refused open closed its connection")

    def test_first_use_creates_an_absent_schema_with_its_policies(self) -> None:
        role = fresh_name("nbrole")
        self.addCleanup(_drop_role, role)
        with Queue(self.dsn, "app", schema=self.schema, worker_role=role) as q:
            q.enqueue("x")
        Queue(self.dsn, "app", schema=self.schema, worker_role=role).close()  # in place: opens


if __name__ == "__main__":
    unittest.main()
