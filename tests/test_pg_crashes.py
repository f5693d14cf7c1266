"""Crashes and dead connections on PostgreSQL: a SIGKILLed worker, a terminated backend, a forked child.

Owns: the part of ``PostgresStorageTests`` where a holder dies: a worker
process killed with its lease held, a backend terminated under a worker and
under reads and idempotent writes, a connection lost while it is set up, and
a forked child that must open its own connections (``_use_inherited_queue``).
Imports: the standard library, psycopg (through tests.pgsupport), the
public ``nobroker`` API and tests.pgstoragesupport. Backends are terminated
by the server (pg_terminate_backend); processes are killed for real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import unittest
from typing import Any

from nobroker import JobState, NotLeasedError, Queue
from tests.pgsupport import connect, pg_dsn
from tests.pgstoragesupport import NO_BACKOFF, PATIENCE, SRC_DIR, PostgresStorageCase, _fork
from tests.support import wait_until


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


class PostgresStorageTests(PostgresStorageCase):
    """Behaviour of the PostgreSQL storage beyond the shared semantic suite: crashes and dead connections."""

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


def _backend_alive(pid: int) -> bool:
    with connect() as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] > 0


if __name__ == "__main__":
    unittest.main()
