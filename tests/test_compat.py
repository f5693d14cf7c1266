"""Format version 1, byte by byte: logs of nobroker 0.1.2 open here, and ours stay readable there.

The log below is built by hand from the layout in DESIGN.md section 4, not
with nobroker's own encoder, so a change in our writer cannot hide a change
in what we read. Our writer makes version 1 where it is asked to
(``log_format=1``); version 2 holds the very same records
(FormatVersionTwo); version 4, the default, leaves out one field where it
says nothing (tests/test_format_lean.py).
"""

from __future__ import annotations

import json
import os
import random
import struct
import zlib

from typing import Any

from nobroker import BackoffPolicy, CorruptLogError, Job, JobState, Queue, Worker
from nobroker.filestore.admin import inspect_log
from tests.support import FakeClock, TempDirTestCase

V012_ENQUEUE_KEYS = [
    "id", "payload", "priority", "state", "attempts", "max_attempts", "available_at",
    "enqueued_at", "lease_deadline", "lease_token", "last_error", "seq",
]  # fmt: skip
#: What 0.1.2's Job.from_dict reads for each ENQUEUE key the body leaves out (only the id is required).
V012_ENQUEUE_DEFAULTS: dict[str, Any] = {
    "payload": None, "priority": 0, "state": "ready", "attempts": 0, "max_attempts": 5, "available_at": 0.0,
    "enqueued_at": 0.0, "lease_deadline": None, "lease_token": None, "last_error": None, "seq": 0,
}  # fmt: skip
#: The keys a new job's ENQUEUE leaves out while they hold that default (a compaction writes them all).
LEFT_OUT_AT_DEFAULT = {"priority", "state", "attempts", "max_attempts", "lease_deadline", "lease_token", "last_error"}
V012_KEYS = {
    "LEASE": {"id", "at", "deadline", "attempts", "token"},
    "ACK": {"id", "at"},
    "NACK": {"id", "at", "attempts", "available_at", "error"},
    "RECLAIM": {"id", "at", "available_at"},
    "DEAD": {"id", "at", "error"},
    "REQUEUE": {"id", "at", "available_at"},
    "PURGE": {"at"},
    "EXTEND": {"id", "at", "deadline"},
}


def record(rtype: int, body: dict) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    crc = zlib.crc32(bytes([rtype]) + data)
    return struct.pack("<IBI", len(data), rtype, crc) + data


def job(job_id: str, payload, seq: int, priority: int = 0, at: float = 1000.0) -> dict:
    return {
        "id": job_id, "payload": payload, "priority": priority, "state": "ready", "attempts": 0,
        "max_attempts": 5, "available_at": at, "enqueued_at": at, "lease_deadline": None,
        "lease_token": None, "last_error": None, "seq": seq,
    }  # fmt: skip


def parse_log(data: bytes) -> list[tuple[int, dict[str, Any]]]:
    """(type, body) of every record of a version 1 log, read with struct and json alone."""
    assert data[:8] == b"NOBROKER", "not a log"
    out, pos = [], 16
    while pos < len(data):
        length, rtype, crc = struct.unpack_from("<IBI", data, pos)
        body = data[pos + 9 : pos + 9 + length]
        assert zlib.crc32(bytes([rtype]) + body) == crc, f"bad record at {pos}"
        out.append((rtype, json.loads(body)))
        pos += 9 + length
    return out


