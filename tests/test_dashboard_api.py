"""The dashboard's HTTP side, without a browser: every endpoint, every safety rule, /metrics.

Imports: the standard library, nobroker, tests.support. Each test runs a real
dashboard server on a free loopback port over a real file queue in a temp dir
and talks to it with http.client.
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import math
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse
from typing import Any
from unittest import mock

import nobroker
from nobroker import Job, Queue, dashboard
from nobroker.dashboard import (
    CSRF_HEADER,
    MAX_BODY_BYTES,
    MAX_PAGE_JOBS,
    SESSION_COOKIE,
    DashboardConfigError,
    DashboardServer,
    is_loopback_host,
    make_server,
    serve,
)
from nobroker.errors import NobrokerError
from nobroker.jobs import MAX_PRIORITY, JobState
from tests.pgsupport import drop_schema, fresh_name, require_postgres
from tests.support import WAIT_SECONDS, TempDirTestCase

SCRIPT_PAYLOAD = "<script>alert(1)</script>"
#: How often a test server checks for shutdown (the default half second adds up over many tests).
POLL_SECONDS = 0.05

# One sample line of the Prometheus text format 0.0.4: name{labels} value.
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE_RE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>" + _LABEL + r"(?:," + _LABEL + r")*)?\})?"
    r" (?P<value>[-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+|NaN|Inf))"
    r"(?: -?[0-9]+)?$"
)
HELP_RE = re.compile(r"^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .+$")
TYPE_RE = re.compile(r"^# TYPE (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$")


def nonce_of(csp: str) -> str:
    match = re.search(r"script-src 'nonce-([A-Za-z0-9_-]+)'", csp)
    assert match is not None, f"no script nonce in {csp!r}"
    return match.group(1)


class Response:
    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def picker_options(where: str, options: dict[str, Any]) -> dict[str, Any]:
    """What `nobroker serve` gives the dashboard: list the queues at ``where``, open one without creating it."""
    return {
        "list_queues": lambda: nobroker.list_queues(where, schema=options.get("schema")),
        "open_queue": lambda name: Queue(where, name, create=False, **options),
    }


class DashboardCase(TempDirTestCase):
    """A file queue in a temp dir and a dashboard over it on a free port, offering the folder's other queues."""

    token: str | None = None

    def location(self) -> tuple[str, dict[str, Any]]:
        """Where this test's queues live, and the options to open them with."""
        return self.dir, {"fsync": False}

    def open_queue(self) -> Queue:
        """The queue under test: a file queue in this test's temp folder."""
        return Queue(self.dir, fsync=False)

    def close_queue(self, queue: Queue) -> None:
        queue.close()

    def queue_options(self) -> dict[str, Any]:
        """How the dashboard lists and opens the other queues (as `nobroker serve` does, unless a test says otherwise)."""
        return picker_options(*self.location())

    def setUp(self) -> None:
        super().setUp()
        self.queue = self.open_queue()
        self.addCleanup(self.close_queue, self.queue)
        self.server = make_server(self.queue, host="127.0.0.1", port=0, token=self.token, **self.queue_options())
        thread = threading.Thread(target=self.server.serve_forever, args=(POLL_SECONDS,), name="dashboard", daemon=True)
        thread.start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(thread.join, 10)
        self.addCleanup(self.server.shutdown)
        self.port = self.server.server_address[1]

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
        csrf: bool | str = True,
        auth: bool = True,
    ) -> Response:
        sent: dict[str, str] = {}
        if method == "POST" and csrf:
            sent[CSRF_HEADER] = self.server.csrf_token if csrf is True else str(csrf)
        if auth and self.token is not None:
            sent["Authorization"] = f"Bearer {self.token}"
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=data, headers=sent)
            resp = conn.getresponse()
            return Response(resp.status, resp.headers, resp.read())
        finally:
            conn.close()

    def get_json(self, path: str) -> Any:
        resp = self.request("GET", path)
        self.assertEqual(resp.status, 200, resp.body)
        self.assertTrue(resp.headers["Content-Type"].startswith("application/json"))
        return resp.json()

    def assertError(self, resp: Response, status: int, fragment: str = "") -> None:
        self.assertEqual(resp.status, status, resp.body)
        self.assertTrue(resp.headers["Content-Type"].startswith("application/json"))
        error = resp.json()["error"]
        self.assertIsInstance(error, str)
        self.assertIn(fragment, error)

    def lease(self) -> Job:
        """Lease the next job; there must be one."""
        job = self.queue.lease_one()
        assert job is not None, "no job was ready to lease"
        return job

    def make_dead(self, payload: Any = "doomed", job_id: str | None = None) -> str:
        # Top priority, so the lease below takes this job and not another ready one.
        job = self.queue.enqueue(payload, job_id=job_id, priority=MAX_PRIORITY)
        leased = self.lease()
        self.assertEqual(leased.id, job.id)
        self.queue.nack(leased, error="boom", permanent=True)
        self.assertEqual(self.queue.get(job.id).state, JobState.DEAD)
        return job.id

    def make_done(self, payload: Any = "finished", result: Any = None) -> str:
        job = self.queue.enqueue(payload, priority=MAX_PRIORITY)
        leased = self.lease()
        self.assertEqual(leased.id, job.id)
        self.queue.ack(leased, result=result)
        return job.id

    def snapshot(self) -> tuple[dict[str, int], list[dict[str, Any]]]:
        jobs = [job.to_dict() for job in self.queue.list_jobs()]
        return self.queue.stats().to_dict(), jobs


# ---------------------------------------------------------------- the page
class PageTest(DashboardCase):
    def test_page_is_served_with_strict_security_headers(self) -> None:
        resp = self.request("GET", "/")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.headers["Content-Type"], "text/html; charset=utf-8")
        csp = resp.headers["Content-Security-Policy"]
        self.assertIn("default-src 'self'", csp)
        self.assertIn("frame-ancestors 'none'", csp)
        self.assertNotIn("unsafe-inline", csp)
        self.assertNotIn("unsafe-eval", csp)
        nonce = nonce_of(csp)
        # Every script and style block carries this response's nonce; nothing else can run.
        self.assertEqual(re.findall(r"<script\b[^>]*>", resp.text), [f'<script nonce="{nonce}">'])
        self.assertEqual(re.findall(r"<style\b[^>]*>", resp.text), [f'<style nonce="{nonce}">'])
        self.assertEqual(resp.headers["X-Content-Type-Options"], "nosniff")
        self.assertEqual(resp.headers["X-Frame-Options"], "DENY")
        self.assertEqual(resp.headers["Referrer-Policy"], "no-referrer")
        self.assertEqual(resp.headers["Server"], "nobroker")

    def test_each_page_gets_a_fresh_nonce_and_the_server_csrf_token(self) -> None:
        first, second = self.request("GET", "/"), self.request("GET", "/")
        nonces = [nonce_of(r.headers["Content-Security-Policy"]) for r in (first, second)]
        self.assertNotEqual(nonces[0], nonces[1])
        for resp in (first, second):
            self.assertIn(f'<meta name="csrf-token" content="{self.server.csrf_token}">', resp.text)
        self.assertRegex(self.server.csrf_token, r"^[0-9a-f]{64}$")

    def test_page_needs_nothing_from_the_network(self) -> None:
        page = self.request("GET", "/").text
        self.assertNotRegex(page, r"(?i)(src|href)\s*=\s*[\"']?(https?:)?//")
        self.assertNotIn("@import", page)
        self.assertNotIn("innerHTML", page)
        self.assertNotIn("outerHTML", page)
        self.assertNotIn("insertAdjacentHTML", page)
        self.assertNotIn("document.write", page)

    def test_api_answers_carry_the_security_headers_too(self) -> None:
        for path in ("/api/stats", "/metrics", "/api/nope"):
            resp = self.request("GET", path)
            self.assertEqual(resp.headers["X-Content-Type-Options"], "nosniff", path)
            self.assertEqual(resp.headers["X-Frame-Options"], "DENY", path)
            self.assertIn("default-src 'none'", resp.headers["Content-Security-Policy"], path)
            self.assertEqual(resp.headers["Cache-Control"], "no-store", path)

    def test_head_answers_without_a_body(self) -> None:
        resp = self.request("HEAD", "/api/stats")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.body, b"")


