"""What every test of the dashboard's HTTP side shares: a real server over a real queue, and the PostgreSQL variant.

Owns: ``FileQueueCase`` (where a dashboard test's file queues live, and
opening and closing the one under test; the browser tests' base shares it),
``DashboardCase`` (a file queue in a temp dir and a dashboard over it on
a free loopback port, with ``request``/``get_json``/``assertError`` over
http.client and helpers that make dead and done jobs), ``Response``,
``picker_options`` (how `nobroker serve` lists and opens the other queues),
``OnPostgres`` (runs a test class on the PostgreSQL storage) and
``POLL_SECONDS``. The tests are in tests/test_dashboard_*.py; the browser
tests (tests/test_web_dashboard_*.py) use ``OnPostgres`` and
``picker_options`` too. Imports: the standard library, nobroker,
tests.pgsupport, tests.support.
"""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any

import nobroker
from nobroker import Job, Queue
from nobroker.dashboard import CSRF_HEADER, make_server
from nobroker.jobs import MAX_PRIORITY, JobState
from tests.pgsupport import drop_schema, fresh_name, require_postgres
from tests.support import TempDirTestCase

#: How often a test server checks for shutdown (the default half second adds up over many tests).
POLL_SECONDS = 0.05


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


class FileQueueCase(TempDirTestCase):
    """The queues of a dashboard test, on the file storage: in this test's temp folder (OnPostgres overrides them)."""

    def location(self) -> tuple[str, dict[str, Any]]:
        """Where this test's queues live, and the options to open them with."""
        return self.dir, {"fsync": False}

    def open_queue(self) -> Queue:
        """The queue under test: a file queue in this test's temp folder."""
        return Queue(self.dir, fsync=False)

    def close_queue(self, queue: Queue) -> None:
        queue.close()


class DashboardCase(FileQueueCase):
    """A file queue in a temp dir and a dashboard over it on a free port, offering the folder's other queues."""

    token: str | None = None

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
