"""A job's page on the dashboard in Chromium: its fields, its times, its attempts, and why it is not running.

Owns: ``WebDashboardJobPageTest``: a failed job's fields, stage, error and
traceback; one time zone (local shown, UTC in the titles); the attempts with
their timings, worker and outcome; explain's reasons (the lease token never
shown, hostile kinds and errors as text); the time limit; run on a file
queue, behind a token, and on PostgreSQL. Imports: the standard library,
nobroker, tests.dashsupport (``OnPostgres``), tests.webdashsupport (the page
and its helpers).

Skips locally without Chromium; in CI (CI=true) a missing browser fails.
Waits poll the page or the queue for a condition, with a timeout; nothing
sleeps for a fixed time.
"""

from __future__ import annotations

import datetime
import json
import os
import time
import unittest
import urllib.parse

from nobroker.jobs import MAX_PRIORITY
from tests.dashsupport import OnPostgres
from tests.webdashsupport import WebDashboardCase, WebDashboardTokenCase, hostile


class WebDashboardJobPageTest(WebDashboardCase):
    """A job's page: fields, times, attempts and explain's reasons."""

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


class WebDashboardJobPageTokenTest(WebDashboardTokenCase, WebDashboardJobPageTest):
    """The same tests behind a token."""


class PostgresWebDashboardJobPageTest(OnPostgres, WebDashboardJobPageTest):
    """The same page over the PostgreSQL storage (skipped without a DSN or psycopg)."""


if __name__ == "__main__":
    unittest.main()
