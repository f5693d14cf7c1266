"""The connections to PostgreSQL: opening one, and keeping the one a storage works on alive.

Owns: ``connect`` (a new autocommit connection, tried again while the server
is unreachable), ``Link`` (the one connection a storage works on, behind a
lock: set up with the queue's session settings, replaced when it died idle,
an operation retried once when that is safe, driver errors turned into
nobroker's; between two runs of one operation, ``let_others_in`` lets a
thread that waits for the lock go first; ``run_if_free`` and
``open_at_once``, for lanes.py's spare connection), and the session's
settings and keepalives. What names a server is naming.py's.
Imports: errors, addresses, waiting, driver, naming, turns.

Connections are not shared between threads: each Link is one connection
guarded by a lock. The Worker's threads share one Queue: its work goes
through lanes.Lanes, so a second thread's statement runs on a spare
connection while the first's is in flight. A dropped connection (server
restart, ``pg_terminate_backend``) is noticed before the next statement is
sent and replaced, waiting up to ``reconnect_timeout`` seconds for the server
to come back; an unreachable server is logged once (WARNING), not once per
attempt. A statement that fails because the connection died is retried
once when the caller says that is safe (reads, and writes that do the same
thing twice); otherwise the caller gets StorageError saying the outcome is
unknown. A process forked from one holding connections never speaks on the
parent's sockets: the child opens its own and leaves the inherited ones alone.

Where a pool, or an async twin of Link for an AsyncQueue, would go: here,
beside Link; the statements and their parameters (statements.py) serve both.
"""

from __future__ import annotations

import logging
import math
import os
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..errors import LockTimeoutError, NobrokerError, StorageError
from ..addresses import dsn_parameters
from ..waiting import readable
from .driver import pg_errors, psycopg, require_psycopg, tuple_row
from .naming import connect_timeout_of, redact_dsn
from .turns import Turns

logger = logging.getLogger("nobroker.postgres")

T = TypeVar("T")

#: How long to keep trying to reach a server that went away, by default.
DEFAULT_RECONNECT_TIMEOUT = 30.0
#: Seconds one connection attempt may take.
CONNECT_TIMEOUT = 5
#: Pause between connection attempts grows from the first to the last value.
RECONNECT_PAUSES = (0.05, 0.1, 0.25, 0.5, 1.0)
#: libpq counts connect_timeout in whole seconds, and treats less than this as this.
LIBPQ_MIN_CONNECT_TIMEOUT = 2
#: TCP keepalives (seconds idle before the first probe, between probes, probes lost before the connection
#: counts as dead) and how long sent data may stay unacknowledged (libpq's tcp_user_timeout, seconds): a
#: half-open connection fails within about a minute instead of stalling every thread of a Worker. Unix
#: sockets ignore them. A DSN that sets one of these keeps its own.
KEEPALIVES_IDLE, KEEPALIVES_INTERVAL, KEEPALIVES_COUNT = 10, 5, 3
DEFAULT_TCP_USER_TIMEOUT = 30.0
#: Longest one statement may run (the session's statement_timeout), by default: every statement of the
#: storage is bounded (claims, batches of pruning), so only a stuck one reaches it.
DEFAULT_STATEMENT_TIMEOUT = 300.0
#: Longest a run of a many-run operation waits, in ``let_others_in``, for a thread waiting for the
#: connection to take it (a safety net: such a thread takes it within moments).
TURN_PATIENCE = 1.0


def connection_options(dsn: str, tcp_user_timeout: float) -> dict[str, Any]:
    """The keepalive and TCP timeout parameters to connect with, where the DSN does not set its own."""
    given = dsn_parameters(dsn)
    wanted: dict[str, Any] = {
        "keepalives": 1, "keepalives_idle": KEEPALIVES_IDLE, "keepalives_interval": KEEPALIVES_INTERVAL,
        "keepalives_count": KEEPALIVES_COUNT, "tcp_user_timeout": int(tcp_user_timeout * 1000),
    }  # fmt: skip
    return {key: value for key, value in wanted.items() if key not in given}


