"""The dashboard page's actions in Chromium, by a click: requeue, cancel, run now, delete, in bulk, compact, purge.

Owns: ``WebDashboardActionsTest``: each action done by a click where the
job's state allows it (and its button hidden where not), the ones that
cannot be undone asking first, a delete waiting for every load of the job's
page on its way, a selection acted on in bulk, a refusal (409) shown as text,
purge needing the typed queue name; run on a file queue, behind a token, and
on PostgreSQL. Imports: the standard library, nobroker (the dashboard's
api), tests.dashsupport (``OnPostgres``), tests.support, tests.webdashsupport
(the page and its helpers).

Skips locally without Chromium; in CI (CI=true) a missing browser fails.
Waits poll the page or the queue for a condition, with a timeout; nothing
sleeps for a fixed time, but for the one request the delete test holds for
HOLD_SECONDS to show that the page sends nothing meanwhile.
"""

from __future__ import annotations

import json
import threading
import time
import unittest
import urllib.parse
from typing import Any
from unittest import mock

import nobroker
from nobroker.dashboard import api
from nobroker.jobs import MAX_PRIORITY, JobState
from tests.dashsupport import OnPostgres
from tests.support import wait_until
from tests.webdashsupport import PAGE_TIMEOUT, WebDashboardCase, WebDashboardTokenCase, hostile

#: How long the server holds the page's reload of a job's reasons, waiting for a delete the page must not send meanwhile.
HOLD_SECONDS = 2.0


class WebDashboardActionsTest(WebDashboardCase):
    """The actions on jobs and on the whole queue, by a click."""

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

    def test_a_delete_waits_for_every_load_of_the_jobs_page_on_its_way(self) -> None:
        # A delete sent while the job's page was loading reached the server first: the load then
        # asked for a job that was gone (a 404 in the console), as one loaded run of the suite saw.
        # Then the delete waited for the last load only: a refresh that started while an earlier
        # load still waited for its answer, and ended first, let the delete go ahead of that
        # answer, as a run of the new-user check saw. Here the second load's read of the job
        # is answered only once the delete was clicked.
        done = self.make_done("finished")
        self.open_job_page(done)
        self.wait_js("document.getElementById('detail-explain').textContent !== ''", "the job's reasons were shown")
        explained, deleted, second, clicked = threading.Event(), threading.Event(), threading.Event(), threading.Event()
        seen: list[bool] = []  # at the first explain: had the delete arrived?
        real = api.Api.answer

        def answer(api_self: api.Api, method: str, path: str, parts: list[str], *args: Any) -> Any:
            if parts[-1:] == ["delete"]:
                deleted.set()
            elif parts[-1:] == ["explain"] and not explained.is_set():
                explained.set()
                # Held until the delete comes, or long enough for it to have come (a bound, not a sleep:
                # the page must send it only after this answer).
                deleted.wait(HOLD_SECONDS)
                seen.append(deleted.is_set())
            elif explained.is_set() and not second.is_set() and parts[-2:] == ["jobs", done]:
                second.set()
                clicked.wait(PAGE_TIMEOUT)  # a load that ends once the delete was clicked
            return real(api_self, method, path, parts, *args)

        with mock.patch.object(api.Api, "answer", answer):
            self.js("document.getElementById('detail-refresh').click()")
            self.assertTrue(explained.wait(PAGE_TIMEOUT), "the page reloaded the job's reasons")
            self.js("document.getElementById('detail-refresh').click()")
            self.assertTrue(second.wait(PAGE_TIMEOUT), "a second load of the job's page started")
            self.js("window.__confirmAnswer = true")
            self.js("document.getElementById('detail-delete').click()")
            clicked.set()
            self.wait_js(f"document.getElementById('message').textContent === 'Deleted job: {done}'", "the page said so")
        self.assertEqual(seen, [False], "the delete was sent while the job's page was loading")
        self.assertRaises(nobroker.JobNotFoundError, self.queue.get, done)
        self.assertCleanPage(dialogs=1)

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


class WebDashboardActionsTokenTest(WebDashboardTokenCase, WebDashboardActionsTest):
    """The same tests behind a token."""


class PostgresWebDashboardActionsTest(OnPostgres, WebDashboardActionsTest):
    """The same page over the PostgreSQL storage (skipped without a DSN or psycopg)."""


if __name__ == "__main__":
    unittest.main()
