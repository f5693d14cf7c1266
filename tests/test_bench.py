"""The benchmark suites of tools/bench/ run, and their command hands each flag to the suite it belongs to.

Imports: the standard library, tools.bench, tests.support.
The file storage's suites run once at toy sizes: that proves every
measurement still works against the library (they reach into it in places:
the snapshot flag) and that the table keeps its rows in order (the
PostgreSQL suite's toy run is in test_pg_bench.py); the comparison with
sqlite3 runs in quick mode through the command, and the hand-written sqlite3
queue it measures is checked for what a queue must do. No figure is
checked: benchmarks measure speed, tests never do.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sqlite3
import unittest
from unittest import mock

from tests.support import TempDirTestCase, slow, wait_until
from tools.bench import engine, file, peers, pg
from tools.bench.plan import Plan
from tools.bench.report import render
from tools.bench.sqlite_queue import DATABASE, Leased, SqliteQueue

#: Pending jobs of the toy run: just over what makes a close write a snapshot
#: (filestore.snapshot.SNAPSHOT_MIN_RECORDS), which the opening figures need.
TOY_PENDING = 21_000

#: The comparison table's rows, in order (engine.py).
ENGINE_ROWS = [
    "enqueue, 1 process",
    "enqueue, 4 processes",
    "lease_one + ack, 1 process",
    "enqueue_many, 1,000 per call",
    "enqueue, 8 threads of 1 process",
]

FILE_FIGURES = [
    "Worker(concurrency=8) drains 80",
    "Worker(processes=4) drains 80",
    "Worker(processes=4, concurrency=8) drains 80",
    "Worker(processes=",
    "memory per job, 21,000 pending",
    "stats(), 21,000 pending",
    "first lease_one() after open, 21,000 pending",
    "open a log of 21,000 records, after a clean close",
    "open a log of 21,000 records, every record replayed (no snapshot, no checkpoint)",
    "close writing the snapshot, 21,000 pending",
    "open a compacted queue of 21,000 jobs, after a clean close",
    "open a compacted queue of 21,000 jobs, no snapshot",
    "compaction of 20,000 jobs (half done), two other processes open",
    "longest lock hold while compacting 20,000 jobs, as the compactor reports it",
    "a peer's longest enqueue while it compacts",
    "the peer's enqueue that followed the flip",
    "an idle process's first operation after another compacted 20,000 jobs",
    "the peer's longest enqueue while that first operation ran",
    "open 20,000 records after a crash (no snapshot)",
    "a peer's longest enqueue while it opens after the crash",
    "open 20,000 records with a snapshot (after a clean close)",
    "a peer's longest enqueue while it opens with the snapshot",
    "pickup by an idle worker, median",
    "pickup by an idle worker, p99",
    "idle worker CPU",
    "lease + ack without limits",
    "lease + ack under limits",
    "lease + ack without groups or limits",
    "lease + ack under a group limit, 8 groups",
    "lease + ack without limits, fsync=False",
    "lease + ack under limits, fsync=False",
    "lease + ack without groups or limits, fsync=False",
    "lease + ack under a group limit, 8 groups, fsync=False",
]


class CommandTest(unittest.TestCase):
    def test_the_plans_of_the_flags(self) -> None:
        self.assertEqual(Plan.of(quick=False, full=False, runs=5), Plan(runs=5, jobs=2000, drain_jobs=8000, pending=200_000, pickups=80))
        self.assertEqual(Plan.of(quick=True, full=False, runs=3), Plan(runs=3, jobs=800, drain_jobs=3200, pending=50_000, pickups=30))
        self.assertEqual(Plan.of(quick=False, full=True, runs=1), Plan(runs=1, jobs=2000, drain_jobs=20_000, pending=1_000_000, pickups=80))

    @unittest.skipIf(importlib.util.find_spec("psycopg") is None, "psycopg is not installed")
    def test_every_flag_but_pg_goes_to_the_postgresql_suite(self) -> None:
        with mock.patch.object(pg, "main", return_value=0) as pg_main:
            self.assertEqual(file.main(["--quick", "--pg", "--md", "--jobs", "10"]), 0)
        pg_main.assert_called_once_with(["--quick", "--md", "--jobs", "10"])

    @unittest.skipIf(importlib.util.find_spec("psycopg") is None, "psycopg is not installed")
    def test_only_names_the_postgresql_figures_to_measure(self) -> None:
        self.assertIsNone(pg._only(None, 4))
        per_job = {"enqueue_single", "drain_1_one", "drain_4_one", "worker_1", "worker_4", "pickup"}
        self.assertEqual(pg._only("per-job", 4), per_job)
        self.assertEqual(pg._only("per-job", 2), per_job - {"drain_4_one", "worker_4"} | {"drain_2_one", "worker_2"})
        self.assertEqual(pg._only("enqueue_batch, pickup", 4), {"enqueue_batch", "pickup"})
        known = {key for key, _, _, _ in pg.figures(1, 1, 4, 1)}
        self.assertLessEqual(per_job, known, "per-job names figures that exist")
        for bad in ("sideways", "", "per-job,drain_9_one"):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                pg._only(bad, 4)
        with mock.patch("sys.stderr"), self.assertRaises(SystemExit):
            pg.main(["--only", "sideways"])


class FileSuitesTest(TempDirTestCase):
    @slow
    def test_a_toy_run_reports_every_figure_in_order(self) -> None:
        figures = file.run(self.dir, Plan(runs=1, jobs=40, drain_jobs=80, pending=TOY_PENDING, pickups=3))
        self.assertEqual(len(figures), len(FILE_FIGURES), [f.name for f in figures])
        for figure, name in zip(figures, FILE_FIGURES):
            self.assertTrue(figure.name.startswith(name), (figure.name, name))
        table = render(figures, markdown=True).splitlines()
        self.assertEqual(table[0], "| figure | value | limit | ratio | target | verdict |")
        self.assertEqual(len(table), 2 + len(FILE_FIGURES))

    @slow
    def test_quick_mode_prints_the_comparison_table_beside_sqlite3(self) -> None:
        out = io.StringIO()
        # The other suites' toy run is the test above; here the command itself runs in quick mode.
        with mock.patch.object(file, "SUITES", ()), contextlib.redirect_stdout(out):
            self.assertEqual(file.main(["--quick", "--runs", "1", "--md", "--dir", self.dir]), 0)
        lines = out.getvalue().splitlines()
        self.assertTrue(lines[0].startswith("_nobroker bench (--quick, median of 1 runs) on "), lines[0])
        self.assertIn(f"payload {engine.PAYLOAD_TEXT} ({engine.PAYLOAD_BYTES} bytes)", lines[0])
        header = lines.index("| figure | limit | sqlite3 | nobroker | nobroker/limit | nobroker/sqlite3 "
                             "| CPU µs/job (sqlite3 / nobroker) | bytes/job on disk (payload 43) | target | verdict |")
        rows = lines[header + 2: header + 2 + len(ENGINE_ROWS)]
        for row, name in zip(rows, ENGINE_ROWS):
            self.assertTrue(row.startswith(f"| {name} |"), (row, name))
            self.assertRegex(row, r"\| (met|short) \|$")
        self.assertEqual(os.listdir(self.dir), [], "the scratch queues are removed")


class PeerWindowsTest(unittest.TestCase):
    """Which of a peer's enqueues (start, end, seconds in its fsync, followed a flip) a figure takes."""

    MARKS = [(1.0, 1.5, 0.1, False), (1.5001, 2.0, 0.2, True), (3.0, 3.002, 0.001, False), (4.0, 4.09, 0.0, True)]

    def test_the_enqueue_that_followed_the_flip_is_taken_out_of_the_others(self) -> None:
        rest, ms = peers._following(self.MARKS, 1.2)
        self.assertEqual(round(ms, 3), 499.9)
        self.assertEqual(rest, [self.MARKS[0], self.MARKS[2], self.MARKS[3]])
        self.assertEqual([round(v) for v in peers._within(rest, 0.0, 5.0)], [500, 2, 90])

    def test_only_a_following_after_the_start_counts(self) -> None:
        rest, ms = peers._following(self.MARKS, 2.5)
        self.assertEqual(round(ms, 3), 90.0)
        self.assertEqual(rest, self.MARKS[:3])


