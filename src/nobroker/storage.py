"""The small interface every storage implements, and the choice between them.

Owns: Storage (the protocol the Queue facade calls), EnqueueSpec (one job to
add, already validated and encoded), and ``is_dsn``. Imports: jobs.

The Queue facade validates arguments and turns ``Job | id`` into
``(id, token)``; a storage only stores. Two siblings implement it:
filestore.FileStorage (the default, one folder on local disk) and
postgres.PostgresStorage (optional, many hosts). The Worker, the CLI and the
dashboard only ever see the Queue facade, so they run on both.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from .jobs import CompactionResult, Job, JobState, QueueStats, RecoveryReport


class EnqueueSpec(NamedTuple):
    """One job to enqueue. ``payload_json`` is ``payload`` already encoded once.

    A NamedTuple rather than a frozen dataclass: enqueue_many builds one per
    job, and a frozen dataclass's __init__ costs several times more.
    """

    payload: Any
    payload_json: str
    priority: int
    delay: float
    max_attempts: int
    job_id: str | None
    kind: str
    dedupe_key: str | None


class Storage(Protocol):
    """What a storage must do. Tokens: None means "operator, skip the check"."""

    durable: bool
    visibility_timeout: float

    def enqueue(self, specs: list[EnqueueSpec], conn: Any = None) -> list[Job]: ...

    def lease(self, count: int, visibility_timeout: float, kinds: frozenset[str] | None) -> list[Job]: ...

    def ack(self, job_id: str, token: str | None, result_json: str | None, result: Any) -> None: ...

    def ack_many(self, items: list[tuple[str, str | None, str | None]]) -> None: ...

    def nack(
        self, job_id: str, token: str | None, error: str | None, delay: float | None, permanent: bool,
        traceback: str | None,
    ) -> Job: ...  # fmt: skip

    def extend(self, job_id: str, token: str | None, seconds: float) -> Job: ...

    def set_stage(self, job_id: str, token: str | None, stage: str | None) -> Job: ...

    def get(self, job_id: str) -> Job: ...

    def stats(self) -> QueueStats: ...

    def list_jobs(self, listing: str | None, limit: int | None, offset: int, kind: str | None) -> list[Job]: ...

    def requeue_dead(self, job_id: str | None) -> int: ...

    def purge(self) -> int: ...

    def compact(self) -> CompactionResult: ...

    def count(self) -> int: ...

    def wait_for_jobs(
        self, timeout: float, interrupt: int | None = None, kinds: frozenset[str] | None = None
    ) -> bool: ...

    def wakes_waiters(self) -> bool: ...

    def close(self) -> None: ...

    @property
    def location(self) -> str: ...

    @property
    def recovery(self) -> RecoveryReport: ...


def is_dsn(path: object) -> bool:
    """Does ``path`` name a PostgreSQL database rather than a folder?"""
    return isinstance(path, str) and path.startswith(("postgresql://", "postgres://"))
