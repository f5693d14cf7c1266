"""/metrics: one queue's state right now, in the Prometheus text format 0.0.4.

Owns: metrics_text and render_metrics (the samples, their HELP and TYPE lines, label
escaping) and the scan for the longest-waiting runnable job. Imports: jobs,
queue. The queue is used through the public Queue API only (name, stats,
counters, workers, list_jobs), so the figures mean the same on both storages:
gauges of the jobs by state and of the workers announced, and the counters the storage keeps (jobs enqueued,
succeeded, failed, dead, cancelled per kind), which only grow, so
Prometheus can take a ``rate()`` of them.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Protocol

from ..jobs import JobState

if TYPE_CHECKING:  # for the annotations only: any object with the public Queue methods works
    from ..queue import Queue

#: Ready jobs read per page, and at most in all, to find the longest-waiting one.
METRICS_SCAN_PAGE = 1_000
METRICS_SCAN_JOBS = 100_000
#: The states /metrics counts, in the order its samples appear (delayed: ready, not yet runnable).
METRIC_STATES = ("ready", "delayed", "leased", "done", "dead")
#: The counters /metrics exports (``nobroker_jobs_<name>_total{queue=,kind=}``), with their help.
METRIC_COUNTERS = {
    "enqueued": "Jobs enqueued, by kind (an idempotent enqueue of an id the queue holds adds none).",
    "succeeded": "Attempts that succeeded (acks), by kind.",
    "failed": "Attempts that failed and went back to be retried (nacks, expired leases), by kind.",
    "dead": "Jobs moved to the dead-letter queue, by kind.",
    "cancelled": "Jobs cancelled, by kind.",
}


class Served(Protocol):
    """What render_metrics needs of a dashboard: its first queue, and the lock its queue calls take turns under."""

    @property
    def queue(self) -> Queue: ...

    @property
    def queue_lock(self) -> threading.Lock: ...


def render_metrics(server: Served, queue: Queue | None = None) -> str:
    """The Prometheus text exposition (format 0.0.4) of a dashboard's queue (default: its first)."""
    return metrics_text(server.queue if queue is None else queue, server.queue_lock)


def metrics_text(queue: Queue, lock: threading.Lock) -> str:
    """The Prometheus text exposition (format 0.0.4) of ``queue``'s state right now, read under ``lock``.

    Gauges by state, and the storage's counters by kind (``queue.counters()``:
    kept through restarts, compaction and purge). Gauges per kind wait: the
    public Queue counts by state only, and counting by kind would read every
    job (its payload with it) at each scrape.
    """
    name = _escape_label(queue.name)
    now = time.time()
    with lock:
        stats = queue.stats()
        counters = queue.counters()
        workers = queue.workers()
        oldest = _earliest_runnable(queue, now) if stats.ready else None
    oldest_age = max(0.0, now - oldest) if oldest is not None else 0.0
    counts = stats.to_dict()

    lines: list[str] = []

    def metric(metric_name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {metric_name} {help_text}")
        lines.append(f"# TYPE {metric_name} {kind}")
        for labels, value in samples:
            lines.append(f"{metric_name}{{{labels}}} {_format_metric_value(value)}")

    metric(
        "nobroker_jobs",
        "gauge",
        "Jobs held by the queue, by state (delayed: ready but not yet runnable).",
        [(f'queue="{name}",state="{s}"', counts[s]) for s in METRIC_STATES],
    )
    metric(
        "nobroker_oldest_ready_age_seconds",
        "gauge",
        "Seconds the longest-waiting runnable job has been runnable (0 when none).",
        [(f'queue="{name}"', round(oldest_age, 3))],
    )
    metric("nobroker_leases_active", "gauge", "Jobs leased right now.", [(f'queue="{name}"', counts["leased"])])
    metric("nobroker_dead_jobs", "gauge", "Jobs in the dead-letter queue.", [(f'queue="{name}"', counts["dead"])])
    gone = sum(1 for w in workers if w.gone(now))
    metric(
        "nobroker_workers", "gauge", "Workers that announced themselves (gone: no heartbeat for a while).",
        [(f'queue="{name}",state="live"', len(workers) - gone), (f'queue="{name}",state="gone"', gone)],
    )  # fmt: skip
    metric(
        "nobroker_worker_jobs_running", "gauge", "Jobs the live workers said they were running at their last heartbeat.",
        [(f'queue="{name}"', sum(w.running for w in workers if not w.gone(now)))],
    )  # fmt: skip
    for counter, help_text in METRIC_COUNTERS.items():
        samples: list[tuple[str, float]] = [
            (f'queue="{name}",kind="{_escape_label(kind)}"', row[counter]) for kind, row in counters.items()
        ]
        metric(f"nobroker_jobs_{counter}_total", "counter", help_text, samples)
    return "\n".join(lines) + "\n"


def _earliest_runnable(queue: Queue, now: float) -> float | None:
    """The smallest ``available_at`` among ready jobs runnable at ``now``, or None.

    Jobs come oldest first, and a job never becomes available before it was
    enqueued: once the best time found is no later than the last scanned
    job's ``enqueued_at``, no later job can beat it, so the scan usually ends
    after one page. It stops at METRICS_SCAN_JOBS on a pathological queue.
    """
    best: float | None = None
    offset = 0
    while offset < METRICS_SCAN_JOBS:
        page = queue.list_jobs(JobState.READY, limit=METRICS_SCAN_PAGE, offset=offset)
        for job in page:
            if job.available_at <= now and (best is None or job.available_at < best):
                best = job.available_at
        if len(page) < METRICS_SCAN_PAGE:
            break
        if best is not None and best <= page[-1].enqueued_at:
            break
        offset += len(page)
    return best


def _format_metric_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


__all__ = ["render_metrics", "metrics_text", "METRICS_SCAN_PAGE", "METRICS_SCAN_JOBS", "METRIC_STATES", "METRIC_COUNTERS"]
