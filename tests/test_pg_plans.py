"""The PostgreSQL storage's plans at scale: what a claim, a count and a listing read, in buffers.

Imports: the standard library, psycopg (through tests.pgsupport), the public
``nobroker`` API and nobroker.postgres.statements. Buffers from EXPLAIN
(ANALYZE, BUFFERS) are the steady evidence (times on a shared machine are
not): each test builds a queue with many jobs in the way of the operation,
runs the operation's own statement under EXPLAIN inside a transaction that
is rolled back, and bounds the pages it touched. Nothing here is timed.
"""

from __future__ import annotations

import time
import unittest
from typing import Any

from nobroker import Queue
from nobroker.postgres.fragments import JOINED_CLAIM_MAX, MAX_PRUNE_SPAN, PROMOTE_BATCH, PRUNE_BATCH, RECLAIM_BATCH
from nobroker.postgres.statements import backoff_parameters
from tests.pgsupport import PostgresTestCase, connect, fresh_name, unanalyzed_queue
from tests.support import slow

#: Jobs put in the way of each operation (a tenth of the issue's 100,000 keeps the suite quick).
IN_THE_WAY = 20_000
#: Most pages an operation may touch however many jobs are in its way: a few
#: index pages, the rows it takes, the counts' rows. Walking the jobs in the
#: way costs one page per ~100 of them (200 or more here).
FEW_PAGES = 60
#: How long a listing's plan may take to settle to a page's reads (a transaction held elsewhere delays it).
SETTLE_SECONDS = 120.0
#: Two batches of ack_many or extend_many, the table they meet, and the most pages finding one of
#: their jobs may read (a probe of the primary key: its levels and the heap page; about 5 measured).
FEW, BATCH, SMALL_TABLE, PAGES_PER_LOOKUP = 4, 50, 3000, 8


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

    def explain(self, statement: str, *, analyze: bool = True, schema: str | None = None, **values: Any) -> dict[str, Any]:
        """The plan of ``statement`` run for real (EXPLAIN ANALYZE), its changes rolled back.

        ``analyze``: the statistics of ``schema``'s jobs (default: this test's) brought up to date first.
        The session calls the row check's function once before (sql/012): its
        first call in a session reads the catalogs to compile it, which a
        queue's connection does once, not at each statement.
        """
        params = {"q": self.name, "off": 0.0, **backoff_parameters(self.q.storage.backoff), **values}  # type: ignore[attr-defined]
        with connect(autocommit=False) as conn:
            if analyze:
                conn.execute(f'ANALYZE "{schema or self.schema}".jobs')
            conn.execute(f"""SELECT "{schema or self.schema}".job_row_valid('ready', false, NULL, NULL, false, NULL)""")
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params).fetchone()
            conn.rollback()
        return row[0][0]["Plan"]  # type: ignore[no-any-return]

    def settled_plan(self, statement: str, **values: Any) -> dict[str, Any]:
        """The plan of ``statement`` once the index entries a burst of acks left behind are marked dead.

        The first read after the burst visits them (and marks them, as vacuum
        would remove them); every read after it reads only its pages. Only once no
        transaction anywhere on the server still sees those rows: another suite's
        long-held transaction delays it, so this tries again, boundedly.
        """
        plan = self.explain(statement, **values)
        deadline = time.monotonic() + SETTLE_SECONDS
        while _buffers(plan) > FEW_PAGES and time.monotonic() < deadline:
            time.sleep(0.5)
            for state in (None, "ready", "runnable", "delayed", "done", "leased"):
                self.q.list_jobs(state, limit=100)
            self.q.stats()
            plan = self.explain(statement, **values)
        return plan

    def assert_few_pages(self, plan: dict[str, Any], what: str) -> None:
        self.assertLessEqual(_buffers(plan), FEW_PAGES, f"{what} touched {_buffers(plan)} pages")
        scans = [n for n in _nodes(plan) if n["Node Type"] == "Seq Scan" and n["Relation Name"] == "jobs"]
        self.assertFalse(scans, f"{what} scans the table")  # a page of pauses or limits may be read whole

    # ------------------------------------------------------------ claims
    def test_a_claim_never_walks_over_delayed_or_retrying_jobs(self) -> None:
        self.fill(IN_THE_WAY, delay=3600)  # delayed an hour, all ahead of the job below in seq order
        retrying = self.q.lease(100)
        for job in retrying:
            self.q.nack(job, delay=3600)
        ready = self.q.enqueue("now")
        upkeep = self.explain(self.sql["upkeep"])
        self.assert_few_pages(upkeep, "the upkeep before a claim")
        claim = self.explain(self.sql.claim(1, kinds=False), vt=30.0, kinds=None, by="plans:1")
        self.assert_few_pages(claim, "a claim")
        self.assertEqual(claim["Actual Rows"], 1)
        checked = self.explain(self.sql.claim(1, kinds=False, checked=True), vt=30.0, kinds=None, by="plans:1")
        self.assert_few_pages(checked, "a claim that checks whether the upkeep has work")
        self.assertEqual(checked["Actual Rows"], 1)
        self.assertEqual([job.id for job in self.q.lease(5)], [ready.id])

    def test_a_claim_of_some_kinds_never_walks_over_other_kinds(self) -> None:
        self.fill(IN_THE_WAY, kind="other")
        email = self.q.enqueue("mail", kind="email")
        for kinds in (["email"], ["email", "sms"]):
            with self.subTest(kinds=kinds):
                for checked in (False, True):
                    plan = self.explain(self.sql.claim(1, kinds=True, checked=checked), vt=30.0, kinds=kinds, by="plans:1")
                    self.assert_few_pages(plan, f"a claim of {kinds}")
                    self.assertEqual(plan["Actual Rows"], 1)
        self.assertEqual([job.id for job in self.q.lease(5, kinds=["email"])], [email.id])

    def test_a_batch_is_updated_by_its_primary_key_never_through_a_scan_of_the_table(self) -> None:
        # A plan made for a LIMIT of 1,000 rows would hash-join the batch to a scan of
        # every job, however few the batch finds: a claim of 1,000 on a table of
        # 20,000, and the upkeep's two parts when jobs came due, took that plan.
        self.addCleanup(self.q.purge)  # the other tests' plans meet none of these jobs
        self.fill(IN_THE_WAY)
        self.q.lease(RECLAIM_BATCH, visibility_timeout=60)  # their leases expired an hour later
        self.fill(PROMOTE_BATCH, delay=60)  # due an hour later
        later = {"off": 3600.0}
        claim = {"vt": 30.0, "by": "plans:1", "kinds": None}
        limited = {**claim, "all": True, "kinds": [], "held": ["other"], "lk": ["default"], "caps": [1000],
                   "count": 1000, "picked": []}  # fmt: skip
        walked = {**limited, "lk": [], "caps": []}
        limit_sql = self.q.storage.limit_sql  # type: ignore[attr-defined]
        for what, statement, values, changed in (
            ("the upkeep", self.sql["upkeep"], later, [RECLAIM_BATCH, PROMOTE_BATCH]),
            ("a claim of 1,000", self.sql.claim(1000, kinds=False), claim, [1000]),
            ("a claim of 1,000 of some kinds", self.sql.claim(1000, kinds=True), {**claim, "kinds": ["default"]}, [1000]),
            ("a claim of 1,000 under limits", limit_sql.claim(1000), limited, [1000]),
            ("a claim of 1,000 under limits of many kinds", limit_sql.claim(1000, walk=True), walked, [1000]),
        ):  # fmt: skip
            with self.subTest(what):
                nodes = _nodes(self.explain(statement, **values))
                scans = [n["Alias"] for n in nodes if n["Node Type"] == "Seq Scan"]
                self.assertFalse(scans, f"{what} scans the table")
                updates = [n for n in nodes if n["Node Type"] == "ModifyTable" and n["Relation Name"] == "jobs"]
                self.assertEqual([n["Actual Rows"] for n in updates], changed, f"the jobs {what} changed")

    def test_an_idle_wait_under_limits_reads_the_head_of_each_limited_kind(self) -> None:
        # The look asked EXISTS of each limited kind's runnable jobs, and the plan answered it
        # with a scan of the table, guessing one would turn up soon: with the kind's one job
        # behind every other job, each idle wait (and each explain) read every job.
        self.fill(IN_THE_WAY, kind="other")
        self.q.set_limit("slow", concurrency=1)
        self.q.enqueue("last", kind="slow")
        limit_sql = self.q.storage.limit_sql  # type: ignore[attr-defined]
        look = self.explain(limit_sql.text["look"])
        self.assert_few_pages(look, "an idle wait's look")
        self.assertEqual(look["Actual Rows"], 1, "the one limit")

    def test_a_lease_under_limits_never_walks_over_the_backlog_of_a_limited_kind(self) -> None:
        # The kinds without a limit were taken from the claim index's head, past every
        # ready job of the limited kinds: 7.3 ms of the server's CPU a lease with 50,000
        # of them waiting for one slot. Each kind is now taken from its own index's head.
        self.q.set_limit("slow", concurrency=1)
        self.fill(IN_THE_WAY, kind="slow")
        self.q.lease(1, kinds=["slow"])  # the slot is spent: every slow job waits
        fast = self.q.enqueue("now", kind="fast")
        limit_sql = self.q.storage.limit_sql  # type: ignore[attr-defined]
        leased = self.explain(limit_sql.text["leased"], lk=["slow"], all=True)
        self.assert_few_pages(leased, "finding the kinds without a limit")
        values = {"vt": 30.0, "by": "plans:1", "all": True, "kinds": [], "held": ["slow"], "lk": ["fast"],
                  "caps": [1], "count": 1, "picked": []}  # fmt: skip
        claim = self.explain(limit_sql.claim(1), **values)
        self.assert_few_pages(claim, "a claim under limits")
        self.assertEqual(claim["Actual Rows"], 1)
        for kinds in (None, ["fast", "slow"]):
            with self.subTest(kinds=kinds):
                jobs = self.q.lease(5, kinds=kinds)
                self.assertEqual([job.id for job in jobs], [fast.id])
                self.q.nack(jobs[0], delay=0)

    def test_a_lease_never_walks_over_the_jobs_of_a_paused_kind_or_of_a_paused_queue(self) -> None:
        # The claim filtered each ready job by the pauses: with a paused kind's backlog
        # ahead, or the whole queue paused, every lease read every ready job. A kind's
        # pause sends the lease the way of a queue with limits (each kind from its own
        # head); the whole queue's pause is a test made once per statement.
        self.fill(IN_THE_WAY, kind="bulk", priority=5)
        fast = self.q.enqueue("now", kind="fast")
        self.q.pause("bulk")
        claim = {"vt": 30.0, "by": "plans:1"}
        for kinds in (None, ["bulk", "fast"]):
            with self.subTest(kinds=kinds):
                checked = self.explain(self.sql.claim(1, kinds=kinds is not None, checked=True), **claim, kinds=kinds)
                self.assert_few_pages(checked, "a claim in a queue with a paused kind")
        limit_sql = self.q.storage.limit_sql  # type: ignore[attr-defined]
        self.assert_few_pages(self.explain(limit_sql.text["leased"], lk=[], all=True), "finding the kinds not paused")
        values = {**claim, "all": True, "kinds": [], "held": [], "lk": ["fast"], "caps": [1], "count": 1, "picked": []}
        self.assert_few_pages(self.explain(limit_sql.claim(1), **values), "a claim of the kinds not paused")
        self.assertEqual([job.id for job in self.q.lease(5)], [fast.id])
        self.q.nack(fast, delay=0)
        self.q.resume("bulk")
        self.q.pause()
        for kinds in (None, ["bulk", "fast"]):
            with self.subTest(queue_paused=True, kinds=kinds):
                plan = self.explain(self.sql.claim(1, kinds=kinds is not None, checked=True), **claim, kinds=kinds)
                self.assert_few_pages(plan, "a claim in a paused queue")
                self.assertEqual(self.q.lease(5, kinds=kinds), [])

    def test_a_claim_of_a_few_probes_the_key_on_a_table_not_yet_analyzed(self) -> None:
        # Without statistics (a new schema, before autovacuum's first ANALYZE), the plan of a
        # batch taken by ``id = ANY(...)`` read every row of the queue: a drain of one job
        # per claim at half its rate. A small claim joins its batch: a probe of the key.
        q = unanalyzed_queue(self, self.name)
        schema = q.storage.schema  # type: ignore[attr-defined]
        for start in range(0, 3000, 1000):
            q.enqueue_many([{"n": n} for n in range(start, start + 1000)])
        sql = q.storage._target.sql  # type: ignore[attr-defined]
        params = {"q": self.name, "off": 0.0, **backoff_parameters(q.storage.backoff), "vt": 30.0, "kinds": None,  # type: ignore[attr-defined]
                  "by": "plans:1"}  # fmt: skip
        with connect(autocommit=False) as conn:
            self.assertEqual(conn.execute(
                "SELECT coalesce(max(last_analyze), max(last_autoanalyze)) FROM pg_stat_user_tables "
                "WHERE schemaname = %s AND relname = 'jobs'", (schema,)).fetchone(), (None,), "not analyzed yet")
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            for count in (1, JOINED_CLAIM_MAX):
                for checked in (False, True):
                    with self.subTest(count=count, checked=checked):
                        statement = sql.claim(count, kinds=False, checked=checked)
                        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params).fetchone()
                        read = [n["Actual Rows"] * n["Actual Loops"] for n in _nodes(plan[0][0]["Plan"])
                                if n.get("Relation Name") == "jobs" or n.get("Index Name", "").startswith("jobs_")]
                        self.assertLessEqual(max(read), count, f"a claim of {count} reads more jobs than it takes")
            conn.rollback()

    def test_scheduled_jobs_that_came_due_are_claimed_in_priority_order(self) -> None:
        low = self.q.enqueue("low", delay=5)
        high = self.q.enqueue("high", delay=6, priority=9)
        plain = self.q.enqueue("plain")
        self.q.storage.clock_offset = 10  # type: ignore[attr-defined]
        self.assertEqual([job.id for job in self.q.lease(3)], [high.id, low.id, plain.id])

    def test_a_batch_of_pruning_reads_a_range_of_the_finished_jobs_never_all_of_them(self) -> None:
        # Jobs of another queue in the table made a generic plan of an ORDER BY ... LIMIT
        # over every finished job a bitmap scan of them all and a sort: the batch's range
        # of seqs is what bounds what it reads, whichever plan the server picks.
        other = Queue(self.dsn, fresh_name("q"), schema=self.schema, migrate=False)
        self.addCleanup(other.close)
        self.addCleanup(other.purge)
        self.addCleanup(self.q.purge)  # the other tests' plans meet no finished jobs of this one
        finished = 2 * MAX_PRUNE_SPAN
        self.fill(finished)
        while jobs := self.q.lease(1000):
            self.q.ack_many(jobs)
        for start in range(0, IN_THE_WAY, 1000):
            other.enqueue_many([{"n": n} for n in range(start, start + 1000)])
        seqs = sorted(job.seq for job in self.q.list_jobs("done", limit=None))
        for after in (0, seqs[len(seqs) // 2]):
            with self.subTest(after=after):
                plan = self.explain(self.sql["prune"], state="done", keep=0.0, after=after, span=MAX_PRUNE_SPAN)
                nodes = _nodes(plan)
                self.assertFalse([n for n in nodes if n["Node Type"] == "Seq Scan"], "a batch scans the table")
                reads = [n for n in nodes if n.get("Index Name") == "jobs_finished"]
                self.assertTrue(reads, "the batch reads the finished jobs' index")
                self.assertLessEqual(max(n["Actual Rows"] for n in reads), MAX_PRUNE_SPAN, "read past its span")
                deleting = [n for n in nodes if n["Node Type"] == "Tid Scan"]
                self.assertEqual([n["Actual Rows"] for n in deleting], [PRUNE_BATCH], "the rows deleted by their place")

    def test_an_idle_wait_asks_two_index_probes_when_the_next_job_comes_due(self) -> None:
        self.fill(IN_THE_WAY, delay=3600)
        plan = self.explain(self.sql["next_due"])
        self.assert_few_pages(plan, "the next due time")

    # ------------------------------------------------------------ batches by primary key
    def test_ack_many_and_extend_many_read_a_few_pages_per_job_analyzed_or_not(self) -> None:
        # A batch found by an array of ids compared with the queue's part of the primary key: on a
        # table never analyzed (a new schema, before autovacuum's first ANALYZE) the plan read the
        # queue's every job instead, and a Worker's 4,000 acks read 14 million index entries.
        # A probe of the key per job, or (a big batch, a small table) one scan of the table.
        for analyzed in (True, False):
            q = self.q if analyzed else unanalyzed_queue(self, self.name)
            sql = q.storage._target.sql  # type: ignore[attr-defined]
            for start in range(0, SMALL_TABLE, 1000):
                q.enqueue_many([{"n": n} for n in range(start, start + 1000)])
            for size in (FEW, BATCH):
                jobs = q.lease(size)
                batch = {"ids": [job.id for job in jobs], "tokens": [job.lease_token for job in jobs], "n": size}
                for name, values in (("ack_many", {"results": [None] * size}), ("extend_many", {"secs": 60.0})):
                    with self.subTest(name, analyzed=analyzed, size=size):
                        plan = self.explain(sql[name], analyze=analyzed, schema=q.storage.schema, **batch, **values)  # type: ignore[attr-defined]
                        nodes = _nodes(plan)
                        changed = [n["Actual Rows"] for n in nodes if n["Node Type"] == "ModifyTable" and n["Relation Name"] == "jobs"]
                        self.assertEqual(changed, [size], name)
                        # What finding the rows reads (the pages a change then writes depend on the indexes' upkeep).
                        found = [n for n in nodes if n.get("Relation Name") == "jobs" and "Scan" in n["Node Type"]]
                        self.assertLessEqual(sum(map(_buffers, found)), PAGES_PER_LOOKUP * size, name)
                self.assertEqual(len(q.extend_many(jobs, 60)), size)
                q.ack_many(jobs)
            self.assertEqual(q.stats().done, FEW + BATCH)

    # ------------------------------------------------------------ counts and listings
    def test_stats_and_len_read_the_counts_not_the_jobs(self) -> None:
        self.fill(IN_THE_WAY)
        self.fill(IN_THE_WAY // 2, delay=3600)
        self.q.ack_many(self.q.lease(500))
        for name in ("stats", "count"):
            with self.subTest(name):
                self.assert_few_pages(self.settled_plan(self.sql[name]), name)
        stats = self.q.stats()
        self.assertEqual(
            (stats.ready, stats.delayed, stats.leased, stats.done, stats.dead),
            (IN_THE_WAY - 500, IN_THE_WAY // 2, 0, 500, 0),
        )
        self.assertEqual(len(self.q), IN_THE_WAY + IN_THE_WAY // 2)

    def test_a_page_of_each_listing_reads_a_page_of_jobs(self) -> None:
        self.fill(IN_THE_WAY)
        self.fill(IN_THE_WAY // 2, delay=3600)
        self.q.ack_many(self.q.lease(2000))
        page = {"kind": None, "limit": 100, "offset": 0, "reach": 100}
        # A dashboard's next poll after a burst of acks, and every one after it, reads this (settled_plan).
        for listing in ("list", "list_ready", "list_runnable", "list_delayed", "list_done", "list_leased"):
            with self.subTest(listing):
                self.assert_few_pages(self.settled_plan(self.sql[listing], **page), listing)
        self.assertEqual(len(self.q.list_jobs("ready", limit=100)), 100)
        self.assertEqual([j.seq for j in self.q.list_jobs("delayed", limit=3)],
                         sorted(j.seq for j in self.q.list_jobs("delayed", limit=3)))  # fmt: skip

    def test_counts_stay_exact_through_purge_truncate_and_folding(self) -> None:
        from nobroker.postgres import queue_ops as operations
        from nobroker.postgres.steps import drive

        self.fill(3000)
        self.q.ack_many(self.q.lease(1000))
        with self.q.storage._side.held() as conn:  # type: ignore[attr-defined]
            rows = conn.execute(f'SELECT count(*) FROM "{self.schema}".counts WHERE queue = %s', (self.name,)).fetchone()[0]
            self.assertGreater(rows, 2)
            drive(conn, operations.fold_counts(self.q.storage._target))  # type: ignore[attr-defined]
            rows = conn.execute(f'SELECT count(*) FROM "{self.schema}".counts WHERE queue = %s', (self.name,)).fetchone()[0]
        self.assertEqual(rows, 1, "one row after folding")
        self.assertEqual((self.q.stats().ready, self.q.stats().done), (2000, 1000))
        self.assertEqual(self.q.purge(), 3000)
        self.assertEqual(len(self.q), 0)


if __name__ == "__main__":
    unittest.main()
