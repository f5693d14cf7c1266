"""The single-file build, nobroker.pyz: under its budget, only the package inside, and it works as the clone does.

Owns: ``PyzTest``: tools/build_pyz.py builds it (under PYZ_BUDGET_BYTES, the
package's files exactly), slimming keeps every line, statement and the
docstrings help shows, and the bundle run from another folder with nothing
on PYTHONPATH shows source lines in tracebacks, prints the same help,
enqueues, keeps its exit codes, benchmarks, serves the dashboard and runs
the example handlers from the clone. Imports: the standard library,
tests.support and tests.toolingsupport (tools.build_pyz, tools.pyz_bundle
and nobroker.postgres.schema inside the tests).

These run the tools as a user would, in subprocesses, from temp folders.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import traceback
import unittest
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from tests.support import TempDirTestCase
from tests.toolingsupport import ROOT, SUBPROCESS_TIMEOUT, bare_env, run

#: The promise in README and tools/build_pyz.py.
PYZ_BUDGET_BYTES = 208 * 1024


class PyzTest(TempDirTestCase):
    """The single-file build, run from a folder that is not the clone, with nothing on PYTHONPATH."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.build_dir = tempfile.TemporaryDirectory(prefix="nobroker-pyz-test-")
        cls.pyz = Path(cls.build_dir.name) / "nobroker.pyz"
        cls.build = run(["tools/build_pyz.py", "--output", str(cls.pyz)])

    @classmethod
    def tearDownClass(cls) -> None:
        cls.build_dir.cleanup()

    def pyz_run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run([str(self.pyz), *args], cwd=self.dir, env=bare_env())

    def test_builds_under_budget_with_only_the_package_inside(self) -> None:
        from tools.build_pyz import IMPORTER_FILE, MAIN_FILE, bundled_files
        from tools.pyz_bundle import BLOB

        self.assertEqual(self.build.returncode, 0, self.build.stdout + self.build.stderr)
        self.assertLess(self.pyz.stat().st_size, PYZ_BUDGET_BYTES)
        with zipfile.ZipFile(self.pyz) as bundle:
            self.assertEqual(sorted(bundle.namelist()), sorted([MAIN_FILE, IMPORTER_FILE, BLOB]))
            self.assertIn("nobroker.cli", bundle.read(MAIN_FILE).decode())
        names = list(bundled_files(self.pyz))
        self.assertIn("nobroker/__init__.py", names)
        self.assertIn("nobroker/cli/__init__.py", names)
        self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc")])
        self.assertFalse([n for n in names if not n.startswith("nobroker/")])
        source = {p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "nobroker").rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts}  # fmt: skip
        self.assertEqual(set(names), source, "the bundle holds exactly the package's files")

    def test_a_traceback_from_the_bundle_shows_the_source_line(self) -> None:
        # linecache asks the bundle's loader for the source: a user's traceback reads as one from a clone.
        probe = run(
            ["-c",
             "import sys, traceback, zipimport\n"
             "bundle = zipimport.zipimporter(sys.argv[1])\n"
             "importer = bundle.load_module('_nobroker_bundle')\n"
             "importer.install(bundle.archive, bundle.get_data('nobroker.bundle'))\n"
             "from nobroker import Queue\n"
             "try:\n    Queue(sys.argv[2], 'not a name')\n"
             "except ValueError:\n    traceback.print_exc()\n",
             str(self.pyz), str(Path(self.dir, "q"))],
            cwd=self.dir, env=bare_env(),
        )  # fmt: skip
        self.assertIn("nobroker.pyz/nobroker/queue/base.py", probe.stderr)
        frames = [line for line in probe.stderr.splitlines() if "nobroker.pyz/nobroker/" in line]
        self.assertTrue(frames)
        after = probe.stderr.splitlines()
        shown = [after[after.index(f) + 1] for f in frames]
        self.assertTrue(all(line.startswith("    ") and line.strip() for line in shown), probe.stderr)

    def test_help_runs_from_another_folder_and_matches_the_source(self) -> None:
        proc = self.pyz_run("--help")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("enqueue", proc.stdout)
        source = run(["-m", "nobroker", "--help"], cwd=self.dir, env=dict(bare_env(), PYTHONPATH=str(ROOT / "src")))
        self.assertEqual(proc.stdout, source.stdout, "slimming the bundle changed the help text")

    def test_slimming_keeps_every_line_in_place(self) -> None:
        from tools.build_pyz import slim_source

        source = textwrap.dedent('''\
            """Module summary.

            More words that the bundle drops.
            """
            # a dropped remark
            def f(x):  # trailing comment
                """Say "hi" \\ then fail.

                Details.
                """
                s = "# not a comment"
                raise ValueError(s)
        ''')
        slimmed = slim_source(source)
        self.assertEqual(slimmed.count("\n"), source.count("\n"))
        self.assertNotIn("dropped remark", slimmed)
        self.assertNotIn("Details", slimmed)
        space: dict[str, object] = {}
        exec(compile(slimmed, "m.py", "exec"), space)
        self.assertEqual(space["__doc__"].splitlines()[0], "Module summary.")  # type: ignore[union-attr]
        self.assertEqual(space["f"].__doc__.splitlines()[0], 'Say "hi" \\ then fail.')  # type: ignore[union-attr]
        try:
            space["f"](1)  # type: ignore[operator]
        except ValueError as exc:
            self.assertEqual(str(exc), "# not a comment")
            self.assertEqual(traceback.extract_tb(exc.__traceback__)[-1].lineno, 12)
        else:
            self.fail("f did not raise")

    def test_slimming_keeps_the_first_line_of_the_docstrings_help_shows_only(self) -> None:
        from tools.build_pyz import slim_source

        source = textwrap.dedent('''\
            """Module."""
            class Public:
                """Public class.

                More.
                """
                def method(self):
                    """Public method."""
                    def inner():
                        """Nested."""
                    return inner
                def __repr__(self):
                    """Dunder."""
                    return "x"
                def _private(self):
                    """Private method."""
            class _Hidden:
                """Hidden class."""
                def method(self):
                    """Method of a hidden class."""
            def _helper():
                """Helper."""
        ''')
        space: dict[str, Any] = {}
        exec(compile(slim_source(source), "m.py", "exec"), space)
        public, hidden = space["Public"], space["_Hidden"]
        self.assertEqual(
            [space["__doc__"], public.__doc__, public.method.__doc__, public.__repr__.__doc__],
            ["Module.", "Public class.\n\n\n", "Public method.", "Dunder."],
        )
        self.assertEqual(
            [public.method(None).__doc__, public._private.__doc__, hidden.__doc__, hidden.method.__doc__, space["_helper"].__doc__],
            [""] * 5,
        )

    def test_slimming_sql_keeps_every_statement_on_its_line(self) -> None:
        from nobroker.postgres.schema import split_statements as _statements
        from tools.build_pyz import slim_sql

        paths = sorted((ROOT / "src" / "nobroker" / "postgres" / "sql").glob("*.sql"))
        self.assertTrue(paths, "no migration files found to slim")
        for path in paths:
            with self.subTest(path.name):
                text = path.read_text(encoding="utf-8")
                slimmed = slim_sql(text)
                self.assertEqual(slimmed.splitlines(), ["" if line.lstrip().startswith("--") else line for line in text.splitlines()])
                self.assertNotIn("\n--", slimmed)

                def code(statements: list[str]) -> list[list[str]]:
                    return [[ln for ln in st.splitlines() if ln.strip() and not ln.lstrip().startswith("--")] for st in statements]

                self.assertEqual(code(_statements(slimmed)), code(_statements(text)))

    def test_enqueue_then_stats_against_a_temp_queue(self) -> None:
        enq = self.pyz_run("--dir", "q", "enqueue", '{"resize": "photo.jpg"}', "--priority", "5")
        self.assertEqual(enq.returncode, 0, enq.stderr)
        stats = self.pyz_run("--dir", "q", "--json", "stats")
        self.assertEqual(stats.returncode, 0, stats.stderr)
        counts = json.loads(stats.stdout)
        counts = counts.get("stats", counts)
        self.assertEqual(counts["ready"], 1)
        self.assertEqual(counts["total"], 1)
        self.assertTrue(any(name.endswith(".log") for name in os.listdir(Path(self.dir, "q"))))

    def test_exit_codes_survive_the_bundle(self) -> None:
        # zipapp's own main= would call cli.main() and drop its return value.
        missing = self.pyz_run("--dir", "no-such-queue", "stats")
        self.assertEqual(missing.returncode, 1, missing.stdout + missing.stderr)
        self.assertIn("nobroker: error:", missing.stderr)
        usage = self.pyz_run("enqueue")
        self.assertEqual(usage.returncode, 2, usage.stdout + usage.stderr)


    def test_bench_runs_in_the_bundle(self) -> None:
        proc = self.pyz_run("--json", "bench", "--seconds", "0.05")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        figures = json.loads(proc.stdout)["figures"]
        self.assertEqual([f["name"] for f in figures], ["enqueue, 1 thread", "lease_one + ack, 1 thread"])
        self.assertTrue(all(f["per_second"] > 0 and f["disk_per_second"] > 0 for f in figures))
        self.assertEqual(os.listdir(self.dir), [], "the scratch queue is removed")
        from tools.build_pyz import bundled_files

        names = bundled_files(self.pyz)
        self.assertIn("nobroker/cli/bench.py", names)
        self.assertFalse([n for n in names if not n.startswith("nobroker/")], "the benchmark suites stay out")

    def test_serve_serves_the_page_from_the_bundle(self) -> None:
        # The page is three data files of the package: the bundle carries them, the server reads them from the blob.
        from tools.build_pyz import bundled_files

        self.assertLessEqual({f"nobroker/dashboard/page.{ext}" for ext in ("html", "css", "js")}, set(bundled_files(self.pyz)))
        self.assertEqual(self.pyz_run("--dir", "q", "enqueue", '"shown"').returncode, 0)
        proc = subprocess.Popen(
            [sys.executable, str(self.pyz), "--dir", "q", "serve", "--port", "0"],
            cwd=self.dir, env=bare_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        line = proc.stdout.readline()  # type: ignore[union-attr]
        self.assertIn(" at http://127.0.0.1:", line, proc.stderr.read() if not line else "")  # type: ignore[union-attr]
        with urllib.request.urlopen(line.split(" at ")[1].split()[0], timeout=SUBPROCESS_TIMEOUT) as response:
            nonce = re.search(r"script-src 'nonce-([A-Za-z0-9_-]+)'", response.headers["Content-Security-Policy"])
            page = response.read().decode("utf-8")
        self.assertIsNotNone(nonce)
        assert nonce is not None
        self.assertIn(f'<style nonce="{nonce.group(1)}">\n:root', page)
        self.assertIn(f'<script nonce="{nonce.group(1)}">\n"use strict";', page)
        self.assertNotIn("{{", page)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=SUBPROCESS_TIMEOUT)

    def test_work_runs_the_example_handlers_from_the_clone(self) -> None:
        queue_dir = str(Path(self.dir, "q"))
        for payload in ('{"n": 1}', '{"n": 2}'):
            self.assertEqual(self.pyz_run("--dir", queue_dir, "enqueue", payload).returncode, 0)
        work = run([str(self.pyz), "--dir", queue_dir, "work", "examples.handlers:echo", "--max-jobs", "2"], env=bare_env())
        self.assertEqual(work.returncode, 0, work.stdout + work.stderr)
        done = json.loads(self.pyz_run("--dir", queue_dir, "--json", "list", "--state", "done").stdout)
        jobs = done.get("jobs", done) if isinstance(done, dict) else done
        self.assertEqual(sorted(job["result"]["n"] for job in jobs), [1, 2])


if __name__ == "__main__":
    unittest.main()
