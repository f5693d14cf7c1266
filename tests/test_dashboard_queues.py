"""One dashboard for every queue of a folder or schema: /api/queues and ?queue= on every route, nothing ever created.

Owns: ``QueuePickerTest`` (the queues listed with their counts, every route
acting on the queue named, an unknown queue a 404 and not created, the
queues it opened closed with the server; also with a token and on
PostgreSQL), ``EmptyFirstQueueTest`` (a first queue that is not there) and
``UncountableQueueTest`` (a listed queue that cannot be opened). Imports: the
standard library, nobroker, tests.dashsupport (the server and its request
helpers), tests.pgsupport (fresh names).
"""

from __future__ import annotations

import os
import unittest
import urllib.parse
from typing import Any
from unittest import mock

import nobroker
from nobroker import Queue, dashboard
from nobroker.dashboard import CSRF_HEADER
from tests.dashsupport import DashboardCase, OnPostgres
from tests.pgsupport import fresh_name


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


class PostgresQueuePickerTest(OnPostgres, QueuePickerTest):
    pass


class PostgresEmptyFirstQueueTest(OnPostgres, EmptyFirstQueueTest):
    pass


if __name__ == "__main__":
    unittest.main()
