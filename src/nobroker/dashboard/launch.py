"""Starting the dashboard: make_server (checked, then bound) and serve (until Ctrl-C).

Owns: make_server and serve, the two calls that start a dashboard (``nobroker
serve`` uses serve). Imports: queue, queues, server. What may be bound at all
(a public address needs a token) is server.check_config's to say.
"""

from __future__ import annotations

import errno
import logging
import urllib.parse
import webbrowser
from collections.abc import Callable
from typing import TYPE_CHECKING

from .queues import QueueSet
from .server import DEFAULT_HOST, DEFAULT_PORT, DashboardBindError, DashboardServer, check_config

if TYPE_CHECKING:  # for the annotations only: any object with the public Queue methods works
    from ..queue import Queue

logger = logging.getLogger("nobroker.dashboard")


def make_server(
    queue: Queue,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    list_queues: Callable[[], list[str]] | None = None,
    open_queue: Callable[[str], Queue] | None = None,
) -> DashboardServer:
    """Bind the dashboard for ``queue`` and return the server, not yet serving.

    With ``list_queues`` (the names of the queues there are) and
    ``open_queue`` (open one by name, without creating it), the page and the
    API also offer every other queue listed; the server closes those it
    opened in ``server_close``.

    ``port=0`` picks a free port (``server.server_address[1]`` tells which).
    Call ``server.serve_forever()`` (in a thread, for tests), then
    ``server.shutdown()`` and ``server.server_close()``.
    Raises DashboardConfigError for a public ``host`` without a ``token``, and
    DashboardBindError (also an OSError) when the address cannot be bound (a
    busy port), naming host and port.
    """
    check_config(host, port, token)
    queues = QueueSet(queue, list_names=list_queues, open_queue=open_queue)
    try:
        return DashboardServer(queue, host, port, token, queues)
    except OSError as exc:
        # The bare OSError ("Address already in use") names neither the address nor a way out.
        reason = (exc.strerror or str(exc)).lower()
        raise DashboardBindError(
            f"cannot serve the dashboard on {host}:{port}: {reason}; pick another port (--port; 0 takes any free one)"
            if exc.errno == errno.EADDRINUSE
            else f"cannot serve the dashboard on {host}:{port}: {reason}"
        ) from None


def serve(
    queue: Queue,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    open_browser: bool = False,
    on_ready: Callable[[DashboardServer], None] | None = None,
    list_queues: Callable[[], list[str]] | None = None,
    open_queue: Callable[[str], Queue] | None = None,
) -> None:
    """Serve the dashboard for ``queue`` until Ctrl-C (or ``server.shutdown()`` from another thread).

    Logs the address on the ``nobroker.dashboard`` logger and, when given,
    calls ``on_ready(server)`` once the socket listens: ``server.url`` is the
    address to print, and ``server.shutdown()`` stops serving.
    ``open_browser`` opens the page in the default browser (with the token,
    so the browser gets its session cookie). ``list_queues`` and
    ``open_queue``: as for make_server (the list of the other queues).
    """
    server = make_server(queue, host=host, port=port, token=token, list_queues=list_queues, open_queue=open_queue)
    url = server.url
    logger.info("dashboard for queue %s at %s", queue.name, url)
    if on_ready is not None:
        on_ready(server)
    if open_browser:
        target = url if token is None else f"{url}?{urllib.parse.urlencode({'token': token})}"
        webbrowser.open(target)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        logger.info("dashboard stopped")
    finally:
        server.server_close()


__all__ = ["make_server", "serve"]