def one_line(exc: BaseException) -> str:
    """A driver message on one line (libpq's run over several, with tab-indented hints)."""
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or type(exc).__name__


# ---------------------------------------------------------------- connecting
def connect(
    dsn: str, *, timeout: float, location: str, setup: Callable[[Any], None] | None = None, **options: Any
) -> Any:
    """A new autocommit connection, trying again for up to ``timeout`` seconds while the server is unreachable.

    ``setup(conn)`` runs on each new connection before it is returned (the
    session settings); a connection that dies under it, as when the server
    restarts right then, counts as one more failed attempt, so the caller
    still gets a working connection within ``timeout``.

    The first failure is logged once (a WARNING); the attempts after it only
    at DEBUG, so an unreachable server costs one line and then the final
    StorageError, however long it is tried. Each attempt waits at most
    CONNECT_TIMEOUT seconds (or the DSN's connect_timeout, if smaller), and
    never past ``timeout``.
    """
    require_psycopg()
    tries = Tries(dsn, timeout, location)
    while True:
        try:
            conn = psycopg.connect(dsn, autocommit=True, connect_timeout=tries.attempt_timeout(), **options)
            return conn if setup is None else _set_up(conn, setup, location)
        except psycopg.OperationalError as exc:
            time.sleep(tries.failed(one_line(exc)))


class Tries:
    """The attempts of one connect (sync or async): how long each may take, the pause after a failure, when to give up."""

    def __init__(self, dsn: str, timeout: float, location: str) -> None:
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.location = location
        self.per_attempt = min(CONNECT_TIMEOUT, connect_timeout_of(dsn) or CONNECT_TIMEOUT)
        self.attempt = 0

    def attempt_timeout(self) -> int:
        """The next attempt's connect_timeout (whole seconds, as libpq counts them; never past the deadline)."""
        left = self.deadline - time.monotonic()
        return max(LIBPQ_MIN_CONNECT_TIMEOUT, math.ceil(min(self.per_attempt, max(left, 0.0))))

    def failed(self, reason: str) -> float:
        """An attempt failed: the seconds to pause before the next, or StorageError once the time is up."""
        if time.monotonic() >= self.deadline:
            tried = f"tried for {self.timeout:g} s" if self.attempt else "tried once"
            raise StorageError(f"cannot connect to PostgreSQL at {self.location}: {reason} ({tried})") from None
        if self.attempt == 0:
            logger.warning(
                "cannot reach PostgreSQL at %s (%s); trying again for up to %g s", self.location, reason, self.timeout
            )
        else:
            logger.debug("cannot reach PostgreSQL at %s (%s); attempt %d", self.location, reason, self.attempt + 1)
        pause = RECONNECT_PAUSES[min(self.attempt, len(RECONNECT_PAUSES) - 1)]
        self.attempt += 1
        return min(pause, max(self.deadline - time.monotonic(), 0.0))


def session_settings(lock_timeout: float, durable: bool, statement_timeout: float) -> tuple[str, tuple[str, ...]]:
    """The statement (and its parameters) that gives a new connection the queue's session settings."""
    lock_ms = max(1, int(lock_timeout * 1000))
    statement_ms = int(statement_timeout * 1000)  # 0: no limit
    return (
        "SELECT set_config('lock_timeout', %s, false), set_config('synchronous_commit', %s, false),"
        " set_config('statement_timeout', %s, false)",
        (f"{lock_ms}ms", "on" if durable else "off", f"{statement_ms}ms"),
    )


def _set_up(conn: Any, setup: Callable[[Any], None], location: str) -> Any:
    """``conn`` after ``setup(conn)``; OperationalError if the connection died under it (try again)."""
    try:
        setup(conn)
    except psycopg.Error as exc:
        _discard(conn)
        if isinstance(exc, psycopg.OperationalError) and (conn.broken or conn.closed):
            raise
        raise StorageError(f"cannot set up the connection to PostgreSQL at {location}: {one_line(exc)}") from None
    return conn


