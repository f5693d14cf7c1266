"""Idle waits on PostgreSQL: wait_for_jobs wakes for an enqueue elsewhere, and when a delayed job or a lease comes due.

Owns: the part of ``PostgresStorageTests`` about ``wait_for_jobs`` seen from
the waiting side: woken by another connection's enqueue, not by another
queue's, and at the due time of a delayed job or an expiring lease (which no
NOTIFY announces). Imports: the standard library, the public ``nobroker`` API,
tests.pgsupport and tests.pgstoragesupport.
"""

from __future__ import annotations

import threading
import time
import unittest

from tests.pgsupport import fresh_name
from tests.pgstoragesupport import NO_BACKOFF, PATIENCE, PostgresStorageCase


class PostgresStorageTests(PostgresStorageCase):
    """Behaviour of the PostgreSQL storage beyond the shared semantic suite: idle waits."""

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


if __name__ == "__main__":
    unittest.main()
