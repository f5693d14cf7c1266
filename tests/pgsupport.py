"""Helpers for the tests that need a real PostgreSQL server.

Imports: the standard library, tests.support, and psycopg only inside
functions (so importing this module never fails without the driver).

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