# ---------------------------------------------------------------- the JSON API
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


# ---------------------------------------------------------------- safety
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


class JobListTest(DashboardCase):
    """/api/jobs: by state and kind, searched by id and payload text, oldest or newest first, paged."""

    def ids(self, query: str) -> list[str]:
        return [j["id"] for j in self.get_json("/api/jobs?" + query)["jobs"]]

    def test_filter_by_kind_alone_and_with_a_state(self) -> None:
        emails = [self.queue.enqueue({"n": n}, kind="email").id for n in range(3)]
        sms = [self.queue.enqueue({"n": n}, kind="sms").id for n in range(2)]
        later = self.queue.enqueue("later", kind="email", delay=3600).id
        self.assertEqual(self.ids("kind=email"), emails + [later])
        self.assertEqual(self.ids("kind=sms&state=runnable"), sms)
        self.assertEqual(self.ids("kind=email&state=delayed"), [later])
        self.assertEqual(self.ids("kind=email&state=dead"), [])
        self.assertEqual(self.ids("kind=nothing"), [])
        answer = self.get_json("/api/jobs?kind=email")
        self.assertEqual((answer["kind"], answer["total"]), ("email", None), "oldest first with a kind is not counted")

    def test_newest_first_is_the_same_list_reversed_page_by_page(self) -> None:
        ids = [self.queue.enqueue({"n": n}).id for n in range(7)]
        first = self.get_json("/api/jobs?state=all&sort=newest&limit=3")
        self.assertEqual([j["id"] for j in first["jobs"]], ids[::-1][:3])
        self.assertEqual((first["has_more"], first["total"], first["sort"]), (True, 7, "newest"))
        self.assertEqual(self.ids("state=all&sort=newest&limit=3&offset=3"), ids[::-1][3:6])
        last = self.get_json("/api/jobs?state=all&sort=newest&limit=3&offset=6")
        self.assertEqual(([j["id"] for j in last["jobs"]], last["has_more"]), ([ids[0]], False))
        self.assertEqual(self.get_json("/api/jobs?sort=newest&offset=7")["jobs"], [])
        self.assertEqual(self.get_json("/api/jobs?state=all&limit=3")["total"], 7, "without a kind the count is free")

    def test_every_listing_counts_newest_first_also_with_none_cancelled(self) -> None:
        # stats().to_dict() leaves "cancelled" out while no job is: the count must not need it.
        job = self.queue.enqueue("one", kind="email")
        for state in ("cancelled", "ready", "runnable", "delayed", "leased", "done", "dead", "all"):
            with self.subTest(state=state):
                page = self.get_json(f"/api/jobs?state={state}&sort=newest")
                expected = [job.id] if state in ("ready", "runnable", "all") else []
                self.assertEqual(([j["id"] for j in page["jobs"]], page["total"]), (expected, len(expected)))
        self.queue.cancel(job)
        page = self.get_json("/api/jobs?state=cancelled&kind=email&sort=newest")
        self.assertEqual(([j["id"] for j in page["jobs"]], page["total"]), ([job.id], 1))

    def test_newest_first_with_a_state_and_a_kind_counts_the_list(self) -> None:
        wanted = []
        for n in range(23):
            job = self.queue.enqueue({"n": n}, kind="email" if n % 3 else "sms")
            if n % 3:
                wanted.append(job.id)
        self.queue.enqueue("later", kind="email", delay=3600)
        page = self.get_json("/api/jobs?state=runnable&kind=email&sort=newest&limit=4")
        self.assertEqual([j["id"] for j in page["jobs"]], wanted[::-1][:4])
        self.assertEqual((page["total"], page["has_more"]), (len(wanted), True))
        # The count is found again after the list changes (the hint from the last answer is stale).
        newer = [self.queue.enqueue({"n": n}, kind="email").id for n in range(5)]
        page = self.get_json("/api/jobs?state=runnable&kind=email&sort=newest&limit=4")
        self.assertEqual([j["id"] for j in page["jobs"]], newer[::-1][:4])
        self.assertEqual(page["total"], len(wanted) + 5)
        for job in self.queue.lease(10, kinds=["email"]):
            self.queue.ack(job)
        page = self.get_json("/api/jobs?state=runnable&kind=email&sort=newest&limit=50")
        self.assertEqual([j["id"] for j in page["jobs"]], (wanted + newer)[10:][::-1])
        self.assertEqual(page["total"], len(wanted) + 5 - 10)
        done = self.get_json("/api/jobs?state=done&kind=email&sort=newest&limit=3")
        self.assertEqual(done["total"], 10)

    def test_search_finds_payload_text_and_ids_ignoring_case(self) -> None:
        ada = self.queue.enqueue({"to": "Ada@Example.com"}, job_id="welcome-ada").id
        grace = self.queue.enqueue({"to": "grace@example.com", "note": "Ada's friend"}, job_id="welcome-grace").id
        self.queue.enqueue({"to": "alan@example.com"}, job_id="invoice-7")
        self.assertEqual(self.ids("q=ada"), [ada, grace])
        self.assertEqual(self.ids("q=ADA%40example"), [ada])
        self.assertEqual(self.ids("q=welcome-"), [ada, grace])
        self.assertEqual(self.ids("q=" + urllib.parse.quote('"to":"alan')), ["invoice-7"], "compact JSON text")
        self.assertEqual(self.ids("q=ada&sort=newest"), [grace, ada])
        self.assertEqual(self.ids("q=nobody"), [])
        quoted = self.queue.enqueue({"text": 'she said "Hi" \\o/', "deep": [[{"Key-Ünïcode": 1}]]}).id
        self.assertEqual(self.ids("q=" + urllib.parse.quote('said "hi" \\o/')), [quoted], "a string as itself, quotes and all")
        self.assertEqual(self.ids("q=" + urllib.parse.quote("key-ünï")), [quoted], "keys too, at any depth")
        answer = self.get_json("/api/jobs?q=ada")
        self.assertEqual((answer["q"], answer["scanned"], answer["complete"]), ("ada", 4, True))

    def test_search_within_a_state_and_a_kind_with_paging(self) -> None:
        matching = [self.queue.enqueue({"order": n, "city": "Paris"}, kind="order").id for n in range(7)]
        self.queue.enqueue({"city": "Paris"}, kind="invoice")
        self.queue.enqueue({"order": 99, "city": "Lyon"}, kind="order")
        dead = self.make_dead({"city": "Paris"})
        self.assertEqual(self.ids("q=paris&kind=order&state=runnable&limit=3"), matching[:3])
        second = self.get_json("/api/jobs?q=paris&kind=order&state=runnable&limit=3&offset=3")
        self.assertEqual(([j["id"] for j in second["jobs"]], second["has_more"]), (matching[3:6], True))
        third = self.get_json("/api/jobs?q=paris&kind=order&state=runnable&limit=3&offset=6")
        self.assertEqual(([j["id"] for j in third["jobs"]], third["has_more"]), (matching[6:], False))
        self.assertEqual(self.ids("q=paris&kind=order&state=runnable&sort=newest&limit=2"), matching[::-1][:2])
        self.assertEqual(self.ids("q=paris&state=dead"), [dead])

    def test_a_search_stops_at_its_bound_and_says_so(self) -> None:
        ids = self.queue.enqueue_many([{"n": n} for n in range(12)])
        with mock.patch.object(dashboard.listing, "MAX_SEARCH_SCAN", 5), mock.patch.object(dashboard.listing, "SEARCH_PAGE", 2):
            answer = self.get_json("/api/jobs?q=%22n%22")
            self.assertEqual([j["id"] for j in answer["jobs"]], [j.id for j in ids[:5]])
            self.assertEqual((answer["scanned"], answer["complete"], answer["has_more"]), (5, False, False))
            # A whole id is found wherever it is, and only once.
            whole = self.get_json("/api/jobs?q=" + urllib.parse.quote(ids[11].id))
            self.assertEqual([j["id"] for j in whole["jobs"]], [ids[11].id])
            # ... unless the state or the kind leaves it out.
            self.assertEqual(self.ids("state=dead&q=" + urllib.parse.quote(ids[11].id)), [])
            self.assertEqual(self.ids("kind=other&q=" + urllib.parse.quote(ids[11].id)), [])

    def test_a_whole_id_that_also_matches_the_scan_is_listed_once(self) -> None:
        self.queue.enqueue("x", job_id="abc")
        self.queue.enqueue("x", job_id="abc-2")
        self.assertEqual(self.ids("q=abc"), ["abc", "abc-2"])
        self.assertEqual(self.ids("q=abc&sort=newest"), ["abc", "abc-2"], "the whole id comes first")

    def test_bad_list_parameters_are_refused(self) -> None:
        for query, fragment in (
            ("sort=random", "sort"),
            ("q=" + "x" * 257, "q must be at most 256"),
            ("kind=" + "k" * 257, "kind must be at most 256"),
            ("q=a%00b", "NUL"),
        ):
            with self.subTest(query=query[:40]):
                self.assertError(self.request("GET", "/api/jobs?" + query), 400, fragment)


