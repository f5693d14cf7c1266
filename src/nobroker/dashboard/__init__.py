"""The live dashboard behind ``nobroker serve``: one HTML page, a JSON API, /metrics.

Owns: nothing but the names the CLI and callers use (make_server, serve,
DashboardConfigError, ...), re-exported from the modules that own them.
Imports: server.
"""

from __future__ import annotations

from .server import (
    CSRF_HEADER,
    DEFAULT_HOST,
    DEFAULT_PORT,
    MAX_BODY_BYTES,
    MAX_PAGE_JOBS,
    SESSION_COOKIE,
    DashboardBindError,
    DashboardConfigError,
    DashboardServer,
    is_loopback_host,
    make_server,
    render_metrics,
    serve,
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
