"""The project's tooling does what README promises: make.py, the dependency proof, the pyz, the examples.

Owns: tests of make.py, Makefile, tools/check_deps.py, tools/build_pyz.py,
deps-proof.txt, pyproject.toml and examples/. Imports: the standard library,
nobroker, examples.handlers and tests.support.

These run the tools as a user would, in subprocesses, from temp folders.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
import traceback
import unittest
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import nobroker
from nobroker import Job, PermanentError

from examples import handlers
from tests.support import TempDirTestCase, slow

ROOT = Path(__file__).resolve().parent.parent
#: The promise in README and tools/build_pyz.py.
PYZ_BUDGET_BYTES = 192 * 1024
#: Every task README documents; make.py may have more, never fewer.
DOCUMENTED_TASKS = (
    "build", "test", "test-quick", "bench", "bench-md", "check-deps", "deps-proof",
    "demo", "video-demo", "soak", "screenshots", "clean",
)
#: Generous: these run on a shared 2-core machine next to other test modules.
SUBPROCESS_TIMEOUT = 120


def run(args: list[str], *, cwd: Path | str = ROOT, env: dict[str, str] | None = None,
        timeout: float = SUBPROCESS_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout,
    )


def bare_env() -> dict[str, str]:
    """The environment of a user who has installed nothing: no PYTHONPATH at all."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def make_job(payload: object, attempts: int = 1) -> Job:
    return Job(id="job-1", payload=payload, attempts=attempts)


