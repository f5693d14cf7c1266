"""The dashboard's /metrics: the Prometheus text format, checked line by line, and what each sample says.

Owns: ``parse_metrics`` (every sample of an exposition, each line's syntax
checked), ``MetricsTest`` (the job counts by state, the oldest ready job's
age, the counters per kind, the workers, label values escaped; on the file
storage and on PostgreSQL) and the queue proxies it uses to fix a clock or a
name. Imports: the standard library, nobroker, tests.dashsupport (the server
and its request helpers), tests.semantics_roster (a worker's announcement).
"""

from __future__ import annotations

import math
import re
import time
import unittest
from typing import Any
from unittest import mock

from nobroker import Queue, dashboard
from tests.dashsupport import DashboardCase, OnPostgres

# One sample line of the Prometheus text format 0.0.4: name{labels} value.
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE_RE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>" + _LABEL + r"(?:," + _LABEL + r")*)?\})?"
    r" (?P<value>[-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+|NaN|Inf))"
    r"(?: -?[0-9]+)?$"
)
HELP_RE = re.compile(r"^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .+$")
TYPE_RE = re.compile(r"^# TYPE (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$")


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text exposition, checking each line's syntax."""
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    typed: dict[str, str] = {}
    if not text.endswith("\n"):
        raise AssertionError("the exposition must end with a newline")
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            match = TYPE_RE.match(line)
            if not match:
                raise AssertionError(f"bad TYPE line: {line!r}")
            typed[match.group("name")] = match.group(2)
            continue
        if line.startswith("# HELP "):
            if not HELP_RE.match(line):
                raise AssertionError(f"bad HELP line: {line!r}")
            continue
        match = SAMPLE_RE.match(line)
        if not match:
            raise AssertionError(f"line is not in the Prometheus text format: {line!r}")
        name = match.group("name")
        if name not in typed:
            raise AssertionError(f"sample before its TYPE line: {line!r}")
        labels = tuple(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', match.group("labels") or ""))
        value = float(match.group("value").replace("Inf", "inf"))
        key = (name, labels)
        if key in samples:
            raise AssertionError(f"duplicate sample: {line!r}")
        samples[key] = value
    return samples


class MetricsTest(DashboardCase):
    def test_metrics_parse_and_match_stats(self) -> None:
        for n in range(5):
            self.queue.enqueue({"n": n})
        self.queue.enqueue("later", delay=3600)
        first = self.lease()
        self.queue.ack(first)
        self.lease()
        self.make_dead()
        resp = self.request("GET", "/metrics")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8")
        samples = parse_metrics(resp.text)
        stats = self.queue.stats()
        q = ("queue", self.queue.name)
        for state in ("ready", "delayed", "leased", "done", "dead"):
            self.assertEqual(samples[("nobroker_jobs", (q, ("state", state)))], getattr(stats, state), state)
        self.assertEqual(samples[("nobroker_leases_active", (q,))], stats.leased)
        self.assertEqual(samples[("nobroker_dead_jobs", (q,))], stats.dead)
        self.assertEqual((stats.ready, stats.delayed, stats.leased, stats.done, stats.dead), (3, 1, 1, 1, 1))
        age = samples[("nobroker_oldest_ready_age_seconds", (q,))]
        self.assertTrue(0.0 <= age < 600.0, age)
        self.assertTrue(math.isfinite(age))

    def test_oldest_ready_age_ignores_delayed_jobs_and_is_zero_when_idle(self) -> None:
        q = ("queue", self.queue.name)
        samples = parse_metrics(self.request("GET", "/metrics").text)
        self.assertEqual(samples[("nobroker_oldest_ready_age_seconds", (q,))], 0.0)
        self.queue.enqueue("later", delay=3600)
        samples = parse_metrics(self.request("GET", "/metrics").text)
        self.assertEqual(samples[("nobroker_oldest_ready_age_seconds", (q,))], 0.0)

    def test_oldest_ready_age_tracks_the_longest_waiting_job(self) -> None:
        # A clock of our own makes the age exact: the job became runnable 90 s ago.
        queue = _AgedQueue(self.queue, age=90.0)
        self.server.queue = queue  # type: ignore[assignment]
        queue.enqueue("waiting")
        samples = parse_metrics(self.request("GET", "/metrics").text)
        age = samples[("nobroker_oldest_ready_age_seconds", (("queue", self.queue.name),))]
        self.assertGreaterEqual(age, 90.0)
        self.assertLess(age, 90.0 + 60.0)

    def test_oldest_ready_age_scans_past_a_page_of_delayed_jobs(self) -> None:
        queue = _AgedQueue(self.queue, age=90.0)
        self.server.queue = queue  # type: ignore[assignment]
        for n in range(3):
            queue.enqueue(n, delay=3600)
        queue.enqueue("runnable")
        with mock.patch.object(dashboard.metrics, "METRICS_SCAN_PAGE", 2):
            samples = parse_metrics(self.request("GET", "/metrics").text)
        self.assertGreaterEqual(samples[("nobroker_oldest_ready_age_seconds", (("queue", self.queue.name),))], 90.0)
        self.assertEqual(queue.list_calls, 2)

    def test_oldest_ready_age_stops_after_the_first_page_when_it_can(self) -> None:
        queue = _AgedQueue(self.queue, age=90.0)
        self.server.queue = queue  # type: ignore[assignment]
        for n in range(7):
            queue.enqueue(n)
        with mock.patch.object(dashboard.metrics, "METRICS_SCAN_PAGE", 2):
            samples = parse_metrics(self.request("GET", "/metrics").text)
        self.assertGreaterEqual(samples[("nobroker_oldest_ready_age_seconds", (("queue", self.queue.name),))], 90.0)
        self.assertEqual(queue.list_calls, 1)

    def test_the_storage_counters_are_prometheus_counters_per_kind(self) -> None:
        self.queue.enqueue_many(["a", "b"], kind="mail")
        self.queue.enqueue("c")
        self.queue.ack(self.lease())
        self.make_dead()  # one more job (default kind), leased and failed for good
        text = self.request("GET", "/metrics").text
        self.assertIn("# TYPE nobroker_jobs_enqueued_total counter", text)
        samples = parse_metrics(text)
        counters = self.queue.counters()
        q = ("queue", self.queue.name)
        for kind, row in counters.items():
            for name in ("enqueued", "succeeded", "failed", "dead", "cancelled"):
                self.assertEqual(samples[(f"nobroker_jobs_{name}_total", (q, ("kind", kind)))], row[name], (kind, name))
        self.assertEqual(samples[("nobroker_jobs_enqueued_total", (q, ("kind", "mail")))], 2)
        self.assertEqual(sum(v for (n, _), v in samples.items() if n == "nobroker_jobs_succeeded_total"), 1)
        self.assertEqual(sum(v for (n, _), v in samples.items() if n == "nobroker_jobs_dead_total"), 1)

    def test_kind_names_are_escaped_as_label_values(self) -> None:
        self.queue.enqueue("x", kind='k"ind\\with\nnewline')
        samples = parse_metrics(self.request("GET", "/metrics").text)
        kind = 'k\\"ind\\\\with\\nnewline'
        self.assertEqual(samples[("nobroker_jobs_enqueued_total", (("queue", self.queue.name), ("kind", kind)))], 1)

    def test_workers_are_gauges_live_and_gone(self) -> None:
        from nobroker.announcements import GONE_AFTER
        from tests.semantics_roster import info

        now = time.time()
        self.queue.announce_worker(info(running=3))
        self.queue.announce_worker(info(running=1))
        self.queue.announce_worker(info(running=5, heartbeat_at=now - GONE_AFTER - 1))
        samples = parse_metrics(self.request("GET", "/metrics").text)
        q = ("queue", self.queue.name)
        self.assertEqual(samples[("nobroker_workers", (q, ("state", "live")))], 2)
        self.assertEqual(samples[("nobroker_workers", (q, ("state", "gone")))], 1)
        self.assertEqual(samples[("nobroker_worker_jobs_running", (q,))], 4)

    def test_queue_names_are_escaped_as_label_values(self) -> None:
        self.server.queue = _RenamedQueue(self.queue, 'we"ird\\name')  # type: ignore[assignment]
        samples = parse_metrics(self.request("GET", "/metrics").text)
        self.assertIn(("nobroker_dead_jobs", (("queue", 'we\\"ird\\\\name'),)), samples)


class _Proxy:
    """Forwards everything to a real queue; subclasses change one answer."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


class _RenamedQueue(_Proxy):
    def __init__(self, queue: Queue, name: str) -> None:
        super().__init__(queue)
        self.name = name


class _AgedQueue(_Proxy):
    """Reports every runnable job as having become runnable ``age`` seconds ago; counts list calls."""

    def __init__(self, queue: Queue, age: float) -> None:
        super().__init__(queue)
        # Before any scrape begins, so every reported age is at least ``age``.
        self._runnable_at = time.time() - age
        self.list_calls = 0

    def list_jobs(self, *args: Any, **kwargs: Any) -> Any:
        self.list_calls += 1
        now = time.time()
        jobs = self._queue.list_jobs(*args, **kwargs)
        for job in jobs:
            if job.available_at <= now:
                job.available_at = self._runnable_at
        return jobs


class PostgresMetricsTest(OnPostgres, MetricsTest):
    pass


if __name__ == "__main__":
    unittest.main()
