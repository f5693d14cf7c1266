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
    answers.py  what routes answer with: HTTPError, JSON (markup characters escaped), a job without its lease token
    actions.py  the POST routes: per job and on a selection cancel, requeue, run now, delete; the 409s; purge, compact
    page.py     the page: page.html, page.css and its scripts, read once, rendered with each answer's nonce
    api.py      the route table and the GET routes: each one public Queue call under the dashboard's lock
    server.py   the HTTP server: request reading and every security rule (Host, token, CSRF, CSP, headers, limits)
    launch.py   make_server (checked, then bound) and serve (until Ctrl-C)

The operator's view (issue 17): counters from ``queue.counters()`` (as
Prometheus counters in /metrics, and sampled in memory for the page's chart:
history.py), workers from ``queue.workers()`` (a panel, /api/workers,
nobroker_workers), each job's attempts and ``queue.explain`` on its page,
the schedules, limits and pauses stored in the queue (read-only panels), and
per-job cancel, requeue, run now and delete, alone or on a selection (POST
routes behind the same CSRF and token checks as every other: actions.py).
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