def _discard(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # closing a dead connection may fail; it is gone either way
        pass


_owned: weakref.WeakSet[Owned] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The parent's threads do not exist here: a lock one of them held at the fork
    # (a Worker's announcement, a caller's read on another thread) would stay held
    # forever in the child. Every connection's place gets fresh locks.
    for owned in list(_owned):
        owned._fresh_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Owned:
    """A place for one connection that belongs to the process that opened it.

    A forked child must not speak on the parent's socket, nor close it: the
    child sets the inherited connection aside (never touched, never closed)
    and opens its own, behind locks of its own (``_fresh_locks``).
    """

    def __init__(self) -> None:
        self._conn: Any = None
        self._pid = os.getpid()
        self._orphans: list[Any] = []
        _owned.add(self)

    def _fresh_locks(self) -> None:
        """In a forked child, before anything else runs: new locks for those the parent's threads held."""
        self._mutex = Turns()

    def _current(self) -> Any:
        """The connection this process opened, or None."""
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            if self._conn is not None:
                self._orphans.append(self._conn)
            self._conn = None
        return self._conn

    def _drop(self) -> None:
        """Close the connection (unless another process opened it) and forget it."""
        if self._conn is not None and os.getpid() == self._pid:
            _discard(self._conn)
        self._conn = None


# ---------------------------------------------------------------- the working connection
class Session:
    """A live connection as an operation uses it: ``execute`` runs on one cursor, made once.

    psycopg makes a new cursor for each ``Connection.execute``, and with it
    a new adaptation context whose caches start empty: about a quarter of
    the driver's own work for each statement of the storage. A Session keeps
    one cursor, so the cursor ``execute`` returns is its only one: read its
    rows before the next statement (every operation does, at once). In a
    pipeline, and for everything else, it is the connection itself.
    """

    __slots__ = ("conn", "_cursor")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._cursor: Any = None

    def execute(self, query: Any, params: Any = None) -> Any:
        if self.conn._pipeline is not None:  # each statement of a pipeline keeps its own results
            return self.conn.execute(query, params)
        cursor = self._cursor
        if cursor is None or cursor.closed:
            cursor = self._cursor = self.conn.cursor(row_factory=tuple_row)  # a caller's may make dicts
        return cursor.execute(query, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


class Link(Owned):
    """The one connection a storage works on, behind a lock, replaced when it dies.

    ``run(what, fn, retry=...)`` is how an operation uses it: ``fn`` gets the
    live connection as a Session and may run any statements on it; the driver's errors
    come out as nobroker's (LockTimeoutError for a row lock waited on past
    ``lock_timeout``, StorageError for the rest, saying whether the outcome
    is known). ``held()`` lends it for the few statements of opening.
    """

    def __init__(
        self, dsn: str, *, queue: str, schema: str, reconnect_timeout: float, lock_timeout: float, durable: bool,
        prepare_threshold: int | None, statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
        options: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        self.dsn = dsn
        self.location = redact_dsn(dsn)
        self._queue = queue
        self._schema = schema  # for the hint when the table is missing
        self._reconnect_timeout = reconnect_timeout
        self._lock_timeout = lock_timeout
        self._durable = durable
        self._prepare_threshold = prepare_threshold
        self._statement_timeout = statement_timeout
        self._options = dict(options or {})
        self._mutex = Turns()
        self._closed = False
        self._session: Session | None = None
        super().__init__()

    def _connect(self, timeout: float | None = None) -> Any:
        """A new connection with the queue's session settings, trying again while the server is unreachable.

        ``timeout``: for how long (reconnect_timeout by default; 0: one attempt).
        """
        return connect(
            self.dsn, timeout=self._reconnect_timeout if timeout is None else timeout, location=self.location,
            setup=self._set_session, prepare_threshold=self._prepare_threshold, application_name="nobroker",
            **self._options,
        )  # fmt: skip

    def _set_session(self, conn: Any) -> None:
        conn.execute(*session_settings(self._lock_timeout, self._durable, self._statement_timeout))

    @staticmethod
    def _usable(conn: Any) -> bool:
        """Is this idle connection still alive? A dead one has unread bytes (the FATAL) or EOF."""
        if conn is None or conn.closed or conn.broken:
            return False
        try:
            return not readable([conn.fileno()], 0.0)
        except (OSError, ValueError):
            return False

    def _connection(self) -> Any:
        """The live connection, replaced first if it died while idle (call under the mutex)."""
        if self._closed:
            raise StorageError(f"queue {self._queue!r} is closed")
        conn = self._current()
        if not self._usable(conn):
            if conn is not None:
                logger.warning("connection to PostgreSQL at %s was lost; reconnecting", self.location)
                self._drop()
            self._conn = conn = self._connect()
        return conn

    def let_others_in(self) -> None:
        """Between two runs of one operation: a thread that waits for the connection has it first."""
        self._mutex.let_others_in(TURN_PATIENCE)

    def open_at_once(self) -> bool:
        """Is there a live connection, or did one open at the first attempt (no retries, no waiting for a server)?"""
        with self._mutex:
            if self._closed:
                return False
            if self._usable(self._current()):
                return True
            self._drop()
            try:
                self._conn = self._connect(timeout=0.0)  # one attempt
            except StorageError as exc:
                logger.info("no spare connection to PostgreSQL at %s for now (%s)", self.location, exc)
                return False
            return True

    @contextmanager
    def held(self) -> Iterator[Any]:
        """The live connection, held for a few statements whose errors the caller handles (opening)."""
        with self._mutex:
            yield self._connection()

    def run(self, what: str, fn: Callable[[Any], T], *, retry: bool) -> T:
        """Run ``fn(connection)`` under the mutex, mapping driver errors to nobroker's.

        ``retry``: the operation may safely run twice, so a connection lost
        under it is replaced and the operation tried once more.
        """
        with self._mutex:
            return self._run_held(what, fn, retry)

    def run_if_free(self, what: str, fn: Callable[[Any], T], *, retry: bool) -> tuple[bool, T | None]:
        """As ``run``, if no other thread holds the connection now: (True, its result); else (False, None) at once."""
        if not self._mutex.try_acquire():
            return False, None
        try:
            return True, self._run_held(what, fn, retry)
        finally:
            self._mutex.release()

    def _run_held(self, what: str, fn: Callable[[Any], T], retry: bool) -> T:
        for attempt in (1, 2):
            conn = self._connection()
            session = self._session
            if session is None or session.conn is not conn:
                session = self._session = Session(conn)
            try:
                return fn(session)
            except (NobrokerError, ValueError):
                raise
            except psycopg.Error as exc:
                error = self.failure(exc, what, conn, retry and attempt == 1)
                if error is None:
                    self._drop()
                    continue
                if conn.broken or conn.closed:
                    self._drop()
                raise error from None
        raise AssertionError("unreachable: the second attempt returns or raises")

    def failure(self, exc: Exception, what: str, conn: Any, may_retry: bool) -> Exception | None:
        """What a driver error during ``what`` becomes (None: the connection died, try once more)."""
        if isinstance(exc, pg_errors.LockNotAvailable):
            return LockTimeoutError(f"{what} waited more than lock_timeout={self._lock_timeout:g} s for a row lock: {exc}")
        if isinstance(exc, psycopg.OperationalError) and (conn.broken or conn.closed):
            if may_retry:
                logger.warning("connection lost during %s (%s); reconnecting and trying again", what, exc)
                return None
            return StorageError(
                f"the connection to PostgreSQL at {self.location} was lost during {what} ({exc}); "
                "it may or may not have been applied"
            )
        hint = ""
        if isinstance(exc, (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName)):
            hint = f" (run `nobroker pg migrate --dsn ... --schema {self._schema}`)"
        return StorageError(f"{what} failed in PostgreSQL at {self.location}: {exc}{hint}")

    def release(self) -> None:
        """Close the connection for now: the next operation opens a new one."""
        with self._mutex:
            self._drop()

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            self._drop()
