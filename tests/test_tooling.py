"""The project's tooling does what README promises: make.py, the Makefile, the dependency proof, the manifest.

Owns: tests of make.py (its task list, its test runner's counts and summary
line), Makefile, tools/check_deps.py, deps-proof.txt and pyproject.toml. The
single-file build is tests/test_pyz.py's, examples/ tests/test_examples.py's.
Imports: the standard library, nobroker and tests.toolingsupport.

These run the tools as a user would, in subprocesses, from temp folders.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
import subprocess
import tempfile
import textwrap
import tomllib
import unittest
from pathlib import Path

import nobroker

from tests.toolingsupport import ROOT, run

#: Every task README documents; make.py may have more, never fewer.
DOCUMENTED_TASKS = (
    "build", "test", "test-quick", "bench", "bench-md", "check-deps", "deps-proof",
    "demo", "video-demo", "soak", "screenshots", "clean",
)


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


if __name__ == "__main__":
    unittest.main()
