"""The PostgreSQL storage's plans at scale: what a claim, a count and a listing read, in buffers.

Imports: the standard library, psycopg (through tests.pgsupport), the public
``nobroker`` API and nobroker.postgres.statements. Buffers from EXPLAIN
(ANALYZE, BUFFERS) are the steady evidence (times on a shared machine are
not): each test builds a queue with many jobs in the way of the operation,
runs the operation's own statement under EXPLAIN inside a transaction that
is rolled back, and bounds the pages it touched. Nothing here is timed.
"""

from __future__ import annotations

import unittest
from typing import Any

from nobroker import Queue
from nobroker.postgres.statements import backoff_parameters
from tests.pgsupport import PostgresTestCase, connect, fresh_name
from tests.support import slow

#: Jobs put in the way of each operation (a tenth of the issue's 100,000 keeps the suite quick).
IN_THE_WAY = 20_000
#: Most pages an operation may touch however many jobs are in its way: a few
#: index pages, the rows it takes, the counts' rows. Walking the jobs in the
#: way costs one page per ~100 of them (200 or more here).
FEW_PAGES = 60


def _buffers(plan: dict[str, Any]) -> int:
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _nodes(child)
    return out


@slow
class PlanTests(PostgresTestCase):
    """Each operation's statement touches a bounded number of pages, whatever waits beside it."""

    def setUp(self) -> None:
        super().setUp()
        self.name = fresh_name("q")
        self.q = Queue(self.dsn, self.name, schema=self.schema, migrate=False)
        self.addCleanup(self.q.close)
        self.sql = self.q.storage._target.sql  # type: ignore[attr-defined]

    def fill(self, count: int, **options: Any) -> None:
        for start in range(0, count, 1000):
            self.q.enqueue_many([{"n": n} for n in range(start, min(start + 1000, count))], **options)

    def explain(self, statement: str, **values: Any) -> dict[str, Any]:
        """The plan of ``statement`` run for real (EXPLAIN ANALYZE), its changes rolled back."""
        params = {"q": self.name, "off": 0.0, **backoff_parameters(self.q.storage.backoff), **values}  # type: ignore[attr-defined]
        with connect(autocommit=False) as conn:
            conn.execute(f'ANALYZE "{self.schema}".jobs')
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params).fetchone()
            conn.rollback()
        return row[0][0]["Plan"]  # type: ignore[no-any-return]

    def assert_few_pages(self, plan: dict[str, Any], what: str) -> None:
        self.assertLessEqual(_buffers(plan), FEW_PAGES, f"{what} touched {_buffers(plan)} pages")
        self.assertFalse([n for n in _nodes(plan) if n["Node Type"] == "Seq Scan"], f"{what} scans the table")

    # ------------------------------------------------------------ claims
    def test_a_claim_never_walks_over_delayed_or_retrying_jobs(self) -> None:
        self.fill(IN_THE_WAY, delay=3600)  # delayed an hour, all ahead of the job below in seq order
        retrying = self.q.lease(100)
        for job in retrying:
            self.q.nack(job, delay=3600)
        ready = self.q.enqueue("now")
        upkeep = self.explain(self.sql["upkeep"])
        self.assert_few_pages(upkeep, "the upkeep before a claim")
        claim = self.explain(self.sql.claim(1, kinds=False), vt=30.0, kinds=None)
        self.assert_few_pages(claim, "a claim")
        self.assertEqual(claim["Actual Rows"], 1)
        self.assertEqual([job.id for job in self.q.lease(5)], [ready.id])

    def test_a_claim_of_some_kinds_never_walks_over_other_kinds(self) -> None:
        self.fill(IN_THE_WAY, kind="other")
        email = self.q.enqueue("mail", kind="email")
        for kinds in (["email"], ["email", "sms"]):
            with self.subTest(kinds=kinds):
                plan = self.explain(self.sql.claim(1, kinds=True), vt=30.0, kinds=kinds)
                self.assert_few_pages(plan, f"a claim of {kinds}")
                self.assertEqual(plan["Actual Rows"], 1)
        self.assertEqual([job.id for job in self.q.lease(5, kinds=["email"])], [email.id])

    def test_scheduled_jobs_that_came_due_are_claimed_in_priority_order(self) -> None:
        low = self.q.enqueue("low", delay=5)
        high = self.q.enqueue("high", delay=6, priority=9)
        plain = self.q.enqueue("plain")
        self.q.storage.clock_offset = 10  # type: ignore[attr-defined]
        self.assertEqual([job.id for job in self.q.lease(3)], [high.id, low.id, plain.id])

    def test_an_idle_wait_asks_two_index_probes_when_the_next_job_comes_due(self) -> None:
        self.fill(IN_THE_WAY, delay=3600)
        plan = self.explain(self.sql["next_due"])
        self.assert_few_pages(plan, "the next due time")


if __name__ == "__main__":
    unittest.main()
