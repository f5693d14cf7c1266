"""The dashboard page's queues in Chromium: every queue listed with its counts, the address naming the queue and the job.

Owns: ``WebDashboardQueuesTest`` (a click switches queues and the address
follows, back goes back, an address naming no queue here says so; run on a
file queue, behind a token, and on PostgreSQL) and ``ServedByTheCommandTest``
(`nobroker serve` as a real process: a folder or schema holding only queue
`app` opens on `app` and creates no empty default). Imports: the standard
library, nobroker, tests.browser, tests.dashsupport (``OnPostgres``),
tests.pgsupport, tests.support, tests.webdashsupport (the page and its
helpers).

Skips locally without Chromium; in CI (CI=true) a missing browser fails.
Waits poll the page or the queue for a condition, with a timeout; nothing
sleeps for a fixed time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest
import urllib.parse
from typing import Any

import nobroker
from nobroker import Queue
from tests.browser import Browser, require_browser
from tests.dashsupport import OnPostgres
from tests.pgsupport import drop_schema, fresh_name, require_postgres
from tests.support import TempDirTestCase, wait_until
from tests.webdashsupport import PAGE_TIMEOUT, WebDashboardCase, WebDashboardTokenCase

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


class WebDashboardQueuesTest(WebDashboardCase):
    """Every queue of the folder or schema on one page, and the address naming the queue and the job."""

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


class WebDashboardQueuesTokenTest(WebDashboardTokenCase, WebDashboardQueuesTest):
    """The same tests behind a token."""


class PostgresWebDashboardQueuesTest(OnPostgres, WebDashboardQueuesTest):
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