def v012_states(records: list[tuple[int, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The job states nobroker 0.1.2 shows after replaying ``records``, by its rules for each record type.

    Records naming a job it does not hold change nothing. The rules (checked
    against 0.1.2 itself): LEASE sets leased, attempts, deadline and token;
    EXTEND moves the deadline of a leased job only; ACK: done, no deadline,
    no token; NACK: ready at available_at, attempts if given, last_error =
    the error (None if absent); RECLAIM: ready at available_at, last_error
    kept; DEAD: dead, last_error replaced only if the record has an error;
    REQUEUE: ready at available_at, attempts 0; PURGE: nothing left. An
    ENQUEUE of an id it holds replaces that job.
    """
    jobs: dict[str, dict[str, Any]] = {}
    for rtype, body in records:
        if rtype == 1:
            jobs[body["id"]] = {key: body.get(key, V012_ENQUEUE_DEFAULTS.get(key)) for key in V012_ENQUEUE_KEYS}
            continue
        if rtype == 8:
            jobs.clear()
            continue
        j = jobs.get(body["id"])
        if j is None or (rtype == 9 and j["state"] != "leased"):
            continue
        if rtype == 2:
            j.update(state="leased", attempts=body["attempts"], lease_deadline=body["deadline"], lease_token=body["token"])
        elif rtype == 9:
            j["lease_deadline"] = body["deadline"]
        else:
            j.update(lease_deadline=None, lease_token=None)
            if rtype == 3:
                j["state"] = "done"
            elif rtype == 4:
                j.update(state="ready", attempts=body.get("attempts", j["attempts"]), available_at=body["available_at"])
                j["last_error"] = body.get("error")
            elif rtype == 5:
                j.update(state="ready", available_at=body["available_at"])
            elif rtype == 6:
                j.update(state="dead", last_error=body.get("error", j["last_error"]))
            elif rtype == 7:
                j.update(state="ready", attempts=0, available_at=body["available_at"])
    return jobs


def shown(q: Queue) -> dict[str, dict[str, Any]]:
    """What our queue shows of every job, in 0.1.2's fields."""
    return {job.id: {key: job.to_dict()[key] for key in V012_ENQUEUE_KEYS} for job in q.list_jobs()}


class ReadsVersionOne(TempDirTestCase):
    def write_log(self, generation: int, records: list[bytes]) -> None:
        header = b"NOBROKER" + struct.pack("<HIH", 1, generation, 0)
        with open(os.path.join(self.dir, f"default.{generation:06d}.log"), "wb") as f:
            f.write(header + b"".join(records))
        if generation:
            with open(os.path.join(self.dir, "default.current"), "w") as f:
                f.write(f"{generation}\n")

    def test_a_hand_built_log_opens_with_the_expected_jobs(self) -> None:
        self.write_log(
            0,
            [
                record(1, job("a", {"to": "ada"}, 1)),
                record(1, job("b", [1, 2, 3], 2, priority=9)),
                record(1, job("c", "see", 3)),
                record(2, {"id": "b", "at": 1001.0, "deadline": 1031.0, "attempts": 1, "token": "t1"}),
                record(4, {"id": "b", "at": 1002.0, "attempts": 1, "available_at": 1010.0, "error": "boom"}),
                record(2, {"id": "a", "at": 1003.0, "deadline": 1033.0, "attempts": 1, "token": "t2"}),
                record(9, {"id": "a", "at": 1004.0, "deadline": 1064.0}),
                record(3, {"id": "a", "at": 1005.0}),
                record(2, {"id": "c", "at": 1006.0, "deadline": 1036.0, "attempts": 1, "token": "t3"}),
                record(6, {"id": "c", "at": 1007.0, "error": "gave up"}),
                record(7, {"id": "c", "at": 1008.0, "available_at": 1008.0}),
            ],
        )
        with Queue(self.dir, clock=FakeClock(1020.0)) as q:
            self.assertEqual(q.recovery.records, 11)
            a, b, c = q.get("a"), q.get("b"), q.get("c")
            self.assertEqual((a.state, a.payload, a.attempts), (JobState.DONE, {"to": "ada"}, 1))
            self.assertEqual((b.state, b.payload, b.priority), (JobState.READY, [1, 2, 3], 9))
            self.assertEqual((b.attempts, b.available_at, b.last_error), (1, 1010.0, "boom"))
            self.assertEqual((c.state, c.attempts, c.last_error), (JobState.READY, 0, "gave up"))
            self.assertEqual(q.lease_one().id, "b")  # priority 9 first
            self.assertEqual(q.stats().to_dict(), {"ready": 1, "delayed": 0, "leased": 1, "done": 1, "dead": 0, "total": 3})

    def test_a_compacted_generation_with_a_pointer_and_a_leased_job(self) -> None:
        leased = job("x", {"k": "v"}, 7)
        leased.update(state="leased", attempts=2, lease_deadline=5000.0, lease_token="tok")
        self.write_log(3, [record(1, leased), record(1, job("y", None, 8)), record(8, {"at": 1100.0})])
        with Queue(self.dir, clock=FakeClock(1200.0)) as q:
            self.assertEqual(len(q), 0)  # the PURGE record emptied it
            self.assertEqual(q.storage.generation, 3)  # type: ignore[attr-defined]
            q.enqueue("new")
            self.assertEqual(q.list_jobs()[0].seq, 9, "sequence numbers continue after a purge")

    def test_unknown_keys_are_kept_through_compaction(self) -> None:
        body = job("k", "payload", 1)
        body["future_field"] = {"kept": True}
        self.write_log(0, [record(1, body)])
        with Queue(self.dir) as q:
            q.compact()
        bodies = [v.body for v in inspect_log(self.dir) if v.type_name == "ENQUEUE"]
        self.assertEqual(bodies[0]["future_field"], {"kept": True})


    def test_a_compaction_leaves_out_what_a_reader_takes_for_an_absent_key(self) -> None:
        """Fields at 0.1.2's defaults are left out of a compacted job, also where its older body held them set."""
        clock = FakeClock(1000.0)
        with Queue(self.dir, log_format=1, clock=clock, auto_compact=None) as q:
            waiting = q.enqueue("waits").id
            retried = q.enqueue("retried", priority=2, max_attempts=3).id
            leased = q.lease_one()
            self.assertEqual(leased.id, retried)
            q.compact()  # its body now says leased, with a deadline and a token
            q.nack(leased, error="once", delay=0)  # ready again: no deadline, no token, one attempt spent
            q.compact()
            ours = shown(q)
        bodies = {v.body["id"]: v.body for v in inspect_log(self.dir) if v.type_name == "ENQUEUE"}
        self.assertEqual(list(bodies[waiting]), ["id", "payload", "available_at", "enqueued_at", "seq"])
        self.assertEqual(
            list(bodies[retried]),
            ["id", "payload", "priority", "attempts", "max_attempts", "available_at", "enqueued_at", "last_error", "seq",
             "attempt_history"],
        )  # fmt: skip
        with Queue(self.dir) as q:
            again = q.get(retried)
            self.assertEqual((again.state, again.attempts, again.lease_token), (JobState.READY, 1, None))
            self.assertEqual(shown(q), ours)
        with open(os.path.join(self.dir, "default.000002.log"), "rb") as f:
            self.assertEqual(v012_states(parse_log(f.read())), ours, "0.1.2 reads the compacted jobs as we do")

    def test_a_0_1_2_log_shows_the_job_states_0_1_2_shows(self) -> None:
        records = [
            (1, job("a", {"to": "ada"}, 1)), (1, job("b", [1, 2], 2, priority=9)), (1, job("c", "see", 3)),
            (1, job("d", None, 4)), (1, job("f", "untouched", 5)),
            (9, {"id": "f", "at": 1000.5, "deadline": 5000.0}),  # an EXTEND of a job that is not leased
            (2, {"id": "a", "at": 1001.0, "deadline": 1031.0, "attempts": 1, "token": "ta"}),
            (3, {"id": "a", "at": 1002.0}),
            (2, {"id": "b", "at": 1003.0, "deadline": 1033.0, "attempts": 1, "token": "tb"}),
            (4, {"id": "b", "at": 1004.0, "available_at": 1010.0, "error": "boom"}),  # no attempts key
            (2, {"id": "b", "at": 1011.0, "deadline": 1041.0, "attempts": 2, "token": "tb2"}),
            (5, {"id": "b", "at": 1042.0, "available_at": 1050.0}),
            (2, {"id": "c", "at": 1005.0, "deadline": 1035.0, "attempts": 5, "token": "tc"}),
            (6, {"id": "c", "at": 1006.0}),  # no error key
            (2, {"id": "d", "at": 1007.0, "deadline": 1037.0, "attempts": 1, "token": "td"}),
            (6, {"id": "d", "at": 1008.0, "error": "gave up"}),
            (7, {"id": "d", "at": 1009.0, "available_at": 1009.0}),
            (3, {"id": "ghost", "at": 1010.0}),  # names a job the log never held
            (1, job("e", "first", 6)), (1, job("e", "second", 7)),  # a repeated id: the last one holds
            (2, {"id": "e", "at": 1012.0, "deadline": 1100.0, "attempts": 1, "token": "te"}),
            (9, {"id": "e", "at": 1013.0, "deadline": 1200.0}),
        ]  # fmt: skip
        self.write_log(0, [record(t, b) for t, b in records])
        expected = v012_states(records)
        self.assertEqual(expected["a"]["lease_token"], None)
        self.assertEqual(expected["f"]["lease_deadline"], None)
        with Queue(self.dir, log_format=1, clock=FakeClock(1020.0)) as q:
            self.assertEqual(shown(q), expected)
            self.assertEqual(q.recovery.orphan_records, 1)
            q.ack(Job("a", None, lease_token="ta"))  # the lease that finished it: a harmless repeat

    def test_our_logs_show_0_1_2_the_job_states_we_show(self) -> None:
        clock = FakeClock(1000.0)
        with Queue(self.dir, log_format=1, clock=clock, visibility_timeout=5, max_attempts=2, backoff=BackoffPolicy(base=3)) as q:
            q.enqueue({"a": 1}, priority=3)
            q.enqueue_many(["b", "c", "d", "e"], job_ids=["b", "c", "d", "e"])
            q.enqueue("later", delay=50)
            q.enqueue("five tries", max_attempts=5)  # the default 0.1.2 reads: its ENQUEUE leaves it out
            first = q.lease_one()
            q.extend(first, 10)
            q.nack(first, error="once", delay=0)
            q.ack(q.lease_one())
            q.lease_one()
            clock.advance(6)
            q.enqueue("x")  # reclaims b's lease
            q.nack(q.lease_one(), error="boom")
            clock.advance(100)
            q.lease(3)
            clock.advance(100)
            q.ack(q.lease_one())  # reclaims the three (one of them dead), acks one
            q.requeue_dead()
            q.ack(q.lease_one().id)
            q.lease_one()
            ours = shown(q)
        with open(os.path.join(self.dir, "default.000000.log"), "rb") as f:
            theirs = v012_states(parse_log(f.read()))
        self.assertEqual(theirs, ours)
        self.assertEqual({j["state"] for j in ours.values()}, {"ready", "leased", "done"})


    def test_a_workers_tracebacks_add_one_key_0_1_2_reads_past(self) -> None:
        def handler(job: Job) -> None:
            raise ValueError(f"no {job.payload}")

        clock = FakeClock(1000.0)
        with Queue(self.dir, log_format=1, clock=clock, max_attempts=2, backoff=BackoffPolicy(base=0)) as q:
            q.enqueue_many(["a", "b"], job_ids=["a", "b"])
            Worker(q, handler, max_jobs=4, handle_signals=False).run()  # each fails twice: dead
            self.assertTrue(all(j.traceback and j.state is JobState.DEAD for j in q.list_jobs()))
            ours = shown(q)
            with open(os.path.join(self.dir, "default.000000.log"), "rb") as f:
                records = parse_log(f.read())
            q.compact()
            with open(os.path.join(self.dir, "default.000001.log"), "rb") as f:
                compacted = parse_log(f.read())
        names = ["", "ENQUEUE", *V012_KEYS]  # record types 1 to 9, in order
        # The compacted generation opens with a PURGE (of nothing) carrying the counters: one more
        # key 0.1.2 reads past, on a record type it knows (less the two enqueues that the kept dead
        # jobs' ENQUEUE records count again).
        self.assertEqual(compacted[0], (8, {"at": 1000.0, "counters": {"default": [0, 0, 2, 2, 0]}}))
        for rtype, body in records + compacted[1:]:
            known = set(V012_ENQUEUE_KEYS) if rtype == 1 else V012_KEYS[names[rtype]]
            # The traceback; and each attempt's worker and history (issue 15), which 0.1.2 reads past too.
            self.assertLessEqual(set(body) - known, {"traceback", "by", "attempt_history"}, body)
        self.assertIn("traceback", compacted[1][1])
        self.assertEqual(v012_states(records), ours)
        self.assertEqual(v012_states(compacted), ours)


class WritesVersionOne(TempDirTestCase):
    def assert_bodies_are_compact_json(self, path: str) -> None:
        """Every record's body is exactly the compact JSON of what it holds (ours come from templates, not json)."""
        with open(path, "rb") as f:
            data = f.read()
        pos, count = 16, 0
        while pos < len(data):
            length = struct.unpack_from("<I", data, pos)[0]
            body = data[pos + 9 : pos + 9 + length]
            self.assertEqual(body, json.dumps(json.loads(body), separators=(",", ":")).encode(), f"record at {pos}")
            pos, count = pos + 9 + length, count + 1
        self.assertGreater(count, 10)

    def test_the_0_1_2_feature_set_writes_only_0_1_2_keys(self) -> None:
        clock = FakeClock()
        # A 10 s backoff: a reclaimed job waits out the next lease (the backoff runs from the deadline).
        with Queue(self.dir, log_format=1, clock=clock, visibility_timeout=5, max_attempts=2, backoff=BackoffPolicy(base=10)) as q:
            a = q.enqueue({"a": 1})
            q.enqueue_many(["b", "c"], job_ids=["b", "c"])
            job_a = q.lease_one()
            q.extend(job_a, 10)
            q.nack(job_a, error="once", delay=0)
            job_a = q.lease_one()
            q.ack(job_a)
            q.lease_one()
            clock.advance(6)  # the lease of b expires: RECLAIM
            q.stats()
            q.lease_one()
            q.lease_one()
            clock.advance(100)
            q.lease_one()  # reclaims c, leases b again (its second attempt)
            clock.advance(100)
            q.lease_one()  # b's second lease expires: attempts exhausted, DEAD
            self.assertEqual(q.stats().dead, 1)
            q.requeue_dead()
            q.purge()
            del a
        views = list(inspect_log(self.dir))
        self.assertEqual(views[0].body, {"version": 1, "generation": 0})
        seen = set()
        for view in views[1:]:
            self.assertIsNone(view.damage)
            seen.add(view.type_name)
            if view.type_name == "ENQUEUE":
                # 0.1.2's keys in its order; those left out hold exactly what 0.1.2 reads for them.
                self.assertEqual(list(view.body), [k for k in V012_ENQUEUE_KEYS if k in view.body])
                for key in set(V012_ENQUEUE_KEYS) - set(view.body):
                    self.assertIn(key, LEFT_OUT_AT_DEFAULT)
            elif view.type_name == "LEASE":  # and the leasing worker (issue 15), a key 0.1.2 reads past
                self.assertEqual(set(view.body), V012_KEYS[view.type_name] | {"by"}, view.type_name)
            else:
                self.assertEqual(set(view.body), V012_KEYS[view.type_name], view.type_name)
        self.assertEqual(seen, {"ENQUEUE", "LEASE", "ACK", "NACK", "RECLAIM", "DEAD", "REQUEUE", "PURGE", "EXTEND"})
        self.assert_bodies_are_compact_json(os.path.join(self.dir, "default.000000.log"))
        names = sorted(os.listdir(self.dir))
        self.assertEqual(names, ["default.000000.log", "default.lock"])
        with open(os.path.join(self.dir, "default.000000.log"), "rb") as f:
            self.assertEqual(f.read(16), b"NOBROKER\x01\x00\x00\x00\x00\x00\x00\x00")


class FormatVersionTwo(TempDirTestCase):
    """Version 2: version 1's records, with room for appends set aside after them; version 1 still opens and upgrades."""

    def run_ops(self, folder: str, **options: Any) -> bytes:
        from unittest import mock

        rng = random.Random(4)
        clock = FakeClock(1000.0)
        with mock.patch.object(os, "urandom", lambda n: rng.randbytes(n)):
            with Queue(folder, clock=clock, auto_compact=None, backoff=BackoffPolicy(jitter=0.0), **options) as q:
                for i in range(300):
                    q.enqueue({"n": i, "pad": "x" * (i % 50)}, priority=i % 3)
                    if i % 4 == 0:
                        job = q.lease_one()
                        q.nack(job, error="again") if i % 8 else q.ack(job, result=i)
                    clock.advance(0.5)
        with open(os.path.join(folder, "default.000000.log"), "rb") as f:
            return f.read()

    def test_version_2_is_version_1_records_with_room_after_them(self) -> None:
        one = self.run_ops(os.path.join(self.dir, "one"), log_format=1)
        two = self.run_ops(os.path.join(self.dir, "two"), log_format=2)
        self.assertEqual(two[:16], b"NOBROKER\x02\x00\x00\x00\x00\x00\x00\x00")
        self.assertEqual(one[:16], b"NOBROKER\x01\x00\x00\x00\x00\x00\x00\x00")
        self.assertEqual(two[16 : len(one)], one[16:], "the records differ")
        room = two[len(one) :]
        self.assertGreater(len(room), 0, "no room was set aside")
        self.assertEqual(room.count(0), len(room), "the room holds something but zeros")
        self.assertEqual([v.body for v in inspect_log(os.path.join(self.dir, "two"))][1:],
                         [v.body for v in inspect_log(os.path.join(self.dir, "one"))][1:])  # fmt: skip

    def test_a_version_1_log_is_upgraded_by_a_compaction_unless_told_to_keep_it(self) -> None:
        ReadsVersionOne.write_log(self, 0, [record(1, job("a", {"to": "ada"}, 1)), record(1, job("b", None, 2))])  # type: ignore[arg-type]
        path = os.path.join(self.dir, "default.000000.log")
        with Queue(self.dir) as q:
            q.enqueue("appended to version 1")
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(data[8:10], b"\x01\x00", "appending to a version 1 log changed its version")
        self.assertEqual(data.rstrip(b"\0"), data, "a version 1 log got room after its records")
        with Queue(self.dir, log_format=1) as q:
            q.compact()
        with open(os.path.join(self.dir, "default.000001.log"), "rb") as f:
            self.assertEqual(f.read(10)[8:], b"\x01\x00", "log_format=1 still wrote version 2")
        with Queue(self.dir) as q:
            q.compact()
        with open(os.path.join(self.dir, "default.000002.log"), "rb") as f:
            self.assertEqual(f.read(10)[8:], b"\x04\x00", "a compaction did not upgrade the log")
        with Queue(self.dir) as q:
            payloads = {job.id: job.payload for job in q.list_jobs()}
            self.assertEqual(len(payloads), 3)
            self.assertEqual((payloads["a"], payloads["b"]), ({"to": "ada"}, None))
            self.assertIn("appended to version 1", payloads.values())

    def test_a_log_format_other_than_1_2_or_4_is_refused_and_nothing_is_made(self) -> None:
        folder = os.path.join(self.dir, "q")
        for bad in (0, 3, 5, "2", 2.0, True, None):
            with self.subTest(bad=bad), self.assertRaisesRegex(ValueError, "log_format"):
                Queue(folder, log_format=bad)
        self.assertFalse(os.path.exists(folder))

    def test_the_room_of_a_version_2_log_must_hold_only_zeros(self) -> None:
        with Queue(self.dir) as q:
            kept = [q.enqueue({"n": i}) for i in range(5)]
        path = os.path.join(self.dir, "default.000000.log")
        end = max(v.offset + (9 + v.length if v.type_name != "HEADER" else 16) for v in inspect_log(self.dir))
        with open(path, "r+b") as f:  # a torn append: part of a record in the room, nothing whole after it
            f.seek(end)
            f.write(record(1, job("torn", "t", 99))[:20])
        with Queue(self.dir) as q:
            self.assertGreater(q.recovery.torn_bytes, 0)
            self.assertEqual(sorted(job.id for job in q.list_jobs()), sorted(job.id for job in kept))
            q.enqueue("makes room again")
        with open(path, "r+b") as f:  # zeros where a record should start, and a whole record further on: damage
            f.seek(0, os.SEEK_END)
            room_end = f.tell()
            f.seek(room_end - 1000)
            f.write(record(1, job("stray", "s", 100)))
        with self.assertRaisesRegex(CorruptLogError, "valid records follow"):
            Queue(self.dir)

    def test_the_templates_write_what_json_writes(self) -> None:
        from nobroker.filestore import records
        from nobroker.filestore.framing import encode_body

        for by in (None, "host-1.example:4242"):
            for job_id in ("0123456789abcdef", 'a "quoted" id \u00e9'):
                args = (job_id, 1700000000.123456, 1700000030.5, 3, "0f1e2d3c4b5a6978", by)
                self.assertEqual(records.lease_text(*args), encode_body(records.lease(*args)[1]), (by, job_id))
