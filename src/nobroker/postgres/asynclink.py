"""The async twin of connection.Link: one psycopg AsyncConnection an AsyncQueue works on.

Owns: ``AsyncSession`` (a live AsyncConnection as the steps of an operation
use it: one cursor, and the pipeline of the upkeep and a claim),
``AsyncLink`` (the connection behind an asyncio.Lock: set up with the
queue's session settings, replaced when it died, an operation retried once
when that is safe, driver errors turned into nobroker's as Link turns them)
and ``AsyncLanes`` (lanes.Lanes' twin: the work's connection and a spare one
for a call that finds it busy, so concurrent tasks' enqueues and acks run
side by side). Imports: errors, driver, steps, connection, lanes.

An operation is the same steps a Queue sends (operations.py, queue_ops.py),
awaited statement by statement, so the event loop runs while the server
works. A call cancelled while it awaits (``asyncio.CancelledError``, a
timeout) leaves a connection in the middle of a statement: it is closed and
replaced at the next call, never reused, and whatever the statement did is
its own transaction (autocommit), done or undone as a whole.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import NobrokerError, StorageError
from .connection import Link, Tries, one_line, session_settings
from .driver import psycopg, require_psycopg, tuple_row
from .lanes import SparePause
from .steps import Steps, drive_async

logger = logging.getLogger("nobroker.postgres")

T = TypeVar("T")


class AsyncSession:
    """A live AsyncConnection as an operation's steps use it (see steps.drive_async)."""

    __slots__ = ("conn", "_cursor")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._cursor: Any = None

    async def execute(self, query: str, params: Any) -> Any:
        cursor = self._cursor
        if cursor is None or cursor.closed:
            cursor = self._cursor = self.conn.cursor(row_factory=tuple_row)  # a caller's may make dicts
        await cursor.execute(query, params)
        return cursor

    async def piped(self, first: str, query: str, params: Any) -> list[Any]:
        """``first`` then ``query`` in one round trip; the rows of ``query``."""
        async with self.conn.pipeline():
            await self.conn.execute(first, params)
            cur = await self.conn.execute(query, params)
        rows: list[Any] = await cur.fetchall()
        return rows


class AsyncLink:
    """One AsyncConnection behind an asyncio.Lock, replaced when it dies (see connection.Link)."""

    def __init__(self, link: Link) -> None:
        # The settings (and the way errors are told) are the sync Link's: one place for both.
        self._like = link
        self.location = link.location
        self._lock = asyncio.Lock()
        self._conn: Any = None
        self._session: AsyncSession | None = None
        self._closed = False

    async def _connect(self, timeout: float | None = None) -> Any:
        require_psycopg()
        like = self._like
        tries = Tries(like.dsn, like._reconnect_timeout if timeout is None else timeout, like.location)
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    like.dsn, autocommit=True, connect_timeout=tries.attempt_timeout(),
                    prepare_threshold=like._prepare_threshold, application_name="nobroker", **like._options,
                )  # fmt: skip
                await conn.execute(*session_settings(like._lock_timeout, like._durable, like._statement_timeout))
                return conn
            except psycopg.OperationalError as exc:
                await asyncio.sleep(tries.failed(one_line(exc)))

    @property
    def busy(self) -> bool:
        """Does a call hold the connection now?"""
        return self._lock.locked()

    async def open_at_once(self) -> bool:
        """Is there a live, idle connection, or did one open at the first attempt (as Link.open_at_once)?"""
        async with self._lock:
            if self._closed:
                return False
            conn = self._conn
            if conn is not None and not (conn.closed or conn.broken) and _idle(conn):
                return True
            await self._drop()
            try:
                self._conn = await self._connect(timeout=0.0)  # one attempt
            except StorageError as exc:
                logger.info("no spare connection to PostgreSQL at %s for now (%s)", self.location, exc)
                return False
            return True

    async def _session_now(self) -> AsyncSession:
        """The live session, the connection replaced first if it died or a cancelled call left it mid-statement."""
        if self._closed:
            raise StorageError(f"queue at {self.location} is closed")
        conn = self._conn
        if conn is None or conn.closed or conn.broken or not _idle(conn):
            if conn is not None:
                await _discard(conn)
            self._conn = conn = await self._connect()
            self._session = None
        if self._session is None:
            self._session = AsyncSession(conn)
        return self._session

    async def run(self, what: str, steps: Callable[[], Steps[T]], *, retry: bool) -> T:
        """Await ``steps()`` (made anew for a second try) on the live connection, errors as Link says them."""
        async with self._lock:
            for attempt in (1, 2):
                session = await self._session_now()
                try:
                    return await drive_async(session, steps())
                except (NobrokerError, ValueError):
                    raise
                except psycopg.Error as exc:
                    error = self._like.failure(exc, what, session.conn, retry and attempt == 1)
                    if session.conn.broken or session.conn.closed:
                        await self._drop()
                    if error is None:
                        continue
                    raise error from None
                except BaseException:  # cancelled mid-statement: never reuse the connection
                    await self._drop()
                    raise
            raise AssertionError("unreachable: the second attempt returns or raises")

    async def _drop(self) -> None:
        conn, self._conn, self._session = self._conn, None, None
        if conn is not None:
            await _discard(conn)

    async def close(self) -> None:
        self._closed = True
        await self._drop()


class AsyncLanes:
    """The work's connection and a spare one, awaited: a call takes the first if none holds it, else the spare."""

    def __init__(self, first: AsyncLink, spare: AsyncLink) -> None:
        self.first, self.spare = first, spare
        self._pause = SparePause()

    async def run(self, what: str, steps: Callable[[], Steps[T]], *, retry: bool) -> T:
        # The look and the first's take happen with no await between them: on one event loop, nothing comes in between.
        if not self.first.busy:
            return await self.first.run(what, steps, retry=retry)
        if self._pause.may_try():
            if await self.spare.open_at_once():
                return await self.spare.run(what, steps, retry=retry)
            self._pause.refused()
        return await self.first.run(what, steps, retry=retry)

    async def close(self) -> None:
        await self.first.close()
        await self.spare.close()


def _idle(conn: Any) -> bool:
    """Is ``conn`` between statements (no call left it mid-statement, in a transaction or a pipeline)?"""
    return bool(conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)


async def _discard(conn: Any) -> None:
    try:
        await conn.close()
    except Exception:  # closing a dead connection may fail; it is gone either way
        pass
