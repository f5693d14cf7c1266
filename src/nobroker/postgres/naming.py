"""What names a PostgreSQL server and a queue's channel on it: the DSN shown without its password, its own connect_timeout, the channel.

Owns: ``redact_dsn`` (a DSN fit for logs and errors), ``connect_timeout_of``
and ``channel_name`` (the LISTEN/NOTIFY channel of one queue). Pure
functions of text: no connection, no driver. Imports: addresses.
"""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

from ..addresses import dsn_parameters, parse_keyword_dsn


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


__all__ = ["channel_name", "connect_timeout_of", "redact_dsn"]
