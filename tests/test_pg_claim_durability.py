"""On PostgreSQL a claim commits without waiting for the WAL flush, and its ack makes it durable.

Owns: ``ClaimDurabilityTests``, on a private server (tests.pgsupport.PrivateCluster):
its setting ``synchronous_standby_names`` names a standby that never
connects, so every commit that waits for its WAL to be flushed waits for
ever (``wait_event`` SyncRep) and one that does not, returns; and a crash
(``pg_ctl -m immediate``) after a claim and its ack, and after a claim
alone. Imports: the standard library, psycopg (through tests.pgsupport),
the public ``nobroker`` API, nobroker.postgres (migrate), tests.support
and tests.pgstoragesupport.
"""

from __future__ import annotations

import threading
import unittest
from typing import Any

from nobroker import JobState, NotLeasedError, Queue
from tests.pgstoragesupport import PATIENCE
from tests.pgsupport import PrivateCluster, connect, fresh_name, require_postgres
from tests.support import slow, wait_until

#: A standby that never connects: a commit that waits for its flush waits for it for ever.
NO_SUCH_STANDBY = "nobody_will_ever_connect"


@slow
class ClaimDurabilityTests(unittest.TestCase):
    def setUp(self) -> None:
        require_postgres(self)
        reason = PrivateCluster.unavailable()
        if reason is not None:
            self.skipTest(f"cannot run a private PostgreSQL server: {reason}")
        self.cluster = PrivateCluster()
        self.addCleanup(self.cluster.close)
        self.dsn = self.cluster.dsn
        self.schema = fresh_name("nbflush")
        from nobroker.postgres import migrate

        migrate(self.dsn, schema=self.schema)

    def open_queue(self) -> Queue:
        q = Queue(self.dsn, "flush", schema=self.schema, migrate=False, reconnect_timeout=60)
        self.addCleanup(q.close)
        return q

    def _waiting_for_the_flush(self) -> list[int]:
        """The backends whose commit waits for the standby that never comes."""
        with connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND backend_type = 'client backend'"
            ).fetchall()
        return [pid for (pid,) in rows]

    def _require_a_flush_for_ever(self) -> None:
        self.cluster.configure("synchronous_standby_names", NO_SUCH_STANDBY)

        def seen() -> bool:
            with connect(self.dsn) as conn:  # a new session reads the setting as it starts
                return bool(conn.execute("SHOW synchronous_standby_names").fetchone()[0] == NO_SUCH_STANDBY)

        self.assertTrue(wait_until(seen, PATIENCE))

    def test_a_claim_does_not_wait_for_the_flush_and_its_ack_and_an_enqueue_do(self) -> None:
        self.open_queue().enqueue_many(["a", "b"], job_ids=["a", "b"])
        self._require_a_flush_for_ever()
        # Opened now, so their sessions started with the setting.
        leaser, acker, enqueuer = self.open_queue(), self.open_queue(), self.open_queue()
        # Run before their close (cleanups run last in, first out): a commit left waiting returns.
        self.addCleanup(self.cluster.configure, "synchronous_standby_names", "")
        calls: dict[str, Any] = {}

        def call(name: str, fn: Any) -> threading.Thread:
            def main() -> None:
                try:
                    calls[name] = fn()
                except BaseException as exc:
                    calls[name] = exc

            thread = threading.Thread(target=main, daemon=True)
            thread.start()
            return thread

        lease = call("lease", lambda: leaser.lease(1))
        self.assertTrue(wait_until(lambda: not lease.is_alive() or bool(self._waiting_for_the_flush()), PATIENCE))
        self.assertEqual(self._waiting_for_the_flush(), [], "the claim waits for its WAL to be flushed")
        lease.join(PATIENCE)
        (job,) = calls["lease"]
        self.assertEqual(job.state, JobState.LEASED)
        ack = call("ack", lambda: acker.ack(job, result="done"))
        enqueue = call("enqueue", lambda: enqueuer.enqueue("c", job_id="c"))
        self.assertTrue(wait_until(lambda: len(self._waiting_for_the_flush()) == 2, PATIENCE))
        self.assertTrue(ack.is_alive() and enqueue.is_alive(), calls)
        self.cluster.configure("synchronous_standby_names", "")
        ack.join(PATIENCE)
        enqueue.join(PATIENCE)
        self.assertIsNone(calls["ack"])
        self.assertEqual(calls["enqueue"].id, "c")
        self.assertEqual(leaser.get(job.id).state, JobState.DONE)

    def test_after_a_crash_an_acked_claim_holds_and_a_claim_alone_is_there_or_taken_back(self) -> None:
        q = self.open_queue()
        q.enqueue_many(["a", "b"], job_ids=["a", "b"])
        first = q.lease(1)[0]
        q.ack(first, result=1)
        second = q.lease(1)[0]
        self.cluster.crash()
        again = self.open_queue()
        done = again.get(first.id)
        self.assertEqual((done.state, done.result, done.attempts), (JobState.DONE, 1, 1))
        after = again.get(second.id)
        if after.state is JobState.LEASED:  # the claim reached the disk before the crash: it holds as it was
            self.assertEqual((after.lease_token, after.attempts), (second.lease_token, 1))
            again.ack(second)
        else:  # taken back: exactly as before the claim, and the lost lease's ack is refused
            self.assertEqual((after.state, after.attempts, after.lease_token), (JobState.READY, 0, None))
            with self.assertRaises(NotLeasedError):
                again.ack(second)
            (retaken,) = again.lease(1)
            self.assertEqual((retaken.id, retaken.attempts), (second.id, 1))
            again.ack(retaken)
        self.assertEqual(again.stats().done, 2)


if __name__ == "__main__":
    unittest.main()
