"""What every test of the dashboard page in Chromium shares: the server, the page, and the helpers that drive it.

Owns: ``WebDashboardCase`` (a file queue in a temp dir and a dashboard over
it on a free port, opened in the class's headless Chromium; helpers that wait
on the page, fill its filters, read its list, open a job's page, and check
that nothing ran and nothing left the server), ``WebDashboardTokenCase`` (the
same page behind a token), ``hostile`` (a value that runs script wherever it
becomes markup), the script that records dialogs and added elements, and the
waits' timeouts. The tests are in tests/test_web_dashboard_*.py. Imports: the
standard library, nobroker, tests.browser, tests.dashsupport
(``FileQueueCase``, ``picker_options``), tests.pgsupport (fresh names), tests.support.
"""

from __future__ import annotations

import datetime
import json
import threading
import urllib.parse
from typing import Any

from nobroker import Queue
from nobroker.dashboard import DashboardServer, make_server
from nobroker.jobs import MAX_PRIORITY
from tests.browser import Browser, require_browser
from tests.dashsupport import FileQueueCase, picker_options
from tests.pgsupport import fresh_name
from tests.support import wait_until

#: Seconds to wait for the page to show something (it refreshes every second).
PAGE_TIMEOUT = 60.0
POLL_SECONDS = 0.05

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


class WebDashboardCase(FileQueueCase):
    """A queue, a dashboard over it on a free port, and the page in the class's Chromium; the helpers every page test uses."""

    browser: Browser
    TOKEN: str | None = None

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.browser = require_browser(cls)
        cls.browser.send("Page.addScriptToEvaluateOnNewDocument", {"source": _WATCH})

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

    def assertNoHostileMarkup(self, values: dict[str, str]) -> None:
        self.assertNothingRan()
        markup = self.js("document.body.innerHTML")
        for value in values.values():
            self.assertNotIn(value, markup, "a hostile value appears unescaped in the document")

    def open_job_page(self, job_id: str) -> None:
        self.open_dashboard("?queue=" + urllib.parse.quote(self.queue.name) + "&job=" + urllib.parse.quote(job_id))
        self.wait_js(f"document.getElementById('detail-title').textContent === {json.dumps(job_id)}", "the job's page opened")

    def in_kolkata(self) -> Any:
        """Show the page in UTC+05:30 (no DST); the function that formats a time as the page should show it."""
        self.browser.send("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
        self.addCleanup(self.browser.send, "Emulation.setTimezoneOverride", {"timezoneId": ""})
        kolkata = datetime.timezone(datetime.timedelta(hours=5, minutes=30))
        return lambda t: datetime.datetime.fromtimestamp(int(t), kolkata).strftime("%Y-%m-%d %H:%M:%S")

    def shown_buttons(self) -> list[str]:
        return list(self.js("Array.from(document.querySelectorAll('#detail .actions button'), (b) => b.hidden ? '' : b.id).filter(Boolean)"))

    def other_queue(self, prefix: str) -> Queue:
        where, options = self.location()
        queue = Queue(where, fresh_name(prefix), **options)
        self.addCleanup(queue.close)
        return queue

    def queue_button(self, name: str) -> str:
        return f"document.querySelector('#queues button.queue[data-queue=' + CSS.escape({json.dumps(name)}) + ']')"


def hostile(where: str) -> str:
    """A value that would run script wherever it became markup, in an attribute or out of one; marked by ``where``."""
    return f"\"'><img src=x onerror=\"window.__pwned='{where}'\"><script>window.__pwned='{where}'</script>&amp;{where}"


class WebDashboardTokenCase(WebDashboardCase):
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
