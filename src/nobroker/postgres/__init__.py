"""The PostgreSQL storage: the same queue, kept in one table that many hosts share.

Owns nothing itself: it names the package's face. psycopg 3 is imported by
its modules only, and only when a PostgreSQL queue is opened, so importing
nobroker never needs it. Imports: storage.
"""

from __future__ import annotations

from .storage import DEFAULT_SCHEMA, PostgresStorage, check_identifier, latest_version, migrate, queue_names, redact_dsn

__all__ = ["DEFAULT_SCHEMA", "PostgresStorage", "check_identifier", "latest_version", "migrate", "queue_names", "redact_dsn"]
