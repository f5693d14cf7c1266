"""The dashboard page's job list in Chromium: live counts and rows, the tabs, filters, search, sort and paging.

Owns: ``WebDashboardListTest`` (a job enqueued from Python shows without a
reload, a row on show is always in the counts, each tab lists what its card
counts, the kind filter, the search and the sort are kept in the address,
paging with counts, a bounded search says how far it read), run on a file
queue, behind a token, and on PostgreSQL.
Imports: the standard library, nobroker (the dashboard's api and listing),
tests.dashsupport (``OnPostgres``), tests.webdashsupport (the page and its
helpers).

Skips locally without Chromium; in CI (CI=true) a missing browser fails.
Waits poll the page or the queue for a condition, with a timeout; nothing
sleeps for a fixed time.
"""

from __future__ import annotations

import json
import threading
import unittest
import urllib.parse
from typing import Any
from unittest import mock

from nobroker.dashboard import api, listing
from tests.dashsupport import OnPostgres
from tests.webdashsupport import WebDashboardCase, WebDashboardTokenCase


class WebDashboardListTest(WebDashboardCase):
    """The job list: live, by tab, filtered, searched, sorted and paged."""

    def test_shows_a_job_enqueued_from_python_without_reloading(self) -> None:
        self.open_dashboard()
        self.assertEqual(self.js("document.getElementById('count-total').textContent"), "0")
        self.js("window.__sameDocument = true")
        self.queue.enqueue({"to": "a@example.com", "n": 3}, job_id="py-job-1")
        self.wait_js(self.row("py-job-1") + " !== null", "the new job's row appeared")
        self.assertEqual(self.js("document.getElementById('count-ready').textContent"), "1")
        self.assertEqual(self.js("document.getElementById('count-total').textContent"), "1")
        self.assertTrue(self.js("window.__sameDocument === true"), "the page reloaded instead of refreshing")

        self.js(self.row("py-job-1") + ".click()")
        self.wait_js("document.getElementById('detail-title').textContent === 'py-job-1'", "the detail opened")
        shown = self.js("document.getElementById('detail-payload').textContent")
        self.assertEqual(json.loads(shown), {"to": "a@example.com", "n": 3})
        # A lease from Python shows up in the open detail too.
        leased = self.queue.lease_one()
        assert leased is not None
        self.queue.set_stage(leased, "rendering")
        self.wait_js("document.getElementById('count-leased').textContent === '1'", "the lease was counted")
        self.wait_js(
            "document.getElementById('detail-fields').textContent.includes('rendering')", "the stage was shown"
        )
        self.assertCleanPage()

    def test_a_job_that_arrives_between_the_list_and_the_counts_is_counted_when_it_shows(self) -> None:
        self.open_dashboard()
        self.js("window.__sameDocument = true")
        real = api.list_page
        arrived = threading.Event()

        def list_page_then_enqueue(*args: Any, **kwargs: Any) -> Any:
            # The job lands after the list is asked for and before the counts are: the list holds it.
            if not arrived.is_set():
                arrived.set()
                self.queue.enqueue("between", job_id="between-1")
            return real(*args, **kwargs)

        with mock.patch.object(api, "list_page", list_page_then_enqueue):
            self.wait_js(self.row("between-1") + " !== null", "the job's row appeared")
            # Read in the same task as the row: the counts were drawn with it, not a round later.
            shown = self.js(
                "[document.getElementById('count-ready').textContent, " + self.row("between-1") + " !== null]"
            )
        self.assertEqual(shown, ["1", True], "a row on show is in the counts")
        self.assertTrue(self.js("window.__sameDocument === true"))
        self.assertCleanPage()

    def test_the_ready_and_delayed_tabs_list_what_their_cards_count(self) -> None:
        for n in range(3):
            self.queue.enqueue(n, job_id=f"now-{n}")
        for n in range(2):
            self.queue.enqueue(n, job_id=f"later-{n}", delay=3600)
        self.open_dashboard()
        rows = "document.querySelectorAll('#jobs tr.job').length"
        self.wait_js(self.row("now-2") + " !== null", "the ready tab listed its jobs")
        self.assertEqual(self.js("document.getElementById('count-ready').textContent"), "3")
        self.assertEqual(self.js(rows), 3, "the ready tab lists what the ready card counts")
        self.assertEqual(self.js(self.row("later-0")), None)
        self.js("document.querySelector('#tabs button[data-state=delayed]').click()")
        self.wait_js(self.row("later-1") + " !== null", "the delayed tab listed its jobs")
        self.assertEqual(self.js("document.getElementById('count-delayed').textContent"), "2")
        self.assertEqual(self.js(rows), 2)
        self.assertCleanPage()

    def test_filter_by_kind_search_and_sort_and_the_address_keeps_them(self) -> None:
        for who in ("ada", "grace", "alan"):
            self.queue.enqueue({"to": f"{who}@example.com"}, job_id=f"mail-{who}", kind="email")
        self.queue.enqueue({"to": "+33 6 12"}, job_id="text-1", kind="sms")
        self.queue.enqueue({"to": "Grace", "via": "sms"}, job_id="text-2", kind="sms")
        self.open_dashboard()
        self.wait_listed(["mail-ada", "mail-grace", "mail-alan", "text-1", "text-2"], "every job was listed")
        self.type_into("filter-kind", "sms")
        self.wait_listed(["text-1", "text-2"], "the kind filter left the sms jobs")
        self.assertEqual(self.url_param("kind"), "sms")
        self.type_into("filter-kind", "")
        self.type_into("filter-q", "GRACE")
        self.wait_listed(["mail-grace", "text-2"], "the search found the payload text")
        self.type_into("filter-q", "mail-a")
        self.wait_listed(["mail-ada", "mail-alan"], "the search found the ids")
        self.choose("sort", "newest")
        self.wait_listed(["mail-alan", "mail-ada"], "newest first")
        self.assertEqual((self.url_param("q"), self.url_param("sort")), ("mail-a", "newest"))
        self.type_into("filter-kind", "sms")
        self.wait_js("!document.getElementById('jobs-empty').hidden", "the empty list says so")
        self.assertEqual(self.js("document.getElementById('jobs-empty').textContent"), "No job here matches.")

        # A reload (or a shared link) shows the same list with the same controls.
        self.type_into("filter-kind", "email")
        self.wait_listed(["mail-alan", "mail-ada"], "the kind and the search together")
        self.open_dashboard(self.js("location.search"))
        self.wait_listed(["mail-alan", "mail-ada"], "the reloaded page lists the same")
        controls = "['filter-kind', 'filter-q', 'sort'].map((id) => document.getElementById(id).value)"
        self.assertEqual(self.js(controls), ["email", "mail-a", "newest"])
        self.assertCleanPage()

    def test_the_delayed_tab_and_paging_with_counts(self) -> None:
        ids = [j.id for j in self.queue.enqueue_many([{"n": n} for n in range(25)])]
        later = self.queue.enqueue("later", job_id="later-1", delay=3600).id
        self.open_dashboard()
        self.choose("page-size", "20")
        self.wait_listed(ids[:20], "the first page")
        self.assertEqual(self.js("document.getElementById('page-info').textContent"), "1–20 of 25")
        self.assertTrue(self.js("document.getElementById('prev').disabled"))
        self.js("document.getElementById('next').click()")
        self.wait_listed(ids[20:], "the second page")
        self.assertEqual(self.js("document.getElementById('page-info').textContent"), "21–25 of 25")
        self.assertTrue(self.js("document.getElementById('next').disabled"))
        self.assertEqual((self.url_param("offset"), self.url_param("limit")), ("20", "20"))
        self.choose("sort", "newest")
        self.wait_listed(ids[::-1][:20], "newest first starts again at the first page")
        self.js("document.querySelector('#tabs button[data-state=delayed]').click()")
        self.wait_listed([later], "the delayed tab lists the delayed job apart from the ready ones")
        self.assertEqual(self.js(self.row(later) + ".children[3].textContent"), "delayed")
        self.assertCleanPage()

    def test_a_search_past_its_bound_says_how_far_it_read(self) -> None:
        ids = [j.id for j in self.queue.enqueue_many([{"n": n} for n in range(30)])]
        with mock.patch.object(listing, "MAX_SEARCH_SCAN", 10), mock.patch.object(listing, "SEARCH_PAGE", 4):
            self.open_dashboard("?queue=" + urllib.parse.quote(self.queue.name) + "&q=" + urllib.parse.quote('"n"'))
            self.wait_listed(ids[:10], "the bounded search listed what it read")
            self.wait_js("!document.getElementById('list-note').hidden", "the note appeared")
            self.assertIn("Searched the oldest 10 jobs", self.js("document.getElementById('list-note').textContent"))
            self.type_into("filter-q", ids[25])
            self.wait_listed([ids[25]], "a whole id is found past the bound")
            self.type_into("filter-q", "no such text")
            self.choose("page-size", "20")
            self.wait_js("document.getElementById('jobs-empty').textContent === 'No job here matches.'", "nothing matched")
            self.assertFalse(self.js("document.getElementById('list-note').hidden"), "a bounded search says so")
        self.type_into("filter-q", "")
        self.wait_listed(ids[:20], "without a search the list is whole again")
        self.wait_js("document.getElementById('list-note').hidden", "the note went")
        self.assertCleanPage()


class WebDashboardListTokenTest(WebDashboardTokenCase, WebDashboardListTest):
    """The same tests behind a token."""


class PostgresWebDashboardListTest(OnPostgres, WebDashboardListTest):
    """The same page over the PostgreSQL storage (skipped without a DSN or psycopg)."""


if __name__ == "__main__":
    unittest.main()
