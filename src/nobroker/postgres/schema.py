"""The versioned schema: the numbered SQL files in sql/, applied once each, and row level security.

Owns: ``migrate`` (create or upgrade a schema, from any number of processes
at once), ``ensure_schema`` (what opening a queue does: read the version,
create the schema where it is absent, refuse one that is behind), ``latest_version``, ``queue_names`` (which
queues a schema holds; reads only), the splitting of a SQL file into
statements, and the bookkeeping table ``<schema>.schema_migrations``.
Imports: errors, driver, statements, naming, connection.

A migration is a file ``NNN_what_it_does.sql`` in nobroker/postgres/sql/; the
number is its version, and files run in that order, each once, all of them in
one transaction. ``{schema}`` in a file is replaced by the quoted schema name
before it runs; nothing else is templated. A change to the table (a column,
an index, a function) is a new file, never an edit of one already released:
databases that ran the old text would never see the new one.

Row level security: ``migrate(dsn, worker_role="queue_worker")`` creates the
role if it is missing (NOLOGIN; grant it to the login roles your workers use:
``GRANT queue_worker TO app``), turns on FORCE ROW LEVEL SECURITY and adds
policies (RLS_TABLES and sql/rls.sql, applied on every run) so only that role and the
table's owner see or change the rows; any other role, even one granted
SELECT on the table, sees none. Roles with BYPASSRLS (superusers) are never
limited by policies. On Supabase, run the migration as ``postgres`` with
``worker_role="service_role"``: the service role (the secret key your backend
holds; it has BYPASSRLS there anyway) gets the grants, while ``anon`` and
``authenticated`` (what a browser holds) get no grant on the schema and match
no policy, so the queue never shows through Supabase's auto-generated APIs.
Connect workers with the service role's (or ``postgres``'s) connection
string, from server code only; never expose the ``nobroker`` schema in the
API settings.
"""

from __future__ import annotations

import functools
import logging
import re
from importlib import resources
from typing import Any

from ..errors import StorageError
from .connection import DEFAULT_RECONNECT_TIMEOUT, connect, one_line
from .naming import check_identifier, connect_timeout_of, redact_dsn
from .driver import pg_errors, psycopg, require_psycopg, sql
from .statements import MAX_LISTED_QUEUES, Statements

logger = logging.getLogger("nobroker.postgres")

#: Schema used when none is given.
DEFAULT_SCHEMA = "nobroker"
#: A migration's file name: three digits (its version), then what it does.
MIGRATION_FILE = re.compile(r"([0-9]{3})_[a-z0-9_]+\.sql")
#: Where the SQL files live, as package data.
SQL_PACKAGE = "nobroker.postgres"

# The bookkeeping, in the order _apply runs it. The advisory lock makes a
# second process migrating at the same moment wait, then find the work done.
_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s))"
_CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {schema}"
_CREATE_MIGRATIONS = (
    "CREATE TABLE IF NOT EXISTS {schema}.schema_migrations ("
    " version integer PRIMARY KEY, name text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())"
)
_APPLIED = "SELECT version FROM {schema}.schema_migrations"
_RECORD = "INSERT INTO {schema}.schema_migrations (version, name) VALUES (%s, %s)"
_VERSION = "SELECT max(version) FROM {schema}.schema_migrations"
_ROLE_EXISTS = "SELECT 1 FROM pg_roles WHERE rolname = %s"
_CREATE_ROLE = "CREATE ROLE {role} NOLOGIN"
_OWNER = "SELECT tableowner FROM pg_tables WHERE schemaname = %s AND tablename = 'jobs'"
_TABLE = "SELECT to_regclass(%s)"
_RLS_IN_PLACE = (
    "SELECT c.relforcerowsecurity AND EXISTS (SELECT 1 FROM pg_policy AS p WHERE p.polrelid = c.oid AND p.polname = %s)"
    " FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = 'jobs'"
)


# ---------------------------------------------------------------- the files
@functools.lru_cache(maxsize=1)
def _migration_files() -> list[tuple[int, str, str]]:
    """(version, file name, text) of every numbered SQL file shipped in nobroker/postgres/sql/."""
    out = []
    for entry in resources.files(SQL_PACKAGE).joinpath("sql").iterdir():
        match = MIGRATION_FILE.fullmatch(entry.name)
        if match:
            out.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    out.sort()
    versions = [version for version, _, _ in out]
    assert len(set(versions)) == len(versions), f"two migration files share a version: {versions}"
    return out


