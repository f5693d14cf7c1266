"""The dashboard page in a real headless Chromium, over a real file queue.

Imports: the standard library, nobroker, tests.browser, tests.support.
Skips locally without Chromium; in CI (CI=true) a missing browser fails.
Waits poll the page or the queue for a condition, with a timeout; nothing
sleeps for a fixed time.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse
from typing import Any
from unittest import mock

import nobroker
from nobroker import Queue
from nobroker.dashboard import DashboardServer, listing, make_server
from nobroker.jobs import MAX_PRIORITY, JobState
from tests.browser import WINDOW_SIZE, Browser, require_browser
from tests.pgsupport import drop_schema, fresh_name, require_postgres
from tests.test_dashboard_api import OnPostgres, picker_options
from tests.support import TempDirTestCase, wait_until

SCRIPT_PAYLOAD = "<script>alert(1)</script>"
#: Seconds to wait for the page to show something (it refreshes every second).
PAGE_TIMEOUT = 60.0
POLL_SECONDS = 0.05
#: A phone's width in CSS pixels (an iPhone's 375; the issue's complaint was a table cut off at 420).
PHONE_WIDTH = 375
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

# Installed before any page script runs: dialogs are recorded instead of shown
# (a real one would block the page), and every element added after the first
# parse is recorded, so a payload that turned into markup would be caught even
# if the CSP stopped it from running.
_WATCH = """
window.__dialogs = [];
for (const name of ["alert", "confirm", "prompt"]) {
  window[name] = function (message) {
    window.__dialogs.push([name, String(message)]);
    return name === "confirm" ? window.__confirmAnswer !== false : null;
  };
}
window.__added = [];
document.addEventListener("DOMContentLoaded", function () {
  new MutationObserver(function (records) {
    for (const record of records) for (const node of record.addedNodes) {
      if (node.nodeType !== 1) continue;
      window.__added.push(node.tagName);
      for (const inner of node.querySelectorAll("*")) window.__added.push(inner.tagName);
    }
  }).observe(document, { childList: true, subtree: true });
});
"""
#: The only elements the page itself creates after loading (table rows, detail fields).
PAGE_MADE_ELEMENTS = {"TR", "TD", "BUTTON", "SPAN", "DT", "DD", "LI", "OPTION", "INPUT", "DIV", "svg", "line", "text", "path", "title"}
#: The chart's own SVG elements (page-panels.js): the only SVG in the page, drawn from numbers alone.
CHART_ELEMENTS = {"svg", "line", "text", "path", "title"}


class WebDashboardTest(TempDirTestCase):
    browser: Browser
    TOKEN: str | None = None

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.browser = require_browser(cls)
        cls.browser.send("Page.addScriptToEvaluateOnNewDocument", {"source": _WATCH})

    def location(self) -> tuple[str, dict[str, Any]]:
        return self.dir, {"fsync": False}

    def open_queue(self) -> Queue:
        return Queue(self.dir, fsync=False)

    def close_queue(self, queue: Queue) -> None:
        queue.close()

    def setUp(self) -> None:
        super().setUp()
        self.queue = self.open_queue()
        self.addCleanup(self.close_queue, self.queue)
        self.server = self.start_server(self.queue, **picker_options(*self.location()))
        self.browser.clear()

    def start_server(self, queue: Any, **queues: Any) -> DashboardServer:
        """A dashboard for ``queue`` on a free port, serving until the test ends."""
        server = make_server(queue, host="127.0.0.1", port=0, token=self.TOKEN, **queues)
        thread = threading.Thread(target=server.serve_forever, args=(POLL_SECONDS,), daemon=True)
        thread.start()
        self.addCleanup(server.server_close)
        self.addCleanup(thread.join, 10)
        self.addCleanup(server.shutdown)
        # Leave the page before the server goes, so its refresh loop does not log errors into the next test.
        self.addCleanup(self.browser.open, "about:blank")
        return server

    # ------------------------------------------------------------ helpers
    def open_dashboard(self, query: str | None = None, *, live: bool = True) -> None:
        """Open the page on ``query`` (default: the address of the queue under test)."""
        self.browser.open(self.server.url + self.address(query))
        if live:
            self.wait_js("document.getElementById('status').textContent === 'live'", "the page went live")

    def address(self, query: str | None) -> str:
        # By name: on PostgreSQL an empty queue is not there, and the page would open on another one.
        return "?queue=" + urllib.parse.quote(self.queue.name) if query is None else query

    def js(self, expression: str) -> Any:
        return self.browser.evaluate(expression)

    def wait_js(self, expression: str, what: str) -> None:
        if not wait_until(lambda: bool(self.js(expression)), timeout=PAGE_TIMEOUT, interval=0.1):
            raise AssertionError(f"timed out waiting until {what}; page errors: {self.browser.errors}")

    def row(self, job_id: str) -> str:
        return f"document.querySelector('tr.job[data-job-id=' + CSS.escape({json.dumps(job_id)}) + ']')"

    def make_dead(self, payload: Any, job_id: str) -> None:
        self.queue.enqueue(payload, job_id=job_id, priority=MAX_PRIORITY)
        leased = self.queue.lease_one()
        assert leased is not None and leased.id == job_id
        self.queue.nack(leased, error=f"failed: {payload}", traceback=f"Traceback:\n  {payload}\nError", permanent=True)

    def make_done(self, payload: Any) -> str:
        job = self.queue.enqueue(payload, priority=MAX_PRIORITY)
        leased = self.queue.lease_one()
        assert leased is not None and leased.id == job.id
        self.queue.ack(leased)
        return job.id

    def assertCleanPage(self, dialogs: int = 0) -> None:
        self.assertEqual(self.browser.errors, [])
        self.assertEqual(len(self.js("window.__dialogs")), dialogs, self.js("window.__dialogs"))
        origin = self.server.url
        self.assertTrue(self.browser.requests)
        for url in self.browser.requests:
            self.assertTrue(url.startswith(origin), f"the page fetched {url} from outside the server")

    # ------------------------------------------------------------ tests
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

    def test_requeues_a_dead_job_by_a_click(self) -> None:
        self.make_dead({"order": 42}, "dead-1")
        self.make_dead({"order": 43}, "dead-2")
        self.open_dashboard()
        self.assertEqual(self.js("document.getElementById('count-dead').textContent"), "2")
        self.js("document.querySelector('#tabs button[data-state=dead]').click()")
        button = "document.querySelector('button[data-action=requeue][data-job-id=\"dead-1\"]')"
        self.wait_js(button + " !== null", "the DLQ listed the dead job")
        self.js(button + ".click()")
        self.assertTrue(
            wait_until(lambda: self.queue.get("dead-1").state == JobState.READY, timeout=PAGE_TIMEOUT),
            "the click did not requeue the job",
        )
        revived = self.queue.get("dead-1")
        self.assertEqual(revived.attempts, 0)
        self.assertEqual(self.queue.get("dead-2").state, JobState.DEAD)
        self.wait_js("document.getElementById('count-dead').textContent === '1'", "the dead count dropped")
        self.wait_js(self.row("dead-1") + " === null", "the requeued job left the DLQ list")
        again = self.queue.lease_one()
        self.assertEqual(again.id if again else None, "dead-1")
        self.assertCleanPage()

    def test_a_script_payload_is_shown_as_text(self) -> None:
        self.make_dead(SCRIPT_PAYLOAD, "xss-dead")
        self.queue.enqueue({"html": "<img src=x onerror=alert(2)>"}, job_id="xss-ready")
        self.open_dashboard()
        self.wait_js(self.row("xss-ready") + " !== null", "the ready job's row appeared")
        cell = self.js(self.row("xss-ready") + ".querySelector('td.payload').textContent")
        self.assertIn("<img src=x onerror=alert(2)>", cell)

        self.js("document.querySelector('#tabs button[data-state=dead]').click()")
        self.wait_js(self.row("xss-dead") + " !== null", "the dead job's row appeared")
        self.assertEqual(self.js(self.row("xss-dead") + ".querySelector('td.payload').textContent"), json.dumps(SCRIPT_PAYLOAD))
        self.assertIn("failed: " + SCRIPT_PAYLOAD, self.js(self.row("xss-dead") + ".textContent"))
        self.js(self.row("xss-dead") + ".click()")
        self.wait_js("document.getElementById('detail-title').textContent === 'xss-dead'", "the detail opened")
        self.assertEqual(self.js("document.getElementById('detail-payload').textContent"), json.dumps(SCRIPT_PAYLOAD))
        self.assertEqual(self.js("document.getElementById('detail-error').textContent"), "failed: " + SCRIPT_PAYLOAD)
        trace = self.js("document.getElementById('detail-traceback').textContent")
        self.assertEqual(trace, f"Traceback:\n  {SCRIPT_PAYLOAD}\nError", "the traceback is shown, as text")
        self.assertFalse(self.js("document.getElementById('detail-traceback').hidden"))

        # Text, not markup: the page still has its one script, and no element came from a payload.
        self.assertEqual(self.js("document.scripts.length"), 1)
        self.assertEqual(self.js("document.images.length"), 0)
        added = set(self.js("window.__added"))
        self.assertTrue(added, "the observer saw no rows being built")
        self.assertLessEqual(added, PAGE_MADE_ELEMENTS)
        markup = self.js("document.body.innerHTML")
        self.assertNotIn(SCRIPT_PAYLOAD, markup)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", markup)
        self.assertCleanPage()

    def type_into(self, element_id: str, value: str) -> None:
        self.js(f"(() => {{ const i = document.getElementById({json.dumps(element_id)}); i.value = {json.dumps(value)}; "
                "i.dispatchEvent(new Event('input')); })()")

    def choose(self, element_id: str, value: str) -> None:
        self.js(f"(() => {{ const s = document.getElementById({json.dumps(element_id)}); s.value = {json.dumps(value)}; "
                "s.dispatchEvent(new Event('change')); })()")

    def listed_ids(self) -> list[str]:
        return list(self.js("Array.from(document.querySelectorAll('#jobs tr.job'), (r) => r.dataset.jobId)"))

    def wait_listed(self, ids: list[str], what: str) -> None:
        if not wait_until(lambda: self.listed_ids() == ids, timeout=PAGE_TIMEOUT, interval=0.1):
            raise AssertionError(f"timed out waiting until {what}: listed {self.listed_ids()}, not {ids}")

    def url_param(self, name: str) -> Any:
        return self.js(f"new URLSearchParams(location.search).get({json.dumps(name)})")

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

    def test_a_failed_jobs_page_shows_its_fields_stage_error_and_traceback(self) -> None:
        self.queue.enqueue({"resize": "cat.jpg"}, job_id="thumb-1", kind="thumbnail", max_attempts=3)
        leased = self.queue.lease_one()
        assert leased is not None
        self.queue.set_stage(leased, "decoding")
        self.queue.nack(leased, error="OSError: truncated file", traceback="Traceback (most recent call last):\n  File \"h.py\", line 3\nOSError: truncated file", delay=3600)
        self.open_dashboard("?queue=" + urllib.parse.quote(self.queue.name) + "&job=thumb-1")
        self.wait_js("document.getElementById('detail-title').textContent === 'thumb-1'", "the job's page opened")
        fields = self.js("Object.fromEntries(Array.from(document.querySelectorAll('#detail-fields dt'), (dt) => [dt.textContent, dt.nextElementSibling.textContent]))")
        self.assertEqual(fields["kind"], "thumbnail")
        self.assertEqual(fields["attempts"], "1 of 3")
        self.assertEqual(fields["state"], "ready (delayed)")
        self.assertEqual(fields["stage"], "decoding")
        for name in ("priority", "dedupe key", "enqueued", "available", "lease deadline", "seq"):
            self.assertIn(name, fields)
        self.assertEqual(self.js("document.getElementById('detail-error').textContent"), "OSError: truncated file")
        self.assertTrue(self.js("document.getElementById('detail-traceback').textContent").endswith("OSError: truncated file"))
        self.assertEqual(json.loads(self.js("document.getElementById('detail-payload').textContent")), {"resize": "cat.jpg"})
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

    def test_one_time_zone_local_shown_and_utc_in_the_titles_header_included(self) -> None:
        self.browser.send("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})  # UTC+05:30, no DST
        self.addCleanup(self.browser.send, "Emulation.setTimezoneOverride", {"timezoneId": ""})
        job = self.queue.enqueue({"n": 1}, job_id="timed", delay=7200)
        kolkata = datetime.timezone(datetime.timedelta(hours=5, minutes=30))

        def local(t: float) -> str:
            return datetime.datetime.fromtimestamp(int(t), kolkata).strftime("%Y-%m-%d %H:%M:%S")

        def utc(t: float) -> str:
            return datetime.datetime.fromtimestamp(int(t), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

        self.open_dashboard("?queue=" + urllib.parse.quote(self.queue.name) + "&job=timed&state=delayed")
        self.wait_js("document.getElementById('detail-title').textContent === 'timed'", "the job's page opened")
        # ICU may name the zone by its older name.
        self.assertIn(self.js("document.getElementById('zone').textContent"), {"Asia/Kolkata (UTC+05:30)", "Asia/Calcutta (UTC+05:30)"})
        updated = self.js("document.getElementById('updated').textContent")
        self.assertRegex(updated, r"^\d\d:\d\d:\d\d$")
        title = self.js("document.getElementById('updated').title")
        self.assertRegex(title, r" UTC$")
        moment = datetime.datetime.strptime(title, "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=datetime.timezone.utc)
        self.assertEqual(moment.astimezone(kolkata).strftime("%H:%M:%S"), updated, "the header shows local time, UTC on hover")

        fields = "Object.fromEntries(Array.from(document.querySelectorAll('#detail-fields dt'), (dt) => [dt.textContent, [dt.nextElementSibling.textContent, dt.nextElementSibling.title]]))"
        shown = self.js(fields)
        for name, t in (("enqueued", job.enqueued_at), ("available", job.available_at)):
            text, hover = shown[name]
            self.assertTrue(text.startswith(local(t) + " ("), f"{name}: {text!r} is not local time {local(t)}")
            self.assertEqual(hover, utc(t), name)
        self.wait_js(self.row("timed") + " !== null", "the delayed job was listed")
        info = self.js(self.row("timed") + ".children[6].title")
        self.assertEqual(info, local(job.available_at) + " · " + utc(job.available_at))
        self.assertNotRegex(self.js("document.body.innerText"), r"\d\d:\d\d:\d\dZ", "no UTC time shown as text")
        self.assertCleanPage()

    def test_nothing_overflows_a_phones_width_nor_a_desktops(self) -> None:
        self.addCleanup(self.browser.send, "Emulation.setDeviceMetricsOverride",
                        {"width": WINDOW_SIZE[0], "height": WINDOW_SIZE[1], "deviceScaleFactor": 1, "mobile": False})
        long_word = "x" * 200
        self.queue.enqueue({"to": "ada@example.com", "body": long_word}, job_id="j-" + "i" * 250, kind="k" * 256, priority=-2147483648)
        leased = self.queue.enqueue({"n": 2}, job_id="leased-one", kind="email")
        lease = self.queue.lease_one(visibility_timeout=3600)  # held for the whole test, however slow
        assert lease is not None and lease.id == leased.id
        self.queue.set_stage(lease, "s" * 256)
        self.make_dead({"why": long_word}, "dead-" + "d" * 200)
        self.queue.enqueue("later", delay=3600)
        self.other_queue("q" * 100).enqueue("x")
        # The control panels with long names too: a schedule, a limit, a paused kind (the banner).
        self.queue.schedule("s" * 128, {"long": long_word}, cron="*/5 * * * *", tz="America/Argentina/Buenos_Aires", kind="k" * 256)
        self.queue.set_limit("l" * 256, concurrency=1000, rate=1000, per=86400, burst=1000, group_concurrency=1000, weights={"g" * 256: 1000})
        self.queue.pause("p" * 256)
        # Every element within the viewport's width, except inside a box that scrolls its own content (a <pre>).
        overflow = """(() => {
          const width = document.documentElement.clientWidth;
          const out = [];
          if (document.documentElement.scrollWidth > width) out.push('page scrolls sideways: ' + document.documentElement.scrollWidth);
          for (const node of document.querySelectorAll('body *')) {
            if (node.closest('pre') || node.getClientRects().length === 0) continue;
            const box = node.getBoundingClientRect();
            if (box.right > width + 0.5 || box.left < -0.5) out.push(node.tagName + '#' + node.id + '.' + node.className + ' ' + Math.round(box.left) + '..' + Math.round(box.right));
          }
          return out;
        })()"""
        for width, mobile in ((WINDOW_SIZE[0], False), (PHONE_WIDTH, True)):
            self.browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": mobile})
            self.open_dashboard()
            self.wait_js("document.querySelector('#schedules tr.schedule') && document.querySelector('#limits tr.limit')"
                         " && !document.getElementById('paused-banner').hidden", "the control panels were drawn")
            for state in ("all", "leased", "dead", "delayed"):
                with self.subTest(width=width, state=state):
                    self.js(f"document.querySelector('#tabs button[data-state={state}]').click()")
                    # Until the rows are this tab's (the address changes at once, the rows a moment later).
                    states = "Array.from(document.querySelectorAll('#jobs tr.job'), (r) => r.children[3].textContent)"
                    self.wait_js(f"(s => s.length > 0 && ('{state}' === 'all' ? s.length === 4 : s.every(x => x === '{state}')))({states})",
                                 f"the {state} tab listed its jobs")
                    self.js("document.querySelector('#jobs tr.job').click()")
                    self.wait_js("!document.getElementById('detail').hidden", "the detail opened")
                    self.wait_js("document.getElementById('detail-title').textContent === document.querySelector('#jobs tr.job').dataset.jobId", "its detail is shown")
                    self.wait_js("document.querySelector('#detail-explain li') !== null", "why it waits is shown")
                    if state in ("leased", "dead"):
                        self.wait_js("document.querySelector('#detail-attempts tr.attempt') !== null", "its attempts are shown")
                    self.assertEqual(self.js("window.innerWidth"), width)
                    self.assertEqual(self.js(overflow), [])
        self.js("window.__confirmAnswer = true")
        self.js("document.getElementById('purge').click()")
        self.assertTrue(self.js("document.getElementById('purge-dialog').open"))
        self.assertEqual(self.js(overflow), [], "the purge dialog fits too")
        self.js("document.getElementById('purge-cancel').click()")
        self.assertCleanPage(dialogs=1)

    def assertNothingRan(self) -> None:
        """No hostile value became markup or ran: no marker set, no dialog, no element the page does not make itself."""
        self.assertIsNone(self.js("window.__pwned"), "a hostile value ran as script")
        self.assertEqual(self.js("window.__dialogs"), [])
        self.assertEqual(self.js("document.scripts.length"), 1)
        self.assertEqual(self.js("document.images.length + document.querySelectorAll('iframe, object, embed, a').length"), 0)
        # The one SVG is the chart, where it belongs, made of the chart's own elements only.
        svg = "Array.from(document.querySelectorAll('svg'), (s) => s.parentElement.id + ':' + s.className.baseVal)"
        self.assertLessEqual(set(self.js(svg)), {"chart:chart"})
        inside = set(self.js("Array.from(document.querySelectorAll('svg *, svg'), (n) => n.tagName)"))
        self.assertLessEqual(inside, CHART_ELEMENTS)
        added = set(self.js("window.__added"))
        self.assertTrue(added, "the observer saw no rows being built")
        self.assertLessEqual(added, PAGE_MADE_ELEMENTS)

    def make_hostile_jobs(self) -> tuple[dict[str, str], str]:
        """Jobs whose every user-controlled field would run script as markup: the values by field, and a done job's id."""
        values = {name: hostile(name) for name in ("payload", "id", "kind", "stage", "dedupe", "error", "traceback", "result", "leased-id", "dead-id")}
        self.queue.enqueue({"html": values["payload"]}, job_id=values["id"], kind=values["kind"], dedupe_key=values["dedupe"], delay=3600)
        self.queue.enqueue("leased", job_id=values["leased-id"], kind=values["kind"], priority=MAX_PRIORITY)
        leased = self.queue.lease_one(visibility_timeout=3600)
        assert leased is not None and leased.id == values["leased-id"]
        self.queue.set_stage(leased, values["stage"])
        self.queue.enqueue("dies", job_id=values["dead-id"], priority=MAX_PRIORITY)
        dying = self.queue.lease_one()
        assert dying is not None and dying.id == values["dead-id"]
        self.queue.nack(dying, error=values["error"], traceback=values["traceback"], permanent=True)
        with_result = self.queue.enqueue("with result", priority=MAX_PRIORITY)
        got = self.queue.lease_one()
        assert got is not None and got.id == with_result.id
        self.queue.ack(got, result={"html": values["result"]})
        return values, with_result.id

    def assertNoHostileMarkup(self, values: dict[str, str]) -> None:
        self.assertNothingRan()
        markup = self.js("document.body.innerHTML")
        for value in values.values():
            self.assertNotIn(value, markup, "a hostile value appears unescaped in the document")

    def test_every_user_controlled_string_is_text_in_the_list(self) -> None:
        values, _ = self.make_hostile_jobs()
        self.open_dashboard()
        self.js("document.querySelector('#tabs button[data-state=all]').click()")
        self.wait_js(self.row(values["id"]) + " !== null", "the hostile job was listed")
        row = self.row(values["id"])
        self.assertEqual(self.js(row + ".children[1].textContent"), values["id"])
        self.assertEqual(self.js(row + ".children[1].firstChild.title"), values["id"])
        self.assertEqual(self.js(row + ".children[2].textContent"), values["kind"])
        as_json = json.dumps({"html": values["payload"]}, ensure_ascii=False, separators=(",", ":"))
        self.assertEqual(self.js(row + ".querySelector('td.payload').textContent"), as_json)
        self.assertEqual(self.js(row + ".querySelector('td.payload').title"), as_json)
        self.assertIn(values["stage"], self.js(self.row(values["leased-id"]) + ".textContent"))
        self.assertIn(values["error"], self.js(self.row(values["dead-id"]) + ".textContent"))
        self.assertEqual(self.js(self.row(values["dead-id"]) + ".children[6].title"), values["error"])
        # The filters and the search take them back as text, and the address carries them.
        self.type_into("filter-kind", values["kind"])
        self.type_into("filter-q", values["payload"])
        self.wait_listed([values["id"]], "the hostile kind and search text found the job")
        self.assertEqual((self.url_param("kind"), self.url_param("q")), (values["kind"], values["payload"]))
        self.assertIn(values["kind"], self.js("Array.from(document.querySelectorAll('#kinds option'), (o) => o.value)"))
        self.assertNoHostileMarkup(values)
        self.assertCleanPage()

    def open_job_page(self, job_id: str) -> None:
        self.open_dashboard("?queue=" + urllib.parse.quote(self.queue.name) + "&job=" + urllib.parse.quote(job_id))
        self.wait_js(f"document.getElementById('detail-title').textContent === {json.dumps(job_id)}", "the job's page opened")

    def test_every_user_controlled_string_is_text_on_each_jobs_page(self) -> None:
        values, done_id = self.make_hostile_jobs()
        detail = "Object.fromEntries(Array.from(document.querySelectorAll('#detail-fields dt'), (dt) => [dt.textContent, dt.nextElementSibling.textContent]))"
        self.open_job_page(values["id"])
        self.assertEqual((self.js(detail)["kind"], self.js(detail)["dedupe key"]), (values["kind"], values["dedupe"]))
        self.assertEqual(json.loads(self.js("document.getElementById('detail-payload').textContent")), {"html": values["payload"]})
        self.assertNoHostileMarkup(values)
        self.open_job_page(values["leased-id"])
        self.assertEqual(self.js(detail)["stage"], values["stage"])
        self.assertNoHostileMarkup(values)
        self.open_job_page(values["dead-id"])
        self.assertEqual(self.js("document.getElementById('detail-error').textContent"), values["error"])
        self.assertEqual(self.js("document.getElementById('detail-traceback').textContent"), values["traceback"])
        self.assertNoHostileMarkup(values)
        self.open_job_page(done_id)
        self.assertEqual(json.loads(self.js("document.getElementById('detail-result').textContent")), {"html": values["result"]})
        self.assertNoHostileMarkup(values)
        # An id that is not there comes back in an error message, as text.
        missing = hostile("missing")
        self.open_dashboard("?queue=" + urllib.parse.quote(self.queue.name) + "&job=" + urllib.parse.quote(missing))
        self.wait_js("document.getElementById('message').textContent.includes('Could not load job')", "the page said so")
        self.assertIn(missing, self.js("document.getElementById('message').textContent"))
        self.assertNoHostileMarkup({**values, "missing": missing})
        # The browser logs the 404 of the missing job; that is the only error.
        self.assertTrue(self.browser.errors)
        self.assertTrue(all("404" in e and "/api/jobs/" in e for e in self.browser.errors), self.browser.errors)
        self.browser.errors.clear()
        self.assertCleanPage()

    def test_a_hostile_queue_name_is_shown_as_text(self) -> None:
        name = hostile("queue")
        where, options = self.location()
        if where == self.dir:
            # A folder refuses such a name for its files; a queue that reports one stands in for it.
            shown: Any = _Named(self.queue, name)
            server = self.start_server(shown, list_queues=lambda: [name], open_queue=lambda n: shown)
        else:
            shown = Queue(where, name, **options)
            self.addCleanup(shown.close)
            server = self.start_server(self.queue, **picker_options(where, options))
        shown.enqueue("in the hostile queue", job_id="in-hostile")
        self.browser.open(server.url + ("?token=" + self.TOKEN + "&" if self.TOKEN else "?") + "queue=" + urllib.parse.quote(name))
        self.wait_js(self.row("in-hostile") + " !== null", "the hostile queue's job was listed")
        self.wait_js(self.queue_button(name) + " !== null", "the hostile queue was listed")
        self.assertEqual(self.js("document.getElementById('queue-name').textContent"), name)
        self.assertEqual(self.js(self.queue_button(name) + ".querySelector('.qname').textContent"), name)
        self.assertEqual(self.url_param("queue"), name)
        self.js("window.__confirmAnswer = true")
        self.js("document.getElementById('purge').click()")
        self.assertEqual(self.js("document.getElementById('purge-name').textContent"), name)
        self.assertIn(name, self.js("window.__dialogs[0][1]"), "the confirmation names the queue, as text")
        self.js("document.getElementById('purge-cancel').click()")
        self.js("window.__dialogs = []")
        self.assertNothingRan()
        self.assertNotIn(name, self.js("document.body.innerHTML"))
        self.assertEqual(self.browser.errors, [])
        self.assertEqual(len(shown), 1)

    def test_a_cross_site_page_cannot_requeue(self) -> None:
        self.make_dead({"order": 1}, "dead-1")
        self.open_dashboard()  # with a token, this also gives the browser its session cookie
        target = self.server.url + "api/jobs/dead-1/requeue"
        # A page of another origin: a simple POST goes out but carries no CSRF token (nor, cross-site, the
        # SameSite=Strict cookie); one with the header needs a preflight, which the server never grants.
        self.browser.open("data:text/html,<title>elsewhere</title>")
        attempts = f"""(async () => {{
          const out = [];
          try {{ await fetch({json.dumps(target)}, {{ method: "POST", mode: "no-cors", credentials: "include", body: "{{}}" }}); out.push("sent"); }}
          catch (e) {{ out.push("refused: " + e.message); }}
          try {{ const r = await fetch({json.dumps(target)}, {{ method: "POST", credentials: "include", headers: {{ "X-CSRF-Token": "guess", "Content-Type": "application/json" }}, body: "{{}}" }}); out.push("answered " + r.status); }}
          catch (e) {{ out.push("blocked"); }}
          return out;
        }})()"""
        outcome = self.js(attempts)
        self.assertEqual(outcome[1], "blocked", outcome)
        self.assertEqual(self.queue.get("dead-1").state, JobState.DEAD, "a cross-site request requeued the job")
        # The page itself: a POST without the CSRF token is refused; the page's own button works.
        self.open_dashboard()
        refused = self.js(f"fetch({json.dumps(target)}, {{ method: 'POST', body: '{{}}' }}).then((r) => r.status)")
        self.assertEqual(refused, 403)
        wrong = self.js(f"fetch({json.dumps(target)}, {{ method: 'POST', headers: {{ 'X-CSRF-Token': 'wrong' }}, body: '{{}}' }}).then((r) => r.status)")
        self.assertEqual(wrong, 403)
        self.assertEqual(self.queue.get("dead-1").state, JobState.DEAD)
        self.js("document.querySelector('#tabs button[data-state=dead]').click()")
        button = "document.querySelector('button[data-action=requeue][data-job-id=\"dead-1\"]')"
        self.wait_js(button + " !== null", "the DLQ listed the dead job")
        self.js(button + ".click()")
        self.assertTrue(wait_until(lambda: self.queue.get("dead-1").state == JobState.READY, timeout=PAGE_TIMEOUT))
        self.browser.errors.clear()  # the refused fetches are logged by the browser as failed requests

    # ------------------------------------------------------------ issue 17: chart, workers, actions, cancelled
    def test_the_chart_draws_throughput_and_failures_from_the_counters_samples(self) -> None:
        history = self.server.api.sampler.history
        now = time.time()
        zero = {"default": {"enqueued": 0, "succeeded": 0, "failed": 0, "dead": 0, "cancelled": 0}}
        busy = {"default": {"enqueued": 30, "succeeded": 20, "failed": 3, "dead": 2, "cancelled": 0}}
        self.assertTrue(history.add(self.queue.name, zero, now - 20))
        self.assertTrue(history.add(self.queue.name, busy, now - 10))
        history.interval = 3600.0  # no new sample during the test: the seeded ones are the chart
        self.open_dashboard()
        self.wait_js("document.querySelector('#chart path[data-series=succeeded]') !== null", "the chart was drawn")
        self.assertIsNotNone(self.js("document.querySelector('#chart path[data-series=failed]')"))
        # 20 successes and 5 failures (3 retried, 2 dead) in 10 s: 120 and 30 a minute.
        self.assertEqual(self.js("document.getElementById('chart-summary').textContent"),
                         "last 5 min: 120 succeeded/min, 30.0 failed/min")  # fmt: skip
        ticks = self.js("Array.from(document.querySelectorAll('#chart text.tick'), (t) => t.firstChild.textContent)")
        self.assertIn("now", ticks)
        self.assertIn("2 min ago", ticks, "a short history spans the chart (MIN_SPAN), not its last few pixels")
        self.assertEqual(ticks[:3], ["0", "100", "200"], "the scale tops at a round number over the highest rate")
        when = self.js("document.querySelector('#chart text.tick:last-of-type title').textContent")
        self.assertTrue(when.endswith(" UTC"), when)
        self.assertCleanPage()

    def test_the_workers_panel_shows_each_worker_and_the_gone_ones(self) -> None:
        from nobroker.announcements import GONE_AFTER
        from tests.semantics_roster import info

        now = time.time()
        live = info(name=hostile("worker-name"), host=hostile("worker-host"), kinds=(hostile("worker-kind"), "b"))
        gone = info(name="old", kinds=None, heartbeat_at=now - GONE_AFTER - 5, started_at=now - 999)
        self.queue.announce_worker(live)
        self.queue.announce_worker(gone)
        self.queue.enqueue("x")
        self.open_dashboard()
        row = f"document.querySelector('tr.worker[data-worker-id=\"{live.id}\"]')"
        self.wait_js(row + " !== null", "the workers were listed")
        self.assertEqual(self.js(row + ".children[0].textContent"), live.name)
        self.assertEqual(self.js(row + ".children[1].textContent"), live.host + " · pid 4242")
        self.assertEqual(self.js(row + ".children[2].textContent"), ", ".join(live.kinds or ()))
        self.assertEqual(self.js(row + ".children[3].textContent"), "2 of 4")
        old = f"document.querySelector('tr.worker[data-worker-id=\"{gone.id}\"]')"
        self.assertTrue(self.js(old + ".classList.contains('gone')"))
        self.assertTrue(self.js(old + ".children[5].textContent.startsWith('gone: ')"))
        self.assertEqual(self.js(old + ".children[2].textContent"), "all")
        self.assertEqual(self.js("document.getElementById('workers-note').textContent"), "1 live, 1 gone")
        self.assertNoHostileMarkup({"name": live.name, "host": live.host, "kind": (live.kinds or ("",))[0]})
        self.assertCleanPage()

    def test_cancel_by_a_click_and_the_cancelled_tab(self) -> None:
        self.queue.enqueue("a", job_id="to-cancel")
        self.queue.enqueue("b", job_id="stays")
        self.open_dashboard()
        button = "document.querySelector('button[data-action=cancel][data-job-id=\"to-cancel\"]')"
        self.wait_js(button + " !== null", "the ready job has a Cancel button")
        self.js("window.__confirmAnswer = false")
        self.js(button + ".click()")
        self.assertIs(self.queue.get("to-cancel").state, JobState.READY, "a declined confirmation cancels nothing")
        self.js("window.__confirmAnswer = true")
        self.js(button + ".click()")
        self.assertTrue(wait_until(lambda: self.queue.get("to-cancel").state == JobState.CANCELLED, timeout=PAGE_TIMEOUT))
        self.wait_js("document.getElementById('count-cancelled').textContent === '1'", "the cancelled card counts it")
        self.js("document.querySelector('#tabs button[data-state=cancelled]').click()")
        self.wait_listed(["to-cancel"], "the cancelled tab lists it")
        self.assertEqual(self.url_param("state"), "cancelled")
        self.assertIs(self.queue.get("stays").state, JobState.READY)
        self.assertCleanPage(dialogs=2)

    def test_a_selection_is_cancelled_or_requeued_in_bulk(self) -> None:
        for n in range(4):
            self.queue.enqueue(n, job_id=f"j-{n}")
        self.make_dead("d1", "dead-1")
        self.make_dead("d2", "dead-2")
        self.open_dashboard()
        self.js("document.querySelector('#tabs button[data-state=runnable]').click()")
        self.wait_listed(["j-0", "j-1", "j-2", "j-3"], "the ready jobs were listed")
        self.assertTrue(self.js("document.getElementById('bulk-actions').hidden"))
        for job_id in ("j-1", "j-3"):
            self.js(self.row(job_id) + ".querySelector('input[data-pick]').click()")
        self.assertEqual(self.js("document.getElementById('picked-count').textContent"), "2 selected")
        self.assertTrue(self.js("document.getElementById('pick-all').indeterminate"))
        self.js("window.__confirmAnswer = true")
        self.js("document.getElementById('bulk-cancel').click()")
        self.assertTrue(wait_until(lambda: [self.queue.get(f"j-{n}").state for n in range(4)] == [
            JobState.READY, JobState.CANCELLED, JobState.READY, JobState.CANCELLED], timeout=PAGE_TIMEOUT))
        self.wait_js("document.getElementById('message').textContent === 'Cancelled 2 job(s).'", "the page said so")
        self.js("document.querySelector('#tabs button[data-state=dead]').click()")
        self.wait_listed(["dead-1", "dead-2"], "the dead jobs were listed")
        self.js("document.getElementById('pick-all').click()")
        self.assertEqual(self.js("document.getElementById('picked-count').textContent"), "2 selected")
        self.js("document.getElementById('bulk-requeue').click()")
        self.assertTrue(wait_until(lambda: self.queue.get("dead-1").state == self.queue.get("dead-2").state == JobState.READY,
                                   timeout=PAGE_TIMEOUT))  # fmt: skip
        self.assertCleanPage(dialogs=2)

    def test_the_new_actions_need_the_csrf_token_from_the_page_too(self) -> None:
        self.queue.enqueue("a", job_id="keep", delay=3600)
        self.open_dashboard()
        for path, body in (("api/jobs/keep/cancel", "{}"), ("api/bulk", json.dumps({"action": "cancel", "ids": ["keep"]})),
                           ("api/jobs/keep/run-now", "{}"), ("api/jobs/keep/delete", "{}"),
                           ("api/bulk", json.dumps({"action": "run_now", "ids": ["keep"]})),
                           ("api/bulk", json.dumps({"action": "delete", "ids": ["keep"]}))):  # fmt: skip
            target = json.dumps(self.server.url + path)
            refused = self.js(f"fetch({target}, {{ method: 'POST', body: {json.dumps(body)} }}).then((r) => r.status)")
            wrong = self.js(f"fetch({target}, {{ method: 'POST', headers: {{ 'X-CSRF-Token': 'wrong' }}, body: {json.dumps(body)} }}).then((r) => r.status)")
            self.assertEqual((refused, wrong), (403, 403), path)
        self.assertIs(self.queue.get("keep").state, JobState.READY)
        self.assertGreater(self.queue.get("keep").available_at, time.time(), "not run now either")
        self.browser.errors.clear()  # the refused fetches are logged by the browser as failed requests

    def test_compact_asks_first(self) -> None:
        done = self.make_done("finished")
        kept = self.queue.enqueue("waiting").id
        self.open_dashboard()
        self.js("window.__confirmAnswer = false")
        self.js("document.getElementById('compact').click()")
        self.assertEqual(self.js("window.__dialogs.length"), 1)
        self.assertEqual(self.queue.get(done).state, JobState.DONE)  # declined: nothing happened

        self.js("window.__confirmAnswer = true")
        self.js("document.getElementById('compact').click()")
        self.wait_js("document.getElementById('message').textContent.startsWith('Compacted')", "compaction reported")
        self.assertEqual([j.id for j in self.queue.list_jobs()], [kept])
        self.wait_js("document.getElementById('count-done').textContent === '0'", "the done count dropped")
        self.assertCleanPage(dialogs=2)

    # ------------------------------------------------------------ issues 15 and 17: a job's page, its actions, the control panels
    def in_kolkata(self) -> Any:
        """Show the page in UTC+05:30 (no DST); the function that formats a time as the page should show it."""
        self.browser.send("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
        self.addCleanup(self.browser.send, "Emulation.setTimezoneOverride", {"timezoneId": ""})
        kolkata = datetime.timezone(datetime.timedelta(hours=5, minutes=30))
        return lambda t: datetime.datetime.fromtimestamp(int(t), kolkata).strftime("%Y-%m-%d %H:%M:%S")

    def shown_buttons(self) -> list[str]:
        return list(self.js("Array.from(document.querySelectorAll('#detail .actions button'), (b) => b.hidden ? '' : b.id).filter(Boolean)"))

    def reasons(self) -> list[list[str]]:
        return list(self.js("Array.from(document.querySelectorAll('#detail-explain li'), (li) => [li.dataset.code, li.textContent])"))

    def test_a_jobs_page_shows_its_attempts_why_it_waits_and_its_time_limit(self) -> None:
        local = self.in_kolkata()
        job = self.queue.enqueue({"n": 1}, job_id="tried", timeout=5, priority=MAX_PRIORITY)
        first = self.queue.lease_one()
        assert first is not None and first.id == job.id
        self.queue.nack(first, error="first try failed", delay=0)
        running = self.queue.lease_one(visibility_timeout=3600)
        assert running is not None and running.lease_token is not None
        self.open_job_page("tried")
        self.wait_js("document.querySelectorAll('#detail-attempts tr.attempt').length === 2", "both attempts were listed")
        cells = "Array.from(document.querySelectorAll('#detail-attempts tr.attempt'), (r) => Array.from(r.children, (c) => c.textContent))"
        rows = self.js(cells)
        stored = self.queue.get("tried").attempt_history
        self.assertEqual([r[0] for r in rows], ["1", "2"])
        self.assertEqual([r[5] for r in rows], ["failed", "running"])
        self.assertEqual(rows[0][4], stored[0]["by"])
        self.assertRegex(rows[0][4], r":%d$" % os.getpid(), "the worker is host:pid")
        self.assertTrue(rows[0][1].startswith(local(stored[0]["started"]) + " ("), rows[0])
        self.assertTrue(rows[0][2].startswith(local(stored[0]["finished"]) + " ("), rows[0])
        self.assertRegex(rows[0][3], r"^\d+\.\d\d s$")
        self.assertEqual((rows[1][2], rows[1][3].endswith(" so far")), ("–", True))
        title = self.js("document.querySelector('#detail-attempts tr.attempt td:nth-child(2) span').title")
        self.assertEqual(title, datetime.datetime.fromtimestamp(int(stored[0]["started"]), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
        fields = "Object.fromEntries(Array.from(document.querySelectorAll('#detail-fields dt'), (dt) => [dt.textContent, dt.nextElementSibling.textContent]))"
        self.assertEqual(self.js(fields)["time limit"], "5 s")
        self.wait_js("document.querySelector('#detail-explain li[data-code=leased]') !== null", "why it runs was shown")
        leased = dict(self.reasons())["leased"]
        self.assertIn("leased by " + stored[1]["by"], leased)
        self.assertIn("(hidden)", leased)
        self.assertNotIn(running.lease_token, self.js("document.body.innerHTML"), "the lease token never reaches the page")
        self.assertIn("time_limit", dict(self.reasons()))
        self.assertEqual(self.shown_buttons(), ["detail-cancel", "detail-refresh"], "a leased job is cancelled, nothing else")
        # A delayed job says until when: in the page's zone, the server's words (in UTC) in the title.
        later = self.queue.enqueue("later", job_id="later", delay=3600)
        self.open_job_page("later")
        self.wait_js("document.querySelector('#detail-explain li[data-code=delayed]') !== null", "the delay was explained")
        utc = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(later.available_at))
        self.assertTrue(dict(self.reasons())["delayed"].startswith("delayed until " + local(later.available_at) + " (in "), self.reasons())
        self.assertNotIn("UTC", dict(self.reasons())["delayed"])
        self.assertIn(utc, self.js("document.querySelector('#detail-explain li[data-code=delayed]').title"))
        self.assertEqual(self.js("document.getElementById('detail-attempts-empty').hidden"), False)
        self.assertCleanPage()

    def test_run_now_retry_and_delete_by_a_click_only_where_the_state_allows(self) -> None:
        self.queue.enqueue("later", job_id="later", delay=3600)
        self.make_dead("d", "dead-1")
        done = self.make_done("finished")
        self.queue.enqueue("held", job_id="held", priority=MAX_PRIORITY)
        held = self.queue.lease_one(visibility_timeout=3600)
        assert held is not None and held.id == "held"
        expected = {
            "later": ["detail-run-now", "detail-cancel", "detail-delete", "detail-refresh"],
            "dead-1": ["detail-requeue", "detail-delete", "detail-refresh"],
            done: ["detail-delete", "detail-refresh"],
            "held": ["detail-cancel", "detail-refresh"],
        }
        for job_id, buttons in expected.items():
            with self.subTest(job=job_id):
                self.open_job_page(job_id)
                self.assertEqual(self.shown_buttons(), buttons)
        # Run now: from the delayed tab's row, then the job is runnable.
        self.open_dashboard("?queue=" + urllib.parse.quote(self.queue.name) + "&state=delayed")
        button = "document.querySelector('button[data-action=run_now][data-job-id=\"later\"]')"
        self.wait_js(button + " !== null", "the delayed job has a Run now button")
        self.js(button + ".click()")
        self.assertTrue(wait_until(lambda: self.queue.get("later").available_at <= time.time(), timeout=PAGE_TIMEOUT))
        self.wait_js("document.getElementById('message').textContent === 'Runnable now: later'", "the page said so")
        self.wait_js("document.getElementById('count-delayed').textContent === '0'", "the delayed count dropped")
        # Retry on the dead job's page: ready again with its attempts reset.
        self.open_job_page("dead-1")
        self.js("document.getElementById('detail-requeue').click()")
        self.assertTrue(wait_until(lambda: self.queue.get("dead-1").state == JobState.READY, timeout=PAGE_TIMEOUT))
        self.assertEqual(self.queue.get("dead-1").attempts, 0)
        # Delete asks first; declined, nothing happens; accepted, the job and its page are gone.
        self.open_job_page(done)
        self.js("window.__confirmAnswer = false")
        self.js("document.getElementById('detail-delete').click()")
        self.assertIn("cannot be undone", self.js("window.__dialogs[0][1]"))
        self.assertIs(self.queue.get(done).state, JobState.DONE)
        self.js("window.__confirmAnswer = true")
        self.js("document.getElementById('detail-delete').click()")
        self.wait_js(f"document.getElementById('message').textContent === 'Deleted job: {done}'", "the page said so")
        self.assertRaises(nobroker.JobNotFoundError, self.queue.get, done)
        self.assertTrue(self.js("document.getElementById('detail').hidden"), "the deleted job's page closed")
        self.assertIsNone(self.url_param("job"))
        self.assertCleanPage(dialogs=2)

    def test_a_selection_is_run_now_or_deleted_and_a_refusal_is_shown_as_text(self) -> None:
        for n in range(3):
            self.queue.enqueue(n, job_id=f"later-{n}", delay=3600)
        self.open_dashboard("?queue=" + urllib.parse.quote(self.queue.name) + "&state=delayed")
        self.wait_listed(["later-0", "later-1", "later-2"], "the delayed jobs were listed")
        for job_id in ("later-0", "later-2"):
            self.js(self.row(job_id) + ".querySelector('input[data-pick]').click()")
        self.js("window.__confirmAnswer = true")
        self.js("document.getElementById('bulk-run-now').click()")
        self.wait_js("document.getElementById('message').textContent === 'Made runnable 2 job(s).'", "the page said so")
        self.assertEqual(self.queue.stats().delayed, 1)
        self.js("document.querySelector('#tabs button[data-state=runnable]').click()")
        self.wait_listed(["later-0", "later-2"], "the runnable jobs were listed")
        self.js("document.getElementById('pick-all').click()")
        self.js("document.getElementById('bulk-delete').click()")
        self.assertIn("cannot be undone", self.js("window.__dialogs[window.__dialogs.length - 1][1]"))
        self.wait_js("document.getElementById('message').textContent === 'Deleted 2 job(s).'", "the page said so")
        self.assertEqual([j.id for j in self.queue.list_jobs()], ["later-1"])
        # A leased job with a hostile id: the refusal (409) comes back naming it, shown as text.
        bad = hostile("refused-id")
        self.queue.enqueue("held", job_id=bad, priority=MAX_PRIORITY)
        held = self.queue.lease_one(visibility_timeout=3600)
        assert held is not None and held.id == bad
        self.js("document.querySelector('#tabs button[data-state=leased]').click()")
        self.wait_listed([bad], "the leased job was listed")
        self.js(self.row(bad) + ".querySelector('input[data-pick]').click()")
        self.js("document.getElementById('bulk-delete').click()")
        self.wait_js("document.getElementById('message').textContent.startsWith('Deleted 0 job(s); refused 1')", "the refusal was shown")
        self.assertIn(f"job {bad} is leased: a leased job is not deleted", self.js("document.getElementById('message').textContent"))
        self.assertIs(self.queue.get(bad).state, JobState.LEASED)
        self.js("window.__dialogs = []")
        self.assertNoHostileMarkup({"id": bad})
        self.assertCleanPage()

    def test_the_new_actions_answer_409_to_the_page_for_a_state_that_does_not_allow_them(self) -> None:
        self.queue.enqueue("held", job_id="held")
        assert self.queue.lease_one(visibility_timeout=3600) is not None
        done = self.make_done("x")
        self.open_dashboard()
        post = """((path) => fetch(path, { method: "POST", headers: { "Content-Type": "application/json",
          "X-CSRF-Token": document.querySelector('meta[name="csrf-token"]').content }, body: "{}" })
          .then(async (r) => [r.status, (await r.json()).error]))"""
        for path, fragment in (("api/jobs/held/delete", "cancel it first"), ("api/jobs/held/run-now", "held is leased"),
                               (f"api/jobs/{done}/run-now", "is done"), (f"api/jobs/{done}/cancel", "is done"),
                               ("api/jobs/held/requeue", "not dead")):  # fmt: skip
            with self.subTest(path=path):
                status, error = self.js(f"{post}({json.dumps(self.server.url + path)})")
                self.assertEqual(status, 409, error)
                self.assertIn(fragment, error)
        self.assertIs(self.queue.get("held").state, JobState.LEASED)
        self.assertIs(self.queue.get(done).state, JobState.DONE)
        self.browser.errors.clear()  # the refused fetches are logged by the browser as failed requests

    def test_the_schedules_and_limits_panels_and_the_paused_banner(self) -> None:
        local = self.in_kolkata()
        name, kind = hostile("schedule-name"), hostile("limit-kind")
        self.queue.schedule(name, {"x": 1}, cron="30 4 * * *", tz="Europe/Berlin", kind=hostile("schedule-kind"), catch_up="all")
        self.queue.schedule("often", None, every=90)
        self.queue.set_limit(kind, concurrency=2, rate=10, per=60, burst=4, group_concurrency=3, weights={hostile("group"): 2})
        self.queue.set_limit("sms", rate=5)
        self.queue.enqueue("x")
        self.open_dashboard()
        rows = "Array.from(document.querySelectorAll('#schedules tr.schedule'), (r) => Array.from(r.children, (c) => c.textContent))"
        self.wait_js(rows + ".length === 2", "the schedules were listed")
        stored = {s.name: s for s in self.queue.schedules()}
        shown = {r[0]: r for r in self.js(rows)}
        self.assertEqual(shown[name][1:3], ["30 4 * * * (Europe/Berlin)", hostile("schedule-kind")])
        self.assertEqual(shown[name][4], "all")
        self.assertEqual(shown["often"][1:3], ["every 90 s", "default"])
        self.assertTrue(shown["often"][3].startswith(local(stored["often"].next_run) + " (in "), shown["often"])
        hover = "document.querySelector('#schedules tr.schedule[data-schedule=\"often\"] td:nth-child(4) span').title"
        self.assertEqual(self.js(hover), time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(stored["often"].next_run))))
        limits = "Array.from(document.querySelectorAll('#limits tr.limit'), (r) => Array.from(r.children, (c) => c.textContent))"
        self.wait_js(limits + ".length === 2", "the limits were listed")
        by_kind = {r[0]: r[1:] for r in self.js(limits)}
        self.assertEqual(by_kind[kind], ["2 at once", "10 per 60 s", "4", f"3 at once each; take turns, {hostile('group')} × 2", "no"])
        self.assertEqual(by_kind["sms"], ["–", "5 per s", "5", "–", "no"])
        self.assertTrue(self.js("document.getElementById('paused-banner').hidden"), "nothing paused, no banner")
        self.queue.pause(kind)
        self.wait_js("!document.getElementById('paused-banner').hidden", "the pause was shown")
        self.assertEqual(self.js("document.getElementById('paused-banner').textContent"), f"Paused kind: {kind} (nobroker resume --kind {kind}).")
        self.wait_js(limits + ".find((r) => r[0] === " + json.dumps(kind) + ")[5] === 'paused'", "the limit's row says paused")
        self.queue.pause()
        self.wait_js("document.getElementById('paused-banner').textContent.startsWith('The whole queue is paused')", "the queue's pause was shown")
        self.assertNoHostileMarkup({"name": name, "kind": kind, "schedule-kind": hostile("schedule-kind"), "group": hostile("group")})
        self.queue.resume()
        self.queue.resume(kind)
        self.wait_js("document.getElementById('paused-banner').hidden", "the banner went once resumed")
        self.assertCleanPage()

    def test_explain_text_with_hostile_kinds_and_errors_is_text(self) -> None:
        kind, error = hostile("explain-kind"), hostile("explain-error")
        self.queue.enqueue("ahead", job_id="ahead", kind=kind, priority=5)
        self.queue.enqueue("behind", job_id="behind", kind=kind)
        self.queue.enqueue("retry", job_id="retry", kind=kind, priority=MAX_PRIORITY)
        leased = self.queue.lease_one(kinds=[kind])
        assert leased is not None and leased.id == "retry"
        self.queue.nack(leased, error=error, delay=3600)
        self.open_job_page("behind")
        self.wait_js("document.querySelector('#detail-explain li[data-code=work_ahead]') !== null", "the work ahead was explained")
        self.assertIn(f"of kind {kind!r} come before it", dict(self.reasons())["work_ahead"])
        self.open_job_page("retry")
        self.wait_js("document.querySelector('#detail-explain li[data-code=backing_off]') !== null", "the backoff was explained")
        self.assertIn(f"(last error: {error})", dict(self.reasons())["backing_off"])
        self.assertEqual(self.js("document.querySelector('#detail-attempts tr.attempt td.outcome').textContent"), "failed")
        self.assertNoHostileMarkup({"kind": kind, "error": error})
        self.assertCleanPage()

    def other_queue(self, prefix: str) -> Queue:
        where, options = self.location()
        queue = Queue(where, fresh_name(prefix), **options)
        self.addCleanup(queue.close)
        return queue

    def queue_button(self, name: str) -> str:
        return f"document.querySelector('#queues button.queue[data-queue=' + CSS.escape({json.dumps(name)}) + ']')"

    def test_every_queue_is_listed_with_its_counts_and_a_click_switches(self) -> None:
        where, options = self.location()
        other = self.other_queue("emails")
        other.enqueue({"to": "ada"}, job_id="in-other")
        other.enqueue({"to": "later"}, job_id="later-other", delay=3600)
        self.queue.enqueue("here", job_id="in-first")
        listed = nobroker.list_queues(where, schema=options.get("schema"))
        self.open_dashboard("")  # no queue named: the page opens on the first
        self.wait_js(self.queue_button(other.name) + " !== null", "the other queue was listed")
        self.wait_js(self.row("in-first") + " !== null", "the first queue's job was listed")
        names = self.js("Array.from(document.querySelectorAll('#queues button.queue'), (b) => b.dataset.queue)")
        self.assertEqual(names, listed)
        counts = self.js(self.queue_button(other.name) + ".querySelector('.qcounts').textContent")
        self.assertEqual(counts, "1 ready · 1 delayed · 0 leased · 0 dead · 2 in all")
        self.assertEqual(self.js(self.queue_button(self.queue.name) + ".getAttribute('aria-current')"), "true")
        self.assertEqual(self.js("new URLSearchParams(location.search).get('queue')"), self.queue.name)

        self.js(self.queue_button(other.name) + ".click()")
        self.wait_js(f"document.getElementById('queue-name').textContent === {json.dumps(other.name)}", "the name switched")
        self.wait_js(self.row("in-other") + " !== null", "the other queue's job was listed")
        self.wait_js(self.row("in-first") + " === null", "the first queue's job left the list")
        self.wait_js("document.getElementById('count-total').textContent === '2'", "the counts are the other queue's")
        self.assertEqual(self.js("new URLSearchParams(location.search).get('queue')"), other.name, "the address names the queue")
        self.assertEqual(self.js(self.queue_button(other.name) + ".getAttribute('aria-current')"), "true")
        self.js(self.row("in-other") + ".click()")
        self.wait_js("document.getElementById('detail-title').textContent === 'in-other'", "its detail opened")
        self.assertEqual(self.js("new URLSearchParams(location.search).get('job')"), "in-other")

        # Back: the job closes; back again: the first queue, as the address said.
        self.js("history.back()")
        self.wait_js("document.getElementById('detail').hidden", "going back closed the detail")
        self.js("history.back()")
        self.wait_js(f"document.getElementById('queue-name').textContent === {json.dumps(self.queue.name)}", "back went to the first queue")
        self.wait_js(self.row("in-first") + " !== null", "the first queue's job is listed again")
        self.assertEqual(nobroker.list_queues(where, schema=options.get("schema")), listed, "no queue was created")
        self.assertCleanPage()

    def test_the_address_names_the_queue_and_the_job(self) -> None:
        other = self.other_queue("reports")
        other.enqueue({"report": "q3"}, job_id="q3-report")
        self.queue.enqueue("here", job_id="in-first")
        query = "?queue=" + urllib.parse.quote(other.name) + "&job=q3-report"
        self.open_dashboard(query)
        self.wait_js(f"document.getElementById('queue-name').textContent === {json.dumps(other.name)}", "it opened on the named queue")
        self.wait_js("document.getElementById('detail-title').textContent === 'q3-report'", "the named job is shown")
        self.wait_js(self.row("q3-report") + " !== null", "the named queue's jobs are listed")
        self.assertEqual(json.loads(self.js("document.getElementById('detail-payload').textContent")), {"report": "q3"})
        self.assertEqual(self.js(self.row("in-first")), None)
        self.assertCleanPage()

    def test_an_address_naming_no_queue_here_says_so_and_shows_the_default(self) -> None:
        self.queue.enqueue("here", job_id="in-first")
        self.open_dashboard("?queue=ghost", live=False)
        self.wait_js("document.getElementById('message').textContent.includes(\"no queue named 'ghost'\")", "the page said so")
        self.wait_js(f"document.getElementById('queue-name').textContent === {json.dumps(self.queue.name)}", "it showed the default")
        self.wait_js(self.row("in-first") + " !== null", "the default queue's jobs are listed")
        self.assertEqual(self.js("new URLSearchParams(location.search).get('queue')"), self.queue.name)
        where, options = self.location()
        self.assertNotIn("ghost", nobroker.list_queues(where, schema=options.get("schema")))

    def test_purge_needs_a_confirmation_and_the_typed_queue_name(self) -> None:
        for n in range(3):
            self.queue.enqueue(n)
        self.open_dashboard()
        self.js("window.__confirmAnswer = true")
        self.js("document.getElementById('purge').click()")
        self.assertTrue(self.js("document.getElementById('purge-dialog').open"))
        typing = "(v) => { const i = document.getElementById('purge-input'); i.value = v; i.dispatchEvent(new Event('input')); }"
        self.js(f"({typing})('not-the-name')")
        self.assertTrue(self.js("document.getElementById('purge-confirm').disabled"))
        self.js("document.getElementById('purge-cancel').click()")
        self.assertFalse(self.js("document.getElementById('purge-dialog').open"))
        self.assertEqual(self.queue.stats().total, 3)

        self.js("document.getElementById('purge').click()")
        self.js(f"({typing})({json.dumps(self.queue.name)})")
        self.assertFalse(self.js("document.getElementById('purge-confirm').disabled"))
        self.js("document.getElementById('purge-confirm').click()")
        self.assertTrue(wait_until(lambda: self.queue.stats().total == 0, timeout=PAGE_TIMEOUT), "purge did not happen")
        self.wait_js("document.getElementById('count-total').textContent === '0'", "the page showed the empty queue")
        self.assertCleanPage(dialogs=2)


