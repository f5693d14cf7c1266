"""Helpers for the tests that need a real PostgreSQL server.

Imports: the standard library, nobroker (Queue; nobroker.postgres and
psycopg only inside functions, so importing this module never fails without
the driver), tests.support.

``require_postgres(testcase)`` returns the DSN to test against (env
``NOBROKER_PG_DSN``, default: the local server's unix socket). Without psycopg
or a reachable server the test is skipped with the reason, except in CI
(``tests.support.IN_CI``), where it fails: CI must prove the PostgreSQL
storage works, not quietly skip it.
"""

from __future__ import annotations

import functools
import os
import unittest
import uuid
from typing import Any

from nobroker import Queue
from tests.support import IN_CI

DEFAULT_DSN = "postgresql:///test?host=/var/run/postgresql"


def pg_dsn() -> str:
    return os.environ.get("NOBROKER_PG_DSN") or DEFAULT_DSN


@functools.lru_cache(maxsize=1)
def _unavailable() -> str | None:
    """Why the PostgreSQL tests cannot run here, or None when they can."""
    try:
        import psycopg
    except ImportError:
        return 'psycopg is not installed (pip install "psycopg[binary]")'
    try:
        with psycopg.connect(pg_dsn(), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL server at {pg_dsn()} ({str(exc).strip()}); set NOBROKER_PG_DSN"
    return None


def require_postgres(testcase: unittest.TestCase | type[unittest.TestCase] | None = None) -> str:
    """The DSN to test against; skips (fails in CI) when PostgreSQL cannot be used."""
    reason = _unavailable()
    if reason is not None:
        if IN_CI:
            raise AssertionError(f"the PostgreSQL tests must run in CI, but {reason}")
        raise unittest.SkipTest(reason)
    return pg_dsn()


def fresh_name(prefix: str = "t") -> str:
    """A schema- and queue-safe name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def connect(dsn: str | None = None, **kwargs: Any) -> Any:
    import psycopg

    kwargs.setdefault("autocommit", True)
    return psycopg.connect(dsn or pg_dsn(), **kwargs)


def drop_schema(schema: str) -> None:
    from psycopg import sql

    with connect() as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def unanalyzed_queue(case: unittest.TestCase, name: str) -> Queue:
    """A queue ``name`` in a schema of its own, whose jobs table autovacuum never analyzes (as a new
    schema's is, before autovacuum's first ANALYZE); schema and queue go when ``case`` ends."""
    from nobroker.postgres import migrate

    schema = fresh_name("fresh")
    migrate(pg_dsn(), schema=schema)
    case.addCleanup(drop_schema, schema)
    with connect() as conn:
        conn.execute(f'ALTER TABLE "{schema}".jobs SET (autovacuum_enabled = false)')
    q = Queue(pg_dsn(), name, schema=schema, migrate=False)
    case.addCleanup(q.close)
    return q


class PostgresTestCase(unittest.TestCase):
    """A TestCase with ``self.dsn`` and a fresh, migrated schema (``cls.schema``) per class."""

    schema: str
    dsn: str

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.dsn = require_postgres(cls)
        from nobroker.postgres import migrate

        cls.schema = fresh_name("nbtest")
        migrate(cls.dsn, schema=cls.schema)
        cls.addClassCleanup(drop_schema, cls.schema)


class PostgresQueueCase(PostgresTestCase):
    """A PostgresTestCase whose every test has a fresh queue name (``self.name``) and ``open_queue``."""

    def setUp(self) -> None:
        super().setUp()
        self.name = fresh_name("q")

    def open_queue(self, **options: Any) -> Queue:
        """A Queue on the class's schema (migrated already), closed when the test ends."""
        q = Queue(self.dsn, self.name, schema=self.schema, migrate=False, **options)
        self.addCleanup(q.close)
        return q


class PrivateCluster:
    """A throwaway PostgreSQL server of our own, for tests that restart or kill the server.

    Restarting the shared server would break every other PostgreSQL test
    running at the same moment (the test runner runs modules in parallel), so
    a test that needs a restart gets a server nobody else uses: ``initdb`` in a
    temp folder, listening only on a unix socket in that folder. As root, the
    server runs as the ``postgres`` user (PostgreSQL refuses to run as root).
    ``PrivateCluster.unavailable()`` says why one cannot be made here.
    """

    def __init__(self) -> None:
        import shutil
        import subprocess
        import tempfile

        self._subprocess = subprocess
        self.bindir = _pg_bindir()
        if self.bindir is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) found")
        self.root = tempfile.mkdtemp(prefix="nobroker-pg-")
        self.data = os.path.join(self.root, "data")
        self.socket_dir = os.path.join(self.root, "sock")
        # The server writes here, never to our pipes (it would hold them open and hang the caller).
        self._log = os.path.join(self.root, "server.log")
        os.mkdir(self.socket_dir)
        self._as: list[str] = []
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            import pwd

            user = pwd.getpwnam("postgres")
            for path in (self.root, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._rmtree = shutil.rmtree
        self._run("initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        self.start()

    @staticmethod
    def unavailable() -> str | None:
        if _pg_bindir() is None:
            return "no PostgreSQL server binaries (initdb, pg_ctl) on this machine"
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            import pwd
            import shutil

            try:
                pwd.getpwnam("postgres")
            except KeyError:
                return "running as root without a postgres user to run a private server as"
            if shutil.which("runuser") is None:
                return "running as root without runuser to start a private server as postgres"
        return None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@/postgres?host={self.socket_dir}&port=5432"

    def _run(self, tool: str, *args: str) -> None:
        self._subprocess.run(
            [*self._as, os.path.join(self.bindir, tool), *args],  # type: ignore[arg-type]
            check=True, stdin=self._subprocess.DEVNULL, stdout=self._subprocess.DEVNULL,
            stderr=self._subprocess.PIPE, timeout=120,
        )  # fmt: skip

    def _options(self) -> str:
        return f"-k {self.socket_dir} -p 5432 -c listen_addresses='' -c fsync=off"

    def start(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-o", self._options(), "-l", self._log, "-w", "start")

    def restart(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-o", self._options(), "-l", self._log, "-m", "fast", "-w", "restart")

    def crash(self) -> None:
        """Stop the server as a crash does (no checkpoint, WAL not yet written is lost), then start it again."""
        self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        self.start()

    def configure(self, name: str, value: str) -> None:
        """Set a server setting (ALTER SYSTEM) and have every session read it at its next statement."""
        conn = connect(self.dsn)
        try:
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")
        finally:
            conn.close()

    def close(self) -> None:
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        except Exception:  # already stopped, or never started: nothing to stop
            pass
        self._rmtree(self.root, ignore_errors=True)


def _pg_bindir() -> str | None:
    import glob
    import shutil

    candidates = [os.path.dirname(p) for p in (shutil.which("initdb"), shutil.which("pg_ctl")) if p]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for path in candidates:
        if os.path.exists(os.path.join(path, "initdb")) and os.path.exists(os.path.join(path, "pg_ctl")):
            return path
    return None
