"""explain.py on its own: pure reasons from a Job and the Facts, and the hook for more (BLOCKERS).

Imports: nobroker.explain and nobroker.jobs only; the storages' side is in
tests/semantics_timeouts.py (run on both).
"""

from __future__ import annotations

import unittest

from nobroker import explain as explaining
from nobroker.explain import Facts, Reason, explain
from nobroker.jobs import Job, JobState

NOW = 1_700_000_000.0


def leased(**fields: object) -> Job:
    running = {"attempt": 1, "started": NOW - 50, "finished": None, "seconds": None, "by": "web-1:42", "outcome": "running"}
    return Job(
        "j1", None, state=JobState.LEASED, attempts=1, lease_deadline=NOW + 20, lease_token="t0k",
        attempt_history=(running,), **fields,  # type: ignore[arg-type]
    )


class ExplainTests(unittest.TestCase):
    def test_a_lease_renewed_by_its_heartbeat_and_one_past_due(self) -> None:
        reasons = explain(leased(timeout=120.0), Facts(now=NOW, visibility_timeout=30))
        self.assertEqual([r.code for r in reasons], ["leased", "heartbeat", "time_limit"])
        self.assertIn("leased by web-1:42 (attempt 1 of 5) with token t0k", reasons[0])
        self.assertEqual(reasons[1].facts["last_extend"], NOW - 10)  # deadline less the lease length
        self.assertIn("running for 50.0 s", reasons[2])
        past = explain(leased(), Facts(now=NOW + 25, visibility_timeout=30))
        self.assertEqual([r.code for r in past], ["leased", "lease_past_due"])
        self.assertIn("5.0 s ago", past[1])
        fresh = leased()
        fresh.lease_deadline = NOW - 50 + 30  # never renewed: the deadline its lease began with
        self.assertEqual(explain(fresh, Facts(now=NOW - 40, visibility_timeout=30))[1].code, "no_heartbeat_yet")

    def test_a_blocker_added_to_the_hook_holds_a_ready_job_back(self) -> None:
        job = Job("j2", None, kind="mail", available_at=NOW - 1)
        self.assertEqual([r.code for r in explain(job, Facts(now=NOW, ahead=0))], ["first_in_line"])

        def frozen(job: Job, facts: Facts) -> Reason | None:
            if job.kind in facts.extra.get("frozen", ()):
                return Reason("frozen", f"kind {job.kind!r} is frozen", kind=job.kind)
            return None

        explaining.BLOCKERS.append(frozen)
        self.addCleanup(explaining.BLOCKERS.remove, frozen)
        reasons = explain(job, Facts(now=NOW, ahead=3, ahead_exact=False, extra={"frozen": {"mail"}}))
        self.assertEqual([r.code for r in reasons], ["frozen", "work_ahead"])
        self.assertIn("at least 3 ready job(s)", reasons[1])
        self.assertEqual([r.code for r in explain(job, Facts(now=NOW, ahead=0, extra={"frozen": {"mail"}}))], ["frozen"])
        self.assertEqual(reasons[0].to_dict(), {"code": "frozen", "text": "kind 'mail' is frozen", "kind": "mail"})

    def test_the_pause_blocker_names_a_paused_kind_or_the_whole_queue(self) -> None:
        job = Job("j4", None, kind="mail", available_at=NOW - 1)
        (held,) = explain(job, Facts(now=NOW, ahead=0, extra={explaining.PAUSED: ["mail"]}))
        self.assertEqual((held.code, held.facts), ("paused", {"kind": "mail"}))
        self.assertIn("its kind 'mail' is paused", held)
        (whole,) = explain(job, Facts(now=NOW, ahead=0, extra={explaining.PAUSED: [None, "mail"]}))
        self.assertEqual((whole.code, whole.facts), ("paused", {"kind": None}))
        self.assertIn("the whole queue is paused", whole)
        self.assertEqual([r.code for r in explain(job, Facts(now=NOW, ahead=0, extra={explaining.PAUSED: ["other"]}))],
                         ["first_in_line"])  # fmt: skip
        both = {explaining.PAUSED: ["mail"], explaining.LIMIT: "the concurrency limit of kind 'mail'"}
        self.assertEqual([r.code for r in explain(job, Facts(now=NOW, ahead=1, extra=both))], ["paused", "limit", "work_ahead"])

    def test_the_limit_blocker_names_the_words_the_queue_gathered(self) -> None:
        job = Job("j3", None, kind="mail", available_at=NOW - 1)
        words = "the concurrency limit of kind 'mail': 2 of 2 allowed are leased; a slot frees when one of them ends"
        (held,) = explain(job, Facts(now=NOW, ahead=0, extra={explaining.LIMIT: words}))
        self.assertEqual(held.to_dict(), {"code": "limit", "text": f"held back by {words}", "kind": "mail", "limit": words})
        self.assertEqual([r.code for r in explain(job, Facts(now=NOW, ahead=1, extra={explaining.LIMIT: words}))],
                         ["limit", "work_ahead"])  # fmt: skip
        self.assertEqual([r.code for r in explain(job, Facts(now=NOW, ahead=0, extra={explaining.LIMIT: None}))],
                         ["first_in_line"])  # fmt: skip

    def test_every_reason_is_a_plain_string_too(self) -> None:
        for job in (Job("d", None, state=JobState.DONE, attempts=1), Job("x", None, state=JobState.DEAD, attempts=5,
                    last_error="boom\nline two"), Job("c", None, state=JobState.CANCELLED)):  # fmt: skip
            (reason,) = explain(job, Facts(now=NOW))
            self.assertIsInstance(reason, str)
            self.assertNotIn("\n", reason)


if __name__ == "__main__":
    unittest.main()
