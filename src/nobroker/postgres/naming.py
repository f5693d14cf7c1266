"""What names a PostgreSQL server and a queue's channel on it: the DSN shown without its password, its own connect_timeout, the channel.

Owns: ``redact_dsn`` (a DSN fit for logs and errors), ``connect_timeout_of``,
``channel_name`` (the LISTEN/NOTIFY channel of one queue), and
``check_identifier`` and ``quote_schema``, the rule that makes writing a
schema or role name into SQL text safe. Pure functions of text: no
connection, no driver. Imports: addresses.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import urlsplit

from ..addresses import dsn_parameters, parse_keyword_dsn

#: Schema and role names: plain SQL identifiers, so they read the same quoted or not.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")  # fullmatch: ``$`` lets a final newline through


def check_identifier(name: Any, what: str) -> str:
    """A schema or role name: letters, digits and _, not starting with a digit, at most 63."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise ValueError(
            f"{what} must be a plain SQL name (letters, digits and _, not starting with a digit, "
            f"at most 63 characters), got {name!r}"
        )
    return name


def quote_schema(schema: str) -> str:
    """The schema as a quoted identifier. Safe to write into SQL: check_identifier allows no quote."""
    return '"' + check_identifier(schema, "schema") + '"'


def redact_dsn(dsn: str) -> str:
    """The DSN without its password (in the authority part, as a query parameter, or as a key word)."""
    pairs = None if "://" in dsn else parse_keyword_dsn(dsn)
    if pairs is not None:
        return " ".join(f"{key}={_keyword_quote(value)}" for key, value in pairs.items() if key != "password")
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "postgresql://<unparseable dsn>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        netloc = userinfo.split(":", 1)[0] + "@" + hostinfo
    query = "&".join(p for p in parts.query.split("&") if p and not p.lower().startswith("password="))
    out = f"{parts.scheme}://{netloc}{parts.path}"
    if query:
        out += "?" + query
    if parts.fragment:
        out += "#" + parts.fragment
    return out


def _keyword_quote(value: str) -> str:
    if value and not any(ch.isspace() or ch in "'\\" for ch in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def connect_timeout_of(dsn: str) -> float | None:
    """The DSN's own ``connect_timeout`` in seconds, if it gives a positive one (0 means "no limit" to libpq)."""
    try:
        value = float(dsn_parameters(dsn).get("connect_timeout", ""))
    except ValueError:
        return None
    return value if 0 < value < float("inf") else None


def channel_name(schema: str, queue: str) -> str:
    """The LISTEN/NOTIFY channel of one queue (an identifier, whatever the queue's name)."""
    digest = hashlib.sha1(f"{schema}\x00{queue}".encode()).hexdigest()[:20]
    return f"nobroker_{digest}"


__all__ = ["channel_name", "check_identifier", "connect_timeout_of", "quote_schema", "redact_dsn"]