class SqliteQueueTest(TempDirTestCase):
    """The baseline is a real queue: what it is measured doing, it does correctly."""

    def test_a_round_trip_in_priority_then_fifo_order(self) -> None:
        with SqliteQueue(self.dir) as q:
            for i in range(3):
                q.enqueue({"n": i})
            q.enqueue({"urgent": True}, priority=5)
            self.assertEqual(q.enqueue_many([{"n": 3}, {"n": 4}]), 2)
            leased = [q.lease_one() for _ in range(7)]
            self.assertIsNone(leased[-1], "every job is leased: nothing more to lease")
            self.assertEqual([j.payload for j in leased[:-1] if j], [{"urgent": True}] + [{"n": i} for i in range(5)])
            self.assertEqual(q.count(), 6, "leased jobs stay until acked")
            for job in leased[:-1]:
                assert job is not None
                self.assertTrue(q.ack(job))
            self.assertEqual(q.count(), 0)
            self.assertIsNone(q.lease_one())

    def test_an_expired_lease_goes_to_the_next_worker_and_the_late_ack_is_refused(self) -> None:
        with SqliteQueue(self.dir, visibility_timeout=0.05) as q:
            q.enqueue({"n": 1})
            first = q.lease_one()
            assert first is not None
            leased: list[Leased] = []

            def leased_again() -> bool:
                job = q.lease_one()
                leased.extend([job] if job else [])
                return bool(leased)

            self.assertTrue(wait_until(leased_again), "the lease never expired")
            second = leased[0]
            self.assertEqual((second.id, second.token), (first.id, first.token + 1))
            self.assertFalse(q.ack(first), "a stale lease must not ack")
            self.assertTrue(q.ack(second))
            self.assertEqual(q.count(), 0)

    def test_two_connections_never_lease_one_job_twice(self) -> None:
        with SqliteQueue(self.dir) as a, SqliteQueue(self.dir) as b:
            a.enqueue_many([{"n": i} for i in range(20)])
            got = [q.lease_one() for _ in range(10) for q in (a, b)]
            self.assertEqual(sorted(j.payload["n"] for j in got if j), list(range(20)))
            self.assertIsNone(b.lease_one())

    def test_it_is_durable_as_measured_wal_and_synchronous_full(self) -> None:
        with SqliteQueue(self.dir) as q:
            self.assertEqual(q._db.execute("PRAGMA journal_mode").fetchone()[0], "wal")
            self.assertEqual(q._db.execute("PRAGMA synchronous").fetchone()[0], 2)  # FULL
            q.enqueue({"kept": True})
        db = sqlite3.connect(os.path.join(self.dir, DATABASE))
        self.addCleanup(db.close)
        self.assertEqual(db.execute("SELECT payload FROM jobs").fetchall(), [('{"kept": true}',)])
        db.close()
        with SqliteQueue(self.dir) as q:
            job = q.lease_one()
            self.assertEqual(job.payload if job else None, {"kept": True})


if __name__ == "__main__":
    unittest.main()