def hostile(where: str) -> str:
    """A value that would run script wherever it became markup, in an attribute or out of one; marked by ``where``."""
    return f"\"'><img src=x onerror=\"window.__pwned='{where}'\"><script>window.__pwned='{where}'</script>&amp;{where}"


class _Named:
    """A queue that reports another name (a folder refuses hostile names for its files)."""

    def __init__(self, queue: Queue, name: str) -> None:
        self._queue = queue
        self.name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._queue, attribute)

    def __len__(self) -> int:
        return len(self._queue)


class WebDashboardTokenTest(WebDashboardTest):
    """The same page behind a token: opened once with ?token=, then carried by the session cookie."""

    TOKEN = "browser-test-token"

    def open_dashboard(self, query: str | None = None, *, live: bool = True) -> None:
        query = self.address(query)
        extra = "&" + query.lstrip("?") if query else ""
        self.browser.open(self.server.url + "?token=" + self.TOKEN + extra)
        if live:
            self.wait_js("document.getElementById('status').textContent === 'live'", "the page went live")
        # The redirect dropped the token from the address bar (and kept the rest), and script cannot read the cookie.
        self.assertNotIn(self.TOKEN, self.js("location.href"))
        self.assertTrue(self.js("location.href").startswith(self.server.url))
        self.assertEqual(self.js("document.cookie"), "")

    def test_without_the_token_the_page_is_refused(self) -> None:
        self.browser.open(self.server.url)
        self.assertIn("token is required", self.js("document.body.textContent"))