class CountListedTest(unittest.TestCase):
    """count_listed against the length of the list itself, for many sizes, bounds and hints right and wrong."""

    class Fake:
        def __init__(self, n: int) -> None:
            self.jobs = [Job(id=str(i), payload=i) for i in range(n)]
            self.reads: list[int | None] = []

        def list_jobs(self, state: Any = None, *, limit: int | None = None, offset: int = 0, kind: Any = None) -> list[Job]:
            self.reads.append(limit)
            return self.jobs[offset : None if limit is None else offset + limit]

    def test_every_size_with_and_without_hints(self) -> None:
        read = dashboard.listing.COUNT_READ
        for n in (*range(12), read - 1, read, read + 1, 2 * read + 3, 4 * read - 1, 1001):
            for upper in {n, n + 1, 2 * n + 7, 10 * n + read}:
                for hint in (None, 0, 1, n, n + 1, max(0, n - 1), max(0, n - read - 2), 3 * n + 5):
                    fake = self.Fake(n)
                    with self.subTest(n=n, upper=upper, hint=hint):
                        self.assertEqual(dashboard.listing.count_listed(fake, None, "k", upper, hint), n)
                        self.assertTrue(all(r is not None and r <= read + 1 for r in fake.reads), "no read is unbounded or wide")

    def test_a_right_hint_costs_one_read_and_none_costs_log_reads(self) -> None:
        fake = self.Fake(100_000)
        self.assertEqual(dashboard.listing.count_listed(fake, None, "k", 200_000, 100_000), 100_000)
        self.assertEqual(len(fake.reads), 1)
        fake.reads.clear()
        self.assertEqual(dashboard.listing.count_listed(fake, None, "k", 200_000), 100_000)
        self.assertLessEqual(len(fake.reads), 11, "log2(200,000 / 250) one-job reads, then one of 250")


