"""The dashboard's JSON API over HTTP, without a browser: stats, the lists by state, one job, the DLQ and the queue's actions.

Owns: ``ApiTest`` (/api/stats, /api/jobs by state with paging, /api/jobs/ID,
/api/dlq and requeue, cancel, /api/bulk, /api/workers, /api/history, requeue
all, purge, compact, refused bodies and methods) on the file storage and on
PostgreSQL. Imports: the standard library, nobroker, tests.dashsupport (the
server and its request helpers), tests.semantics_roster (a worker's
announcement).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse

from nobroker import Queue
from nobroker.dashboard import MAX_BODY_BYTES, MAX_PAGE_JOBS
from nobroker.jobs import JobState
from tests.dashsupport import DashboardCase, OnPostgres


class ApiTest(DashboardCase):
    def test_stats_match_the_queue(self) -> None:
        for n in range(3):
            self.queue.enqueue({"n": n})
        self.queue.enqueue("later", delay=3600)
        self.lease()
        data = self.get_json("/api/stats")
        self.assertEqual(data["stats"], self.queue.stats().to_dict())
        self.assertEqual(data["stats"], {"ready": 2, "delayed": 1, "leased": 1, "done": 0, "dead": 0, "total": 4})
        self.assertEqual(data["queue"], self.queue.name)
        self.assertEqual(data["durable"], self.queue.durable)
        self.assertIsInstance(data["now"], float)

    def test_jobs_by_state_with_paging(self) -> None:
        ids = [self.queue.enqueue({"n": n}).id for n in range(7)]
        page1 = self.get_json("/api/jobs?state=ready&limit=3&offset=0")
        self.assertEqual([j["id"] for j in page1["jobs"]], ids[:3])
        self.assertTrue(page1["has_more"])
        self.assertEqual((page1["state"], page1["limit"], page1["offset"]), ("ready", 3, 0))
        page2 = self.get_json("/api/jobs?state=ready&limit=3&offset=3")
        self.assertEqual([j["id"] for j in page2["jobs"]], ids[3:6])
        self.assertTrue(page2["has_more"])
        page3 = self.get_json("/api/jobs?state=ready&limit=3&offset=6")
        self.assertEqual([j["id"] for j in page3["jobs"]], ids[6:])
        self.assertFalse(page3["has_more"])
        self.assertEqual(self.get_json("/api/jobs?state=ready&offset=50")["jobs"], [])

        leased = self.lease()
        self.assertEqual([j["id"] for j in self.get_json("/api/jobs?state=leased")["jobs"]], [leased.id])
        self.queue.ack(leased)
        self.assertEqual([j["id"] for j in self.get_json("/api/jobs?state=done")["jobs"]], [leased.id])
        self.assertEqual([j["id"] for j in self.get_json("/api/jobs?state=all")["jobs"]], ids)
        self.assertEqual([j["id"] for j in self.get_json("/api/jobs")["jobs"]], ids)

    def test_the_ready_and_delayed_counts_match_their_lists(self) -> None:
        now = [self.queue.enqueue(f"now {n}").id for n in range(3)]
        later = [self.queue.enqueue(f"later {n}", delay=3600).id for n in range(2)]
        stats = self.get_json("/api/stats")["stats"]
        runnable = [j["id"] for j in self.get_json("/api/jobs?state=runnable")["jobs"]]
        delayed = [j["id"] for j in self.get_json("/api/jobs?state=delayed")["jobs"]]
        self.assertEqual((runnable, delayed), (now, later))
        self.assertEqual((stats["ready"], stats["delayed"]), (len(runnable), len(delayed)))
        self.assertEqual([j["id"] for j in self.get_json("/api/jobs?state=ready")["jobs"]], now + later)
        self.assertEqual(self.get_json("/api/jobs?state=delayed")["state"], "delayed")

    def test_list_rows_are_summaries_without_lease_tokens(self) -> None:
        self.queue.enqueue({"big": "x" * 5000})
        self.lease()
        (row,) = self.get_json("/api/jobs?state=leased")["jobs"]
        self.assertNotIn("payload", row)
        self.assertNotIn("lease_token", row)
        self.assertLessEqual(len(row["payload_preview"]), 200)
        self.assertTrue(row["payload_preview"].startswith('{"big":"xxx'))
        self.assertTrue(row["leased"])
        self.assertEqual(row["attempts"], 1)

    def test_list_parameters_are_checked(self) -> None:
        for query, fragment in (
            ("state=bogus", "state"),
            ("state=later", "state"),
            ("limit=0", "limit"),
            ("limit=abc", "limit"),
            (f"limit={MAX_PAGE_JOBS + 1}", "limit"),
            ("offset=-1", "offset"),
            ("offset=1.5", "offset"),
            ("sort=sideways", "sort"),
        ):
            with self.subTest(query=query):
                self.assertError(self.request("GET", "/api/jobs?" + query), 400, fragment)
        self.assertError(self.request("GET", "/api/dlq?limit=-3"), 400, "limit")

    def test_one_job_in_full(self) -> None:
        job = self.queue.enqueue({"to": "a@example.com", "n": [1, 2]}, priority=4, max_attempts=3)
        leased = self.lease()
        self.queue.set_stage(leased, "sending")
        detail = self.get_json(f"/api/jobs/{job.id}")["job"]
        self.assertEqual(detail["payload"], {"to": "a@example.com", "n": [1, 2]})
        self.assertEqual(detail["state"], "leased")
        self.assertEqual(detail["stage"], "sending")
        self.assertEqual((detail["attempts"], detail["max_attempts"], detail["priority"]), (1, 3, 4))
        self.assertIsNotNone(detail["lease_deadline"])
        self.assertNotIn("lease_token", detail)
        self.queue.ack(leased, result={"sent": True})
        detail = self.get_json(f"/api/jobs/{job.id}")["job"]
        self.assertEqual((detail["state"], detail["result"]), ("done", {"sent": True}))
        for key in ("enqueued_at", "available_at", "seq", "kind", "dedupe_key", "last_error", "traceback"):
            self.assertIn(key, detail)

    def test_a_failed_jobs_traceback_is_in_its_detail_not_in_the_list(self) -> None:
        self.queue.enqueue("fails")
        self.queue.nack(self.lease(), error="ValueError: no", traceback="Traceback (most recent call last):\nValueError: no\n", delay=0)
        (row,) = self.get_json("/api/jobs?state=all")["jobs"]
        self.assertNotIn("traceback", row)
        detail = self.get_json(f"/api/jobs/{row['id']}")["job"]
        self.assertEqual((detail["last_error"], detail["traceback"]), ("ValueError: no", "Traceback (most recent call last):\nValueError: no\n"))

    def test_sees_what_another_process_did(self) -> None:
        if not isinstance(self.queue.path, str) or not os.path.isdir(self.queue.path):
            self.skipTest("the other process opens the same folder: file storage only")
        # A worker elsewhere writes to the same folder; the dashboard's queue reads it forward.
        script = (
            "import sys\n"
            "from nobroker import Queue\n"
            "with Queue(sys.argv[1], fsync=False) as q:\n"
            "    q.enqueue({'from': 'another process'}, job_id='elsewhere')\n"
            "    q.nack(q.lease_one(), error='gave up', permanent=True)\n"
        )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        subprocess.run([sys.executable, "-c", script, self.dir], check=True, env=env, timeout=60)
        self.assertEqual(self.get_json("/api/stats")["stats"]["dead"], 1)
        self.assertEqual([j["id"] for j in self.get_json("/api/dlq")["jobs"]], ["elsewhere"])
        self.assertEqual(self.request("POST", "/api/jobs/elsewhere/requeue").json()["requeued"], 1)
        with Queue(self.dir, fsync=False) as other:
            self.assertEqual(other.get("elsewhere").state, JobState.READY)

    def test_parallel_requests_while_the_queue_changes(self) -> None:
        # Requests arrive on many threads; the server must serialise its use of the queue.
        failures: list[str] = []
        start = threading.Event()

        def client() -> None:
            start.wait(10)
            for path in ("/api/stats", "/api/jobs?limit=5", "/metrics") * 4:
                resp = self.request("GET", path)
                if resp.status != 200:
                    failures.append(f"{path}: {resp.status} {resp.body[:200]!r}")

        threads = [threading.Thread(target=client) for _ in range(6)]
        for thread in threads:
            thread.start()
        start.set()
        for n in range(20):
            self.queue.enqueue(n)
        for thread in threads:
            thread.join(60)
        self.assertEqual(failures, [])
        self.assertEqual(self.get_json("/api/stats")["stats"]["ready"], 20)

    def test_job_ids_are_url_decoded(self) -> None:
        job_id = "odd id/with?chars&<b>"
        self.queue.enqueue("x", job_id=job_id)
        detail = self.get_json("/api/jobs/" + urllib.parse.quote(job_id, safe=""))["job"]
        self.assertEqual(detail["id"], job_id)

    def test_unknown_job_and_unknown_route_are_404(self) -> None:
        self.assertError(self.request("GET", "/api/jobs/no-such-job"), 404)
        self.assertError(self.request("GET", "/api/nothing"), 404, "no such page")
        self.assertError(self.request("POST", "/api/jobs/no-such-job/requeue"), 404)

    def test_dlq_lists_dead_jobs_and_requeue_one_revives_it(self) -> None:
        dead = self.make_dead({"order": 7})
        other = self.make_dead({"order": 8})
        dlq = self.get_json("/api/dlq")
        self.assertEqual([j["id"] for j in dlq["jobs"]], [dead, other])
        self.assertEqual(dlq["jobs"][0]["last_error"], "boom")
        self.assertFalse(dlq["has_more"])
        self.assertTrue(self.get_json("/api/dlq?limit=1")["has_more"])

        resp = self.request("POST", f"/api/jobs/{dead}/requeue")
        self.assertEqual(resp.status, 200, resp.body)
        self.assertEqual((resp.json()["requeued"], resp.json()["job"]["state"]), (1, "ready"))
        revived = self.queue.get(dead)
        self.assertEqual((revived.state, revived.attempts), (JobState.READY, 0))
        self.assertEqual(self.queue.get(other).state, JobState.DEAD)
        self.assertEqual(self.lease().id, dead)

    def test_requeue_one_refuses_a_job_that_is_not_dead(self) -> None:
        job = self.queue.enqueue("fine")
        self.assertError(self.request("POST", f"/api/jobs/{job.id}/requeue"), 409, "not dead")
        self.assertEqual(self.queue.get(job.id).state, JobState.READY)

    def test_cancel_one_cancels_a_ready_job_marks_a_leased_one_and_refuses_a_finished_one(self) -> None:
        ready = self.queue.enqueue("ready")
        resp = self.request("POST", f"/api/jobs/{ready.id}/cancel")
        self.assertEqual(resp.status, 200, resp.body)
        self.assertEqual(resp.json()["job"]["state"], "cancelled")
        self.assertNotIn("lease_token", resp.json()["job"])
        self.assertIs(self.queue.get(ready.id).state, JobState.CANCELLED)
        leased = self.queue.enqueue("leased")
        self.assertEqual(self.lease().id, leased.id)
        marked = self.request("POST", f"/api/jobs/{leased.id}/cancel").json()["job"]
        self.assertEqual((marked["state"], marked["cancel_requested"]), ("leased", True))
        done = self.make_done()
        self.assertError(self.request("POST", f"/api/jobs/{done}/cancel"), 409, "done")
        self.assertError(self.request("POST", f"/api/jobs/{ready.id}/cancel"), 409, "cancelled")
        self.assertError(self.request("POST", "/api/jobs/no-such-job/cancel"), 404)
        self.assertEqual(self.queue.counters()["default"]["cancelled"], 1)

    def test_bulk_acts_on_each_id_and_lists_what_it_refused(self) -> None:
        jobs = [self.queue.enqueue(n) for n in range(3)]
        dead = self.make_dead()
        resp = self.request("POST", "/api/bulk", body={"action": "cancel", "ids": [jobs[0].id, jobs[2].id, dead, "nope", jobs[0].id]})
        self.assertEqual(resp.status, 200, resp.body)
        answer = resp.json()
        self.assertEqual(answer["done"], [jobs[0].id, jobs[2].id])
        self.assertEqual(set(answer["refused"]), {dead, "nope"})
        self.assertIn("dead", answer["refused"][dead])
        self.assertEqual([self.queue.get(j.id).state for j in jobs], [JobState.CANCELLED, JobState.READY, JobState.CANCELLED])
        again = self.request("POST", "/api/bulk", body={"action": "requeue", "ids": [dead, jobs[1].id]}).json()
        self.assertEqual((again["done"], list(again["refused"])), ([dead], [jobs[1].id]))
        self.assertIs(self.queue.get(dead).state, JobState.READY)

    def test_bulk_refuses_a_bad_request_before_acting(self) -> None:
        job = self.queue.enqueue("x")
        for body in ({"action": "purge", "ids": [job.id]}, {"action": "cancel", "ids": []},
                     {"action": "cancel", "ids": job.id}, {"action": "cancel", "ids": [1]},
                     {"action": "cancel", "ids": ["j"] * 501}):  # fmt: skip
            with self.subTest(body=str(body)[:60]):
                self.assertError(self.request("POST", "/api/bulk", body=body), 400)
        self.assertIs(self.queue.get(job.id).state, JobState.READY)

    def test_workers_lists_the_announcements_with_gone(self) -> None:
        from nobroker.announcements import GONE_AFTER
        from tests.semantics_roster import info

        self.assertEqual(self.get_json("/api/workers")["workers"], [])
        live, old = info(name="<b>w</b>"), info(heartbeat_at=time.time() - GONE_AFTER - 1, started_at=time.time() - 99)
        self.queue.announce_worker(live)
        self.queue.announce_worker(old)
        listed = self.get_json("/api/workers")["workers"]
        self.assertEqual([(w["id"], w["gone"]) for w in listed], [(old.id, True), (live.id, False)])
        self.assertEqual(listed[1]["name"], "<b>w</b>")
        self.assertEqual(listed[1]["kinds"], ["mail", "sms"])

    def test_history_has_a_sample_at_once_and_the_counters_totals(self) -> None:
        self.queue.enqueue_many(["a", "b"], kind="mail")
        self.queue.ack(self.lease())
        data = self.get_json("/api/history")
        self.assertEqual(data["queue"], self.queue.name)
        self.assertEqual(data["window"], 3600)
        self.assertEqual(len(data["samples"]), 1)
        sample = data["samples"][0]
        self.assertEqual((sample["enqueued"], sample["succeeded"], sample["failed"]), (2, 1, 0))
        self.assertLessEqual(abs(sample["at"] - data["now"]), 60)
        self.assertEqual(len(self.get_json("/api/history")["samples"]), 1, "no second sample within the interval")

    def test_requeue_all(self) -> None:
        ids = [self.make_dead(n) for n in range(3)]
        resp = self.request("POST", "/api/dlq/requeue")
        self.assertEqual(resp.json(), {"requeued": 3})
        self.assertEqual([self.queue.get(i).state for i in ids], [JobState.READY] * 3)
        self.assertEqual(self.request("POST", "/api/dlq/requeue").json(), {"requeued": 0})

    def test_purge_needs_the_queue_name_typed(self) -> None:
        for n in range(4):
            self.queue.enqueue(n)
        self.make_dead()
        self.assertError(self.request("POST", "/api/purge"), 400, "confirm")
        self.assertError(self.request("POST", "/api/purge", body={"confirm": "yes"}), 400, "confirm")
        self.assertEqual(len(self.queue), 5)
        resp = self.request("POST", "/api/purge", body={"confirm": self.queue.name})
        self.assertEqual(resp.status, 200, resp.body)
        self.assertEqual(resp.json(), {"purged": 5})
        self.assertEqual(self.queue.stats().total, 0)

    def test_compact_drops_done_jobs(self) -> None:
        keep = self.queue.enqueue("keep")
        self.make_done("gone")
        resp = self.request("POST", "/api/compact")
        self.assertEqual(resp.status, 200, resp.body)
        result = resp.json()["compaction"]
        self.assertEqual((result["jobs_kept"], result["jobs_dropped"]), (1, 1))
        self.assertEqual([j.id for j in self.queue.list_jobs()], [keep.id])

    def test_bad_bodies_are_refused(self) -> None:
        self.assertError(self.request("POST", "/api/purge", body=b"{not json"), 400, "JSON")
        self.assertError(self.request("POST", "/api/purge", body=b"[1]"), 400, "object")
        self.assertError(self.request("POST", "/api/purge", body=b"x" * (MAX_BODY_BYTES + 1)), 413)

    def test_wrong_method_is_405_with_allow(self) -> None:
        resp = self.request("GET", "/api/purge")
        self.assertError(resp, 405)
        self.assertEqual(resp.headers["Allow"], "POST")
        resp = self.request("POST", "/api/stats")
        self.assertError(resp, 405)
        self.assertEqual(resp.headers["Allow"], "GET, HEAD")
        for method in ("PUT", "DELETE", "PATCH"):
            with self.subTest(method=method):
                self.assertError(self.request(method, "/api/jobs"), 405)
                self.assertError(self.request(method, "/"), 405)


class PostgresApiTest(OnPostgres, ApiTest):
    pass


if __name__ == "__main__":
    unittest.main()
