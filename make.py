#!/usr/bin/env python3
"""Every project task, with nothing but the Python standard library.

Owns: the task list (build, test, demo, ...) and the parallel test runner.
Imports: the standard library only; it runs from a fresh clone with a bare
Python, before anything is installed. The Makefile delegates here, so the two
cannot drift.

    python make.py              list the tasks
    python make.py TASK [ARGS]  run one; ARGS pass through to the task
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SRC = ROOT / "src"
TESTS = ROOT / "tests"

#: Test modules run side by side; the CI machine (and a developer's) has 2 cores.
DEFAULT_TEST_JOBS = 2
#: A test module that runs longer than this is killed and counted as failed,
#: so a hung crash test cannot eat CI's whole time budget (``--long`` allows 4x).
DEFAULT_MODULE_TIMEOUT = 15 * 60.0
LONG_TIMEOUT_FACTOR = 4
#: Where the durations of the last test run are kept, to start the longest first.
TEST_TIMES = ROOT / "build" / "test-times.json"
#: How the per-module runner hands its counts back to make.py.
COUNTS_ENV = "NOBROKER_TEST_COUNTS_FILE"

TaskFn = Callable[[list[str]], int]


@dataclass(frozen=True)
class Task:
    name: str
    help: str
    run: TaskFn


TASKS: dict[str, Task] = {}


def task(name: str, help: str) -> Callable[[TaskFn], TaskFn]:
    def register(fn: TaskFn) -> TaskFn:
        TASKS[name] = Task(name, help, fn)
        return fn

    return register


# ------------------------------------------------------------------ helpers
def project_env(**extra: str) -> dict[str, str]:
    """The environment for a child: src/ and the repo root importable, output unbuffered."""
    env = dict(os.environ)
    paths = [str(SRC), str(ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_python(args: list[str], **extra_env: str) -> int:
    """Run ``python ARGS`` from the repo root; returns its exit code (130 on Ctrl-C)."""
    try:
        return subprocess.call([sys.executable, *args], cwd=ROOT, env=project_env(**extra_env))
    except KeyboardInterrupt:
        return 130


def absent(what: str, path: str, hint: str) -> int:
    print(f"make.py: {what} is not in this checkout yet ({path} is missing).", file=sys.stderr)
    print(f"         {hint}", file=sys.stderr)
    return 1


# ------------------------------------------------------------------ tasks
@task("build", "dist/nobroker.pyz: the whole tool as one runnable file (stdlib zipapp)")
def build(args: list[str]) -> int:
    return run_python(["tools/build_pyz.py", *args])


@task("test", "the whole unittest suite, modules in parallel (-j N, --long, -v, MODULE...)")
def test(args: list[str]) -> int:
    return run_tests(args, quick=False)


@task("test-quick", "the suite without the slow sweeps (NOBROKER_QUICK=1)")
def test_quick(args: list[str]) -> int:
    return run_tests(args, quick=True)


@task("bench", "throughput and latency on this machine (python -m tools.bench; --pg for PostgreSQL)")
def bench(args: list[str]) -> int:
    if not (ROOT / "tools" / "bench" / "file.py").exists():
        return absent("the benchmark", "tools/bench/file.py", "It lands with the performance work.")
    return run_python(["-m", "tools.bench", *args])


@task("bench-md", "the benchmark as a Markdown table for README.md")
def bench_md(args: list[str]) -> int:
    return bench(["--md", *args])


@task("check-deps", "prove that only the standard library is imported (tools/check_deps.py)")
def check_deps(args: list[str]) -> int:
    return run_python(["tools/check_deps.py", *args])


@task("deps-proof", "regenerate deps-proof.txt from a fresh check-deps run")
def deps_proof(args: list[str]) -> int:
    proc = subprocess.run(
        [sys.executable, "tools/check_deps.py", *args],
        cwd=ROOT,
        env=project_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    (ROOT / "deps-proof.txt").write_text(proc.stdout, encoding="utf-8")
    print(proc.stdout, end="")
    print(f"make.py: wrote deps-proof.txt (check-deps exit code {proc.returncode})", file=sys.stderr)
    return proc.returncode


@task("demo", "the tour: enqueue, retry, crash, recover, DLQ, compact (examples/demo.py)")
def demo(args: list[str]) -> int:
    return run_python(["examples/demo.py", *args])


@task("video-demo", "the same tour paced for a screen recording (--scenes N, --fast)")
def video_demo(args: list[str]) -> int:
    return run_python(["examples/video_demo.py", *args])


@task("soak", "minutes of mixed load: memory and disk must stay bounded (python -m tests.soak)")
def soak(args: list[str]) -> int:
    if not (TESTS / "soak.py").exists():
        return absent("the soak run", "tests/soak.py", "It lands with the crash-safety work.")
    return run_python(["-m", "tests.soak", *args])


@task("screenshots", "PNGs of the docs site, playground and dashboard (tools/screenshots.py)")
def screenshots(args: list[str]) -> int:
    if not (ROOT / "tools" / "screenshots.py").exists():
        return absent("the screenshot tool", "tools/screenshots.py", "It lands with the web pages.")
    return run_python(["tools/screenshots.py", *args])


@task("clean", "remove caches, dist/, build/ and scratch queues")
def clean(args: list[str]) -> int:
    doomed: list[Path] = [ROOT / "dist", ROOT / "build", ROOT / ".nobroker", ROOT / "demo-queue", ROOT / ".mypy_cache"]
    doomed += ROOT.glob("**/__pycache__")
    doomed += ROOT.glob("src/*.egg-info")
    doomed += ROOT.glob("*.egg-info")
    removed = 0
    for path in sorted(set(doomed)):
        if ".git" in path.relative_to(ROOT).parts or not path.exists():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
        print(f"removed {path.relative_to(ROOT)}")
    print(f"clean: {removed} removed")
    return 0


# ------------------------------------------------------------------ test runner
@dataclass
class ModuleResult:
    module: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    output: str = ""
    problem: str = ""  # set when the module died without reporting counts
    skips: list[tuple[str, str]] = field(default_factory=list)  # (test id, reason) of each skipped test

    @property
    def ok(self) -> bool:
        return self.failed == 0 and not self.problem


def discover_modules(selected: list[str]) -> list[str]:
    """Dotted names of the test modules to run (every tests/**/test_*.py by default)."""
    if selected:
        names = []
        for item in selected:
            name = item.removesuffix(".py").replace(os.sep, ".").replace("/", ".")
            if "." not in name:  # a bare module name lives in tests/
                name = "tests." + name
            names.append(name)
        return names
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if "__pycache__" not in rel.parts:
            found.append(".".join(rel.parts))
    return found


def order_longest_first(modules: list[str]) -> list[str]:
    """Start the slowest modules first (last run's times; unknown ones first) so 2 cores stay busy."""
    try:
        times = json.loads(TEST_TIMES.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        times = {}
    return sorted(modules, key=lambda m: -float(times.get(m, float("inf"))))


def save_times(results: list[ModuleResult]) -> None:
    try:
        times = json.loads(TEST_TIMES.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        times = {}
    times.update({r.module: round(r.seconds, 2) for r in results if r.ok})
    try:
        TEST_TIMES.parent.mkdir(exist_ok=True)
        TEST_TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    except OSError:
        pass  # a read-only checkout still runs its tests; only the ordering hint is lost


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill a test module and every process it started (crash tests spawn children)."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, 9)
        else:
            proc.kill()
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


class ModuleRunner:
    def __init__(self, env: dict[str, str], timeout: float, verbose: bool) -> None:
        self.env = env
        self.timeout = timeout
        self.verbose = verbose
        self.lock = threading.Lock()
        self.live: set[subprocess.Popen[bytes]] = set()
        self.stopping = False

    def run(self, module: str) -> ModuleResult:
        result = ModuleResult(module)
        with tempfile.TemporaryDirectory(prefix="nobroker-make-") as tmp:
            counts_file = os.path.join(tmp, "counts.json")
            log_file = os.path.join(tmp, "output.txt")
            env = dict(self.env, **{COUNTS_ENV: counts_file})
            cmd = [sys.executable, str(ROOT / "make.py"), "_run-module", module]
            if self.verbose:
                cmd.append("-v")
            start = time.monotonic()
            with open(log_file, "wb") as log:
                with self.lock:
                    if self.stopping:
                        result.problem = "not run (interrupted)"
                        return result
                    proc = subprocess.Popen(
                        cmd,
                        cwd=ROOT,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                    self.live.add(proc)
                try:
                    code = proc.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    kill_group(proc)
                    code = None
                    result.problem = f"killed after the {self.timeout:.0f} s module timeout"
                finally:
                    with self.lock:
                        self.live.discard(proc)
            result.seconds = time.monotonic() - start
            result.output = Path(log_file).read_text(encoding="utf-8", errors="replace")
            try:
                counts = json.loads(Path(counts_file).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                if not result.problem:
                    result.problem = f"exited with code {code} before reporting its results"
            else:
                result.passed = counts["passed"]
                result.failed = counts["failed"]
                result.skipped = counts["skipped"]
                result.skips = [(str(test), str(reason)) for test, reason in counts.get("skips", [])]
                if code not in (0, 1) and not result.problem:
                    result.problem = f"exited with code {code} after its tests"
        if result.problem and result.failed == 0:
            result.failed = 1  # a module that could not report is one failure, never silence
        return result

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            live = list(self.live)
        for proc in live:
            kill_group(proc)


def run_tests(argv: list[str], *, quick: bool) -> int:
    parser = argparse.ArgumentParser(prog=f"make.py {'test-quick' if quick else 'test'}")
    parser.add_argument("modules", nargs="*", help="modules or tests: test_x, tests/test_x.py, tests.test_x.Case.test_y")
    parser.add_argument("-j", "--jobs", type=int, default=DEFAULT_TEST_JOBS, help="modules run at once")
    parser.add_argument("--long", action="store_true", help="the long variants (NOBROKER_LONG=1)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show every module's output")
    parser.add_argument("--timeout", type=float, default=None, help=f"seconds per module (default {DEFAULT_MODULE_TIMEOUT:.0f})")
    opts = parser.parse_args(argv)
    if opts.timeout is None:
        opts.timeout = DEFAULT_MODULE_TIMEOUT * (LONG_TIMEOUT_FACTOR if opts.long else 1)

    modules = discover_modules(opts.modules)
    if not modules:
        print("make.py: no test modules found under tests/", file=sys.stderr)
        return 1
    extra = {"NOBROKER_QUICK": "1"} if quick else {}
    if opts.long:
        extra["NOBROKER_LONG"] = "1"
    runner = ModuleRunner(project_env(**extra), opts.timeout, opts.verbose)
    jobs = max(1, opts.jobs)
    label = "test-quick" if quick else "test"
    print(f"{label}: {len(modules)} modules, {jobs} at a time" + (" (long)" if opts.long else ""), flush=True)

    results: list[ModuleResult] = []
    width = max(len(m) for m in modules)
    started = time.monotonic()

    def report(res: ModuleResult) -> None:
        with runner.lock:
            results.append(res)
            mark = "ok  " if res.ok else "FAIL"
            note = f"  ({res.problem})" if res.problem else ""
            print(
                f"[{len(results):>{len(str(len(modules)))}}/{len(modules)}] {mark} {res.module:<{width}}"
                f"  {res.passed} ok / {res.failed} failed / {res.skipped} skipped"
                f"  {res.seconds:6.1f} s{note}",
                flush=True,
            )
            if opts.verbose and res.output:
                print(res.output.rstrip("\n"), flush=True)

    def terminated(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # CI's time limit or `timeout`: take the module process groups down too

    signal.signal(signal.SIGTERM, terminated)
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(runner.run, m) for m in order_longest_first(modules)]
        for fut in futures:
            fut.add_done_callback(lambda f: report(f.result()))
        for fut in futures:
            fut.result()
    except KeyboardInterrupt:
        runner.stop_all()
        pool.shutdown(wait=False, cancel_futures=True)
        print("\nmake.py: interrupted", file=sys.stderr)
        return 130
    pool.shutdown()

    failing = [r for r in results if not r.ok]
    for res in sorted(failing, key=lambda r: r.module):
        print(f"\n{'=' * 70}\nFAILED {res.module}" + (f" ({res.problem})" if res.problem else ""))
        print("=" * 70)
        print(res.output.rstrip("\n") or "(no output)")
    save_times(results)
    for line in skip_summary(results):
        print(line)
    passed = sum(r.passed for r in results)
    failed = sum(r.failed for r in results)
    skipped = sum(r.skipped for r in results)
    elapsed = time.monotonic() - started
    print(f"\n{len(results)} modules in {elapsed:.1f} s" + (f"; failing: {', '.join(sorted(r.module for r in failing))}" if failing else ""))
    # The closing line stands alone in the plain form that CI systems read: "N passed, N failed, N skipped".
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)
    if passed + failed == 0:
        print("make.py: no test ran", file=sys.stderr)
        return 1
    return 1 if failed else 0


#: Places named per skip reason in the summary before "and N more".
SKIP_PLACES_SHOWN = 3


def skip_summary(results: list[ModuleResult]) -> list[str]:
    """The skips grouped by reason, most first: count, reason, and where (the test, or its modules)."""
    by_reason: dict[str, list[str]] = {}
    for res in results:
        for test_id, reason in res.skips:
            by_reason.setdefault(reason, []).append(test_id)
    if not by_reason:
        return []
    lines = ["\nskipped, by reason:"]
    for reason, tests in sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0])):
        if len(tests) == 1:
            places = tests
        else:  # many tests: name their modules (a test id is module.Class.test)
            places = sorted({test.rsplit(".", 2)[0] if test.count(".") >= 2 else test for test in tests})
        shown = ", ".join(places[:SKIP_PLACES_SHOWN])
        if len(places) > SKIP_PLACES_SHOWN:
            shown += f" and {len(places) - SKIP_PLACES_SHOWN} more"
        lines.append(f"  {len(tests):>4}  {reason}  ({shown})")
    return lines


def run_one_module(argv: list[str]) -> int:
    """Child side of ``test``: run one module with unittest, leave its counts in a file.

    Counts are per test, not per report: a test with three failing subtests is
    one failed test, and an error in setUpClass counts once.
    """
    import unittest

    verbose = "-v" in argv
    names = [a for a in argv if a != "-v"]

    class CountingResult(unittest.TextTestResult):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            self.outcome: dict[str, str] = {}
            self.reasons: dict[str, str] = {}

        def _mark(self, test: unittest.TestCase, outcome: str) -> None:
            key = test.id()
            rank = {"passed": 0, "skipped": 1, "failed": 2}
            if rank[outcome] >= rank[self.outcome.get(key, "passed")]:
                self.outcome[key] = outcome

        def addSuccess(self, test: unittest.TestCase) -> None:
            super().addSuccess(test)
            self._mark(test, "passed")

        def addExpectedFailure(self, test: unittest.TestCase, err: object) -> None:
            super().addExpectedFailure(test, err)  # type: ignore[arg-type]
            self._mark(test, "passed")

        def addSkip(self, test: unittest.TestCase, reason: str) -> None:
            super().addSkip(test, reason)
            self._mark(test, "skipped")
            self.reasons[test.id()] = reason

        def addFailure(self, test: unittest.TestCase, err: object) -> None:
            super().addFailure(test, err)  # type: ignore[arg-type]
            self._mark(test, "failed")

        def addError(self, test: unittest.TestCase, err: object) -> None:
            super().addError(test, err)  # type: ignore[arg-type]
            self._mark(test, "failed")

        def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
            super().addUnexpectedSuccess(test)
            self._mark(test, "failed")

        def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase, err: object) -> None:
            super().addSubTest(test, subtest, err)  # type: ignore[arg-type]
            if err is not None:
                self._mark(test, "failed")

    tally = {"passed": 0, "failed": 0, "skipped": 0}
    skips: list[list[str]] = []  # [test id, reason]: the summary groups them by reason
    try:
        suite = unittest.defaultTestLoader.loadTestsFromNames(names)
        runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2 if verbose else 1, resultclass=CountingResult)
        result = runner.run(suite)
        for test_id, outcome in result.outcome.items():  # type: ignore[attr-defined]
            tally[outcome] += 1
            if outcome == "skipped":
                skips.append([test_id, result.reasons.get(test_id, "")])  # type: ignore[attr-defined]
    except Exception:
        traceback.print_exc()
        tally["failed"] += 1
    with open(os.environ[COUNTS_ENV], "w", encoding="utf-8") as f:
        json.dump({**tally, "skips": skips}, f)
    return 1 if tally["failed"] else 0


# ------------------------------------------------------------------ entry
def list_tasks() -> None:
    print("usage: python make.py TASK [ARGS...]   (ARGS pass through to the task)\n")
    width = max(len(name) for name in TASKS)
    for name, t in TASKS.items():
        print(f"  {name:<{width}}  {t.help}")


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        list_tasks()
        return 0
    name, rest = argv[0], argv[1:]
    if name == "_run-module":
        return run_one_module(rest)
    if name not in TASKS:
        print(f"make.py: unknown task {name!r}\n", file=sys.stderr)
        list_tasks()
        return 2
    return TASKS[name].run(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
