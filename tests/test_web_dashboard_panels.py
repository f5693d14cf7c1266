"""The dashboard page's panels in Chromium: the chart, the workers, the schedules and limits, the paused banner.

Owns: ``WebDashboardPanelsTest``: the chart drawn from the counters' samples,
each worker shown (the gone ones marked), the schedules with their next run
and the limits, the banner while a kind or the queue is paused, every
user-controlled value as text; run on a file queue, behind a token, and on
PostgreSQL. Imports: the standard library, nobroker, tests.dashsupport
(``OnPostgres``), tests.semantics_roster (a worker's announcement),
tests.webdashsupport (the page and its helpers).

Skips locally without Chromium; in CI (CI=true) a missing browser fails.
Waits poll the page or the queue for a condition, with a timeout; nothing
sleeps for a fixed time.
"""

from __future__ import annotations

import json
import time
import unittest

from tests.dashsupport import OnPostgres
from tests.webdashsupport import WebDashboardCase, WebDashboardTokenCase, hostile


class WebDashboardPanelsTest(WebDashboardCase):
    """The chart, the workers' panel, the schedules and limits panels, the paused banner."""

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


class WebDashboardPanelsTokenTest(WebDashboardTokenCase, WebDashboardPanelsTest):
    """The same tests behind a token."""


class PostgresWebDashboardPanelsTest(OnPostgres, WebDashboardPanelsTest):
    """The same page over the PostgreSQL storage (skipped without a DSN or psycopg)."""


if __name__ == "__main__":
    unittest.main()
