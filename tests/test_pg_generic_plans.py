"""Generic plans on PostgreSQL: single-job statements, batches, claims and the DLQ listing keep their index.

Owns: the part of ``PostgresStorageTests`` that reads the plans the server
keeps once it has made a generic one (``plan_cache_mode =
force_generic_plan``, seen through auto_explain by ``watch_plans``; skipped
where auto_explain cannot be loaded), with ``fill_and_watch_plans`` for
100,000 rows in the way, and a batch of acks and heartbeats, and a claim
under limits, on a table never analyzed; the claim of a lease kind by kind
(under limits, or beside a paused kind), planned once and reading a few pages. Imports: the standard library, psycopg (through tests.pgsupport),
the public ``nobroker`` API, tests.support and tests.pgstoragesupport.
"""

from __future__ import annotations

import re
import unittest

from nobroker import Queue
from tests.pgsupport import connect, unanalyzed_queue
from tests.pgstoragesupport import PostgresStorageCase
from tests.support import slow

#: Rounds of a statement that take it past psycopg's prepare threshold (5), so the server plans it once, generically.
PAST_PREPARING = 6
#: Pages a lease's claim may read: the heads it takes, the pauses, the job it updates (16-21 seen).
FEW_PAGES = 60


class PostgresStorageTests(PostgresStorageCase):
    """Behaviour of the PostgreSQL storage beyond the shared semantic suite: generic plans."""

    def test_single_job_statements_use_the_primary_key_even_with_generic_plans(self) -> None:
        # A generic plan is made once and kept: one that walked the index of
        # leases (or of the queue) instead of the primary key would make every
        # ack cost as much as the queue is long.
        q = self.open_queue()
        conn = q.storage._link._conn  # type: ignore[attr-defined]
        try:
            conn.execute("LOAD 'auto_explain'")
        except Exception as exc:  # not a superuser, or no contrib modules: nothing to look through
            self.skipTest(f"auto_explain is not available here ({exc})")
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_level = notice",
                        "client_min_messages = notice", "plan_cache_mode = force_generic_plan"):  # fmt: skip
            conn.execute(f"SET {setting}")
        plans: list[str] = []
        conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
        q.enqueue_many(list(range(200)))
        with connect() as admin:  # what autovacuum does once a table has grown: statistics
            admin.execute(f'ANALYZE "{self.schema}".jobs')
        jobs = q.lease(20)
        for job in jobs[:5]:  # past psycopg's prepare threshold: the server keeps a generic plan
            q.extend(job, 60)
        plans.clear()
        q.extend(jobs[5], 60)
        q.set_stage(jobs[6], "s")
        q.ack(jobs[7])
        q.nack(jobs[8], delay=0)
        single = [plan for plan in plans if "WHERE j.queue = $" in plan and "j.id = $" in plan]
        self.assertEqual(len(single), 4, plans)
        for plan in single:
            self.assertIn("jobs_pkey", plan)
            self.assertNotIn("jobs_leases", plan.split("Query Text")[0] + plan[plan.find("Update on"):])

    def test_batches_of_acks_and_heartbeats_probe_the_key_on_a_table_never_analyzed(self) -> None:
        # The plans a Worker runs, from its first minutes on a new schema: an array of ids
        # compared with the queue's part of the key was planned as a read of every job of the
        # queue (14 million index entries for 4,000 acks); each job is a probe of the key.
        q = unanalyzed_queue(self, self.name)
        plans = self.watch_plans(q)
        for start in range(0, 3000, 1000):
            q.enqueue_many([{"n": n} for n in range(start, start + 1000)])
        for _ in range(PAST_PREPARING):  # past psycopg's prepare threshold: the server keeps a generic plan
            jobs = q.lease(2)
            q.extend_many(jobs, 60)
            q.ack_many(jobs)
        batches = [plan for plan in plans if "unnest(" in plan]
        self.assertEqual(len(batches), 2 * PAST_PREPARING, "every batch's plan was seen")
        for plan in batches:
            shown = plan[plan.index("Update on"):]
            self.assertIn("Index Scan using jobs_pkey on jobs j", shown)
            self.assertRegex(shown, r"Index Cond: \(\(queue = .*\) AND \(id = ", "a probe of the key, by both its columns")
            self.assertNotIn("Seq Scan", shown)
        self.assertEqual(q.stats().done, 2 * PAST_PREPARING)

    def test_a_claim_under_limits_probes_the_key_on_a_table_never_analyzed(self) -> None:
        # Its batch was updated by an array of ids beside the queue's part of the key, which
        # a table never analyzed read whole at every lease (limit_ops._CLAIM).
        q = unanalyzed_queue(self, self.name)
        q.set_limit("mail", concurrency=100)
        for start in range(0, 3000, 1000):
            q.enqueue_many([{"n": n} for n in range(start, start + 1000)], kind="mail")
        plans = self.watch_plans(q)
        for _ in range(PAST_PREPARING):
            job = q.lease_one()
            assert job is not None
            q.ack(job)
        claims = [plan for plan in plans if "k(kind, cap)" in plan]
        self.assertEqual(len(claims), PAST_PREPARING, "every claim's plan was seen")
        for plan in claims:
            shown = plan[plan.index("Update on"):]
            self.assertRegex(shown, r"Index Scan using jobs_pkey on jobs j\b.*\n.*Index Cond: \(\(queue = x\.queue\) AND \(id = x\.id\)\)",
                             "each job of the batch found by a probe of the key")
            self.assertNotRegex(shown, r"Bitmap Heap Scan on jobs j\b", "no read of the queue's part of the key")
            self.assertNotIn("Seq Scan", shown)
        self.assertEqual(q.stats().done, PAST_PREPARING)

    def test_a_claim_under_limits_is_planned_once_and_the_setting_ends_with_its_lease(self) -> None:
        # Its arrays made the server's estimate of a generic plan worse than a custom
        # one's, so it planned the claim again at every lease (a fifth of the server's
        # CPU there); the lease asks for the generic plan, in the claim's pipeline, whose reads
        # test_a_claim_under_limits_probes_the_key_on_a_table_never_analyzed and test_pg_plans bound.
        q = self.open_queue()
        q.set_limit("mail", concurrency=100)
        self.assert_planned_once(q)

    def test_a_claim_beside_a_paused_kind_is_planned_once_and_the_setting_ends_with_its_lease(self) -> None:
        # A queue with pauses and no limit is leased kind by kind too, without the limits'
        # transaction: its claim was planned again at every lease (a quarter of the server's
        # CPU there), until the setting came with the claim in one pipeline.
        q = self.open_queue()
        q.enqueue_many([{"n": n} for n in range(100)], kind="held")
        q.pause(kind="held")
        self.assert_planned_once(q)

    def assert_planned_once(self, q: Queue) -> None:
        """Leases of "mail" jobs past the prepare threshold: the claim kind by kind has one generic plan, no custom one."""
        q.enqueue_many([{"n": n} for n in range(3 * PAST_PREPARING)], kind="mail")
        for _ in range(3 * PAST_PREPARING):
            job = q.lease_one()
            assert job is not None and job.kind == "mail"
            q.ack(job)
        conn = q.storage._link._connection()  # type: ignore[attr-defined]
        claims = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%k(kind, cap)%'"
        ).fetchall()
        self.assertEqual(len(claims), 1, "the claim kind by kind is prepared")
        generic, custom = claims[0]
        self.assertEqual(custom, 0, "never planned for its parameters once prepared")
        self.assertGreaterEqual(generic, 2 * PAST_PREPARING - 1)
        self.assertEqual(conn.execute("SHOW plan_cache_mode").fetchone(), ("auto",), "the setting ended with the lease")

    def test_a_lease_kind_by_kind_reads_a_few_pages_on_a_table_never_analyzed(self) -> None:
        # The fair kinds' picks (an array of ids) were filtered out of every ready job of the
        # queue: 166 pages at each lease of 7,000 jobs, even with no fair kind; then, each a
        # probe beside the claim index's predicate, the same walk for each pick.
        for held in ("limit", "pause", "fair"):
            with self.subTest(held=held):
                self.assert_a_few_pages(unanalyzed_queue(self, f"{self.name}-{held}"), held, analyzed=False)

    def test_a_lease_kind_by_kind_reads_a_few_pages_on_a_table_analyzed(self) -> None:
        # The count as a parameter (a generic plan guesses a tenth of the rows) joined the
        # batch to a scan of every job: 122 pages at each lease of 7,000 jobs.
        for held in ("limit", "pause"):
            with self.subTest(held=held):
                # A schema of its own: the plan turns on the table's size, which other tests would change.
                self.assert_a_few_pages(unanalyzed_queue(self, f"{self.name}-{held}"), held, analyzed=True)

    def assert_a_few_pages(self, q: Queue, held: str, *, analyzed: bool) -> None:
        """Leases under a limit (``held``: "limit"; "fair", a group concurrency limit, the kind in groups), or beside
        a paused kind ("pause"), with 3,000 jobs ahead of the kind leased: a few pages each."""
        q.enqueue_many([{"n": n} for n in range(3000)], kind="other")
        for group in range(10):
            q.enqueue_many([{"n": n} for n in range(300)], kind="mail", group=f"g{group}" if held == "fair" else None)
        if held == "limit":
            q.set_limit("mail", concurrency=100)
        elif held == "fair":
            q.set_limit("mail", group_concurrency=2)
        else:
            q.pause(kind="other")
        if analyzed:  # what autovacuum does once a table has grown
            with connect() as admin:
                admin.execute(f'ANALYZE "{q.storage.schema}".jobs')  # type: ignore[attr-defined]
        plans = self.watch_plans(q, analyze=True)
        for _ in range(PAST_PREPARING):
            job = q.lease_one()
            assert job is not None and job.kind == ("mail" if held == "pause" else "other")
            q.ack(job)
        claims = [plan[plan.index("Update on"):] for plan in plans if "k(kind, cap)" in plan]
        self.assertEqual(len(claims), PAST_PREPARING, "every claim's plan was seen")
        for plan in claims:
            self.assertNotRegex(plan, r"Seq Scan on jobs\b")
            pages = int(re.search(r"Buffers: shared hit=([0-9]+)", plan).group(1))  # type: ignore[union-attr]
            self.assertLessEqual(pages, FEW_PAGES, plan)

    def fill_and_watch_plans(self, q: Queue, state: str, *, side: bool = False) -> list[str]:
        """100,000 rows in ``state``, then every plan ``q`` runs from here on (see watch_plans)."""
        with connect() as admin:
            admin.execute(
                f'INSERT INTO "{self.schema}".jobs (queue, id, state, max_attempts, available_at, enqueued_at, payload) '
                "SELECT %s, 'b' || i, %s, 5, now(), now(), '1' FROM generate_series(1, 100000) AS i",
                (self.name, state),
            )
            admin.execute(f'ANALYZE "{self.schema}".jobs')
        return self.watch_plans(q, side=side)

    def watch_plans(self, q: Queue, *, side: bool = False, analyze: bool = False) -> list[str]:
        """Every plan ``q`` runs from here on: generic plans, via auto_explain (the test skips without it).

        ``side``: watch the connection of reads (listings, stats) rather than the one of the work.
        ``analyze``: with what each node did, and the pages it read.
        """
        len(q)  # both connections are open
        conn = (q.storage._side if side else q.storage._link)._connection()  # type: ignore[attr-defined]
        try:
            conn.execute("LOAD 'auto_explain'")
        except Exception as exc:
            self.skipTest(f"auto_explain is not available here ({exc})")
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_level = notice",
                        "client_min_messages = notice", "plan_cache_mode = force_generic_plan",
                        *(("auto_explain.log_analyze = on", "auto_explain.log_buffers = on") if analyze else ())):  # fmt: skip
            conn.execute(f"SET {setting}")
        plans: list[str] = []
        conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
        return plans

    def test_claims_keep_the_index_plan_over_a_large_backlog(self) -> None:
        q = self.open_queue()
        plans = self.fill_and_watch_plans(q, "ready")
        for count in (1, 1, 1, 1, 1, 1, 10, 10, 10, 10, 10, 10):
            self.assertEqual(len(q.lease(count)), count)
        claims = [plan for plan in plans if "SKIP LOCKED" in plan and "gen_random_uuid" in plan]  # not the reclaims
        self.assertEqual(len(claims), 12)
        for plan in claims:
            self.assertIn("jobs_claim", plan)
            self.assertNotRegex(plan, r"Seq Scan on jobs\b", "no read of every job (a page of pauses may be read whole)")

    @slow
    def test_the_dlq_listing_keeps_the_index_plan_over_a_large_dlq(self) -> None:
        q = self.open_queue()
        plans = self.fill_and_watch_plans(q, "dead", side=True)
        for _ in range(6):  # past psycopg's prepare threshold: the server keeps a generic plan
            self.assertEqual(len(q.dlq(limit=50)), 50)
        listings = [plan for plan in plans if "UNION ALL" in plan]
        self.assertEqual(len(listings), 6)
        for plan in listings:
            self.assertIn("jobs_finished", plan)
            self.assertNotIn("Seq Scan", plan)


if __name__ == "__main__":
    unittest.main()