def _sql_file(name: str) -> str:
    return resources.files(SQL_PACKAGE).joinpath("sql", name).read_text(encoding="utf-8")


def split_statements(text: str) -> list[str]:
    """Split a migration file into statements (``;`` at a line end, outside $$ bodies)."""
    out: list[str] = []
    current: list[str] = []
    in_body = False
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("--")):
            continue
        current.append(line)
        if line.count("$$") % 2:
            in_body = not in_body
        if not in_body and stripped.endswith(";"):
            out.append("\n".join(current))
            current = []
    if "".join(current).strip():
        out.append("\n".join(current))
    return out


def latest_version() -> int:
    """The schema version this nobroker expects."""
    files = _migration_files()
    return files[-1][0] if files else 0


# ---------------------------------------------------------------- applying them
def migrate(
    dsn: str, *, schema: str = DEFAULT_SCHEMA, worker_role: str | None = None, connect_timeout: float | None = None
) -> list[str]:
    """Create or upgrade the nobroker schema in the database at ``dsn``. Returns the files applied.

    Idempotent and safe to run from many processes at once: the work happens
    in one transaction under an advisory lock keyed by the schema name, and
    ``<schema>.schema_migrations`` records which versions are in. With
    ``worker_role``, also create that role if missing and restrict the rows to
    it (and the owner) with FORCE ROW LEVEL SECURITY; see the module docstring.
    ``connect_timeout``: seconds to keep trying to reach the server (default:
    the DSN's connect_timeout, else one attempt).
    """
    require_psycopg()
    check_identifier(schema, "schema")
    if worker_role is not None:
        check_identifier(worker_role, "worker_role")
    timeout = connect_timeout if connect_timeout is not None else connect_timeout_of(dsn) or 0.0
    conn = connect(dsn, timeout=timeout, location=redact_dsn(dsn))
    try:
        with conn:
            return _apply(conn, schema, worker_role)
    except psycopg.Error as exc:
        raise StorageError(f"migrating schema {schema!r} at {redact_dsn(dsn)} failed: {one_line(exc)}") from None


def ensure_schema(conn: Any, schema: str, worker_role: str | None, location: str) -> None:
    """What opening a queue does to the schema: read its version, and create it only where it is absent.

    Reads take no lock on the jobs table (only the version table and the
    catalogs are read), so opening never waits behind an open transaction
    and never makes a running worker wait. A schema that is behind, or whose
    row level security for ``worker_role`` is not in place, is refused with
    what to run (``nobroker pg migrate``): a migration takes the table's
    strongest lock, which is for an operator to choose the moment of.
    """
    try:
        version = conn.execute(sql.SQL(_VERSION).format(schema=sql.Identifier(schema))).fetchone()[0]
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
        version = None
    if version is None:
        try:
            _apply(conn, schema, worker_role)
        except psycopg.Error as exc:
            raise StorageError(f"migrating schema {schema!r} at {location} failed: {exc}") from None
        return
    role_hint = f" --worker-role {worker_role}" if worker_role is not None else ""
    command = f"`nobroker pg migrate --dsn ... --schema {schema}{role_hint}`"
    if version < latest_version():
        raise StorageError(
            f"schema {schema!r} at {location} is at version {version}, this nobroker needs {latest_version()}: "
            f"run {command} (it locks the jobs table while it runs)"
        )
    if worker_role is not None and not _rls_in_place(conn, schema, worker_role):
        raise StorageError(
            f"row level security for role {worker_role!r} is not in place in schema {schema!r} at {location}: "
            f"run {command}"
        )


def _rls_in_place(conn: Any, schema: str, role: str) -> bool:
    """Are RLS and the role's policy on the jobs table? (Catalog reads only: no lock on the table.)"""
    row = conn.execute(_RLS_IN_PLACE, (f"nobroker_role_{role}"[:63], schema)).fetchone()
    return bool(row and row[0])


def _apply(conn: Any, schema: str, worker_role: str | None) -> list[str]:
    ident = sql.Identifier(schema)

    def run(statement: str, params: tuple[Any, ...] | None = None) -> Any:
        return conn.execute(sql.SQL(statement).format(schema=ident), params)

    applied: list[str] = []
    with conn.transaction():
        conn.execute(_LOCK, (f"nobroker.migrate:{schema}",))
        run(_CREATE_SCHEMA)
        run(_CREATE_MIGRATIONS)
        done = {row[0] for row in run(_APPLIED)}
        for version, name, text in _migration_files():
            if version in done:
                continue
            for statement in split_statements(text):
                run(statement)
            run(_RECORD, (version, name))
            applied.append(name)
            logger.info("applied %s to schema %s", name, schema)
        if worker_role is not None:
            _apply_rls(conn, schema, worker_role)
    return applied


