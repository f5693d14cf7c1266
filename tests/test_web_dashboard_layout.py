"""The dashboard page's layout in Chromium: nothing wider than a phone's screen or a desktop's.

Owns: ``WebDashboardLayoutTest``: with long ids, kinds, stages, queue,
schedule, limit and paused names, every tab, each job's page, the control
panels and the purge dialog fit a phone's width and a desktop's; run on a
file queue, behind a token, and on PostgreSQL. Imports: the standard
library, tests.browser (``WINDOW_SIZE``), tests.dashsupport (``OnPostgres``),
tests.webdashsupport (the page and its helpers).

Skips locally without Chromium; in CI (CI=true) a missing browser fails.
Waits poll the page or the queue for a condition, with a timeout; nothing
sleeps for a fixed time.
"""

from __future__ import annotations

import unittest

from tests.browser import WINDOW_SIZE
from tests.dashsupport import OnPostgres
from tests.webdashsupport import WebDashboardCase, WebDashboardTokenCase

#: A phone's width in CSS pixels (an iPhone's 375; the issue's complaint was a table cut off at 420).
PHONE_WIDTH = 375


class WebDashboardLayoutTest(WebDashboardCase):
    """Every part of the page within the window's width, on a desktop and on a phone."""

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


class WebDashboardLayoutTokenTest(WebDashboardTokenCase, WebDashboardLayoutTest):
    """The same tests behind a token."""


class PostgresWebDashboardLayoutTest(OnPostgres, WebDashboardLayoutTest):
    """The same page over the PostgreSQL storage (skipped without a DSN or psycopg)."""


if __name__ == "__main__":
    unittest.main()
