"""The Queue's opening and lifetime: the storage chosen and held.

Owns: Opening (a Queue's arguments checked, for Queue and AsyncQueue alike:
checked_options), QueueBase (FileStorage or PostgresStorage opened by
open_storage, close, the context manager, the properties every part of the
Queue shares).
Imports: checks, errors, jobs, addresses, storage, locations, filestore, postgres (only
when a DSN is given: it needs psycopg).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Self

from .. import checks
from ..errors import QueueClosedError
from ..jobs import BackoffPolicy, RecoveryReport
from ..addresses import storage_kind
from ..storage import Storage, StorageOptions
from ..locations import require_queue


def checked_options(
    path: object, name: str, *, fsync: bool, visibility_timeout: float, max_attempts: int,
    backoff: BackoffPolicy | None, lock_timeout: float, clock: Callable[[], float] | None,
    auto_compact: float | None,
) -> StorageOptions:  # fmt: skip
    """The options of a Queue (or an AsyncQueue), checked; nothing is opened or created."""
    visibility_timeout = checks.seconds(visibility_timeout, "visibility_timeout", allow_zero=False)
    max_attempts = checks.attempts(max_attempts)
    lock_timeout = checks.seconds(lock_timeout, "lock_timeout")
    if backoff is None:
        backoff = BackoffPolicy()
    elif not isinstance(backoff, BackoffPolicy):
        raise TypeError(f"backoff must be a BackoffPolicy, got {type(backoff).__name__}")
    if auto_compact is not None and not (isinstance(auto_compact, (int, float)) and 0 < auto_compact <= 1):
        raise ValueError(f"auto_compact is a share of the log between 0 and 1 (or None for never), got {auto_compact!r}")
    storage_kind(path)  # refuses a location that names no storage, before anything is made
    return StorageOptions(
        name, fsync=bool(fsync), visibility_timeout=visibility_timeout, max_attempts=max_attempts,
        backoff=backoff, lock_timeout=lock_timeout, clock=clock,
    )  # fmt: skip


def open_storage(
    path: str | os.PathLike[str], options: StorageOptions, auto_compact: float | None, create: bool,
    storage_options: dict[str, Any],
) -> Storage:  # fmt: skip
    """The storage ``path`` names, opened (``create=False``: only one that is already there)."""
    if not create:
        require_queue(path, options.name, schema=storage_options.get("schema"),
                      connect_timeout=storage_options.get("reconnect_timeout"))  # fmt: skip
    if storage_kind(path) == "postgresql":
        from ..postgres import PostgresStorage  # optional: needs psycopg

        return PostgresStorage(str(path), options, **storage_options)
    from ..filestore import FileStorage

    return FileStorage(path, options, auto_compact=auto_compact, **storage_options)


class Opening:
    """A Queue's or an AsyncQueue's arguments, checked once; ``_open`` then opens (or keeps) the storage."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        name: str = "default",
        *,
        fsync: bool = True,
        visibility_timeout: float = 30.0,
        max_attempts: int = 5,
        backoff: BackoffPolicy | None = None,
        lock_timeout: float = 10.0,
        clock: Callable[[], float] | None = None,
        auto_compact: float | None = 0.5,
        create: bool = True,
        **storage_options: Any,
    ) -> None:
        options = checked_options(
            path, name, fsync=fsync, visibility_timeout=visibility_timeout, max_attempts=max_attempts,
            backoff=backoff, lock_timeout=lock_timeout, clock=clock, auto_compact=auto_compact,
        )  # fmt: skip
        self._name = name
        self.visibility_timeout = options.visibility_timeout
        self.max_attempts = options.max_attempts
        self.backoff = options.backoff
        self._closed = False
        self._open(path, options, auto_compact, create, storage_options)

    def _open(
        self, path: str | os.PathLike[str], options: StorageOptions, auto_compact: float | None, create: bool,
        storage_options: dict[str, Any],
    ) -> None:  # fmt: skip
        raise NotImplementedError  # pragma: no cover - each face opens in its own way

    @property
    def name(self) -> str:
        return self._name


class QueueBase(Opening):
    """What every part of the Queue stands on: its storage, open or closed (see Queue)."""

    def _open(
        self, path: str | os.PathLike[str], options: StorageOptions, auto_compact: float | None, create: bool,
        storage_options: dict[str, Any],
    ) -> None:  # fmt: skip
        self._storage: Storage = open_storage(path, options, auto_compact, create, storage_options)

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Release files (or connections). Further calls raise QueueClosedError."""
        if not self._closed:
            self._closed = True
            self._storage.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._open_storage().count()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("durable" if self.durable else "NOT durable: fsync=False")
        return f"<nobroker.Queue {self._name!r} at {self.path!r} ({state})>"

    @property
    def path(self) -> str:
        """The folder (file storage) or the DSN without its password (PostgreSQL)."""
        return self._storage.location

    @property
    def durable(self) -> bool:
        """False when opened with fsync=False: acknowledged work may be lost in a power cut."""
        return self._storage.durable

    @property
    def fsync(self) -> bool:
        """The ``fsync`` it was opened with (nobroker 0.1.2's name for ``durable``)."""
        return self._storage.durable

    @property
    def recovery(self) -> RecoveryReport:
        """What opening the queue found (torn tail cut, records replayed, time taken)."""
        return self._storage.recovery

    @property
    def storage(self) -> Storage:
        """The storage behind this facade (for tools; its interface is not a stable API)."""
        return self._storage

    def _open_storage(self) -> Storage:
        if self._closed:
            raise QueueClosedError(f"queue {self._name!r} is closed; open a new Queue")
        return self._storage