class SafetyTest(DashboardCase):
    POSTS = ("/api/dlq/requeue", "/api/purge", "/api/compact")

    def test_post_without_or_with_a_wrong_csrf_token_is_refused(self) -> None:
        dead = self.make_dead()
        self.make_done()
        ready = self.queue.enqueue("ready")
        before = self.snapshot()
        paths = (*self.POSTS, f"/api/jobs/{dead}/requeue", f"/api/jobs/{ready.id}/cancel", "/api/bulk",
                 f"/api/jobs/{ready.id}/run-now", f"/api/jobs/{ready.id}/delete", f"/api/jobs/{dead}/delete")
        for path in paths:
            body = {"confirm": self.queue.name, "action": "cancel", "ids": [ready.id, dead]}
            for csrf in (False, "0" * 64, self.server.csrf_token[:-1], self.server.csrf_token + "0"):
                with self.subTest(path=path, csrf=csrf):
                    self.assertError(self.request("POST", path, body=body, csrf=csrf), 403, CSRF_HEADER)
        self.assertEqual(self.snapshot(), before)

    def test_a_post_from_another_origin_is_refused_even_with_the_token(self) -> None:
        dead = self.make_dead()
        for origin in ("http://evil.example", "null", f"http://localhost:{self.port}"):
            with self.subTest(origin=origin):
                resp = self.request("POST", "/api/dlq/requeue", headers={"Origin": origin})
                self.assertError(resp, 403, "cross-origin")
        self.assertEqual(self.queue.get(dead).state, JobState.DEAD)
        same = self.request("POST", "/api/dlq/requeue", headers={"Origin": f"http://127.0.0.1:{self.port}"})
        self.assertEqual(same.status, 200, same.body)

    def test_the_job_actions_from_another_origin_are_refused(self) -> None:
        later = self.queue.enqueue("later", delay=3600)
        dead = self.make_dead()
        before = self.snapshot()
        for path, body in ((f"/api/jobs/{later.id}/run-now", None), (f"/api/jobs/{later.id}/delete", None),
                           (f"/api/jobs/{dead}/delete", None), (f"/api/jobs/{later.id}/cancel", None),
                           ("/api/bulk", {"action": "run_now", "ids": [later.id]}),
                           ("/api/bulk", {"action": "delete", "ids": [later.id, dead]})):  # fmt: skip
            for origin in ("http://evil.example", "null"):
                with self.subTest(path=path, origin=origin):
                    self.assertError(self.request("POST", path, body=body, headers={"Origin": origin}), 403, "cross-origin")
        self.assertEqual(self.snapshot(), before)

    def test_get_never_changes_state(self) -> None:
        dead = self.make_dead()
        self.queue.enqueue("ready")
        self.make_done()
        before = self.snapshot()
        paths = [
            "/",
            "/api/stats",
            "/api/jobs",
            "/api/jobs?state=dead",
            f"/api/jobs/{dead}",
            "/api/dlq",
            "/metrics",
            "/api/history",
            "/api/workers",
            # The state-changing routes must not act on GET or HEAD.
            f"/api/jobs/{dead}/requeue",
            f"/api/jobs/{dead}/cancel",
            f"/api/jobs/{dead}/run-now",
            f"/api/jobs/{dead}/delete",
            f"/api/jobs/{dead}/explain",
            "/api/schedules",
            "/api/limits",
            "/api/bulk",
            "/api/dlq/requeue",
            "/api/purge",
            "/api/compact",
        ]
        for path in paths:
            for method in ("GET", "HEAD"):
                self.request(method, path)
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.queue.get(dead).state, JobState.DEAD)

    def test_a_foreign_host_header_is_refused(self) -> None:
        # A page whose DNS name is re-pointed at 127.0.0.1 (DNS rebinding) sends its own name.
        for host in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example"):
            with self.subTest(host=host):
                self.assertError(self.request("GET", "/api/stats", headers={"Host": host}), 403, "Host")
                self.assertError(self.request("GET", "/", headers={"Host": host}), 403, "Host")
        for host in (f"localhost:{self.port}", f"127.0.0.1:{self.port}", "127.0.0.1"):
            with self.subTest(host=host):
                self.assertEqual(self.request("GET", "/api/stats", headers={"Host": host}).status, 200)

    def test_a_script_payload_comes_back_escaped(self) -> None:
        job = self.queue.enqueue(SCRIPT_PAYLOAD, job_id="xss-1")
        self.queue.enqueue({"html": "<img src=x onerror=alert(2)>", "amp": "a&b"})
        leased = self.lease()
        self.queue.nack(leased, error="</pre><script>alert(3)</script>", permanent=True)
        for path in ("/api/jobs", "/api/jobs?state=dead", "/api/dlq", f"/api/jobs/{job.id}"):
            with self.subTest(path=path):
                resp = self.request("GET", path)
                self.assertEqual(resp.status, 200)
                for raw in (b"<", b">", b"&"):
                    self.assertNotIn(raw, resp.body)
                self.assertIn(b"\\u003cscript\\u003e", resp.body)
        detail = self.get_json(f"/api/jobs/{job.id}")["job"]
        self.assertEqual(detail["payload"], SCRIPT_PAYLOAD)
        self.assertEqual(detail["last_error"], "</pre><script>alert(3)</script>")
        page = self.request("GET", "/").text
        self.assertNotIn("alert(", page)
        self.assertNotIn("xss-1", page)


