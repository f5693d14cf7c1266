"""The benchmark suites of tools/bench/ run, and their command hands each flag to the suite it belongs to.

Imports: the standard library, tools.bench, tests.support.
The file storage's suites run once at toy sizes: that proves every
measurement still works against the library (they reach into it in places:
the snapshot flag, the generation a peer reads) and that the table keeps its
rows in order (the PostgreSQL suite's toy run is in test_postgres.py). No
figure is checked: benchmarks measure speed, tests never do.
"""

from __future__ import annotations

import importlib.util
import unittest
from unittest import mock

from tests.support import TempDirTestCase, slow
from tools.bench import file, pg
from tools.bench.plan import Plan
from tools.bench.report import render

#: Pending jobs of the toy run: just over what makes a close write a snapshot
#: (filestore.snapshot.SNAPSHOT_MIN_RECORDS), which the opening figures need.
TOY_PENDING = 21_000

FILE_FIGURES = [
    "enqueue, 1 thread",
    "enqueue, 8 threads",
    "enqueue, 4 processes",
    "lease_one + ack, 1 thread",
    "Worker(concurrency=8) drains 80",
    "Worker(processes=4) drains 80",
    "Worker(processes=4, concurrency=8) drains 80",
    "Worker(processes=",
    "enqueue_many, 1,000 per call",
    "memory per job, 21,000 pending",
    "stats(), 21,000 pending",
    "first lease_one() after open, 21,000 pending",
    "open a log of 21,000 records, after a clean close",
    "open a log of 21,000 records, no snapshot (after a crash)",
    "close writing the snapshot, 21,000 pending",
    "open a compacted queue of 21,000 jobs, after a clean close",
    "open a compacted queue of 21,000 jobs, no snapshot",
    "longest file-lock hold while compacting 21,000 jobs",
    "a peer's longest enqueue meanwhile",
    "compaction of 21,000 jobs (half done), a peer enqueuing",
    "the peer's first enqueue after the flip (re-reads the new generation)",
    "pickup by an idle worker, median",
    "pickup by an idle worker, p99",
    "idle worker CPU",
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


if __name__ == "__main__":
    unittest.main()
