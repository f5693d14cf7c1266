"""`nobroker schedule add | list | remove` on a queue folder.

Owns: the schedule commands' behaviour at the command line (text, JSON,
exit codes, refusals that write nothing) and that `nobroker work` enqueues
the ticks. Imports: the standard library, the public ``nobroker`` API and
tests.clisupport (its CliTestCase).
"""

from __future__ import annotations

import os
import unittest

from tests.clisupport import CliTestCase
from tests.support import file_bytes


class ScheduleCommandTests(CliTestCase):
    def test_add_list_remove(self) -> None:
        added = self.ok_json("schedule", "add", "hb", "--every", "60", "--payload", '{"ping": true}')
        self.assertEqual((added["name"], added["every"], added["payload"], added["catch_up"]), ("hb", 60.0, {"ping": True}, "last"))  # type: ignore[index]
        self.ok("schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--catch-up", "all", "--kind", "reports")
        listed = self.ok_json("schedule", "list")
        self.assertEqual([s["name"] for s in listed], ["hb", "nightly"])  # type: ignore[union-attr,index]
        nightly = listed[1]  # type: ignore[index]
        self.assertEqual((nightly["cron"], nightly["tz"], nightly["kind"]), ("0 3 * * *", "Europe/Berlin", "reports"))
        self.assertEqual(nightly["next_run"] % 3600, 0)
        text = self.ok("schedule", "list").out
        self.assertIn("every 60 s", text)
        self.assertIn("cron 0 3 * * * (Europe/Berlin)", text)
        self.assertIn("removed", self.ok("schedule", "remove", "hb").out)
        again = self.cli("schedule", "remove", "hb")
        self.assertEqual(again.code, 1)
        self.assertEqual([s.name for s in self.queue().schedules()], ["nightly"])

    def test_bad_definitions_are_refused_and_write_nothing(self) -> None:
        self.ok("schedule", "add", "keep", "--every", "5")
        before = file_bytes(self.log_path())
        for args in (["--cron", "99 * * * *"], ["--cron", "* * *"], ["--every", "5", "--tz", "Europe/Berlin"],
                     ["--cron", "0 9 * * *", "--tz", "Nowhere/Atlantis"]):  # fmt: skip
            with self.subTest(args=args):
                result = self.cli("schedule", "add", "bad", *args)
                self.assertNotEqual(result.code, 0)
                self.assertNotIn("Traceback", result.err)
        self.assertEqual(self.cli("schedule", "add", "bad").code, 2, "one of --every and --cron is required")
        self.assertEqual(self.cli("schedule", "add", "bad", "--every", "1", "--cron", "* * * * *").code, 2)
        self.assertEqual(file_bytes(self.log_path()), before)

    def test_list_and_remove_do_not_create_a_queue(self) -> None:
        self.assertNotEqual(self.cli("schedule", "list").code, 0)
        self.assertFalse(os.path.exists(self.qdir))

    def test_work_enqueues_the_ticks(self) -> None:
        self.ok("schedule", "add", "fast", "--every", "0.05", "--catch-up", "all", "--payload", "tick")
        handlers = os.path.join(self.dir, "tick_handlers.py")
        with open(handlers, "w", encoding="utf-8") as f:
            f.write("def handle(job):\n    return job.id\n")
        import sys

        sys.path.insert(0, self.dir)
        self.addCleanup(sys.path.remove, self.dir)
        self.ok("work", "tick_handlers:handle", "--max-jobs", "3")
        done = self.queue().list_jobs("done")
        self.assertEqual(len(done), 3)
        self.assertTrue(all(job.id.startswith("tick:fast@") and job.payload == "tick" for job in done))


if __name__ == "__main__":
    unittest.main()
