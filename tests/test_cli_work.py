"""`nobroker work` with a handler from the current folder, and the `counters` and `workers` listings.

Owns: a line per finished job (text, JSON lines, none with -q), --kind,
--idle-timeout, --timeout and `enqueue --timeout`, a snoozed job, bad
handler specs and handler modules that fail to import (one line, nothing
opened), and each kind's counters and the workers' announcements (control
characters escaped). Imports: the standard library, nobroker,
tests.clisupport and tests.semantics_roster (info, inside one test).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import unittest
import uuid

from nobroker import JobState
from tests.clisupport import CliTestCase


# ---------------------------------------------------------------- work
HANDLER_MODULE = textwrap.dedent(
    """
    import threading

    import nobroker

    #: What a "slow" job waits on: set by the test once it is done with the abandoned thread.
    release = threading.Event()

    def handle(job):
        if job.payload == "slow":
            release.wait(30)
        if job.payload == "fail":
            raise RuntimeError("it failed")
        if job.payload == "permanent":
            raise nobroker.PermanentError("never works")
        if job.payload == "snooze":
            raise nobroker.Snooze(3600)
        return {"echo": job.payload}

    class Holder:
        method = staticmethod(handle)

    not_callable = 42
    """
)


class WorkTests(CliTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.module = f"cli_handlers_{uuid.uuid4().hex[:8]}"
        self.workdir = os.path.join(self.dir, "app")
        os.mkdir(self.workdir)
        with open(os.path.join(self.workdir, self.module + ".py"), "w") as f:
            f.write(HANDLER_MODULE)
        saved_path = list(sys.path)
        cwd = os.getcwd()
        os.chdir(self.workdir)

        def restore() -> None:
            os.chdir(cwd)
            sys.path[:] = saved_path
            sys.modules.pop(self.module, None)

        self.addCleanup(restore)

    def test_work_runs_the_handler_from_the_current_folder(self) -> None:
        ok_job = self.enqueue("hello")
        self.enqueue("fail", "--max-attempts", "1")
        self.enqueue("permanent")
        lines = [json.loads(line) for line in self.ok("--json", "work", f"{self.module}:handle", "--max-jobs", "3",
                                                      "-c", "2").out.splitlines()]  # fmt: skip
        *jobs, stats = lines
        self.assertEqual(stats["succeeded"], 1)
        self.assertEqual(stats["leased"], 3)
        self.assertEqual(self.queue().get(ok_job["id"]).result, {"echo": "hello"})
        self.assertEqual(self.queue().stats().dead, 2)
        # One JSON line per job, with its outcome, kind, attempt and duration.
        by_id = {line["id"]: line for line in jobs}
        self.assertEqual(len(jobs), 3)
        self.assertEqual(by_id[ok_job["id"]]["outcome"], "succeeded")
        self.assertEqual(sorted(line["outcome"] for line in jobs), ["dead", "dead", "succeeded"])
        for line in jobs:
            self.assertEqual((line["kind"], line["attempts"]), ("default", 1))
            self.assertGreaterEqual(line["duration"], 0.0)
            self.assertRegex(line["time"], r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")
        self.assertIn("never works", [line for line in jobs if "never works" in line.get("error", "")][0]["error"])

    def test_work_prints_a_line_per_job_and_q_prints_none(self) -> None:
        job = self.enqueue("hello", "--kind", "mail")
        failing = self.enqueue("fail", "--max-attempts", "2")
        result = self.ok("work", f"{self.module}:handle", "--max-jobs", "2")
        lines = result.out.splitlines()
        self.assertEqual(len(lines), 3, result.out)
        self.assertRegex(lines[0] + lines[1], rf"\d\d:\d\d:\d\d\.\d{{3}}  {job['id']}  mail  succeeded  [\d.]+ ms")
        self.assertIn(f"  {failing['id']}  default  failed     ", lines[0] + lines[1])
        self.assertIn("RuntimeError: it failed", lines[0] + lines[1])
        self.assertTrue(lines[2].startswith("worker stopped: leased 2"))
        # -q: only the counts.
        self.enqueue("hello")
        quiet = self.ok("work", f"{self.module}:handle", "--max-jobs", "1", "-q")
        self.assertEqual(quiet.out.splitlines(), ["worker stopped: leased 1, succeeded 1, failed 0, dead 0, lost leases 0"])

    def test_a_job_line_shows_control_characters_escaped(self) -> None:
        self.enqueue("hello", "--kind", "k\x1b[2Jx")
        out = self.ok("work", f"{self.module}:handle", "--max-jobs", "1").out
        self.assertNotIn("\x1b", out)
        self.assertIn("k\\x1b[2Jx", out)

    def test_work_reports_a_snoozed_job(self) -> None:
        later = self.enqueue("snooze")
        result = self.ok("work", f"{self.module}:handle", "--max-jobs", "1")
        self.assertIn("worker stopped: leased 1, succeeded 0, failed 0, dead 0, lost leases 0, snoozed 1", result.out)
        job = self.queue().get(later["id"])
        self.assertEqual((job.state, job.attempts), (JobState.READY, 0))

    def test_work_idle_timeout_and_kinds_and_dotted_callable(self) -> None:
        self.enqueue("skip", "--kind", "other")
        wanted = self.enqueue("take", "--kind", "mine")
        result = self.ok("work", f"{self.module}:Holder.method", "--kind", "mine", "--idle-timeout", "0.3")
        self.assertIn("worker stopped: leased 1, succeeded 1", result.out)
        self.assertEqual(self.queue().get(wanted["id"]).state, JobState.DONE)
        self.assertEqual(self.queue().stats().ready, 1)

    def test_counters_prints_each_kinds_counters_and_json(self) -> None:
        self.enqueue("x")
        self.assertEqual(self.ok_json("counters"), {"queue": "default", "counters": {
            "default": {"enqueued": 1, "succeeded": 0, "failed": 0, "dead": 0, "cancelled": 0}}})  # fmt: skip
        q = self.queue()
        q.enqueue("a", kind="mail\x1b[2J")
        q.ack(q.lease_one(kinds=["mail\x1b[2J"]))  # type: ignore[arg-type]
        q.cancel(q.enqueue("b").id)
        out = self.ok("counters").out
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["kind", "enqueued", "succeeded", "failed", "dead", "cancelled"])
        self.assertEqual(lines[1].split(), ["default", "2", "0", "0", "0", "1"])
        self.assertEqual(lines[2].split(), ["mail\\x1b[2J", "1", "1", "0", "0", "0"])  # a control character escaped
        self.assertNotIn("\x1b", out)

    def test_workers_lists_the_announcements_and_shows_the_gone_ones(self) -> None:
        import dataclasses
        import time

        from nobroker.announcements import GONE_AFTER
        from tests.semantics_roster import info

        self.enqueue("x")
        self.assertIn("no worker has announced itself", self.ok("workers").out)
        q = self.queue()
        now = time.time()
        live = info(name="mailer\x1b[2J", host="box-1", kinds=("mail",), heartbeat_at=now, started_at=now - 90)
        gone = dataclasses.replace(info(name="old", host="box-2", kinds=None), heartbeat_at=now - GONE_AFTER - 5,
                                   started_at=now - 600)  # fmt: skip
        q.announce_worker(live)
        q.announce_worker(gone)
        out = self.ok("workers").out
        lines = out.splitlines()
        self.assertEqual(len(lines), 3, out)
        self.assertTrue(lines[1].startswith("old "), lines)  # the oldest start first
        self.assertIn("GONE", lines[1])
        self.assertNotIn("GONE", lines[2])
        self.assertIn("mailer\\x1b[2J", lines[2])  # a control character is shown escaped, never sent
        self.assertNotIn("\x1b", out)
        self.assertIn("2/4", lines[2])
        listed = self.ok_json("workers")
        self.assertEqual([(w["name"], w["gone"], w["kinds"]) for w in listed["workers"]],  # type: ignore[index]
                         [("old", True, None), ("mailer\x1b[2J", False, ["mail"])])  # fmt: skip

    def test_work_timeout_and_enqueue_timeout(self) -> None:
        by_worker = self.enqueue("slow", "--max-attempts", "1")
        by_job = self.enqueue("slow", "--max-attempts", "1", "--timeout", "0.2")
        self.assertEqual(by_job["timeout"], 0.2)
        self.assertNotIn("timeout", by_worker)
        self.addCleanup(lambda: sys.modules[self.module].release.set() if self.module in sys.modules else None)
        out = self.ok("--json", "work", f"{self.module}:handle", "--max-jobs", "2", "--timeout", "0.3").out
        *jobs, stats = [json.loads(line) for line in out.splitlines()]  # a JSON line per job, then the counts
        self.assertEqual((stats["timed_out"], stats["abandoned"], stats["dead"]), (2, 2, 2))
        # A timed-out attempt's line says it failed its last attempt: dead, with the time limit's error.
        self.assertEqual(sorted((line["id"], line["outcome"], line["error"]) for line in jobs),
                         sorted([(by_worker["id"], "dead", "timed out after 0.3 s"),
                                 (by_job["id"], "dead", "timed out after 0.2 s")]))  # fmt: skip
        self.assertEqual(self.queue().get(by_worker["id"]).last_error, "timed out after 0.3 s")
        self.assertEqual(self.queue().get(by_job["id"]).last_error, "timed out after 0.2 s", "the job's own wins")
        self.assertEqual(self.cli("work", f"{self.module}:handle", "--timeout", "0").code, 2)
        self.assertEqual(self.cli("enqueue", "x", "--timeout", "-1").code, 2)

    def test_bad_handler_specs(self) -> None:
        self.assertEqual(self.cli("work", "no_colon_here").code, 2)
        missing = self.cli("work", "surely_not_a_module_xyz:handle", "--max-jobs", "1")
        self.assert_one_line_error(missing)
        self.assertIn("cannot import", missing.err)
        self.assert_one_line_error(self.cli("work", f"{self.module}:nope"))
        self.assert_one_line_error(self.cli("work", f"{self.module}:not_callable"))

    def test_a_handler_module_that_fails_to_import_is_one_line(self) -> None:
        broken = {
            "needs_a_dependency": ("import surely_not_installed_xyz\n", "ModuleNotFoundError: No module named 'surely_not_installed_xyz'"),
            "imports_a_missing_name": ("from os import no_such_name_xyz\n", "ImportError: cannot import name 'no_such_name_xyz'"),
            "raises_on_import": ("raise RuntimeError('config file missing')\n", "RuntimeError: config file missing"),
            "bad_syntax": ("def handle(job)\n    pass\n", "SyntaxError:"),
            "bad_attribute": ("import os\nos.no_such_attribute_xyz\n", "AttributeError:"),
        }
        for stem, (source, expected) in broken.items():
            name = f"{stem}_{uuid.uuid4().hex[:6]}"
            with open(os.path.join(self.workdir, name + ".py"), "w") as f:
                f.write(source)
            self.addCleanup(sys.modules.pop, name, None)
            with self.subTest(module=stem):
                result = self.cli("work", f"{name}:handle", "--max-jobs", "1")
                self.assert_one_line_error(result)
                self.assertIn(f"cannot import handler module {name!r}: {expected}", result.err)
        self.assertFalse(os.path.exists(self.qdir), "nothing was opened for a handler that cannot load")


if __name__ == "__main__":
    unittest.main()