class PostgresWebDashboardTest(OnPostgres, WebDashboardTest):
    """The same page over the PostgreSQL storage (skipped without a DSN or psycopg)."""


class ServedByTheCommandTest(TempDirTestCase):
    """`nobroker serve` as a real process, the page in Chromium: where holding only queue `app` opens on `app`."""

    browser: Browser

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.browser = require_browser(cls)

    def serve(self, *where: str) -> str:
        """Start `nobroker <where> serve --port 0`; the page's address."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [SRC, os.environ.get("PYTHONPATH", "")] if p))
        env.pop("NOBROKER_TOKEN", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "nobroker", *where, "serve", "--port", "0"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.addCleanup(self.stop, proc)
        line = proc.stdout.readline() if proc.stdout else ""
        self.assertIn(" at http://127.0.0.1:", line, proc.stderr.read() if not line and proc.stderr else line)
        self.addCleanup(self.browser.open, "about:blank")
        return line.split(" at ")[1].split()[0]

    @staticmethod
    def stop(proc: subprocess.Popen[str]) -> None:
        if proc.poll() is None:
            proc.terminate()
        proc.communicate(timeout=PAGE_TIMEOUT)

    def js(self, expression: str) -> Any:
        return self.browser.evaluate(expression)

    def shows_only_app(self, url: str) -> None:
        self.browser.clear()
        self.browser.open(url)
        buttons = "Array.from(document.querySelectorAll('#queues button.queue'), (b) => b.dataset.queue)"
        shown = wait_until(lambda: self.js(buttons) == ["app"], timeout=PAGE_TIMEOUT, interval=0.1)
        self.assertTrue(shown, f"the queue list shows {self.js(buttons)}, not just app")
        self.assertTrue(wait_until(lambda: self.js("document.getElementById('queue-name').textContent") == "app",
                                   timeout=PAGE_TIMEOUT, interval=0.1))
        self.assertTrue(wait_until(lambda: self.js("document.getElementById('count-total').textContent") == "2",
                                   timeout=PAGE_TIMEOUT, interval=0.1), "the counts are app's")
        self.assertEqual(self.js("new URLSearchParams(location.search).get('queue')"), "app")
        self.assertEqual(self.browser.errors, [])

    def test_a_folder_holding_only_app_shows_app_and_no_empty_default(self) -> None:
        with Queue(self.dir, "app") as app:
            app.enqueue_many(["a", "b"])
        self.shows_only_app(self.serve("--dir", self.dir))
        self.assertEqual(nobroker.list_queues(self.dir), ["app"], "nothing was created")

    def test_a_schema_holding_only_app_shows_app_and_no_empty_default(self) -> None:
        dsn = require_postgres(self)
        from nobroker.postgres import migrate

        schema = fresh_name("nbdashcli")
        migrate(dsn, schema=schema)
        self.addCleanup(drop_schema, schema)
        with Queue(dsn, "app", schema=schema) as app:
            app.enqueue_many(["a", "b"])
        self.shows_only_app(self.serve("--dsn", dsn, "--schema", schema))
        self.assertEqual(nobroker.list_queues(dsn, schema=schema), ["app"], "nothing was created")


if __name__ == "__main__":
    unittest.main()
