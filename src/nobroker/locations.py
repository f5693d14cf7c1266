"""Where queues are kept: the queues a folder or a database holds, found without creating anything.

Owns: list_queues, require_queue (the refusal when ``create=False`` finds
no queue) and migrate_postgres (the PostgreSQL schema, for ``nobroker pg
migrate``). Imports: errors, addresses, filestore.admin, postgres (only when
a DSN is given: it needs psycopg).
"""

from __future__ import annotations

import os
from typing import Any

from .errors import QueueNotFoundError
from .addresses import storage_kind


def list_queues(
    path: str | os.PathLike[str], *, schema: str | None = None, connect_timeout: float | None = None
) -> list[str]:
    """Names of the queues kept at ``path`` (a folder, or a PostgreSQL DSN), sorted. Creates nothing.

    QueueNotFoundError when there is no queue storage there at all: no such
    folder (or a file in its place), or no nobroker schema in the database.
    ``schema`` and ``connect_timeout`` (seconds to keep trying to reach the
    server) apply to PostgreSQL only.
    """
    if storage_kind(path) == "postgresql":
        from .postgres import DEFAULT_SCHEMA, queue_names, redact_dsn

        schema = DEFAULT_SCHEMA if schema is None else schema
        names = queue_names(str(path), schema=schema, connect_timeout=connect_timeout)
        if names is None:
            where = redact_dsn(str(path))
            raise QueueNotFoundError(
                f"no nobroker schema {schema!r} at {where}: nothing has been enqueued there yet",
                missing="schema", location=where, name="",
            )  # fmt: skip
        return names
    from .filestore.admin import list_queues as list_folder

    folder = os.fspath(path)
    if not os.path.isdir(folder):
        if os.path.exists(folder):
            message = f"{folder!r} is a file, not a queue folder"
        else:
            message = f"no queue folder at {folder!r} (nothing has been enqueued there yet)"
        raise QueueNotFoundError(message, missing="folder", location=folder, name="")
    return list_folder(folder)


def require_queue(
    path: str | os.PathLike[str], name: str, *, schema: str | None = None, connect_timeout: float | None = None
) -> None:
    """Raise QueueNotFoundError unless queue ``name`` is already kept at ``path``; creates nothing.

    A folder must hold the queue's files. On PostgreSQL the schema must
    exist; the name is not checked there, since a queue is only the rows that
    carry it and an empty one is still a queue.
    """
    try:
        found = list_queues(path, schema=schema, connect_timeout=connect_timeout)
    except QueueNotFoundError as exc:
        exc.name = name
        raise
    if storage_kind(path) == "folder" and name not in found:
        folder = os.fspath(path)
        listed = ", ".join(repr(n) for n in found) or "none"
        raise QueueNotFoundError(
            f"no queue named {name!r} in {folder!r} (queues found: {listed})",
            missing="queue", location=folder, name=name, found=found,
        )  # fmt: skip


def migrate_postgres(
    dsn: str, *, schema: str | None = None, worker_role: str | None = None, connect_timeout: float | None = None
) -> list[str]:
    """Create or upgrade the nobroker schema in the PostgreSQL database at ``dsn``; returns the files applied.

    What ``nobroker pg migrate`` runs, so the command line reaches PostgreSQL
    through this facade too. Options left None take the storage's defaults
    (see nobroker.postgres.migrate). Needs the optional psycopg driver.
    """
    from .postgres import migrate  # optional: needs psycopg

    options: dict[str, Any] = {}
    if schema is not None:
        options["schema"] = schema
    if worker_role is not None:
        options["worker_role"] = worker_role
    if connect_timeout is not None:
        options["connect_timeout"] = connect_timeout
    return migrate(dsn, **options)


