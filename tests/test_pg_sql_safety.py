"""SQL safety on PostgreSQL: hostile text round-trips as data; bad schema and role names are refused before any SQL.

Owns: ``NASTY`` (text that would break SQL pasted together), the part of
``PostgresStorageTests`` that sends it through every field, and
``StatementTextTests`` (the statements as text, built for one schema, no
server needed). Imports: the standard library, the public ``nobroker`` API,
nobroker.postgres (migrate, statements) and tests.pgstoragesupport.
"""

from __future__ import annotations

import re
import unittest

from nobroker import Queue
from tests.pgstoragesupport import NO_BACKOFF, PostgresStorageCase

#: Text that would break SQL built by pasting strings together.
NASTY = "it's \"quoted\"; DROP TABLE jobs; -- a comment\n/* and */ $$dollar$$ \\backslash %s %(x)s {schema}"


class PostgresStorageTests(PostgresStorageCase):
    """Behaviour of the PostgreSQL storage beyond the shared semantic suite: SQL safety."""

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


if __name__ == "__main__":
    unittest.main()
