"""The operator's commands on jobs: `dlq`, `cancel`, `pause`, `resume`, `run-now`, `delete`, `why`, `limit`, `purge`.

Owns: their text and JSON output and refusals, and purge's confirmation
rule (--yes, or a question asked on a terminal).
Imports: the standard library, nobroker and tests.clisupport.
"""

from __future__ import annotations

import os
import unittest

from nobroker import JobState
from tests.clisupport import CliTestCase


class DlqPurgeTests(CliTestCase):
    def make_dead(self, payload: str) -> str:
        job = self.enqueue(payload)
        self.ok("lease")
        self.ok("nack", job["id"], "--permanent", "--error", "boom")
        return job["id"]

    def test_dlq_lists_and_requeues_one_or_all(self) -> None:
        first, second = self.make_dead("a"), self.make_dead("b")
        self.assertEqual({j["id"] for j in self.ok_json("dlq")}, {first, second})  # type: ignore[union-attr]
        self.assertIn("boom", self.ok("dlq").out)
        self.assertEqual(self.ok_json("dlq", "--requeue", first), {"requeued": 1})
        self.assertEqual(self.queue().get(first).state, JobState.READY)
        self.assertEqual(self.queue().get(first).attempts, 0)
        result = self.ok("dlq", "--requeue")
        self.assertIn("requeued 1", result.out)
        self.assertIn("empty", self.ok("dlq").out)

    def test_cancel_a_ready_job_a_leased_one_and_a_finished_one(self) -> None:
        ready = self.enqueue("a", "--id", "ready-one")
        self.assertIn("ready-one cancelled", self.ok("cancel", ready["id"]).out)
        self.assertEqual(self.queue().get("ready-one").state, JobState.CANCELLED)
        self.assertIn("cancelled", self.ok("stats").out)
        running = self.enqueue("b")
        self.ok("lease")
        marked = self.ok_json("cancel", running["id"])
        self.assertEqual((marked["state"], marked["cancel_requested"]), ("leased", True))  # type: ignore[index]
        again = self.cli("cancel", "ready-one")
        self.assert_one_line_error(again)
        self.assertIn("already cancelled", again.err)

    def test_pause_resume_run_now_and_delete(self) -> None:
        later = self.enqueue("a", "--id", "later", "--delay", "600")
        out = self.ok("pause", "--kind", "email").out
        self.assertIn("kind 'email' paused", out)
        self.assertIn("paused now: kind 'email'", out)
        self.assertEqual(self.ok_json("pause"), {"paused": [None, "email"]})
        self.assertEqual(self.queue().paused(), [None, "email"])
        self.assertIn("paused now: kind 'email'", self.ok("resume").out)
        self.assertEqual(self.ok_json("resume", "--kind", "email"), {"paused": []})
        self.assertIn("later is runnable now", self.ok("run-now", later["id"]).out)
        self.assertEqual([j["id"] for j in self.ok_json("lease")], ["later"])  # type: ignore[index,union-attr]
        refused = self.cli("run-now", "later")
        self.assert_one_line_error(refused)
        self.assertIn("leased", refused.err)
        refused = self.cli("delete", "later")
        self.assert_one_line_error(refused)
        self.assertIn("leased", refused.err)
        gone = self.enqueue("b", "--id", "gone")
        self.assertIn("gone deleted (it was ready)", self.ok("delete", gone["id"]).out)
        missing = self.cli("delete", "gone")
        self.assert_one_line_error(missing)
        self.assertIn("gone", missing.err)

    def test_why_says_why_and_get_shows_the_attempts(self) -> None:
        job = self.enqueue("a", "--timeout", "90")
        self.assertIn("ready and first in line", self.ok("why", job["id"]).out)
        self.ok("lease")
        why = self.ok_json("why", job["id"])
        self.assertEqual(why[0]["code"], "leased")  # type: ignore[index]
        self.assertIn(f":{os.getpid()}", why[0]["by"])  # type: ignore[index]
        shown = self.ok("get", job["id"]).out
        self.assertIn("time limit   90 s", shown)
        self.assertIn("attempt 1    running at", shown)
        self.assert_one_line_error(self.cli("why", "no-such-job"))

    def test_limit_set_list_clear(self) -> None:
        self.assertEqual(self.cli("limit", "list").code, 1, "list creates no queue")
        self.assertIn("at most 3 leased at once", self.ok("limit", "set", "emails", "--concurrency", "3").out)
        shown = self.ok_json("limit", "set", "api", "--rate", "100", "--per", "60", "--burst", "10")
        self.assertEqual(shown, {"kind": "api", "concurrency": None, "rate": 100, "per": 60.0, "burst": 10})
        self.assertEqual([lim.kind for lim in self.queue().limits()], ["api", "emails"])
        listed = self.ok("limit", "list").out
        self.assertIn("100 leases per 60 s (burst 10)", listed)
        self.assertLess(listed.index("api"), listed.index("emails"))
        self.assertEqual(len(self.ok_json("limit", "list")), 2)  # type: ignore[arg-type]
        self.assertIn("emails: no limit", self.ok("limit", "clear", "emails").out)
        missing = self.cli("limit", "clear", "emails")
        self.assertEqual(missing.code, 1)
        self.assertIn("has no limit", missing.err)
        self.assertEqual(self.cli("limit", "set", "x").code, 2, "neither --concurrency nor --rate")
        self.assertEqual(self.cli("limit", "set", "x", "--concurrency", "0").code, 2)
        refused = self.cli("limit", "set", "x", "--concurrency", "2", "--burst", "3")
        self.assertEqual(refused.code, 2)
        self.assertIn("burst= goes with rate=", refused.err)
        self.assertEqual([lim.kind for lim in self.queue().limits()], ["api"])
        self.ok("limit", "clear", "api")
        self.assertIn("no limits", self.ok("limit", "list").out)

    def test_purge_with_yes(self) -> None:
        for n in range(3):
            self.enqueue(str(n))
        self.assertEqual(self.ok_json("purge", "--yes"), {"purged": 3})
        self.assertEqual(len(self.queue()), 0)

    def test_purge_without_yes_and_without_a_terminal_refuses_with_2(self) -> None:
        self.enqueue("keep")
        result = self.cli("purge", stdin="yes\n")
        self.assertEqual(result.code, 2)
        self.assertIn("--yes", result.err)
        self.assertEqual(len(self.queue()), 1)

    def test_purge_asks_on_a_terminal(self) -> None:
        self.enqueue("a")
        declined = self.cli("purge", stdin="n\n", tty=True)
        self.assertEqual(declined.code, 1)
        self.assertIn("[y/N]", declined.err)
        self.assertIn("nothing was changed", declined.err)
        self.assertEqual(len(self.queue()), 1)
        accepted = self.cli("purge", stdin="y\n", tty=True)
        self.assertEqual(accepted.code, 0, accepted.err)
        self.assertIn("purged 1", accepted.out)
        self.assertEqual(len(self.queue()), 0)


if __name__ == "__main__":
    unittest.main()
