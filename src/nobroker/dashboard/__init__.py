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

The operator's view (issue 17): counters from ``queue.counters()`` (as
Prometheus counters in /metrics, and sampled in memory for the page's chart:
history.py), workers from ``queue.workers()`` (a panel, /api/workers,
nobroker_workers), and per-job cancel and requeue, alone or on a selection
(POST routes behind the same CSRF and token checks as every other). Run now
and delete wait for ``queue.run_now`` and ``queue.delete``.
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
