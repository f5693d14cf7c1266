"""The PostgreSQL storage: the same queue, kept in one table that many hosts share.

Owns nothing itself: it names the package's face. psycopg 3 is imported by
driver.py only, and nothing calls it before a PostgreSQL queue is opened (or
``migrate`` / ``queue_names`` runs), so importing nobroker never needs it.
The package, in its order (a module imports only modules above it):

    driver.py      the one import of psycopg, and what to install without it
    naming.py      what names a server: the DSN without its password, its connect_timeout; a queue's channel; a safe schema name
    fragments.py   the SQL pieces statements are made of: the clock, a job's columns, the claim, the tallies
    statements.py  the SQL text of every operation and its parameters
    rows.py        a row of a job's columns as a Job
    steps.py       an operation as the statements it sends, run on a Connection or awaited on an AsyncConnection
    turns.py       a mutex whose holder lets a waiting thread go first between two runs of one operation
    connection.py  connecting, the connection a storage works on (reconnect, retry once)
    lanes.py       the work's connection and a spare one, for a thread that finds it busy
    asynclink.py   the AsyncConnection an AsyncQueue works on (Link's twin)
    listener.py    LISTEN on a second connection, and the idle wait until a NOTIFY or the next due time
    wakeups.py     which writes NOTIFY: at most one per queue per few ms, the last one owed never lost
    schema.py      the numbered migrations in sql/, row level security, the version check
    operations.py  each operation on one connection (the statements it sends, what the rows mean)
    enqueueing.py  adding jobs on one connection: one, a batch, in the caller's transaction; the retries of a conflict
    schedule_ops.py  the schedules table and the tick transaction
    limit_ops.py   the limits table and the lease under limits
    queue_ops.py   the whole queue's operations (requeue, purge, pruning, compaction) and the reads
    roster.py      the workers table: the worker announcements
    control_ops.py  snooze, pause and resume, run_now, delete, and the channel Queue.wait listens on
    control_storage.py  ControlStorage: PostgresStorage's control of jobs, run on its connections
    options.py     the storage's own options: what each means, its default, its checks
    storage.py     PostgresStorage, wiring only
    asyncstorage.py  AsyncPostgresStorage: the same statements awaited, for AsyncQueue

Imports: naming, schema, storage.
"""

from __future__ import annotations

from .naming import check_identifier, redact_dsn
from .schema import DEFAULT_SCHEMA, latest_version, migrate, queue_names
from .storage import PostgresStorage

__all__ = ["DEFAULT_SCHEMA", "PostgresStorage", "check_identifier", "latest_version", "migrate", "queue_names", "redact_dsn"]
