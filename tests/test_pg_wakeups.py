"""Who the PostgreSQL storage wakes, and how often: NOTIFY per queue, at most once per window, never for later.

Imports: the standard library, psycopg (through tests.pgsupport), the public
``nobroker`` API and nobroker.postgres (channel_name, the gate and its windows). A raw
connection LISTENs on the queue's channel and counts what arrives; a marker
NOTIFY sent after the writes tells when everything they sent has arrived.
"""

from __future__ import annotations

import time
import unittest
from unittest import mock
from nobroker import BackoffPolicy, Queue
from nobroker.postgres.naming import channel_name
from nobroker.postgres.wakeups import NOTIFY_WINDOW, OWED_AFTER, WIDEST_WINDOW
from tests.pgsupport import PostgresTestCase, connect, fresh_name

PATIENCE = 60.0
MARKER = "marker"


class GateWindowTests(unittest.TestCase):
    """The gate's window, on a clock of its own (no server needed): narrow after quiet, wider in a steady stream."""

    def setUp(self) -> None:
        from nobroker.postgres import wakeups

        self.now = 1000.0
        patcher = mock.patch.object(wakeups.time, "monotonic", lambda: self.now)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.gate = wakeups.NotifyGate(lambda: None)

    def writes(self, count: int, every: float) -> int:
        """``count`` writes ``every`` seconds apart: how many were told to NOTIFY."""
        told = 0
        for _ in range(count):
            told += self.gate.take()
            self.now += every
        return told

    def test_writes_further_apart_than_the_window_each_notify(self) -> None:
        self.assertEqual(self.writes(50, NOTIFY_WINDOW * 2), 50)

    def test_a_steady_stream_widens_the_window_to_the_widest_and_quiet_narrows_it(self) -> None:
        every = NOTIFY_WINDOW / 10
        seconds = 200 * every * 10  # 2,000 writes, 10 to a narrow window
        told = self.writes(2000, every)
        self.assertLessEqual(told, seconds / WIDEST_WINDOW + 4, "the window never widened")
        self.assertGreater(told, seconds / WIDEST_WINDOW - 4, "wider than the widest")
        self.now += WIDEST_WINDOW * 3  # quiet
        self.assertEqual(self.writes(2, NOTIFY_WINDOW / 2), 1, "after quiet: one NOTIFY, the next write held back")
        self.now += NOTIFY_WINDOW
        self.assertTrue(self.gate.take(), "the window after quiet is the narrow one again")


