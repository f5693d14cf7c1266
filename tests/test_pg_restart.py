"""A real PostgreSQL server restart under running Worker processes: they reconnect and carry on.

Owns: ``PostgresRestartTests`` and its helpers (``_drop_schema_at``,
``_listening_on``). Imports: the standard library, psycopg (through
tests.pgsupport), the public ``nobroker`` API, nobroker.postgres (migrate),
tests.support and tests.pgstoragesupport.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import unittest

from nobroker import Queue
from tests.pgsupport import PrivateCluster, connect, fresh_name, require_postgres
from tests.pgstoragesupport import PATIENCE, SRC_DIR
from tests.support import slow, wait_until


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


if __name__ == "__main__":
    unittest.main()
