"""The live dashboard behind ``nobroker serve``: one HTML page, a JSON API, /metrics.

Owns: nothing but the names callers use (make_server, serve,
DashboardConfigError, ...), re-exported from the modules that own them.
Imports: api, metrics, server, launch. The dashboard reaches a queue only through the
public Queue, so it works the same on the file storage and on PostgreSQL.

The package, bottom up (each module imports only those above it):

    queues.py   the queues one dashboard offers: listed on demand, opened on first use, never created
    metrics.py  /metrics: one queue's state in the Prometheus text format
    history.py  the last hour of each open queue's counters, sampled in memory for the chart
    listing.py  the job lists: by state and kind, searched, oldest or newest first, paged
    page.py     the page: page.html, page.css and its scripts, read once, rendered with each answer's nonce
    api.py      the JSON routes: each one public Queue call under the dashboard's lock; queue errors as statuses
    server.py   the HTTP server: request reading and every security rule (Host, token, CSRF, CSP, headers, limits)
    launch.py   make_server (checked, then bound) and serve (until Ctrl-C)

Waiting for the storage (issue 17), and so not here at all: counters that
survive compaction (throughput over the last hour, ``rate()``-able counters in
/metrics), workers that announce themselves, and per-job cancel, run now and
delete. Each needs a public Queue call first (say ``queue.counters(since=...)``,
``queue.workers()``, ``queue.cancel(id)``); then a route in api.py's table, a
POST behind the same CSRF and token checks as requeue, and its part of the page.
"""

from __future__ import annotations

from .api import MAX_PAGE_JOBS
from .launch import make_server, serve
from .metrics import render_metrics
from .server import (
    CSRF_HEADER,
    DEFAULT_HOST,
    DEFAULT_PORT,
    MAX_BODY_BYTES,
    SESSION_COOKIE,
    DashboardBindError,
    DashboardConfigError,
    DashboardServer,
    is_loopback_host,
)

__all__ = [
    "DashboardConfigError",
    "DashboardBindError",
    "DashboardServer",
    "make_server",
    "serve",
    "render_metrics",
    "is_loopback_host",
    "CSRF_HEADER",
    "MAX_BODY_BYTES",
    "MAX_PAGE_JOBS",
    "SESSION_COOKIE",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
]
