"""psycopg 3, imported in one place: the driver's modules, or None where it is not installed.

Owns: the one import of psycopg (the only third-party package nobroker ever
imports) and ``require_psycopg``, which turns its absence into an error that
says what to install. The package's other modules take the driver from here,
so importing nobroker.postgres never needs it, and nothing calls it before a
PostgreSQL queue is opened (or ``migrate`` / ``queue_names`` is called).
Imports: errors.
"""

from __future__ import annotations

from ..errors import NobrokerError

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
    from psycopg.rows import tuple_row
except ImportError:  # pragma: no cover - exercised only where psycopg is missing
    # The names stay defined, so ``from .driver import sql`` works without the
    # driver; every entry point calls require_psycopg before it touches them.
    psycopg = None  # type: ignore[assignment]
    pg_errors = sql = tuple_row = None  # type: ignore[assignment]

INSTALL_HINT = (
    'the PostgreSQL storage needs the psycopg 3 driver: pip install "nobroker[postgres]" '
    '(or pip install "psycopg[binary]")'
)


def require_psycopg() -> None:
    """Refuse, saying what to install, when psycopg 3 is missing."""
    if psycopg is None:
        raise NobrokerError(INSTALL_HINT)


__all__ = ["INSTALL_HINT", "pg_errors", "psycopg", "require_psycopg", "sql", "tuple_row"]