def run_probe_package(package: str, modules: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    """``make.py test`` over a throwaway package of test modules (source by module name), outside tests/."""
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / package
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        for name, source in modules.items():
            (pkg / f"{name}.py").write_text(textwrap.dedent(source))
        env = dict(os.environ, PYTHONPATH=tmp)
        return run(["make.py", "test", *options, *(f"{package}.{name}" for name in modules)], env=env)


class MakePyTest(unittest.TestCase):
    def test_lists_every_task_with_one_line_each(self) -> None:
        proc = run(["make.py"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        listed = {line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ")}
        for name in DOCUMENTED_TASKS:
            self.assertIn(name, listed)
        for line in proc.stdout.splitlines():
            if line.startswith("  "):
                self.assertGreater(len(line.split(None, 1)), 1, f"task without a description: {line!r}")

    def test_unknown_task_is_a_usage_error(self) -> None:
        proc = run(["make.py", "no-such-task"])
        self.assertEqual(proc.returncode, 2)
        self.assertIn("unknown task", proc.stderr)

    def test_runner_counts_tests_not_reports_and_ends_with_the_summary_line(self) -> None:
        # A probe package outside tests/: one pass, one skip, a failure, three
        # failing subtests of one test (one failed test), a setUpClass error.
        proc = run_probe_package("tooling_probe", {"test_probe": """
                import unittest
                class Probe(unittest.TestCase):
                    def test_pass(self): pass
                    @unittest.skip("on purpose")
                    def test_skip(self): pass
                    def test_fail(self): self.fail("on purpose")
                    def test_subtests(self):
                        for i in range(3):
                            with self.subTest(i=i):
                                self.fail("on purpose")
                class Broken(unittest.TestCase):
                    @classmethod
                    def setUpClass(cls): raise RuntimeError("on purpose")
                    def test_never(self): pass
            """}, "-j", "1")
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        lines = proc.stdout.strip().splitlines()
        self.assertEqual(lines[-1], "1 passed, 3 failed, 1 skipped")
        self.assertRegex(proc.stdout, r"FAIL +tooling_probe\.test_probe +1 ok / 3 failed / 1 skipped")
        self.assertIn("FAILED tooling_probe.test_probe", proc.stdout)
        self.assertIn("setUpClass", proc.stdout)  # the failing module's output is shown
        self.assertIn("\nskipped, by reason:\n     1  on purpose  (tooling_probe.test_probe.Probe.test_skip)\n", proc.stdout)

    def test_the_summary_groups_skips_by_reason_with_where_they_are(self) -> None:
        module = """
            import unittest
            class Case(unittest.TestCase):
                @unittest.skip("no browser here")
                def test_one(self): pass
                @unittest.skip("no browser here")
                def test_two(self): pass
                def test_three(self): self.skipTest("once only")
                def test_ok(self): pass
        """
        proc = run_probe_package("tooling_skips", {"test_a": module, "test_b": module})
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        tail = proc.stdout.split("skipped, by reason:\n", 1)[1].splitlines()
        self.assertEqual(tail[0], "     4  no browser here  (tooling_skips.test_a, tooling_skips.test_b)")
        self.assertEqual(tail[1], "     2  once only  (tooling_skips.test_a, tooling_skips.test_b)")
        self.assertEqual(proc.stdout.strip().splitlines()[-1], "2 passed, 0 failed, 6 skipped")

    def test_module_that_cannot_import_counts_as_a_failure(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "tooling_broken_probe.py").write_text("import no_such_module_anywhere\n")
            env = dict(os.environ, PYTHONPATH=tmp)
            proc = run(["make.py", "test", "tooling_broken_probe.x"], env=env)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stdout.strip().splitlines()[-1], "0 passed, 1 failed, 0 skipped")

    def test_absent_optional_tasks_say_so(self) -> None:
        for task, path in (("soak", "tests/soak.py"), ("screenshots", "tools/screenshots.py"), ("bench", "tools/bench/file.py")):
            if (ROOT / path).exists():
                continue
            proc = run(["make.py", task])
            self.assertEqual(proc.returncode, 1)
            self.assertIn(path, proc.stderr)


class MakefileTest(unittest.TestCase):
    def test_every_target_delegates_to_make_py(self) -> None:
        targets: dict[str, str] = {}
        for line in (ROOT / "Makefile").read_text().splitlines():
            match = re.match(r"^([\w-]+):\s*;\s*(.*)$", line)
            if match:
                targets[match.group(1)] = match.group(2)
        self.assertEqual(set(targets) - {"help"}, set(DOCUMENTED_TASKS))
        for name, recipe in targets.items():
            expected = "make.py" if name == "help" else f"make.py {name}"
            self.assertRegex(recipe, rf"^@?\$\(PYTHON\) {re.escape(expected)}( \$\(ARGS\))?$")


class DependencyProofTest(unittest.TestCase):
    def test_check_deps_passes_on_the_repo(self) -> None:
        proc = run(["tools/check_deps.py"])
        self.assertEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("VERDICT: nobroker runs on the Python standard library alone.", proc.stdout)
        self.assertIn("required third-party dependencies: 0", proc.stdout)

    def test_committed_proof_matches_a_fresh_run(self) -> None:
        proc = run(["tools/check_deps.py"])
        committed = (ROOT / "deps-proof.txt").read_text(encoding="utf-8")
        if committed != proc.stdout:
            diff = difflib.unified_diff(committed.splitlines(), proc.stdout.splitlines(), "deps-proof.txt", "fresh run", lineterm="")
            self.fail("deps-proof.txt is stale: run `python make.py deps-proof` and commit it\n" + "\n".join(diff))

    def test_third_party_import_in_the_library_fails(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            lib = Path(tmp, "src", "nobroker")
            lib.mkdir(parents=True)
            (lib / "__init__.py").write_text("from .net import fetch\n")
            (lib / "net.py").write_text("import os\n\ndef fetch():\n    import requests\n    return requests\n")
            proc = run(["tools/check_deps.py", "--root", tmp])
        self.assertEqual(proc.returncode, 1, proc.stdout)
        self.assertIn("requests imported in src/nobroker/net.py", proc.stdout)
        self.assertIn("VERDICT: FAILED", proc.stdout)

    def test_optional_package_only_where_allowed(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            lib = Path(tmp, "src", "nobroker")
            Path(lib, "postgres").mkdir(parents=True)
            (lib / "postgres" / "storage.py").write_text("import psycopg\n")
            Path(tmp, "tests").mkdir()
            Path(tmp, "tests", "test_pg.py").write_text("import psycopg.rows\n")
            ok = run(["tools/check_deps.py", "--root", tmp])
            (lib / "queue.py").write_text("import importlib\nimportlib.import_module('psycopg')\n")
            bad = run(["tools/check_deps.py", "--root", tmp])
        self.assertEqual(ok.returncode, 0, ok.stdout)
        self.assertIn("optional third-party packages (1)", ok.stdout)
        self.assertEqual(bad.returncode, 1, bad.stdout)
        self.assertIn("psycopg imported in src/nobroker/queue.py: allowed only in", bad.stdout)

    def test_a_declared_dependency_fails(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["requests"]\n')
            proc = run(["tools/check_deps.py", "--root", tmp])
        self.assertEqual(proc.returncode, 1)
        self.assertIn("declares a required dependency: requests", proc.stdout)


class ManifestTest(unittest.TestCase):
    def test_pyproject_declares_nothing_and_matches_the_package(self) -> None:
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        self.assertEqual(project["dependencies"], [])
        self.assertEqual(project["version"], nobroker.__version__)
        self.assertEqual(project["scripts"], {"nobroker": "nobroker.cli:main"})
        self.assertEqual(project["optional-dependencies"], {"postgres": ["psycopg>=3.1"]})
        self.assertTrue((ROOT / "src" / "nobroker" / "py.typed").is_file())

    def test_every_data_file_of_the_package_is_listed_for_the_wheel(self) -> None:
        # setuptools puts a file that is not Python into the wheel only when package-data names it.
        globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["nobroker"]
        package = ROOT / "src" / "nobroker"
        data = [
            path.relative_to(package).as_posix()
            for path in package.rglob("*")
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
        ]
        self.assertIn("dashboard/page.js", data)
        self.assertEqual([name for name in data if not any(fnmatch.fnmatchcase(name, g) for g in globs)], [])


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


class HandlersTest(unittest.TestCase):
    def test_ok_and_echo_succeed(self) -> None:
        self.assertEqual(handlers.ok(make_job({"a": 1}, attempts=2)), {"ok": True, "attempt": 2})
        self.assertEqual(handlers.echo(make_job({"a": [1, 2]})), {"a": [1, 2]})

    def test_flaky_fails_the_first_attempts_then_succeeds(self) -> None:
        for attempt in (1, 2):
            with self.assertRaises(RuntimeError):
                handlers.flaky(make_job({}, attempts=attempt))
        self.assertEqual(handlers.flaky(make_job({}, attempts=3))["attempt"], 3)
        self.assertEqual(handlers.flaky(make_job({"fail_times": 0}, attempts=1))["ok"], True)
        with self.assertRaises(RuntimeError):
            handlers.flaky(make_job({"fail_times": 5}, attempts=5))

    def test_permanent_raises_permanent_error(self) -> None:
        with self.assertRaises(PermanentError):
            handlers.permanent(make_job("anything"))

    def test_slow_sleeps_for_the_payloads_seconds(self) -> None:
        start = time.monotonic()
        result = handlers.slow(make_job({"seconds": 0.2}))
        self.assertGreaterEqual(time.monotonic() - start, 0.2)
        self.assertEqual(result["slept"], 0.2)


class ExamplesTest(unittest.TestCase):
    @slow
    def test_demo_runs_to_completion(self) -> None:
        proc = run(["examples/demo.py"], env=bare_env(), timeout=180)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        for title in ("1. Enqueue", "4. A worker is killed mid-job", "5. Fencing", "8. Compaction", "10. Where it all lives"):
            self.assertIn(title, proc.stdout)
        self.assertIn("NotLeasedError", proc.stdout)
        self.assertIn("Done in", proc.stdout)

    def test_demo_keeps_the_queue_when_given_a_folder(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            proc = run(["examples/video_demo.py", "--fast", "--scenes", "1,7", "--dir", tmp], env=bare_env())
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            self.assertIn("7. Idempotent enqueue", proc.stdout)
            self.assertNotIn("2. Lease and ack", proc.stdout)
            self.assertTrue(os.listdir(tmp), "the queue files stay in --dir")

    def test_video_demo_fast_runs_one_scene(self) -> None:
        proc = run(["examples/video_demo.py", "--fast", "--scenes", "1"], env=bare_env())
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("1. Enqueue", proc.stdout)
        self.assertIn("Done in", proc.stdout)

    def test_video_demo_rejects_a_scene_that_does_not_exist(self) -> None:
        proc = run(["examples/video_demo.py", "--fast", "--scenes", "99"], env=bare_env())
        self.assertEqual(proc.returncode, 2)
        self.assertIn("scenes run from 1 to", proc.stderr)


if __name__ == "__main__":
    unittest.main()
