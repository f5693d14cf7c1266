"""The dashboard's routes behind a job's page and the control panels, over HTTP without a browser.

Owns: ``ControlApiTest``: a job's attempts and time limit, explain (each
reason's code and text, the lease token hidden), run now, delete, their bulk
forms, /api/schedules, /api/limits with what is paused, and which of these
are GET or POST only; on the file storage and on PostgreSQL. Imports: the
standard library, nobroker, tests.dashsupport (the server and its request
helpers).
"""

from __future__ import annotations

import os
import time
import unittest

from nobroker.jobs import MAX_PRIORITY, JobState
from tests.dashsupport import DashboardCase, OnPostgres


class ControlApiTest(DashboardCase):
    """The routes of the job's page and the control panels: attempts, explain, run now, delete, schedules, limits, pauses."""

    def test_a_jobs_answer_has_its_attempts_with_timings_worker_and_outcome_and_its_timeout(self) -> None:
        job = self.queue.enqueue("x", timeout=7.5, priority=MAX_PRIORITY)
        self.queue.nack(self.lease(), error="first failed", delay=0)
        self.lease()
        shown = self.get_json(f"/api/jobs/{job.id}")["job"]
        self.assertEqual(shown["timeout"], 7.5)
        attempts = shown["attempt_history"]
        self.assertEqual([(a["attempt"], a["outcome"]) for a in attempts], [(1, "failed"), (2, "running")])
        first, running = attempts
        self.assertLessEqual(first["started"], first["finished"])
        self.assertAlmostEqual(first["seconds"], first["finished"] - first["started"], places=5)
        self.assertEqual((running["finished"], running["seconds"]), (None, None))
        self.assertRegex(first["by"], r"^[A-Za-z0-9._-]+:%d$" % os.getpid())

    def test_explain_gives_each_reason_with_its_code_and_text_and_hides_the_lease_token(self) -> None:
        ahead = self.queue.enqueue("first", priority=5)
        job = self.queue.enqueue("second")
        answer = self.get_json(f"/api/jobs/{job.id}/explain")
        self.assertEqual(answer["id"], job.id)
        self.assertEqual([r["code"] for r in answer["reasons"]], ["work_ahead"])
        self.assertIn("1 ready job(s) of kind 'default' come before it", answer["reasons"][0]["text"])
        self.assertEqual([r["code"] for r in self.get_json(f"/api/jobs/{ahead.id}/explain")["reasons"]], ["first_in_line"])
        self.queue.pause("default")
        self.assertEqual(self.get_json(f"/api/jobs/{ahead.id}/explain")["reasons"][0]["code"], "paused")
        self.queue.resume("default")
        leased = self.lease()
        reasons = self.get_json(f"/api/jobs/{leased.id}/explain")["reasons"]
        self.assertEqual(reasons[0]["code"], "leased")
        self.assertIn("(hidden)", reasons[0]["text"])
        self.assertIsNotNone(leased.lease_token)
        resp = self.request("GET", f"/api/jobs/{leased.id}/explain")
        self.assertNotIn(str(leased.lease_token).encode(), resp.body, "the lease token never leaves")
        self.assertError(self.request("GET", "/api/jobs/no-such/explain"), 404)

    def test_run_now_makes_a_delayed_job_runnable_and_refuses_leased_and_finished_ones(self) -> None:
        later = self.queue.enqueue("later", delay=3600)
        resp = self.request("POST", f"/api/jobs/{later.id}/run-now")
        self.assertEqual(resp.status, 200, resp.body)
        self.assertEqual(resp.json()["action"], "run_now")
        self.assertLessEqual(resp.json()["job"]["available_at"], time.time())
        self.assertNotIn("lease_token", resp.json()["job"])
        self.assertEqual(self.queue.stats().ready, 1)
        leased = self.lease()
        self.assertError(self.request("POST", f"/api/jobs/{leased.id}/run-now"), 409, "leased")
        done = self.make_done()
        self.assertError(self.request("POST", f"/api/jobs/{done}/run-now"), 409, "done")
        self.assertError(self.request("POST", "/api/jobs/no-such/run-now"), 404)
        self.assertIs(self.queue.get(leased.id).state, JobState.LEASED)

    def test_delete_removes_any_job_but_a_leased_one(self) -> None:
        ready, dead, done = self.queue.enqueue("ready"), self.make_dead(), self.make_done()
        for job_id in (ready.id, dead, done):
            with self.subTest(job_id=job_id):
                resp = self.request("POST", f"/api/jobs/{job_id}/delete")
                self.assertEqual(resp.status, 200, resp.body)
                self.assertEqual(resp.json()["job"]["id"], job_id)
                self.assertError(self.request("GET", f"/api/jobs/{job_id}"), 404)
        self.queue.enqueue("held")
        leased = self.lease()
        self.assertError(self.request("POST", f"/api/jobs/{leased.id}/delete"), 409, "cancel it first")
        self.assertIs(self.queue.get(leased.id).state, JobState.LEASED)
        self.assertEqual(self.queue.stats().total, 1)

    def test_bulk_run_now_and_delete_each_id_as_alone(self) -> None:
        later = [self.queue.enqueue(n, delay=3600) for n in range(2)]
        held = self.queue.enqueue("held", priority=MAX_PRIORITY)
        self.assertEqual(self.lease().id, held.id)
        ids = [later[0].id, held.id, "nope"]
        answer = self.request("POST", "/api/bulk", body={"action": "run_now", "ids": ids}).json()
        self.assertEqual((answer["done"], sorted(answer["refused"])), ([later[0].id], sorted([held.id, "nope"])))
        self.assertIn("leased", answer["refused"][held.id])
        self.assertEqual(self.queue.stats().delayed, 1)
        answer = self.request("POST", "/api/bulk", body={"action": "delete", "ids": [later[1].id, held.id]}).json()
        self.assertEqual((answer["done"], list(answer["refused"])), ([later[1].id], [held.id]))
        self.assertEqual(sorted(j.id for j in self.queue.list_jobs()), sorted([later[0].id, held.id]))

    def test_schedules_are_listed_with_their_next_run(self) -> None:
        self.assertEqual(self.get_json("/api/schedules")["schedules"], [])
        self.queue.schedule("nightly", {"report": "daily"}, cron="0 3 * * *", kind="reports", catch_up="last")
        self.queue.schedule("<b>often</b>", None, every=60)
        answer = self.get_json("/api/schedules")
        self.assertEqual(answer["queue"], self.queue.name)
        by_name = {s["name"]: s for s in answer["schedules"]}
        self.assertEqual(set(by_name), {"nightly", "<b>often</b>"})
        nightly = by_name["nightly"]
        self.assertEqual((nightly["cron"], nightly["every"], nightly["kind"], nightly["catch_up"]), ("0 3 * * *", None, "reports", "last"))
        self.assertEqual(nightly["payload_preview"], '{"report":"daily"}')
        self.assertNotIn("payload", nightly)
        stored = {s.name: s for s in self.queue.schedules()}
        self.assertEqual(nightly["next_run"], stored["nightly"].next_run)
        self.assertEqual(by_name["<b>often</b>"]["every"], 60)
        self.assertNotIn(b"<b>", self.request("GET", "/api/schedules").body)

    def test_limits_and_what_is_paused(self) -> None:
        self.assertEqual(self.get_json("/api/limits")["limits"], [])
        self.assertEqual(self.get_json("/api/limits")["paused"], [])
        self.queue.set_limit("email", concurrency=3, rate=10, per=60, burst=5)
        self.queue.set_limit("sms", concurrency=1)
        self.queue.pause("email")
        answer = self.get_json("/api/limits")
        self.assertEqual(answer["limits"], [limit.to_dict() for limit in self.queue.limits()])
        email = next(limit for limit in answer["limits"] if limit["kind"] == "email")
        self.assertEqual((email["concurrency"], email["rate"], email["per"], email["burst"]), (3, 10, 60, 5))
        self.assertEqual(answer["paused"], ["email"])
        self.queue.pause()
        self.assertEqual(self.get_json("/api/limits")["paused"], [None, "email"])

    def test_the_new_reads_are_get_only_and_the_new_actions_post_only(self) -> None:
        job = self.queue.enqueue("x", delay=60)
        for path in ("/api/schedules", "/api/limits", f"/api/jobs/{job.id}/explain"):
            self.assertError(self.request("POST", path), 405)
        for path in (f"/api/jobs/{job.id}/run-now", f"/api/jobs/{job.id}/delete"):
            self.assertError(self.request("GET", path), 405)
        self.assertEqual(self.queue.stats().delayed, 1)


class PostgresControlApiTest(OnPostgres, ControlApiTest):
    pass


if __name__ == "__main__":
    unittest.main()
