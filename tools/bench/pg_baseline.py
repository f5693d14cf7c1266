"""The PostgreSQL benchmark's yardstick: the lease queue a careful developer writes by hand.

Owns: Baseline (enqueue, drain, listen, produce and count, as the nobroker
contender in pg.py has them), its table and SQL, and ``connect`` (an
autocommit psycopg connection, for it and for the run's own set-up).
Imports: nobroker.postgres (check_identifier), pg_count, psycopg.

Every statement waits for its commit to be flushed (synchronous commit
on), the claim too, as a careful hand-written queue does; nobroker's claim
does not wait (its lease becomes durable with its ack's flush, as on the
file storage), every other write of nobroker's does. INSERT to enqueue,
``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n)
RETURNING`` to claim, one UPDATE to mark done (one per job, or one per
claimed batch), LISTEN/NOTIFY to wake. It has no fencing tokens, no reclaim,
no backoff, no dedupe: the ratio to it is what those guarantees cost. The
hand-written sqlite3 queue the file storage is to be measured against would
sit beside this module, the same way.
"""

from __future__ import annotations

import json
import select
import time
from collections.abc import Callable
from typing import Any

from nobroker.postgres import check_identifier
from tools.bench.pg_count import counting, per_operation

#: The channel the baseline's producer notifies and its idle worker listens on.
CHANNEL = "bench_baseline"

BASELINE_TABLE = """
CREATE TABLE {schema}.baseline (
    id bigserial PRIMARY KEY,
    state text NOT NULL DEFAULT 'ready',
    priority integer NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(),
    locked_until timestamptz,
    attempts integer NOT NULL DEFAULT 0,
    payload json NOT NULL
);
CREATE INDEX baseline_claim ON {schema}.baseline (priority DESC, id) WHERE state = 'ready';
"""
_B_INSERT = "INSERT INTO {schema}.baseline (payload) VALUES (%s::json)"
_B_INSERT_NOTIFY = (
    "WITH i AS (INSERT INTO {schema}.baseline (payload) VALUES (%s::json) RETURNING id) "
    f"SELECT pg_notify('{CHANNEL}', '') FROM i"
)
_B_INSERT_MANY = "INSERT INTO {schema}.baseline (payload) SELECT unnest(%s::text[])::json"
_B_CLAIM = """
UPDATE {schema}.baseline SET state = 'leased', attempts = attempts + 1, locked_until = now() + interval '30 seconds'
WHERE id IN (SELECT id FROM {schema}.baseline WHERE state = 'ready' AND run_at <= now()
             ORDER BY priority DESC, id LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id, payload"""
_B_DONE = "UPDATE {schema}.baseline SET state = 'done' WHERE id = %s AND state = 'leased'"
_B_DONE_MANY = "UPDATE {schema}.baseline SET state = 'done' WHERE id = ANY(%s) AND state = 'leased'"


def quoted(schema: str) -> str:
    """The bench's own schema name (a checked plain identifier), quoted for SQL text."""
    return '"' + check_identifier(schema, "schema") + '"'


def connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


class Baseline:
    """The hand-written queue, in the contender's shape: each method one figure's work, timed where pg.py asks."""

    label = "hand-written"

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        ident = quoted(schema)
        self.sql = {
            key: text.replace("{schema}", ident)
            for key, text in {
                "insert": _B_INSERT, "insert_notify": _B_INSERT_NOTIFY, "insert_many": _B_INSERT_MANY,
                "claim": _B_CLAIM, "done": _B_DONE, "done_many": _B_DONE_MANY,
            }.items()
        }  # fmt: skip
        self.channel = CHANNEL

    def fill(self, n: int, batch: int) -> None:
        with connect(self.dsn) as conn:
            for start in range(0, n, batch):
                payloads = [f'{{"i":{i}}}' for i in range(start, min(start + batch, n))]
                conn.execute(self.sql["insert_many"], (payloads,))

    def enqueue_single(self, n: int) -> float:
        with connect(self.dsn) as conn:
            started = time.perf_counter()
            for i in range(n):
                conn.execute(self.sql["insert"], (json.dumps({"i": i}),))
            return time.perf_counter() - started

    def enqueue_batch(self, n: int, batch: int) -> float:
        with connect(self.dsn) as conn:
            started = time.perf_counter()
            for start in range(0, n, batch):
                conn.execute(self.sql["insert_many"], ([json.dumps({"i": i}) for i in range(start, min(start + batch, n))],))
            return time.perf_counter() - started

    def drain(self, batch: int, ready: Any, go: Any) -> int:
        done = 0
        with connect(self.dsn) as conn:
            ready.set()
            go.wait()
            while True:
                rows = conn.execute(self.sql["claim"], (batch,)).fetchall()
                if not rows:
                    return done
                if len(rows) == 1:
                    conn.execute(self.sql["done"], (rows[0][0],))
                else:
                    conn.execute(self.sql["done_many"], ([r[0] for r in rows],))
                done += len(rows)

    def listen(self, ready: Any, results: Any, count: int) -> None:
        with connect(self.dsn) as conn:
            conn.execute(f'LISTEN "{self.channel}"')
            ready.set()
            got = 0
            pg = conn.pgconn
            while got < count:
                rows = conn.execute(self.sql["claim"], (1,)).fetchall()
                if not rows:
                    select.select([conn.fileno()], [], [], 1.0)
                    pg.consume_input()
                    while pg.notifies() is not None:
                        pass
                    continue
                results.put(time.monotonic() - rows[0][1]["t"])
                conn.execute(self.sql["done"], (rows[0][0],))
                got += 1

    def produce(self) -> Callable[[dict[str, Any]], None]:
        conn = connect(self.dsn)
        return lambda payload: conn.execute(self.sql["insert_notify"], (json.dumps(payload),)) and None

    def count(self, n: int, batch: int) -> dict[str, tuple[float, float]]:
        """(statements, round trips) per call of each operation, as Nobroker.count has them."""
        sql = self.sql
        with counting() as tally, connect(self.dsn) as conn:
            out = {"enqueue": per_operation(tally, lambda i: conn.execute(sql["insert"], (json.dumps({"i": i}),)), n)}
            payloads = [json.dumps({"i": i}) for i in range(batch)]
            out["enqueue_batch"] = per_operation(tally, lambda i: conn.execute(sql["insert_many"], (payloads,)), n)
            rows: list[Any] = []
            out["lease"] = per_operation(tally, lambda i: rows.append(conn.execute(sql["claim"], (1,)).fetchall()), n)
            out["ack"] = per_operation(tally, lambda i: conn.execute(sql["done"], (rows[i][0][0],)), n)
            rows.clear()
            out["lease_batch"] = per_operation(
                tally, lambda i: rows.append(conn.execute(sql["claim"], (batch,)).fetchall()), n
            )
            out["ack_batch"] = per_operation(
                tally, lambda i: conn.execute(sql["done_many"], ([r[0] for r in rows[i]],)), n
            )
        return out


__all__ = ["Baseline", "BASELINE_TABLE", "CHANNEL", "connect", "quoted"]
