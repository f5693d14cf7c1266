"""The PostgreSQL storage's own options: what each means, its default, its limits and their checks.

Owns: MAX_QUEUE_NAME, DEFAULT_DONE_RETENTION, MAX_TIMEOUT, ``check_options``
and ``check_seconds`` (storage.PostgresStorage calls them before it connects:
a wrong option is a ValueError and nothing is opened). Imports: jobs,
storage.

Storage options (keyword arguments to ``Queue`` that the facade passes on):
``schema`` (default ``nobroker``), ``migrate`` (default True: create the
schema on open where it is absent; a schema that is behind is refused with
what to run, ``nobroker pg migrate``, since a migration locks the table;
False: no check at all), ``worker_role`` (check on open that the RLS
policies for that role are in place, creating them with a new schema; see
schema.py), ``retention`` (seconds a done job is kept from compaction,
default 0: ``compact()`` deletes every done job), ``reconnect_timeout``
(seconds to keep trying to reach the server, when the queue opens and after
it went away; default: the DSN's ``connect_timeout``, else 30),
``prepare_threshold`` (psycopg's; None turns server-side prepared statements
off) and ``clock_offset`` (tests only). ``lock_timeout`` becomes the
session's ``lock_timeout``; ``fsync=False`` becomes ``synchronous_commit=off``
(faster, and NOT durable: a server crash can lose the last acknowledged
writes). ``statement_timeout`` (seconds, default 300; 0: no limit) becomes
the session's statement_timeout; ``tcp_user_timeout`` (seconds, default 30)
and TCP keepalives (10 s idle, then every 5 s, 3 lost) are set on every
connection where the DSN does not set its own, so a half-open connection
fails in about a minute instead of stalling a Worker. ``done_retention``
(seconds, default 7 days; None: never) and ``dead_retention`` (default None:
the DLQ is kept): finished jobs older than that are pruned automatically,
storage.PRUNE_BATCHES batches of fragments.PRUNE_BATCH every
storage.PRUNE_INTERVAL seconds (every storage.PRUNE_CATCH_UP while a round
finds a backlog), started by a lease and run in a thread on the second
connection, so the table stays the size of its live work. Each
Queue holds one connection for its work (enqueue, lease, ack, nack, extend), a second for operator reads, compaction and the owed
NOTIFYs (opened on first use, so a heartbeat never waits behind them), and,
once a Worker idles on it, one more that LISTENs.
"""

from __future__ import annotations

from typing import Any

from ..jobs import finite_float, shown
from ..storage import StorageOptions

#: Longest queue name, in characters.
MAX_QUEUE_NAME = 256
#: Seconds a done job is kept before it is pruned automatically, by default (the ``done_retention`` option).
DEFAULT_DONE_RETENTION = 7 * 86_400.0
#: Longest statement_timeout or tcp_user_timeout (seconds; both go to the server as int milliseconds).
MAX_TIMEOUT = 86_400.0


def check_options(options: StorageOptions, retention: Any, reconnect_timeout: Any, clock_offset: Any) -> None:
    """Refuse what the facade does not check: the options of this storage alone, and its limits."""
    name = options.name
    if options.clock is not None:
        raise ValueError(
            "clock= is for the file storage; the PostgreSQL storage uses the database clock, "
            "so every host agrees on deadlines"
        )
    if not isinstance(name, str) or not name or len(name) > MAX_QUEUE_NAME or "\x00" in name:
        raise ValueError(f"queue name must be 1 to {MAX_QUEUE_NAME} characters without NUL, got {name!r}")
    for what, value in (("retention", retention), ("reconnect_timeout", reconnect_timeout)):
        number = finite_float(value)  # never raises, not even for 10**400
        if number is None or number < 0:
            raise ValueError(f"{what} must be a finite number of seconds >= 0, got {shown(value)}")
    if finite_float(clock_offset) is None:
        raise ValueError(f"clock_offset must be a finite number of seconds, got {shown(clock_offset)}")


def check_seconds(limit: float = MAX_TIMEOUT, **values: Any) -> None:
    for what, value in values.items():
        number = finite_float(value)
        if number is None or number < 0 or number > limit:
            raise ValueError(f"{what} must be a finite number of seconds from 0 to {limit:g}, got {shown(value)}")


__all__ = ["DEFAULT_DONE_RETENTION", "MAX_QUEUE_NAME", "MAX_TIMEOUT", "check_options", "check_seconds"]
