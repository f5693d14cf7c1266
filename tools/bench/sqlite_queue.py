"""The queue a user could write in an afternoon on the standard library's sqlite3: the file storage's baseline.

Owns: SqliteQueue, a durable job queue in one SQLite database in WAL mode
with ``synchronous=FULL`` (every commit fsyncs the write-ahead log): INSERT
to enqueue, UPDATE ... RETURNING to lease (the lease's deadline is the row's
``available_at``; ``attempts`` is the fencing token), DELETE to ack, one
transaction each; ``executemany`` in one transaction for a batch.
Imports: the standard library only (nothing of nobroker, so nothing of ours
can make the baseline faster or slower).

It is deliberately plain, what the benchmark compares the file storage
against: no retries, backoff or dead-letter queue, one table and one index.
Payloads are JSON text, written with ``json.dumps`` and read back with
``json.loads``, as nobroker hands back a decoded payload.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: The database file inside the queue's folder.
DATABASE = "queue.sqlite3"
#: Seconds a connection waits for another's write lock before it gives up (sqlite3's busy timeout).
BUSY_TIMEOUT = 60.0
#: Seconds a lease lasts unless the caller says otherwise.
VISIBILITY_TIMEOUT = 30.0
#: UPDATE ... RETURNING needs SQLite 3.35 (Python 3.11 on a current system has it).
MIN_SQLITE = (3, 35, 0)

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id INTEGER PRIMARY KEY,"
    " priority INTEGER NOT NULL DEFAULT 0,"
    " available_at REAL NOT NULL,"
    " attempts INTEGER NOT NULL DEFAULT 0,"
    " payload TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS jobs_next ON jobs (priority DESC, id)",
)
INSERT = "INSERT INTO jobs (priority, available_at, payload) VALUES (?, ?, ?)"
LEASE = (
    "UPDATE jobs SET attempts = attempts + 1, available_at = ?"
    " WHERE id = (SELECT id FROM jobs WHERE available_at <= ? ORDER BY priority DESC, id LIMIT 1)"
    " RETURNING id, attempts, payload"
)
ACK = "DELETE FROM jobs WHERE id = ? AND attempts = ?"


@dataclass(frozen=True)
class Leased:
    """One leased job: its id, its token (the attempt it is on) and its payload."""

    id: int
    token: int
    payload: Any


class SqliteQueue:
    """A durable queue in ``directory``/queue.sqlite3; one connection, used by one thread."""

    def __init__(self, directory: str, *, visibility_timeout: float = VISIBILITY_TIMEOUT) -> None:
        assert sqlite3.sqlite_version_info >= MIN_SQLITE, f"UPDATE ... RETURNING needs SQLite {MIN_SQLITE}"
        assert visibility_timeout > 0, visibility_timeout
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.path = os.path.join(directory, DATABASE)
        self.visibility_timeout = visibility_timeout
        # isolation_level=None: no implicit BEGIN; each statement below is its own transaction.
        self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        assert mode == "wal", f"SQLite refused WAL mode ({mode})"
        self._db.execute("PRAGMA synchronous=FULL")
        for statement in SCHEMA:
            self._db.execute(statement)

    def enqueue(self, payload: Any, *, priority: int = 0) -> int:
        """One job, durable when this returns (one INSERT, one commit, one fsync of the WAL)."""
        cursor = self._db.execute(INSERT, (priority, time.time(), json.dumps(payload)))
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def enqueue_many(self, payloads: Iterable[Any], *, priority: int = 0) -> int:
        """Many jobs in one transaction (``executemany``, one commit); returns how many."""
        now = time.time()
        rows = [(priority, now, json.dumps(payload)) for payload in payloads]
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(INSERT, rows)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return len(rows)

    def lease_one(self) -> Leased | None:
        """The next ready job (highest priority, then oldest), leased until now + the visibility timeout."""
        now = time.time()
        # fetchall runs the statement to its end: only then does its transaction commit.
        rows = self._db.execute(LEASE, (now + self.visibility_timeout, now)).fetchall()
        if not rows:
            return None
        assert len(rows) == 1, rows  # the subquery picks one id at most
        job_id, token, payload = rows[0]
        return Leased(job_id, token, json.loads(payload))

    def ack(self, job: Leased) -> bool:
        """Done: the job's row goes. False when the lease is no longer current (another attempt took it)."""
        return self._db.execute(ACK, (job.id, job.token)).rowcount == 1

    def count(self) -> int:
        """Jobs in the queue, leased or not."""
        return int(self._db.execute("SELECT count(*) FROM jobs").fetchone()[0])

    def close(self) -> None:
        """Close the connection (the last one to close folds the WAL back into the database)."""
        self._db.close()

    def __enter__(self) -> SqliteQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["SqliteQueue", "Leased"]