class RawHttpTest(DashboardCase):
    """What only a raw socket can send: smuggling attempts, HTTP/0.9, odd Host values."""

    SECURITY_HEADERS = (b"content-security-policy:", b"x-content-type-options: nosniff", b"x-frame-options: deny")

    def raw(self, data: bytes) -> bytes:
        """Send ``data``, close our side, and read everything the server answers until it closes."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)

    @staticmethod
    def statuses(answer: bytes) -> list[int]:
        return [int(code) for code in re.findall(rb"^HTTP/1\.[01] (\d{3}) ", answer, re.M)]

    def test_a_client_that_hangs_up_mid_answer_is_routine(self) -> None:
        job = self.queue.enqueue("x" * (12 * 1024 * 1024))  # an answer larger than the socket buffers
        finished = threading.Semaphore(0)
        real = DashboardServer.shutdown_request

        def shutdown_request(server: DashboardServer, request: Any) -> None:
            real(server, request)
            finished.release()

        stderr = io.StringIO()
        with mock.patch.object(DashboardServer, "shutdown_request", shutdown_request), \
                mock.patch("sys.stderr", stderr), self.assertNoLogs("nobroker.dashboard", logging.INFO):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            sock.sendall(f"GET /api/jobs/{job.id} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
                         + (f"Authorization: Bearer {self.token}\r\n".encode() if self.token else b"") + b"\r\n")
            self.assertTrue(sock.recv(1024).startswith(b"HTTP/1.1 200"))
            # Hang up hard (a reset) while the server is still writing the body.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            self.assertTrue(finished.acquire(timeout=WAIT_SECONDS), "the server never finished the request")
        self.assertEqual(stderr.getvalue(), "", "a hang-up printed a traceback")
        self.assertEqual(self.request("GET", "/api/stats").status, 200, "the server serves on")

    def test_a_chunked_body_is_refused_not_read_as_a_second_request(self) -> None:
        self.make_done()
        before = self.snapshot()
        smuggled = b"GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        for method, path in (("POST", "/api/compact"), ("GET", "/api/stats")):
            with self.subTest(method=method):
                answer = self.raw(
                    f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n{CSRF_HEADER}: {self.server.csrf_token}\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n".encode() + f"{len(smuggled):x}\r\n".encode() + smuggled
                    + b"\r\n0\r\n\r\n" + smuggled
                )  # fmt: skip
                self.assertEqual(self.statuses(answer), [411], answer)
                self.assertIn(b"Transfer-Encoding", answer)
                self.assertIn(b"connection: close", answer.lower())
        self.assertEqual(self.snapshot(), before, "the refused request did something")

    def test_content_length_must_be_one_number_of_digits(self) -> None:
        for lengths in (("2", "40"), ("+2",), ("0x2",), ("2_0",), ("-1",), ("\u0662",)):
            with self.subTest(lengths=lengths):
                head = "".join(f"Content-Length: {n}\r\n" for n in lengths)
                answer = self.raw(
                    f"POST /api/compact HTTP/1.1\r\nHost: 127.0.0.1\r\n{CSRF_HEADER}: {self.server.csrf_token}\r\n"
                    f"{head}\r\n{{}}".encode("utf-8") + b"GET /api/stats HTTP/1.1\r\n\r\n"
                )  # fmt: skip
                self.assertEqual(self.statuses(answer), [400], answer)
        two_hosts = self.raw(b"GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n")
        self.assertEqual(self.statuses(two_hosts), [400], two_hosts)

    def test_an_http_0_9_request_line_gets_a_proper_refusal(self) -> None:
        for line in (b"GET /api/stats\r\n", b"GET /\r\n", b"POST /api/purge\r\n"):
            with self.subTest(line=line):
                answer = self.raw(line)
                self.assertEqual(self.statuses(answer), [400], answer)
                self.assertTrue(answer.startswith(b"HTTP/1."), answer)
                for header in self.SECURITY_HEADERS:
                    self.assertIn(header, answer.lower())
                self.assertIn(b"HTTP version", answer)
                self.assertNotIn(b'"ready"', answer, "the stats went out")

    def test_http_server_own_refusals_carry_the_security_headers(self) -> None:
        for line in (b"GET /api/stats HTTP/9.9\r\n\r\n", b"GET /api/stats HTTX/1.1\r\n\r\n", b"BREW\r\n\r\n",
                     b"GET / HTTP/1.1 extra\r\n\r\n"):  # fmt: skip
            with self.subTest(line=line):
                answer = self.raw(line)
                self.assertTrue(answer.startswith(b"HTTP/1."), answer)
                self.assertGreaterEqual(self.statuses(answer)[0], 400, answer)
                for header in self.SECURITY_HEADERS:
                    self.assertIn(header, answer.lower())

    def test_a_deeply_nested_json_body_is_a_400(self) -> None:
        for body in (b"[" * 10_000, b'{"a":' * 2_000 + b"1" + b"}" * 2_000):
            with self.subTest(size=len(body)):
                self.assertLess(len(body), MAX_BODY_BYTES)
                self.assertError(self.request("POST", "/api/purge", body=body), 400, "nested")

    def test_host_values_are_parsed_strictly(self) -> None:
        port = self.port
        for host in (
            "[::1]evil.com", "[::1].evil.com", "[::1]:80evil.com", "127.0.0.1.evil.com", "127.0.0.1evil.com",
            "::1", "[::1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:99999", "127.0.0.1:+80",
            "127.0.0.1:0x50", f"127.0.0.1:{port}:1", f"127.0.0.1:{port}x", "127.0.0.1 :80", "localhost.evil.com",
            "localhost@evil.com", "evil.com#127.0.0.1", "",
        ):  # fmt: skip
            with self.subTest(host=host):
                answer = self.raw(f"GET /api/stats HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                self.assertEqual(self.statuses(answer), [403], answer)
        for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}",
                     "[::1]", f"127.1.2.3:{port}"):  # fmt: skip
            with self.subTest(host=host):
                answer = self.raw(f"GET /api/stats HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                self.assertEqual(self.statuses(answer), [200], answer)


class TokenTest(DashboardCase):
    token = "s3cret-token-for-tests"

    def test_every_route_needs_the_bearer_token(self) -> None:
        dead = self.make_dead()
        for method, path in (
            ("GET", "/"),
            ("GET", "/api/stats"),
            ("GET", "/api/jobs"),
            ("GET", f"/api/jobs/{dead}"),
            ("GET", "/api/dlq"),
            ("GET", "/metrics"),
            ("POST", "/api/dlq/requeue"),
            ("POST", f"/api/jobs/{dead}/requeue"),
            ("POST", f"/api/jobs/{dead}/cancel"),
            ("POST", f"/api/jobs/{dead}/run-now"),
            ("POST", f"/api/jobs/{dead}/delete"),
            ("GET", f"/api/jobs/{dead}/explain"),
            ("GET", "/api/schedules"),
            ("GET", "/api/limits"),
            ("POST", "/api/bulk"),
            ("GET", "/api/history"),
            ("GET", "/api/workers"),
            ("POST", "/api/compact"),
        ):
            with self.subTest(method=method, path=path):
                self.assertError(self.request(method, path, auth=False), 403, "token")
                wrong = {"Authorization": "Bearer not-the-token"}
                self.assertError(self.request(method, path, auth=False, headers=wrong), 403, "token")
                basic = {"Authorization": "Basic " + self.token}
                self.assertError(self.request(method, path, auth=False, headers=basic), 403, "token")
        self.assertEqual(self.queue.get(dead).state, JobState.DEAD)
        for path in ("/", "/api/stats", "/metrics", f"/api/jobs/{dead}"):
            self.assertEqual(self.request("GET", path).status, 200, path)

    def test_the_token_does_not_replace_the_csrf_token(self) -> None:
        dead = self.make_dead()
        self.assertError(self.request("POST", "/api/dlq/requeue", csrf=False), 403, CSRF_HEADER)
        self.assertEqual(self.queue.get(dead).state, JobState.DEAD)
        self.assertEqual(self.request("POST", "/api/dlq/requeue").json(), {"requeued": 1})

    def test_the_page_trades_the_token_in_the_url_for_a_strict_cookie(self) -> None:
        self.assertError(self.request("GET", "/?token=wrong", auth=False), 403, "token")
        resp = self.request("GET", "/?" + urllib.parse.urlencode({"token": self.token}), auth=False)
        self.assertEqual(resp.status, 303)
        self.assertEqual(resp.headers["Location"], "/")
        # The rest of the address (the queue and view it names) survives the trade.
        kept = self.request("GET", "/?" + urllib.parse.urlencode({"queue": "a b&c", "token": self.token, "state": "dead"}), auth=False)
        self.assertEqual(kept.headers["Location"], "/?queue=a+b%26c&state=dead")
        cookie = resp.headers["Set-Cookie"]
        self.assertIn("HttpOnly", cookie)
        self.assertIn("SameSite=Strict", cookie)
        self.assertIn("Path=/", cookie)
        name_value = cookie.split(";", 1)[0]
        name, value = name_value.split("=", 1)
        self.assertEqual(name, SESSION_COOKIE)
        self.assertNotIn(self.token, cookie)  # the cookie is a server secret, not the token
        with_cookie = {"Cookie": name_value}
        self.assertEqual(self.request("GET", "/", auth=False, headers=with_cookie).status, 200)
        self.assertEqual(self.request("GET", "/api/stats", auth=False, headers=with_cookie).status, 200)
        flipped = "1" if value[-1] != "1" else "2"
        forged = {"Cookie": f"{SESSION_COOKIE}={value[:-1]}{flipped}"}
        self.assertError(self.request("GET", "/api/stats", auth=False, headers=forged), 403, "token")

    def test_with_a_token_any_host_name_is_accepted(self) -> None:
        resp = self.request("GET", "/api/stats", headers={"Host": "queue-box.internal:8765"})
        self.assertEqual(resp.status, 200)


# ---------------------------------------------------------------- /metrics
def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text exposition, checking each line's syntax."""
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    typed: dict[str, str] = {}
    if not text.endswith("\n"):
        raise AssertionError("the exposition must end with a newline")
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            match = TYPE_RE.match(line)
            if not match:
                raise AssertionError(f"bad TYPE line: {line!r}")
            typed[match.group("name")] = match.group(2)
            continue
        if line.startswith("# HELP "):
            if not HELP_RE.match(line):
                raise AssertionError(f"bad HELP line: {line!r}")
            continue
        match = SAMPLE_RE.match(line)
        if not match:
            raise AssertionError(f"line is not in the Prometheus text format: {line!r}")
        name = match.group("name")
        if name not in typed:
            raise AssertionError(f"sample before its TYPE line: {line!r}")
        labels = tuple(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', match.group("labels") or ""))
        value = float(match.group("value").replace("Inf", "inf"))
        key = (name, labels)
        if key in samples:
            raise AssertionError(f"duplicate sample: {line!r}")
        samples[key] = value
    return samples


class MetricsTest(DashboardCase):
    def test_metrics_parse_and_match_stats(self) -> None:
        for n in range(5):
            self.queue.enqueue({"n": n})
        self.queue.enqueue("later", delay=3600)
        first = self.lease()
        self.queue.ack(first)
        self.lease()
        self.make_dead()
        resp = self.request("GET", "/metrics")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8")
        samples = parse_metrics(resp.text)
        stats = self.queue.stats()
        q = ("queue", self.queue.name)
        for state in ("ready", "delayed", "leased", "done", "dead"):
            self.assertEqual(samples[("nobroker_jobs", (q, ("state", state)))], getattr(stats, state), state)
        self.assertEqual(samples[("nobroker_leases_active", (q,))], stats.leased)
        self.assertEqual(samples[("nobroker_dead_jobs", (q,))], stats.dead)
        self.assertEqual((stats.ready, stats.delayed, stats.leased, stats.done, stats.dead), (3, 1, 1, 1, 1))
        age = samples[("nobroker_oldest_ready_age_seconds", (q,))]
        self.assertTrue(0.0 <= age < 600.0, age)
        self.assertTrue(math.isfinite(age))

    def test_oldest_ready_age_ignores_delayed_jobs_and_is_zero_when_idle(self) -> None:
        q = ("queue", self.queue.name)
        samples = parse_metrics(self.request("GET", "/metrics").text)
        self.assertEqual(samples[("nobroker_oldest_ready_age_seconds", (q,))], 0.0)
        self.queue.enqueue("later", delay=3600)
        samples = parse_metrics(self.request("GET", "/metrics").text)
        self.assertEqual(samples[("nobroker_oldest_ready_age_seconds", (q,))], 0.0)

    def test_oldest_ready_age_tracks_the_longest_waiting_job(self) -> None:
        # A clock of our own makes the age exact: the job became runnable 90 s ago.
        queue = _AgedQueue(self.queue, age=90.0)
        self.server.queue = queue  # type: ignore[assignment]
        queue.enqueue("waiting")
        samples = parse_metrics(self.request("GET", "/metrics").text)
        age = samples[("nobroker_oldest_ready_age_seconds", (("queue", self.queue.name),))]
        self.assertGreaterEqual(age, 90.0)
        self.assertLess(age, 90.0 + 60.0)

    def test_oldest_ready_age_scans_past_a_page_of_delayed_jobs(self) -> None:
        queue = _AgedQueue(self.queue, age=90.0)
        self.server.queue = queue  # type: ignore[assignment]
        for n in range(3):
            queue.enqueue(n, delay=3600)
        queue.enqueue("runnable")
        with mock.patch.object(dashboard.metrics, "METRICS_SCAN_PAGE", 2):
            samples = parse_metrics(self.request("GET", "/metrics").text)
        self.assertGreaterEqual(samples[("nobroker_oldest_ready_age_seconds", (("queue", self.queue.name),))], 90.0)
        self.assertEqual(queue.list_calls, 2)

    def test_oldest_ready_age_stops_after_the_first_page_when_it_can(self) -> None:
        queue = _AgedQueue(self.queue, age=90.0)
        self.server.queue = queue  # type: ignore[assignment]
        for n in range(7):
            queue.enqueue(n)
        with mock.patch.object(dashboard.metrics, "METRICS_SCAN_PAGE", 2):
            samples = parse_metrics(self.request("GET", "/metrics").text)
        self.assertGreaterEqual(samples[("nobroker_oldest_ready_age_seconds", (("queue", self.queue.name),))], 90.0)
        self.assertEqual(queue.list_calls, 1)

    def test_the_storage_counters_are_prometheus_counters_per_kind(self) -> None:
        self.queue.enqueue_many(["a", "b"], kind="mail")
        self.queue.enqueue("c")
        self.queue.ack(self.lease())
        self.make_dead()  # one more job (default kind), leased and failed for good
        text = self.request("GET", "/metrics").text
        self.assertIn("# TYPE nobroker_jobs_enqueued_total counter", text)
        samples = parse_metrics(text)
        counters = self.queue.counters()
        q = ("queue", self.queue.name)
        for kind, row in counters.items():
            for name in ("enqueued", "succeeded", "failed", "dead", "cancelled"):
                self.assertEqual(samples[(f"nobroker_jobs_{name}_total", (q, ("kind", kind)))], row[name], (kind, name))
        self.assertEqual(samples[("nobroker_jobs_enqueued_total", (q, ("kind", "mail")))], 2)
        self.assertEqual(sum(v for (n, _), v in samples.items() if n == "nobroker_jobs_succeeded_total"), 1)
        self.assertEqual(sum(v for (n, _), v in samples.items() if n == "nobroker_jobs_dead_total"), 1)

    def test_kind_names_are_escaped_as_label_values(self) -> None:
        self.queue.enqueue("x", kind='k"ind\\with\nnewline')
        samples = parse_metrics(self.request("GET", "/metrics").text)
        kind = 'k\\"ind\\\\with\\nnewline'
        self.assertEqual(samples[("nobroker_jobs_enqueued_total", (("queue", self.queue.name), ("kind", kind)))], 1)

    def test_workers_are_gauges_live_and_gone(self) -> None:
        from nobroker.announcements import GONE_AFTER
        from tests.semantics_roster import info

        now = time.time()
        self.queue.announce_worker(info(running=3))
        self.queue.announce_worker(info(running=1))
        self.queue.announce_worker(info(running=5, heartbeat_at=now - GONE_AFTER - 1))
        samples = parse_metrics(self.request("GET", "/metrics").text)
        q = ("queue", self.queue.name)
        self.assertEqual(samples[("nobroker_workers", (q, ("state", "live")))], 2)
        self.assertEqual(samples[("nobroker_workers", (q, ("state", "gone")))], 1)
        self.assertEqual(samples[("nobroker_worker_jobs_running", (q,))], 4)

    def test_queue_names_are_escaped_as_label_values(self) -> None:
        self.server.queue = _RenamedQueue(self.queue, 'we"ird\\name')  # type: ignore[assignment]
        samples = parse_metrics(self.request("GET", "/metrics").text)
        self.assertIn(("nobroker_dead_jobs", (("queue", 'we\\"ird\\\\name'),)), samples)


class QueuePickerTest(DashboardCase):
    """One dashboard, every queue of its folder (or schema): ?queue= picks one; nothing is ever created."""

    def other_queue(self, name: str) -> Queue:
        where, options = self.location()
        queue = Queue(where, name, **options)  # the test makes it; the dashboard only finds it
        self.addCleanup(queue.close)
        return queue

    def test_the_queues_are_listed_with_the_default(self) -> None:
        other = self.other_queue(fresh_name("emails"))
        other.enqueue("x")
        self.queue.enqueue("here")  # on PostgreSQL a queue without rows is not there
        listed = self.get_json("/api/queues")
        self.assertEqual(set(listed), {"queues", "default"}, "counts only when asked for")
        self.assertEqual(listed["default"], self.queue.name)
        self.assertIn(self.queue.name, listed["queues"])
        self.assertIn(other.name, listed["queues"])
        self.assertEqual(listed["queues"], sorted(listed["queues"]))

    def test_each_queue_is_listed_with_its_counts(self) -> None:
        other = self.other_queue(fresh_name("emails"))
        for n in range(3):
            other.enqueue(n)
        other.enqueue("later", delay=3600)
        self.queue.enqueue("here")
        listed = self.get_json("/api/queues?counts=1")
        self.assertEqual(listed["stats"][other.name], other.stats().to_dict())
        self.assertEqual(listed["stats"][other.name], {"ready": 3, "delayed": 1, "leased": 0, "done": 0, "dead": 0, "total": 4})
        self.assertEqual(listed["stats"][self.queue.name]["total"], 1)
        self.assertEqual(listed["errors"], {})
        self.assertLessEqual(set(listed["stats"]), set(listed["queues"]))

    def test_counts_are_read_for_a_bounded_number_of_queues_the_default_first(self) -> None:
        others = [self.other_queue(fresh_name(f"many{n}")) for n in range(3)]
        for queue in others:
            queue.enqueue("x")
        self.queue.enqueue("here")
        with mock.patch.object(dashboard.api, "MAX_COUNTED_QUEUES", 2):
            listed = self.get_json("/api/queues?counts=1")
        self.assertEqual(len(listed["stats"]), 2)
        self.assertIn(self.queue.name, listed["stats"])
        self.assertLessEqual({q.name for q in others} | {self.queue.name}, set(listed["queues"]))

    def test_the_first_queue_answers_to_its_name(self) -> None:
        self.queue.enqueue("here", job_id="first-job")
        named = self.get_json("/api/jobs?state=all&queue=" + urllib.parse.quote(self.queue.name))
        self.assertEqual([j["id"] for j in named["jobs"]], ["first-job"])

    def test_every_route_acts_on_the_queue_named(self) -> None:
        other = self.other_queue(fresh_name("emails"))
        mine = other.enqueue({"to": "ada"}, job_id="only-there")
        self.queue.enqueue("here")
        q = "queue=" + urllib.parse.quote(other.name)
        stats = self.get_json(f"/api/stats?{q}")
        self.assertEqual((stats["queue"], stats["stats"]["total"]), (other.name, 1))
        self.assertEqual(self.get_json("/api/stats")["queue"], self.queue.name)
        self.assertEqual([j["id"] for j in self.get_json(f"/api/jobs?state=all&{q}")["jobs"]], [mine.id])
        self.assertEqual(self.get_json(f"/api/jobs/only-there?{q}")["job"]["payload"], {"to": "ada"})
        self.assertError(self.request("GET", "/api/jobs/only-there"), 404)
        self.assertIn(f'queue="{other.name}"', self.request("GET", f"/metrics?{q}").text)
        refused = self.request("POST", f"/api/purge?{q}", body={"confirm": self.queue.name})
        self.assertError(refused, 400, other.name)
        purged = self.request("POST", f"/api/purge?{q}", body={"confirm": other.name})
        self.assertEqual((purged.status, purged.json()), (200, {"purged": 1}))
        self.assertEqual((len(other), len(self.queue)), (0, 1))

    def test_an_unknown_queue_is_a_404_and_is_not_created(self) -> None:
        before = nobroker.list_queues(self.location()[0], schema=self.location()[1].get("schema"))
        for path in ("/api/stats?queue=ghost", "/api/jobs?queue=ghost", "/metrics?queue=ghost"):
            with self.subTest(path=path):
                self.assertError(self.request("GET", path), 404, "no queue named 'ghost'")
        self.assertError(self.request("POST", "/api/compact?queue=ghost", body={}), 404, "no queue named 'ghost'")
        self.assertEqual(nobroker.list_queues(self.location()[0], schema=self.location()[1].get("schema")), before)
        if self.location()[0] == self.dir:
            self.assertFalse([n for n in os.listdir(self.dir) if n.startswith("ghost")])

    def test_the_security_rules_hold_on_the_new_routes(self) -> None:
        other = self.other_queue(fresh_name("emails"))
        other.enqueue("x")
        q = "queue=" + urllib.parse.quote(other.name)
        self.assertError(self.request("POST", f"/api/purge?{q}", body={"confirm": other.name}, csrf=False), 403, CSRF_HEADER)
        self.assertError(self.request("POST", f"/api/purge?{q}", body={"confirm": other.name}, csrf="wrong"), 403)
        if self.token is None:  # with a token the token guards the server, and Host is not checked
            self.assertError(self.request("GET", "/api/queues", headers={"Host": "evil.example"}), 403, "Host")
            self.assertError(self.request("GET", f"/api/stats?{q}", headers={"Host": "evil.example"}), 403, "Host")
        self.assertEqual(len(other), 1)

    def test_the_queues_it_opened_are_closed_with_the_server(self) -> None:
        other = self.other_queue(fresh_name("emails"))
        other.enqueue("x")
        self.get_json("/api/stats?queue=" + urllib.parse.quote(other.name))
        opened = self.server.queues.get(other.name)
        self.assertIsNot(opened, other)
        self.server.server_close()
        with self.assertRaises(nobroker.QueueClosedError):
            opened.stats()
        self.assertEqual(self.queue.stats().total, 0, "the first queue belongs to the caller and stays open")


class EmptyFirstQueueTest(DashboardCase):
    """A dashboard started on a queue that is not there (an empty `default` on PostgreSQL) while others are."""

    def queue_options(self) -> dict[str, Any]:
        self.listed = [fresh_name("app")]
        return {"list_queues": lambda: list(self.listed), "open_queue": lambda name: self.other(name)}

    def other(self, name: str) -> Queue:
        where, options = self.location()
        queue = Queue(where, name, **options)
        self.addCleanup(queue.close)
        return queue

    def test_it_opens_on_a_queue_that_is_there_and_lists_only_those(self) -> None:
        listed = self.get_json("/api/queues?counts=1")
        self.assertEqual(listed["queues"], self.listed)
        self.assertEqual(listed["default"], self.listed[0])
        self.assertEqual(set(listed["stats"]), set(self.listed))
        # The first queue still answers to its own name.
        self.assertEqual(self.get_json("/api/stats?queue=" + urllib.parse.quote(self.queue.name))["queue"], self.queue.name)

    def test_with_nothing_else_listed_the_first_queue_is_shown(self) -> None:
        self.listed = []
        listed = self.get_json("/api/queues")
        self.assertEqual((listed["queues"], listed["default"]), ([self.queue.name], self.queue.name))


class UncountableQueueTest(DashboardCase):
    """A queue listed but impossible to open (damaged, gone): listed with its error; the others keep their counts."""

    def queue_options(self) -> dict[str, Any]:
        def open_queue(name: str) -> Queue:
            raise nobroker.CorruptLogError(f"queue {name} is damaged at offset 42")

        return {"list_queues": lambda: [self.queue.name, "broken"], "open_queue": open_queue}

    def test_the_broken_queue_is_listed_with_its_error(self) -> None:
        self.queue.enqueue("x")
        listed = self.get_json("/api/queues?counts=1")
        self.assertEqual(listed["queues"], sorted([self.queue.name, "broken"]))
        self.assertEqual(listed["stats"], {self.queue.name: self.queue.stats().to_dict()})
        self.assertIn("damaged at offset 42", listed["errors"]["broken"])
        self.assertError(self.request("GET", "/api/stats?queue=broken"), 500, "damaged")


class QueuePickerTokenTest(QueuePickerTest):
    token = "picker-t0ken"

    def test_the_queue_list_needs_the_token(self) -> None:
        self.assertError(self.request("GET", "/api/queues", auth=False), 403, "token is required")
        self.assertError(self.request("GET", "/api/stats?queue=anything", auth=False), 403, "token is required")


class _Proxy:
    """Forwards everything to a real queue; subclasses change one answer."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


class _RenamedQueue(_Proxy):
    def __init__(self, queue: Queue, name: str) -> None:
        super().__init__(queue)
        self.name = name


class _AgedQueue(_Proxy):
    """Reports every runnable job as having become runnable ``age`` seconds ago; counts list calls."""

    def __init__(self, queue: Queue, age: float) -> None:
        super().__init__(queue)
        # Before any scrape begins, so every reported age is at least ``age``.
        self._runnable_at = time.time() - age
        self.list_calls = 0

    def list_jobs(self, *args: Any, **kwargs: Any) -> Any:
        self.list_calls += 1
        now = time.time()
        jobs = self._queue.list_jobs(*args, **kwargs)
        for job in jobs:
            if job.available_at <= now:
                job.available_at = self._runnable_at
        return jobs


# ---------------------------------------------------------------- PostgreSQL
class OnPostgres:
    """Runs a dashboard test class on the PostgreSQL storage: a fresh schema per class, a fresh queue per test.

    Skips without psycopg or a server, except in CI, where that fails
    (tests.pgsupport decides, as for the storage's own tests).
    """

    schema: str
    dsn: str

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()  # type: ignore[misc]
        cls.dsn = require_postgres(cls)  # type: ignore[arg-type]
        from nobroker.postgres import migrate

        cls.schema = fresh_name("nbdash")
        migrate(cls.dsn, schema=cls.schema)
        cls.addClassCleanup(drop_schema, cls.schema)  # type: ignore[attr-defined]

    def location(self) -> tuple[str, dict[str, Any]]:
        return self.dsn, {"schema": self.schema}

    def open_queue(self) -> Queue:
        return Queue(self.dsn, name=fresh_name("dash"), schema=self.schema)

    def close_queue(self, queue: Queue) -> None:
        queue.close()


class PostgresApiTest(OnPostgres, ApiTest):
    pass


class PostgresQueuePickerTest(OnPostgres, QueuePickerTest):
    pass


class PostgresEmptyFirstQueueTest(OnPostgres, EmptyFirstQueueTest):
    pass


class PostgresControlApiTest(OnPostgres, ControlApiTest):
    pass


class PostgresSafetyTest(OnPostgres, SafetyTest):
    pass


class PostgresJobListTest(OnPostgres, JobListTest):
    pass


class PostgresMetricsTest(OnPostgres, MetricsTest):
    pass


# ---------------------------------------------------------------- binding
class BindTest(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.queue = Queue(self.dir, fsync=False)
        self.addCleanup(self.queue.close)

    def test_loopback_hosts(self) -> None:
        for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
            self.assertTrue(is_loopback_host(host), host)
        for host in ("0.0.0.0", "::", "", "192.168.1.5", "10.0.0.1", "example.com", "localhost.evil.example"):
            self.assertFalse(is_loopback_host(host), host)

    def test_a_public_address_without_a_token_is_refused(self) -> None:
        for host in ("0.0.0.0", "::", "192.168.1.5", "example.com", ""):
            with self.subTest(host=host):
                with self.assertRaises(DashboardConfigError) as caught:
                    make_server(self.queue, host=host, port=0)
                self.assertIn("--token", str(caught.exception))
                self.assertIsInstance(caught.exception, ValueError)
                self.assertIsInstance(caught.exception, NobrokerError)

    def test_a_public_address_with_a_token_binds(self) -> None:
        server = make_server(self.queue, host="0.0.0.0", port=0, token="t0ken")
        server.server_close()

    def test_bad_tokens_and_ports_are_refused(self) -> None:
        for token in ("", "   ", "has space", "tab\there", "ünï"):
            with self.subTest(token=token), self.assertRaises(DashboardConfigError):
                make_server(self.queue, port=0, token=token)
        for port in (-1, 65536, True):
            with self.subTest(port=port), self.assertRaises(DashboardConfigError):
                make_server(self.queue, port=port)

    def test_a_busy_port_is_one_error_naming_it(self) -> None:
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with self.assertRaises(DashboardConfigError) as caught:
            make_server(self.queue, host="127.0.0.1", port=port)
        self.assertIsInstance(caught.exception, OSError)
        self.assertIn(f"127.0.0.1:{port}: address already in use; pick another port", str(caught.exception))

    def test_ipv6_loopback(self) -> None:
        if not socket.has_ipv6:
            self.skipTest("no IPv6 on this machine")
        try:
            server = make_server(self.queue, host="::1", port=0)
        except OSError as exc:
            self.skipTest(f"cannot bind ::1 here: {exc}")
        self.addCleanup(server.server_close)
        self.assertTrue(server.url.startswith("http://[::1]:"))
        thread = threading.Thread(target=server.serve_forever, args=(POLL_SECONDS,), daemon=True)
        thread.start()
        self.addCleanup(thread.join, 10)
        self.addCleanup(server.shutdown)
        conn = http.client.HTTPConnection("::1", server.server_address[1], timeout=60)
        conn.request("GET", "/api/stats")
        self.assertEqual(conn.getresponse().status, 200)
        conn.close()

    def test_serve_logs_the_address_and_stops_on_shutdown(self) -> None:
        ready = threading.Event()
        servers: list[DashboardServer] = []

        def on_ready(server: DashboardServer) -> None:
            servers.append(server)
            ready.set()

        with self.assertLogs("nobroker.dashboard", logging.INFO) as logs:
            thread = threading.Thread(
                target=serve, args=(self.queue,), kwargs={"port": 0, "on_ready": on_ready}, daemon=True
            )
            thread.start()
            self.assertTrue(ready.wait(WAIT_SECONDS))
            (server,) = servers
            conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
            conn.request("GET", "/api/stats")
            self.assertEqual(conn.getresponse().status, 200)
            conn.close()
            server.shutdown()
            thread.join(WAIT_SECONDS)
            self.assertFalse(thread.is_alive())
        self.assertTrue(any(server.url in line for line in logs.output), logs.output)

    def test_serve_can_open_the_page_in_a_browser_with_the_token(self) -> None:
        servers: list[DashboardServer] = []

        def on_ready(server: DashboardServer) -> None:
            servers.append(server)
            # shutdown() waits for serve_forever, which starts after this returns.
            threading.Thread(target=server.shutdown, daemon=True).start()

        with mock.patch("webbrowser.open") as opened:
            serve(self.queue, port=0, token="tok-123", open_browser=True, on_ready=on_ready)
        (server,) = servers
        opened.assert_called_once_with(server.url + "?token=tok-123")


if __name__ == "__main__":
    unittest.main()
