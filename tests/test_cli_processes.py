"""The command line as real processes (``python -m nobroker``): exit codes, signals, a real `serve`.

Owns: exit codes as a shell sees them, Ctrl-C and SIGTERM on `work` (the
running job is finished; a second Ctrl-C quits at once), Ctrl-C on
`enqueue --count` (the ids enqueued are printed), and `serve` running the
real dashboard until Ctrl-C (creating nothing, refusing a public address
without a token). Imports: the standard library, nobroker, tests.support
and tests.clisupport.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import unittest
import urllib.request

import nobroker
from nobroker import JobState
from nobroker.cli import job_commands
from nobroker.filestore import admin as maintenance
from tests.clisupport import CliTestCase
from tests.support import records_end, wait_until


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
#: Generous: the machine is shared and two cores run many test processes.
PROCESS_TIMEOUT = 60.0


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("NOBROKER_DSN", None)
    env.update(extra)
    return env


SLOW_HANDLER = textwrap.dedent(
    """
    import os, time

    def handle(job):
        marks = os.environ["CLI_TEST_MARKS"]
        open(os.path.join(marks, "started"), "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(marks, "go")) and time.monotonic() < deadline:
            time.sleep(0.02)
        return "finished"
    """
)


class ProcessTests(CliTestCase):
    """Real processes: exit codes as a shell sees them, and Ctrl-C on `work`."""

    def run_process(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nobroker", *args],
            capture_output=True, text=True, env=subprocess_env(**env), timeout=PROCESS_TIMEOUT, cwd=self.dir,
        )

    def test_exit_codes(self) -> None:
        version = self.run_process("--version")
        self.assertEqual(version.returncode, 0)
        self.assertEqual(version.stdout.strip(), f"nobroker {nobroker.__version__}")
        enqueued = self.run_process("--dir", self.qdir, "--json", "enqueue", '{"a": 1}')
        self.assertEqual(enqueued.returncode, 0, enqueued.stderr)
        self.assertEqual(json.loads(enqueued.stdout)["payload"], {"a": 1})
        missing = self.run_process("--dir", self.qdir, "get", "no-such-job")
        self.assertEqual(missing.returncode, 1)
        self.assertTrue(missing.stderr.startswith("nobroker: error: "), missing.stderr)
        self.assertNotIn("Traceback", missing.stderr)
        usage = self.run_process("--dir", self.qdir, "list", "--state", "bogus")
        self.assertEqual(usage.returncode, 2)
        self.assertIn("usage:", usage.stderr)

    def start_slow_worker(self) -> tuple[subprocess.Popen[str], str, str]:
        marks = os.path.join(self.dir, "marks")
        os.mkdir(marks)
        with open(os.path.join(self.dir, "slow_cli_handler.py"), "w") as f:
            f.write(SLOW_HANDLER)
        job_id = self.enqueue("slow")["id"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "nobroker", "--dir", self.qdir, "work", "slow_cli_handler:handle"],
            cwd=self.dir, env=subprocess_env(CLI_TEST_MARKS=marks),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

        def cleanup() -> None:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()

        self.addCleanup(cleanup)
        started = wait_until(lambda: os.path.exists(os.path.join(marks, "started")) or proc.poll() is not None,
                             timeout=PROCESS_TIMEOUT)
        self.assertTrue(started and proc.poll() is None, "the worker never started the job")
        return proc, marks, job_id

    @staticmethod
    def next_stderr_line(proc: subprocess.Popen[str]) -> str:
        """The next line the process writes to stderr that is not blank (blocks until then)."""
        assert proc.stderr is not None
        line = "\n"
        while line and not line.strip():
            line = proc.stderr.readline()
        return line

    def test_ctrl_c_on_work_finishes_the_running_job_and_exits_130(self) -> None:
        proc, marks, job_id = self.start_slow_worker()
        proc.send_signal(signal.SIGINT)
        # Let the handler finish only once the stop was noticed, so this
        # checks that a stopping worker still acks what it was running.
        self.assertIn("stopping", self.next_stderr_line(proc))
        open(os.path.join(marks, "go"), "w").close()
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(proc.returncode, 130, err)
        self.assertIn("worker stopped: leased 1, succeeded 1", out)
        self.assertEqual(self.queue().get(job_id).state, JobState.DONE)

    def test_second_ctrl_c_quits_at_once(self) -> None:
        proc, marks, job_id = self.start_slow_worker()
        proc.send_signal(signal.SIGINT)
        self.assertIn("stopping", self.next_stderr_line(proc))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(proc.returncode, 130, err)
        self.assertNotIn("Traceback", err)
        # Not acked: the lease stays until it expires and the job runs again.
        self.assertEqual(self.queue().get(job_id).state, JobState.LEASED)

    def start_serve(self) -> tuple[subprocess.Popen[str], str, str]:
        """`nobroker serve --port 0` as a real process: (process, its first line, the page's URL)."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "nobroker", "--dir", self.qdir, "serve", "--port", "0"],
            cwd=self.dir, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        line = proc.stdout.readline()  # type: ignore[union-attr]
        self.assertIn("http://127.0.0.1:", line, proc.stderr.read() if not line else "")  # type: ignore[union-attr]
        return proc, line, line.split(" at ")[1].split()[0]

    def test_serve_runs_the_real_dashboard_until_ctrl_c(self) -> None:
        self.enqueue('{"shown": "on the page"}')
        proc, _line, url = self.start_serve()
        with urllib.request.urlopen(url + "api/stats", timeout=PROCESS_TIMEOUT) as response:
            self.assertEqual(response.status, 200)
            self.assertIn(b'"ready"', response.read())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(proc.returncode, 130, err)
        self.assertNotIn("Traceback", err)

    def test_ctrl_c_on_enqueue_count_prints_the_ids_enqueued_and_exits_130(self) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nobroker", "--dir", self.qdir, "enqueue", "x", "--count", str(job_commands.MAX_ENQUEUE_COUNT)],
            cwd=self.dir, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        # Interrupt once the first batch is on disk: long before a million jobs are.
        self.assertTrue(wait_until(lambda: os.path.exists(self.log_path()) and records_end(self.log_path()) > 4096,
                                   timeout=PROCESS_TIMEOUT))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(proc.returncode, 130, err)
        ids = out.split()
        self.assertGreater(len(ids), 0)
        self.assertLess(len(ids), job_commands.MAX_ENQUEUE_COUNT)
        self.assertEqual(len(ids), len(self.queue()), "every job in the queue is reported, and only those")
        self.assertIn(f"interrupted: enqueued {len(ids):,} of {job_commands.MAX_ENQUEUE_COUNT:,} jobs", err)
        self.assertNotIn("Traceback", err)

    def test_serve_on_a_folder_without_a_default_queue_creates_nothing(self) -> None:
        self.ok("--queue", "emails", "enqueue", '{"shown": true}')
        proc, line, url = self.start_serve()
        self.assertIn("dashboard for queue 'emails'", line)
        with urllib.request.urlopen(url + "api/queues", timeout=PROCESS_TIMEOUT) as response:
            self.assertEqual(json.loads(response.read()), {"queues": ["emails"], "default": "emails"})
        with urllib.request.urlopen(url + "api/stats", timeout=PROCESS_TIMEOUT) as response:
            self.assertEqual(json.loads(response.read())["stats"]["total"], 1)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(maintenance.list_queues(self.qdir), ["emails"])

    def test_serve_on_a_public_address_without_a_token_is_refused(self) -> None:
        self.enqueue("a")
        refused = self.run_process("--dir", self.qdir, "serve", "--host", "0.0.0.0")
        self.assertEqual(refused.returncode, 1)
        self.assertTrue(refused.stderr.startswith("nobroker: error: "), refused.stderr)
        self.assertIn("token", refused.stderr)

    def test_sigterm_on_work_stops_gracefully_with_0(self) -> None:
        proc, marks, job_id = self.start_slow_worker()
        proc.send_signal(signal.SIGTERM)
        self.assertIn("stopping", self.next_stderr_line(proc))
        open(os.path.join(marks, "go"), "w").close()
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(self.queue().get(job_id).state, JobState.DONE)


if __name__ == "__main__":
    unittest.main()
