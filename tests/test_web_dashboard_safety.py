"""The dashboard page in Chromium runs no stored string and takes no change from another site.

Owns: ``WebDashboardSafetyTest``: every user-controlled value (payload, id,
kind, stage, dedupe key, error, traceback, result, queue name) is text in the
list, on each job's page and in the messages; a page of another origin cannot
requeue; the page's own POSTs need its CSRF token; run on a file queue,
behind a token (where the page without the token is refused), and on
PostgreSQL. Imports: the standard library, nobroker, tests.dashsupport
(``OnPostgres``, ``picker_options``), tests.support, tests.webdashsupport (the
page and its helpers).

Skips locally without Chromium; in CI (CI=true) a missing browser fails.
Waits poll the page or the queue for a condition, with a timeout; nothing
sleeps for a fixed time.
"""

from __future__ import annotations

import json
import time
import unittest
import urllib.parse
from typing import Any

from nobroker import Queue
from nobroker.jobs import MAX_PRIORITY, JobState
from tests.dashsupport import OnPostgres, picker_options
from tests.support import wait_until
from tests.webdashsupport import PAGE_MADE_ELEMENTS, PAGE_TIMEOUT, WebDashboardCase, WebDashboardTokenCase, hostile

SCRIPT_PAYLOAD = "<script>alert(1)</script>"


class WebDashboardSafetyTest(WebDashboardCase):
    """Hostile values shown as text, and no change from another site or without the CSRF token."""

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


class _Named:
    """A queue that reports another name (a folder refuses hostile names for its files)."""

    def __init__(self, queue: Queue, name: str) -> None:
        self._queue = queue
        self.name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._queue, attribute)

    def __len__(self) -> int:
        return len(self._queue)


class WebDashboardSafetyTokenTest(WebDashboardTokenCase, WebDashboardSafetyTest):
    """The same tests behind a token, and the page refused without it."""

    def test_without_the_token_the_page_is_refused(self) -> None:
        self.browser.open(self.server.url)
        self.assertIn("token is required", self.js("document.body.textContent"))


class PostgresWebDashboardSafetyTest(OnPostgres, WebDashboardSafetyTest):
    """The same page over the PostgreSQL storage (skipped without a DSN or psycopg)."""


if __name__ == "__main__":
    unittest.main()