#: The tables under row level security, each with what the worker role may do to its rows: the jobs; the
#: counts the statements keep (they name queues and how many jobs each holds: the role's statements insert
#: them); the schedules (version 5), the limits per kind (7), the counters and the worker announcements (10).
RLS_TABLES = (
    ("jobs", "SELECT, INSERT, UPDATE, DELETE"),
    ("counts", "SELECT, INSERT, DELETE"),
    ("schedules", "SELECT, INSERT, UPDATE, DELETE"),
    ("limits", "SELECT, INSERT, UPDATE, DELETE"),
    ("pauses", "SELECT, INSERT, DELETE"),
    ("counters", "SELECT, INSERT, DELETE"),
    ("workers", "SELECT, INSERT, UPDATE, DELETE"),
)
#: What each of them gets, every statement safe to repeat (sql/rls.sql then adds what the role needs beside).
RLS_TABLE = (
    "ALTER TABLE {schema}.{table} ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE {schema}.{table} FORCE ROW LEVEL SECURITY",
    "DROP POLICY IF EXISTS {owner_policy} ON {schema}.{table}",
    "CREATE POLICY {owner_policy} ON {schema}.{table} TO {owner} USING (true) WITH CHECK (true)",
    "DROP POLICY IF EXISTS {role_policy} ON {schema}.{table}",
    "CREATE POLICY {role_policy} ON {schema}.{table} TO {role} USING (true) WITH CHECK (true)",
    "GRANT {privileges} ON {schema}.{table} TO {role}",
)


def _apply_rls(conn: Any, schema: str, role: str) -> None:
    if not conn.execute(_ROLE_EXISTS, (role,)).fetchone():
        try:
            with conn.transaction():  # a savepoint: another database may create it at the same moment
                conn.execute(sql.SQL(_CREATE_ROLE).format(role=sql.Identifier(role)))
        except pg_errors.DuplicateObject:
            pass
    owner = conn.execute(_OWNER, (schema,)).fetchone()[0]
    names = {
        "schema": sql.Identifier(schema),
        "role": sql.Identifier(role),
        "owner": sql.Identifier(owner),  # any name the server allows, so quoted by the driver
        "role_policy": sql.Identifier(f"nobroker_role_{role}"[:63]),
        "owner_policy": sql.Identifier("nobroker_owner"),
    }
    for table, privileges in RLS_TABLES:
        for statement in RLS_TABLE:  # privileges: a constant of this module, never a caller's text
            conn.execute(sql.SQL(statement).format(table=sql.Identifier(table), privileges=sql.SQL(privileges), **names))
    for statement in split_statements(_sql_file("rls.sql")):
        conn.execute(sql.SQL(statement).format(**names))


# ---------------------------------------------------------------- what a schema holds
def queue_names(dsn: str, *, schema: str = DEFAULT_SCHEMA, connect_timeout: float | None = None) -> list[str] | None:
    """Names of the queues holding jobs in ``schema`` at ``dsn`` (sorted, at most MAX_LISTED_QUEUES).

    None when the database has no nobroker table in that schema (nothing was
    ever enqueued there, or another ``--schema``). Reads only: it creates and
    migrates nothing. A queue on PostgreSQL is the rows that carry its name,
    so one whose jobs were all purged or compacted away is not listed.
    """
    require_psycopg()
    check_identifier(schema, "schema")
    timeout = connect_timeout if connect_timeout is not None else connect_timeout_of(dsn) or DEFAULT_RECONNECT_TIMEOUT
    location = redact_dsn(dsn)
    conn = connect(dsn, timeout=timeout, location=location, application_name="nobroker")
    try:
        with conn:
            if conn.execute(_TABLE, (f'"{schema}".jobs',)).fetchone()[0] is None:
                return None
            statement = Statements(schema)["queue_names"]
            return [row[0] for row in conn.execute(statement, {"limit": MAX_LISTED_QUEUES})]
    except psycopg.Error as exc:
        raise StorageError(f"listing the queues at {location} failed: {one_line(exc)}") from None
