"""Waiting for work on PostgreSQL: a second connection that LISTENs, and the idle wait's clock.

Owns: ``Listener`` (LISTEN/NOTIFY on one queue's channel, opened the first
time a worker idles; the wait also ends when the next delayed job or lease
comes due), and the small waits it is made of. Imports: errors, waiting, driver,
turns, connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..errors import StorageError
from ..waiting import readable
from .connection import CONNECT_TIMEOUT, Owned
from .driver import psycopg, sql
from .turns import Turns

logger = logging.getLogger("nobroker.postgres")

#: How often an idle wait asks again when the queue's next job comes due (for jobs others delay meanwhile).
DUE_RECHECK = 0.5


class Listener(Owned):
    """A second connection that LISTENs on one queue's channel, opened the first time a worker idles.

    An idle wait also asks, on this connection, when the queue's next
    scheduled job or lease comes due (``due``), and ends then: a delayed job
    sends no NOTIFY. It asks again every DUE_RECHECK seconds, for the delayed
    jobs other processes add meanwhile.
    """

    def __init__(self, dsn: str, channel: str, options: dict[str, Any] | None = None) -> None:
        self.dsn = dsn
        self.channel = channel
        self._options = dict(options or {})
        self._mutex = Turns()  # as every Owned's (its _fresh_locks after a fork)
        self._failed = False  # the failure is logged once, until listening works again
        self._closed = False
        self._heard = False  # a NOTIFY psycopg took in while a statement ran here
        super().__init__()

    def wait(self, timeout: float, interrupt: int | None, due: Callable[[Any], float | None] | None = None) -> bool:
        """Sleep until a NOTIFY arrives on the channel (True), ``timeout`` passes or ``interrupt`` is readable.

        ``due(conn)``: seconds until the next job or lease comes due (None:
        none); the wait ends then (True: worth leasing). If the listening
        connection cannot be had, this sleeps (polling fallback) and says
        False. When the server goes away under it, it says True, so the
        caller's next operation reconnects.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._mutex:
            if self._closed:
                return False
            try:
                conn = self._listening()
            except (StorageError, psycopg.Error) as exc:
                if not self._failed:
                    logger.warning("cannot LISTEN for new jobs (%s); polling until it works again", exc)
                self._failed = True
                self._drop()
                _sleep_until(deadline, interrupt)
                return False
            try:
                return self._wait_on(conn, deadline, interrupt, due)
            except (psycopg.Error, OSError, ValueError):
                # The server went away: wake the caller, whose next operation reconnects.
                self._drop()
                return True

    def listen(self) -> bool:
        """LISTEN now, so a NOTIFY sent after this returns reaches the next ``wait``; False if it cannot be had."""
        with self._mutex:
            if self._closed:
                return False
            try:
                self._listening()
            except (StorageError, psycopg.Error):
                self._drop()
                return False
            return True

    def _wait_on(
        self, conn: Any, deadline: float, interrupt: int | None, due: Callable[[Any], float | None] | None
    ) -> bool:
        pgconn = conn.pgconn
        fd = conn.fileno()
        extra = [] if interrupt is None else [interrupt]
        recheck = time.monotonic()
        while True:
            now = time.monotonic()
            if due is not None and now >= recheck:
                seconds = due(conn)
                if seconds is not None and seconds <= 0:
                    return True
                recheck = now + min(DUE_RECHECK, seconds if seconds is not None else DUE_RECHECK)
            if self._take_heard() or _drain(pgconn):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            wake_at = min(remaining, recheck - time.monotonic()) if due is not None else remaining
            ready = readable([fd, *extra], max(wake_at, 0.0))
            if interrupt is not None and interrupt in ready:
                return False

    def _take_heard(self) -> bool:
        heard, self._heard = self._heard, False
        return heard

    def _on_notify(self, _notify: Any) -> None:
        self._heard = True

    def _listening(self) -> Any:
        conn = self._current()
        if conn is None or conn.closed or conn.broken:
            self._drop()
            conn = psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT, application_name="nobroker-listen",
                **self._options,
            )  # fmt: skip
            conn.add_notify_handler(self._on_notify)
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            self._conn = conn
            self._failed = False
            self._heard = False
        return conn

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            self._drop()


def _drain(pgconn: Any) -> bool:
    """Consume every notification already received; True if there was one."""
    pgconn.consume_input()
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError("listening connection lost")
    got = False
    while pgconn.notifies() is not None:
        got = True
    return got


def _sleep_until(deadline: float, interrupt: int | None) -> None:
    """The polling fallback: sleep to ``deadline``, or until ``interrupt`` is readable."""
    left = max(deadline - time.monotonic(), 0.0)
    if interrupt is None:
        time.sleep(left)
        return
    try:
        readable([interrupt], left)
    except (OSError, ValueError):
        time.sleep(left)
