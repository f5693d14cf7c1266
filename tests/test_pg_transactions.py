"""Enqueue inside the caller's PostgreSQL transaction: committed and rolled back with it.

Owns: the part of ``PostgresStorageTests`` about ``conn=``: a job enqueued in
the caller's transaction is seen by no one before the commit and gone after
a rollback, keeps the job_id and dedupe rules, and ``conn`` must be a psycopg
connection. Imports: the standard library, psycopg (through
tests.pgsupport), the public ``nobroker`` API and tests.pgstoragesupport.
"""

from __future__ import annotations

import unittest

from nobroker import JobNotFoundError, JobState
from tests.pgsupport import connect
from tests.pgstoragesupport import PostgresStorageCase


class PostgresStorageTests(PostgresStorageCase):
    """Behaviour of the PostgreSQL storage beyond the shared semantic suite: transactions."""

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


if __name__ == "__main__":
    unittest.main()
