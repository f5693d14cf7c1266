"""What a location names: a folder, or a PostgreSQL database; a DSN's parameters read without the driver.

Owns: ``storage_kind`` (a folder, PostgreSQL, or refused with
UnknownStorageError), ``is_dsn``, ``dsn_parameters`` and
``parse_keyword_dsn`` (libpq's two forms, URL and keyword string), and
LIBPQ_KEYWORDS. Imports: errors.
"""

from __future__ import annotations

import os
import re
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from .errors import UnknownStorageError

#: URL schemes that name PostgreSQL (libpq accepts both).
POSTGRES_SCHEMES = ("postgresql", "postgres")
#: libpq's connection parameter key words (PostgreSQL 18 docs, "Parameter Key
#: Words"). A string of ``keyword=value`` pairs is a keyword DSN when it uses
#: these; one that uses none of them is a folder name that happens to hold "=".
LIBPQ_KEYWORDS = frozenset(
    """host hostaddr port dbname user password passfile require_auth channel_binding connect_timeout
    client_encoding options application_name fallback_application_name keepalives keepalives_idle
    keepalives_interval keepalives_count tcp_user_timeout replication gssencmode sslmode requiressl
    sslnegotiation sslcompression sslcert sslkey sslkeylogfile sslpassword sslcertmode sslrootcert sslcrl
    sslcrldir sslsni requirepeer ssl_min_protocol_version ssl_max_protocol_version min_protocol_version
    max_protocol_version krbsrvname gsslib gssdelegation scram_client_key scram_server_key service
    target_session_attrs load_balance_hosts oauth_issuer oauth_client_id oauth_client_secret
    oauth_scope""".split()
)
#: ``scheme://`` at the start of a location. Two letters at least: ``C://x`` is a Windows path.
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+)://")
_KEYWORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
StorageKind = Literal["folder", "postgresql"]


def parse_keyword_dsn(text: str) -> dict[str, str] | None:
    """The ``keyword=value`` pairs of a libpq keyword string, or None if ``text`` is not one.

    The syntax is libpq's: pairs separated by white space, spaces allowed
    around ``=``, a value in single quotes may hold spaces, and a backslash
    escapes the next character. Key words are not checked here.
    """
    pairs: dict[str, str] = {}
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos == n:
            return pairs or None
        match = _KEYWORD.match(text, pos)
        if match is None:
            return None
        pos = match.end()
        while pos < n and text[pos].isspace():
            pos += 1
        if pos == n or text[pos] != "=":
            return None
        pos += 1
        while pos < n and text[pos].isspace():
            pos += 1
        value, pos = _keyword_value(text, pos)
        if value is None:
            return None
        pairs[match.group()] = value


def _keyword_value(text: str, pos: int) -> tuple[str | None, int]:
    quoted = pos < len(text) and text[pos] == "'"
    if quoted:
        pos += 1
    out: list[str] = []
    while pos < len(text):
        ch = text[pos]
        if ch == "\\" and pos + 1 < len(text):
            out.append(text[pos + 1])
            pos += 2
            continue
        if (quoted and ch == "'") or (not quoted and ch.isspace()):
            return "".join(out), pos + 1
        out.append(ch)
        pos += 1
    return (None if quoted else "".join(out)), pos  # an unclosed quote is not a keyword string


def storage_kind(location: object) -> StorageKind:
    """Which storage ``location`` names: ``"postgresql"`` or ``"folder"``.

    PostgreSQL: a ``postgresql://`` or ``postgres://`` URL, or a libpq keyword
    string (``"host=localhost dbname=app"``). A folder: any other path. Refused
    with UnknownStorageError: a URL of another scheme (``mysql://x``,
    ``sqlite:///x``), and a keyword string that mixes libpq key words with
    unknown ones (a typo such as ``hots=localhost dbname=app``). Nothing is
    opened or created here.
    """
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str):
        return "folder"  # bytes and the like: the file storage says what it makes of them
    scheme = _URL_SCHEME.match(location)
    if scheme is not None:
        if scheme.group(1).lower() in POSTGRES_SCHEMES:
            return "postgresql"
        raise UnknownStorageError(
            f"a {scheme.group(1)}:// URL names neither a folder nor a PostgreSQL database; nobroker keeps "
            "a queue in a folder (give its path) or in PostgreSQL (postgresql://... or 'host=... dbname=...')"
        )
    pairs = parse_keyword_dsn(location)
    if pairs is None:
        return "folder"
    unknown = sorted(set(pairs) - LIBPQ_KEYWORDS)
    if len(unknown) == len(pairs):
        return "folder"  # "data=old" is a folder name, not a DSN with nothing libpq knows
    if unknown:
        raise UnknownStorageError(
            f"this looks like a PostgreSQL keyword DSN, but {', '.join(repr(k) for k in unknown)} "
            f"{'is not a libpq key word' if len(unknown) == 1 else 'are not libpq key words'} "
            "(host, port, dbname, user, password, sslmode, connect_timeout, ...); fix the spelling"
        )
    return "postgresql"


def is_dsn(path: object) -> bool:
    """Does ``path`` name a PostgreSQL database rather than a folder? (Never raises.)"""
    try:
        return storage_kind(path) == "postgresql"
    except UnknownStorageError:
        return False


def dsn_parameters(dsn: str) -> dict[str, str]:
    """The connection parameters a DSN spells out as ``key=value`` (the URL's query, or every keyword pair)."""
    if _URL_SCHEME.match(dsn):
        try:
            return dict(parse_qsl(urlsplit(dsn).query))
        except ValueError:
            return {}
    return parse_keyword_dsn(dsn) or {}


__all__ = ["LIBPQ_KEYWORDS", "POSTGRES_SCHEMES", "StorageKind", "dsn_parameters", "is_dsn", "parse_keyword_dsn", "storage_kind"]
