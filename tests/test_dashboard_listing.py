"""The dashboard's job list, /api/jobs: by state and kind, searched, oldest or newest first, paged and counted.

Owns: ``JobListTest`` (filters, search by id and payload text and its bound,
newest first with its count, refused parameters; on the file storage and on
PostgreSQL) and ``CountListedTest`` (dashboard.listing.count_listed against
the list's own length, for many sizes and hints). Imports: the standard
library, nobroker, tests.dashsupport (the server and its request helpers).
"""

from __future__ import annotations

import unittest
import urllib.parse
from typing import Any
from unittest import mock

from nobroker import Job, dashboard
from tests.dashsupport import DashboardCase, OnPostgres


class JobListTest(DashboardCase):
    """/api/jobs: by state and kind, searched by id and payload text, oldest or newest first, paged."""

    def ids(self, query: str) -> list[str]:
        return [j["id"] for j in self.get_json("/api/jobs?" + query)["jobs"]]

    def test_filter_by_kind_alone_and_with_a_state(self) -> None:
        emails = [self.queue.enqueue({"n": n}, kind="email").id for n in range(3)]
        sms = [self.queue.enqueue({"n": n}, kind="sms").id for n in range(2)]
        later = self.queue.enqueue("later", kind="email", delay=3600).id
        self.assertEqual(self.ids("kind=email"), emails + [later])
        self.assertEqual(self.ids("kind=sms&state=runnable"), sms)
        self.assertEqual(self.ids("kind=email&state=delayed"), [later])
        self.assertEqual(self.ids("kind=email&state=dead"), [])
        self.assertEqual(self.ids("kind=nothing"), [])
        answer = self.get_json("/api/jobs?kind=email")
        self.assertEqual((answer["kind"], answer["total"]), ("email", None), "oldest first with a kind is not counted")

    def test_newest_first_is_the_same_list_reversed_page_by_page(self) -> None:
        ids = [self.queue.enqueue({"n": n}).id for n in range(7)]
        first = self.get_json("/api/jobs?state=all&sort=newest&limit=3")
        self.assertEqual([j["id"] for j in first["jobs"]], ids[::-1][:3])
        self.assertEqual((first["has_more"], first["total"], first["sort"]), (True, 7, "newest"))
        self.assertEqual(self.ids("state=all&sort=newest&limit=3&offset=3"), ids[::-1][3:6])
        last = self.get_json("/api/jobs?state=all&sort=newest&limit=3&offset=6")
        self.assertEqual(([j["id"] for j in last["jobs"]], last["has_more"]), ([ids[0]], False))
        self.assertEqual(self.get_json("/api/jobs?sort=newest&offset=7")["jobs"], [])
        self.assertEqual(self.get_json("/api/jobs?state=all&limit=3")["total"], 7, "without a kind the count is free")

    def test_every_listing_counts_newest_first_also_with_none_cancelled(self) -> None:
        # stats().to_dict() leaves "cancelled" out while no job is: the count must not need it.
        job = self.queue.enqueue("one", kind="email")
        for state in ("cancelled", "ready", "runnable", "delayed", "leased", "done", "dead", "all"):
            with self.subTest(state=state):
                page = self.get_json(f"/api/jobs?state={state}&sort=newest")
                expected = [job.id] if state in ("ready", "runnable", "all") else []
                self.assertEqual(([j["id"] for j in page["jobs"]], page["total"]), (expected, len(expected)))
        self.queue.cancel(job)
        page = self.get_json("/api/jobs?state=cancelled&kind=email&sort=newest")
        self.assertEqual(([j["id"] for j in page["jobs"]], page["total"]), ([job.id], 1))

    def test_newest_first_with_a_state_and_a_kind_counts_the_list(self) -> None:
        wanted = []
        for n in range(23):
            job = self.queue.enqueue({"n": n}, kind="email" if n % 3 else "sms")
            if n % 3:
                wanted.append(job.id)
        self.queue.enqueue("later", kind="email", delay=3600)
        page = self.get_json("/api/jobs?state=runnable&kind=email&sort=newest&limit=4")
        self.assertEqual([j["id"] for j in page["jobs"]], wanted[::-1][:4])
        self.assertEqual((page["total"], page["has_more"]), (len(wanted), True))
        # The count is found again after the list changes (the hint from the last answer is stale).
        newer = [self.queue.enqueue({"n": n}, kind="email").id for n in range(5)]
        page = self.get_json("/api/jobs?state=runnable&kind=email&sort=newest&limit=4")
        self.assertEqual([j["id"] for j in page["jobs"]], newer[::-1][:4])
        self.assertEqual(page["total"], len(wanted) + 5)
        for job in self.queue.lease(10, kinds=["email"]):
            self.queue.ack(job)
        page = self.get_json("/api/jobs?state=runnable&kind=email&sort=newest&limit=50")
        self.assertEqual([j["id"] for j in page["jobs"]], (wanted + newer)[10:][::-1])
        self.assertEqual(page["total"], len(wanted) + 5 - 10)
        done = self.get_json("/api/jobs?state=done&kind=email&sort=newest&limit=3")
        self.assertEqual(done["total"], 10)

    def test_search_finds_payload_text_and_ids_ignoring_case(self) -> None:
        ada = self.queue.enqueue({"to": "Ada@Example.com"}, job_id="welcome-ada").id
        grace = self.queue.enqueue({"to": "grace@example.com", "note": "Ada's friend"}, job_id="welcome-grace").id
        self.queue.enqueue({"to": "alan@example.com"}, job_id="invoice-7")
        self.assertEqual(self.ids("q=ada"), [ada, grace])
        self.assertEqual(self.ids("q=ADA%40example"), [ada])
        self.assertEqual(self.ids("q=welcome-"), [ada, grace])
        self.assertEqual(self.ids("q=" + urllib.parse.quote('"to":"alan')), ["invoice-7"], "compact JSON text")
        self.assertEqual(self.ids("q=ada&sort=newest"), [grace, ada])
        self.assertEqual(self.ids("q=nobody"), [])
        quoted = self.queue.enqueue({"text": 'she said "Hi" \\o/', "deep": [[{"Key-Ünïcode": 1}]]}).id
        self.assertEqual(self.ids("q=" + urllib.parse.quote('said "hi" \\o/')), [quoted], "a string as itself, quotes and all")
        self.assertEqual(self.ids("q=" + urllib.parse.quote("key-ünï")), [quoted], "keys too, at any depth")
        answer = self.get_json("/api/jobs?q=ada")
        self.assertEqual((answer["q"], answer["scanned"], answer["complete"]), ("ada", 4, True))

    def test_search_within_a_state_and_a_kind_with_paging(self) -> None:
        matching = [self.queue.enqueue({"order": n, "city": "Paris"}, kind="order").id for n in range(7)]
        self.queue.enqueue({"city": "Paris"}, kind="invoice")
        self.queue.enqueue({"order": 99, "city": "Lyon"}, kind="order")
        dead = self.make_dead({"city": "Paris"})
        self.assertEqual(self.ids("q=paris&kind=order&state=runnable&limit=3"), matching[:3])
        second = self.get_json("/api/jobs?q=paris&kind=order&state=runnable&limit=3&offset=3")
        self.assertEqual(([j["id"] for j in second["jobs"]], second["has_more"]), (matching[3:6], True))
        third = self.get_json("/api/jobs?q=paris&kind=order&state=runnable&limit=3&offset=6")
        self.assertEqual(([j["id"] for j in third["jobs"]], third["has_more"]), (matching[6:], False))
        self.assertEqual(self.ids("q=paris&kind=order&state=runnable&sort=newest&limit=2"), matching[::-1][:2])
        self.assertEqual(self.ids("q=paris&state=dead"), [dead])

    def test_a_search_stops_at_its_bound_and_says_so(self) -> None:
        ids = self.queue.enqueue_many([{"n": n} for n in range(12)])
        with mock.patch.object(dashboard.listing, "MAX_SEARCH_SCAN", 5), mock.patch.object(dashboard.listing, "SEARCH_PAGE", 2):
            answer = self.get_json("/api/jobs?q=%22n%22")
            self.assertEqual([j["id"] for j in answer["jobs"]], [j.id for j in ids[:5]])
            self.assertEqual((answer["scanned"], answer["complete"], answer["has_more"]), (5, False, False))
            # A whole id is found wherever it is, and only once.
            whole = self.get_json("/api/jobs?q=" + urllib.parse.quote(ids[11].id))
            self.assertEqual([j["id"] for j in whole["jobs"]], [ids[11].id])
            # ... unless the state or the kind leaves it out.
            self.assertEqual(self.ids("state=dead&q=" + urllib.parse.quote(ids[11].id)), [])
            self.assertEqual(self.ids("kind=other&q=" + urllib.parse.quote(ids[11].id)), [])

    def test_a_whole_id_that_also_matches_the_scan_is_listed_once(self) -> None:
        self.queue.enqueue("x", job_id="abc")
        self.queue.enqueue("x", job_id="abc-2")
        self.assertEqual(self.ids("q=abc"), ["abc", "abc-2"])
        self.assertEqual(self.ids("q=abc&sort=newest"), ["abc", "abc-2"], "the whole id comes first")

    def test_bad_list_parameters_are_refused(self) -> None:
        for query, fragment in (
            ("sort=random", "sort"),
            ("q=" + "x" * 257, "q must be at most 256"),
            ("kind=" + "k" * 257, "kind must be at most 256"),
            ("q=a%00b", "NUL"),
        ):
            with self.subTest(query=query[:40]):
                self.assertError(self.request("GET", "/api/jobs?" + query), 400, fragment)


