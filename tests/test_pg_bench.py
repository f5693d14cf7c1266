"""The PostgreSQL benchmarks of tools/bench/ run end to end at tiny sizes, and the NOTIFY figure's ways do what they say.

Owns: ``PostgresBenchTests`` (pg, pg_scale and pg_notify: every figure
reported, none checked) and ``BenchWaysOfNotifying``. Imports: the standard
library, psycopg (through tests.pgsupport), the public ``nobroker`` API,
nobroker.postgres.connection (channel_name), tools.bench, tests.support and
tests.pgstoragesupport.
"""

from __future__ import annotations

import unittest

from nobroker import Queue
from tests.pgsupport import PostgresTestCase, connect, fresh_name, require_postgres
from tests.pgstoragesupport import PATIENCE
from tests.support import slow


@slow
class PostgresBenchTests(unittest.TestCase):
    """The PostgreSQL benchmark runs end to end (tiny sizes: this checks it works, not speed)."""

    def test_a_tiny_run_reports_every_figure(self) -> None:
        from tools.bench import pg as bench_pg

        dsn = require_postgres(self)
        rows = bench_pg.run(dsn, jobs=40, batch=10, workers=2, samples=5, rounds=1, progress=lambda text: None)
        keys = [row["key"] for row in rows]
        self.assertEqual(keys, ["enqueue_single", "enqueue_batch", "drain_1_one", "drain_1_batch", "drain_2_one",
                                "drain_2_batch", "worker_1", "worker_2", "pickup_median", "pickup_p99"])  # fmt: skip
        for row in rows:
            self.assertGreater(row["value"], 0, row)
            self.assertGreater(row["baseline"], 0, row)
        table = bench_pg.render(rows)
        self.assertIn("hand-written", table)
        self.assertIn("| figure |", bench_pg.render(rows, markdown=True))

    def test_a_tiny_run_at_scale_reports_every_figure(self) -> None:
        from tools.bench import pg_scale

        dsn = require_postgres(self)
        rows = pg_scale.run(
            dsn, progress=lambda text: None, size=3000, ahead=600, retrying=100, wanted=200, churned=1000, leases=10,
            reads=2,
        )  # fmt: skip
        keys = [row["key"] for row in rows]
        self.assertEqual(keys, [
            "lease_p50", "lease_p99", "lease_kinds_p50", "lease_kinds_p99", "lease_paused_p50", "lease_paused_p99",
            "lease_limited_p50", "lease_limited_p99", "stats", "len",
            *(f"list_{listing}" for listing in pg_scale.LISTINGS), "size_start", "size_churned", "size_ratio",
            "extend_p50", "extend_p99",
        ])  # fmt: skip
        for row in rows:
            self.assertGreater(row["value"], 0, row)
        self.assertIn("beside", rows[-2]["figure"])
        self.assertIn("| figure |", pg_scale.render(rows, markdown=True))

    def test_a_tiny_run_of_what_notify_costs_reports_each_way(self) -> None:
        from tools.bench import pg_notify

        dsn = require_postgres(self)
        rates = pg_notify.run(dsn, progress=lambda text: None, processes=2, jobs=5, rounds=1)
        self.assertEqual(list(rates), [key for key, _ in pg_notify.WAYS] + ["gate/none", "each/none"])
        for way, rate in rates.items():
            self.assertGreater(rate, 0, way)
        self.assertIn("as shipped / no NOTIFY:", pg_notify.render(rates, processes=2))


class BenchWaysOfNotifying(PostgresTestCase):
    """The NOTIFY figure's two ways the library does not ship send what they say: none, and one per enqueue."""

    def test_none_sends_no_notify_and_each_one_per_enqueue(self) -> None:
        from nobroker.postgres.naming import channel_name
        from tools.bench import pg_notify

        heard: dict[str, int] = {}
        for way in ("none", "each"):
            name = fresh_name("q")
            with connect() as ear, Queue(self.dsn, name, schema=self.schema, migrate=False) as q:
                channel = channel_name(self.schema, name)
                ear.execute(f'LISTEN "{channel}"')
                pg_notify.set_way(q, way)
                for i in range(5):
                    q.enqueue({"i": i})
                with connect() as other:
                    other.execute("SELECT pg_notify(%s, 'marker')", (channel,))
                count = 0
                for note in ear.notifies(timeout=PATIENCE):
                    if note.payload == "marker":
                        break
                    count += 1
                heard[way] = count
        self.assertEqual(heard, {"none": 0, "each": 5})


if __name__ == "__main__":
    unittest.main()
