"""Format version 4: a new job's ENQUEUE leaves out an available_at equal to its enqueued_at.

Version 4 is the default. Every reader (a cold row's fast path, Entry, the
playground) takes a missing available_at as the record's enqueued_at; a
writer asked for version 1 or 2 writes every available_at, also into a
version 4 log, and a compaction into version 1 or 2 writes them back.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any
from unittest import mock

from nobroker import BackoffPolicy, Queue
from nobroker.filestore.admin import inspect_log
from nobroker.filestore.entry import Entry
from nobroker.filestore.framing import LEAN_VERSION
from nobroker.filestore.layout import log_path
from tests.support import FakeClock, TempDirTestCase

START = 1000.0


def enqueues(folder: str, generation: int | None = None) -> list[dict[str, Any]]:
    return [v.body for v in inspect_log(folder, generation=generation) if v.type_name == "ENQUEUE"]


def header_version(folder: str, generation: int) -> int:
    with open(log_path(folder, "default", generation), "rb") as f:
        return int.from_bytes(f.read(10)[8:], "little")


class LeanRecords(TempDirTestCase):
    def run_ops(self, folder: str, **options: Any) -> list[Any]:
        """The same operations, with the same ids and times, into a new queue; the jobs as they stand after."""
        rng = random.Random(7)
        clock = FakeClock(START)
        with mock.patch.object(os, "urandom", lambda n: rng.randbytes(n)):
            with Queue(folder, clock=clock, auto_compact=None, backoff=BackoffPolicy(jitter=0.0), **options) as q:
                for i in range(60):
                    q.enqueue({"n": i}, priority=i % 3, delay=5.0 if i % 10 == 9 else 0)
                    if i % 4 == 0:
                        job = q.lease_one()
                        q.nack(job, error="again") if i % 8 else q.ack(job)
                    clock.advance(0.5)
                q.enqueue_many([{"bulk": k} for k in range(20)])
                return sorted(q.list_jobs(), key=lambda j: j.seq)

    def test_a_job_runnable_at_once_is_written_without_its_available_at_and_read_back_the_same(self) -> None:
        three = self.run_ops(os.path.join(self.dir, "three"))
        two = self.run_ops(os.path.join(self.dir, "two"), log_format=2)
        self.assertEqual(header_version(os.path.join(self.dir, "three"), 0), LEAN_VERSION)
        lean, full = enqueues(os.path.join(self.dir, "three")), enqueues(os.path.join(self.dir, "two"))
        self.assertEqual(len(lean), 80)
        left_out = 0
        for short, whole in zip(lean, full):
            if whole["available_at"] == whole["enqueued_at"]:
                self.assertNotIn("available_at", short, "a job runnable at once named its available_at")
                left_out += 1
            self.assertEqual({**short, "available_at": short.get("available_at", short["enqueued_at"])}, whole)
        self.assertEqual(left_out, 74, "the delayed jobs keep their available_at, the others leave it out")
        self.assertEqual(three, two)  # read back the same as they were written
        with Queue(os.path.join(self.dir, "three")) as q:  # replayed from the log: rows and entries alike
            self.assertEqual(sorted(q.list_jobs(), key=lambda j: j.seq), three)

    def test_a_record_is_that_many_bytes_shorter(self) -> None:
        sizes = {}
        for version in (2, LEAN_VERSION):
            folder = os.path.join(self.dir, str(version))
            with Queue(folder, clock=lambda: 1700000000.25, log_format=version) as q:
                q.enqueue({"resize": "photo.jpg"})
            (view,) = [v for v in inspect_log(folder) if v.type_name == "ENQUEUE"]
            sizes[version] = view.length
        self.assertEqual(sizes[2] - sizes[LEAN_VERSION], len(',"available_at":1700000000.25'))

    def test_every_reader_takes_a_missing_available_at_as_the_enqueued_at(self) -> None:
        body = {"id": "00000000000000aa", "payload": 1, "enqueued_at": 1234.5, "seq": 1}
        self.assertEqual(Entry(body, 16).available_at, 1234.5)
        self.assertEqual(Entry({**body, "available_at": 2000.0}, 16).available_at, 2000.0)

    def test_a_writer_asked_for_version_2_writes_every_available_at_into_a_version_3_log(self) -> None:
        with Queue(self.dir) as q:
            q.enqueue("lean")
        with Queue(self.dir, log_format=2) as q:
            q.enqueue("whole")
            q.enqueue_many(["whole"] * 3)
        self.assertEqual(header_version(self.dir, 0), LEAN_VERSION)
        self.assertEqual(["available_at" in body for body in enqueues(self.dir)], [False, True, True, True, True])

    def test_a_compaction_into_version_1_writes_every_available_at_back(self) -> None:
        clock = FakeClock(START)
        with Queue(self.dir, clock=clock) as q:
            kept = [q.enqueue({"n": i}) for i in range(10)]  # untouched since: their records could be copied as they are
            leased = q.lease_one()  # the first of them, rewritten by the compaction
            kept.append(q.enqueue("late"))
            clock.advance(1)
        with Queue(self.dir, log_format=1, clock=clock) as q:
            q.compact()
        self.assertEqual(header_version(self.dir, 1), 1)
        bodies = enqueues(self.dir)
        self.assertEqual(len(bodies), 11)
        for body in bodies:
            self.assertEqual(body["available_at"], body["enqueued_at"], body["id"])
        with Queue(self.dir, clock=clock) as q:
            self.assertEqual({j.id: j.available_at for j in q.list_jobs()},
                             {j.id: j.available_at for j in kept})  # fmt: skip
            self.assertEqual(q.get(leased.id).state.value, "leased")
            q.compact()  # and back: the default writes version 4, a job it rewrites lean, the others' records as they are
        self.assertEqual(header_version(self.dir, 2), LEAN_VERSION)
        self.assertEqual(["available_at" in body for body in enqueues(self.dir)], [False] + [True] * 10)

    def test_a_compaction_into_version_3_rewrites_a_leased_job_lean_and_keeps_a_retry_time(self) -> None:
        clock = FakeClock(START)
        with Queue(self.dir, clock=clock, log_format=2, backoff=BackoffPolicy(jitter=0.0)) as q:
            leased, failed = q.enqueue("runs"), q.enqueue("fails")
            q.lease_one()
            q.nack(q.lease_one(), error="again")
            clock.advance(1)
        with Queue(self.dir, clock=clock) as q:
            q.compact()
            before = {j.id: (j.state, j.available_at) for j in q.list_jobs()}
        bodies = {body["id"]: body for body in enqueues(self.dir)}
        self.assertNotIn("available_at", bodies[leased.id])
        self.assertGreater(bodies[failed.id]["available_at"], bodies[failed.id]["enqueued_at"])
        with Queue(self.dir, clock=clock) as q:
            self.assertEqual({j.id: (j.state, j.available_at) for j in q.list_jobs()}, before)

    def test_the_command_line_writes_the_version_asked_for_and_refuses_others(self) -> None:
        from tests.clisupport import run_main

        for version in (1, 2, LEAN_VERSION):
            folder = os.path.join(self.dir, str(version))
            result = run_main(["--dir", folder, "--log-format", str(version), "enqueue", '{"n": 1}'])
            self.assertEqual(result.code, 0, result.err)
            self.assertEqual(header_version(folder, 0), version)
            self.assertEqual("available_at" in enqueues(folder)[0], version != LEAN_VERSION)
        refused = run_main(["--dir", os.path.join(self.dir, "3"), "--log-format", "3", "enqueue", "1"])
        self.assertEqual(refused.code, 2)
        self.assertIn("--log-format", refused.err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "3")))

    def test_a_lean_record_replays_as_a_packed_row_not_an_object(self) -> None:
        with Queue(self.dir, auto_compact=None) as q:
            q.enqueue("one")
            q.enqueue_many(["more"] * 99)
            q.enqueue("later", delay=60)  # keeps its available_at, and is an object (a delayed job is)
        self.assertEqual(sum("available_at" not in body for body in enqueues(self.dir)), 100)
        self.assertFalse([name for name in os.listdir(self.dir) if name.endswith(".snap")], "replayed, not loaded")
        with Queue(self.dir) as q:
            state = q._storage._state  # type: ignore[attr-defined]
            self.assertEqual((state.n_cold, len(state.hot)), (100, 1))

    def test_one_flipped_bit_never_turns_a_header_into_another_version(self) -> None:
        from nobroker.filestore.framing import FORMAT_VERSIONS, HeaderError, decode_header, encode_header

        for version in sorted(FORMAT_VERSIONS):
            header = encode_header(7, version)
            for bit in range(16):  # the two bytes of the version field, at offset 8
                flipped = bytearray(header)
                flipped[8 + bit // 8] ^= 1 << (bit % 8)
                with self.subTest(version=version, bit=bit), self.assertRaises(HeaderError):
                    decode_header(bytes(flipped))

    def test_a_lease_says_for_how_long_in_place_of_its_deadline_and_attempt(self) -> None:
        leases = {}
        for version in (2, LEAN_VERSION):
            folder = os.path.join(self.dir, str(version))
            clock = FakeClock(START + 0.1)
            with Queue(folder, clock=clock, log_format=version, visibility_timeout=7.3,
                       backoff=BackoffPolicy(base=1.0, jitter=0.0)) as q:  # fmt: skip
                q.enqueue_many(["a", "b"])
                first = q.lease_one()
                q.nack(first, error="again")  # first is an object now; b is still a packed row
                clock.advance(5)
                q.lease(2, visibility_timeout=0.25)  # first's second attempt, and b's first
                before = sorted((j.id, j.state.value, j.attempts, j.lease_deadline) for j in q.list_jobs())
            with Queue(folder, clock=clock) as q:  # replayed
                self.assertEqual(sorted((j.id, j.state.value, j.attempts, j.lease_deadline) for j in q.list_jobs()), before)
            leases[version] = [v.body for v in inspect_log(folder) if v.type_name == "LEASE"]
            self.assertEqual(sorted((j[1], j[2]) for j in before), [("leased", 1), ("leased", 2)])
        for whole, short in zip(leases[2], leases[LEAN_VERSION]):
            self.assertEqual(set(whole) - set(short), {"deadline", "attempts"})
            self.assertEqual(set(short) - set(whole), {"for"})
            self.assertEqual(short["at"] + short["for"], whole["deadline"])
        self.assertEqual([body["for"] for body in leases[LEAN_VERSION]], [7.3, 0.25, 0.25])

    def test_a_lean_lease_is_the_json_of_its_fields(self) -> None:
        from nobroker.filestore import records
        from nobroker.filestore.framing import encode_body

        for by in (None, "host-1:42"):
            text = records.lease_text("0123456789abcdef", 1700000000.125, 1700000030.125, 3, "ab12", by, 30.0)
            body = {"id": "0123456789abcdef", "at": 1700000000.125, "for": 30.0, "token": "ab12"}
            self.assertEqual(text, encode_body({**body, "by": by} if by else body))
            self.assertEqual(records.decode_lease(json.loads(text), 2)[:3], (3, 1700000030.125, "ab12"))
        with self.assertRaises(TypeError):
            records.decode_lease({"id": "x", "at": 1.0, "for": "soon", "token": "t"}, 0)