class NotifyTests(PostgresTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.name = fresh_name("q")
        self.q = Queue(self.dsn, self.name, schema=self.schema, migrate=False, backoff=BackoffPolicy(base=60))
        self.addCleanup(self.q.close)
        self.channel = channel_name(self.schema, self.name)
        self.ear = connect()
        self.addCleanup(self.ear.close)
        self.ear.execute(f'LISTEN "{self.channel}"')

    def heard(self) -> list[tuple[str, float]]:
        """(payload, monotonic time) of every notification up to a marker sent now, in order."""
        with connect() as other:
            other.execute("SELECT pg_notify(%s, %s)", (self.channel, MARKER))
        got: list[tuple[str, float]] = []
        deadline = time.monotonic() + PATIENCE
        for note in self.ear.notifies(timeout=PATIENCE):
            if note.payload == MARKER:
                return got
            got.append((note.payload, time.monotonic()))
            self.assertLess(time.monotonic(), deadline)
        self.fail("the marker never arrived")

    def test_delayed_jobs_and_delayed_retries_never_notify(self) -> None:
        self.q.enqueue("later", delay=60)
        self.q.enqueue_many(["a", "b"], delay=5)
        self.q.enqueue("now")
        self.assertEqual(len(self.heard()), 1, "only the job runnable at once notifies")
        time.sleep(NOTIFY_WINDOW * 2)
        job = self.q.lease_one()
        assert job is not None
        self.q.nack(job, delay=30)  # retried later: nothing to wake anyone for
        self.assertEqual(self.heard(), [])
        self.q.storage.clock_offset = 31  # type: ignore[attr-defined]
        job = self.q.lease_one()
        assert job is not None
        self.q.nack(job)  # the backoff (60 s) decides: later again
        self.assertEqual(self.heard(), [])

    def test_a_burst_of_enqueues_notifies_about_once_per_window_and_the_last_job_is_announced(self) -> None:
        started = time.monotonic()
        for n in range(200):
            self.q.enqueue({"n": n})
        finished = time.monotonic()
        # The owed NOTIFY comes at most OWED_AFTER windows (the widest, in a stream) after the last one sent.
        time.sleep(WIDEST_WINDOW * (OWED_AFTER + 2))
        heard = self.heard()
        windows = (finished - started) / NOTIFY_WINDOW
        self.assertGreaterEqual(len(heard), 1)
        self.assertLessEqual(len(heard), windows + 2, f"{len(heard)} NOTIFYs in {windows:.0f} windows")
        self.assertLess(len(heard), 200, "one NOTIFY per enqueue")

    def test_a_job_enqueued_within_the_window_is_announced_one_window_after_it_ends(self) -> None:
        window = 2.0  # long enough that the marker below surely arrives before the window ends
        self.q.storage._gate._window = window  # type: ignore[attr-defined]
        self.q.enqueue("first")  # notifies in its own statement
        self.q.enqueue("second")  # within the window: owes one
        self.assertEqual(len(self.heard()), 1, "the second enqueue notified at once")
        time.sleep(window * (OWED_AFTER - 0.5))
        self.assertEqual(self.heard(), [], "the owed NOTIFY came before a write after the window could send it")
        time.sleep(window)
        self.assertEqual(len(self.heard()), 1, "the owed NOTIFY never came")

    def test_a_job_nacked_for_now_and_a_requeued_job_wake_workers(self) -> None:
        job = self.q.enqueue("x", max_attempts=2)
        self.heard()
        leased = self.q.lease_one()
        assert leased is not None
        time.sleep(NOTIFY_WINDOW * 2)
        self.q.nack(leased, delay=0)
        self.assertEqual(len(self.heard()), 1)
        leased = self.q.lease_one()
        assert leased is not None and leased.id == job.id
        self.q.nack(leased, delay=0)  # the last attempt: dead, nothing to wake for
        self.assertEqual(self.heard(), [])
        time.sleep(NOTIFY_WINDOW * 2)
        self.assertEqual(self.q.requeue_dead(), 1)
        self.assertEqual(len(self.heard()), 1)

    def test_a_write_told_not_to_notify_sends_a_statement_without_the_notify(self) -> None:
        from nobroker.postgres.connection import Session

        sent: list[str] = []
        real = Session.execute

        def execute(session: Session, query: object, params: object = None) -> object:
            sent.append(str(query))
            return real(session, query, params)

        def sends(call: object) -> str:
            """The one statement ``call`` sent."""
            sent.clear()
            call()  # type: ignore[operator]
            self.assertEqual(len(sent), 1, sent)
            return sent[0]

        gate = self.q.storage._gate  # type: ignore[attr-defined]
        with mock.patch.object(Session, "execute", execute):
            for told in (False, True):
                with mock.patch.object(gate, "take", lambda told=told: told), mock.patch.object(gate, "owe"):
                    self.assertEqual("pg_notify" in sends(lambda: self.q.enqueue("one")), told)
                    self.assertEqual("pg_notify" in sends(lambda: self.q.enqueue_many(["two", "three"])), told)
                    leased = self.q.lease_one()
                    self.assertEqual("pg_notify" in sends(lambda: self.q.nack(leased, delay=0)), told)

    def test_an_enqueue_in_the_callers_transaction_notifies_at_its_commit(self) -> None:
        with connect(autocommit=False) as conn:
            self.q.enqueue("in a transaction", conn=conn)
            self.assertEqual(self.heard(), [], "announced before the commit")
            conn.commit()
        self.assertEqual(len(self.heard()), 1)



if __name__ == "__main__":
    unittest.main()