class CountListedTest(unittest.TestCase):
    """count_listed against the length of the list itself, for many sizes, bounds and hints right and wrong."""

    class Fake:
        def __init__(self, n: int) -> None:
            self.jobs = [Job(id=str(i), payload=i) for i in range(n)]
            self.reads: list[int | None] = []

        def list_jobs(self, state: Any = None, *, limit: int | None = None, offset: int = 0, kind: Any = None) -> list[Job]:
            self.reads.append(limit)
            return self.jobs[offset : None if limit is None else offset + limit]

    def test_every_size_with_and_without_hints(self) -> None:
        read = dashboard.listing.COUNT_READ
        for n in (*range(12), read - 1, read, read + 1, 2 * read + 3, 4 * read - 1, 1001):
            for upper in {n, n + 1, 2 * n + 7, 10 * n + read}:
                for hint in (None, 0, 1, n, n + 1, max(0, n - 1), max(0, n - read - 2), 3 * n + 5):
                    fake = self.Fake(n)
                    with self.subTest(n=n, upper=upper, hint=hint):
                        self.assertEqual(dashboard.listing.count_listed(fake, None, "k", upper, hint), n)
                        self.assertTrue(all(r is not None and r <= read + 1 for r in fake.reads), "no read is unbounded or wide")

    def test_a_right_hint_costs_one_read_and_none_costs_log_reads(self) -> None:
        fake = self.Fake(100_000)
        self.assertEqual(dashboard.listing.count_listed(fake, None, "k", 200_000, 100_000), 100_000)
        self.assertEqual(len(fake.reads), 1)
        fake.reads.clear()
        self.assertEqual(dashboard.listing.count_listed(fake, None, "k", 200_000), 100_000)
        self.assertLessEqual(len(fake.reads), 11, "log2(200,000 / 250) one-job reads, then one of 250")


class PostgresJobListTest(OnPostgres, JobListTest):
    pass


if __name__ == "__main__":
    unittest.main()
