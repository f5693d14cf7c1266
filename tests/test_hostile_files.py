"""Hostile input: payloads nobroker must refuse or keep exactly, and files it must not trust.

Owns: the hostile payload cases (huge integers, deep nesting, 50 MB, NaN,
surrogates, bytes) and the hostile file cases (bad magic, future version,
4 GB length fields, good CRC over bad JSON, unknown record types, garbage
or missing pointers and generations, empty files). Each gets a specific
error whose message says what to do, no crash, bounded memory (tracemalloc
peak under twice MAX_RECORD_BYTES), nothing written outside the queue folder
(and nothing changed inside it by a refused open), and maintenance.verify
reporting exactly what it found. Imports: the standard library, nobroker's
public API and maintenance, tests.support.

The files are built byte by byte here (struct + zlib), from DESIGN.md
section 4, not with nobroker's own encoder.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import tempfile
import tracemalloc
import unittest
import zlib
from unittest import mock
from typing import Any

from nobroker import CompactionError, CorruptLogError, Queue, SerializationError
from nobroker.jobs import (
    MAX_ATTEMPT_HISTORY,
    MAX_ATTEMPTS_LIMIT,
    MAX_ERROR_CHARS,
    MAX_SECONDS,
    MAX_WORKER_CHARS,
    MAX_TRACEBACK_CHARS,
    MAX_ID_CHARS,
    MAX_JSON_DEPTH,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_RECORD_BYTES,
    MAX_RESULT_BYTES,
)
from nobroker.filestore.admin import inspect_log, repair, verify

MEMORY_BOUND = 2 * MAX_RECORD_BYTES


# ------------------------------------------------------------------ format v1, by hand
def header(generation: int = 0, version: int = 1, magic: bytes = b"NOBROKER") -> bytes:
    return struct.pack("<8sHIH", magic, version, generation, 0)


def record(rtype: int, body: bytes | dict[str, Any], *, length: int | None = None) -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    crc = zlib.crc32(data, zlib.crc32(bytes((rtype,))))
    return struct.pack("<IBI", len(data) if length is None else length, rtype, crc) + data


def enqueue_body(job_id: str, payload: Any = None, seq: int = 1) -> dict[str, Any]:
    return {
        "id": job_id, "payload": payload if payload is not None else {"n": job_id}, "priority": 0, "state": "ready",
        "attempts": 0, "max_attempts": 5, "available_at": 1.0, "enqueued_at": 1.0, "lease_deadline": None,
        "lease_token": None, "last_error": None, "seq": seq,
    }  # fmt: skip


def good_log(n: int = 3) -> bytes:
    return header() + b"".join(record(1, enqueue_body(f"j{i}", seq=i + 1)) for i in range(n))


class Folder(unittest.TestCase):
    """A parent folder holding only the queue folder, so writes outside it are visible."""

    def setUp(self) -> None:
        self.parent = tempfile.mkdtemp(prefix="nobroker-hostile-")
        self.addCleanup(shutil.rmtree, self.parent, True)
        self.dir = os.path.join(self.parent, "q")
        os.mkdir(self.dir, 0o700)

    def put(self, name: str, data: bytes) -> None:
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o600)

    def tree(self) -> dict[str, Any]:
        out: dict[str, Any] = {"parent": sorted(os.listdir(self.parent))}
        for name in sorted(os.listdir(self.dir)):
            with open(os.path.join(self.dir, name), "rb") as f:
                out[name] = f.read()
        return out

    def refused(self, *hints: str, offset: int | None = None) -> CorruptLogError:
        """Opening must raise CorruptLogError, change nothing, stay within the memory bound."""
        before = self.tree()
        tracemalloc.start()
        try:
            with self.assertRaises(CorruptLogError) as caught:
                Queue(self.dir)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertLess(peak, MEMORY_BOUND, f"opening used {peak:,} bytes")
        message = str(caught.exception)
        self.assertTrue(any(h in message for h in hints), f"message does not say what to do ({hints}): {message}")
        if offset is not None:
            self.assertEqual(caught.exception.offset, offset, message)
            self.assertIn(str(offset), message)
        after = self.tree()
        # A refused open may create the zero-byte lock file; nothing else changes.
        after.pop("default.lock", None)
        before.pop("default.lock", None)
        self.assertEqual(after, before, "a refused open changed files")
        return caught.exception

    def verified(self) -> Any:
        tracemalloc.start()
        try:
            report = verify(self.dir)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertLess(peak, MEMORY_BOUND, f"verify used {peak:,} bytes")
        return report


class HostileFiles(Folder):
    def test_wrong_magic(self) -> None:
        self.put("default.000000.log", header(magic=b"NOTMINE!") + b"x" * 100)
        exc = self.refused("not a nobroker log", offset=0)
        self.assertIn("default.000000.log", str(exc))
        report = self.verified()
        self.assertFalse(report.ok)
        self.assertIn("not a nobroker log", " ".join(report.problems))

    def test_a_future_format_version(self) -> None:
        self.put("default.000000.log", header(version=8) + record(1, enqueue_body("a")))
        self.refused("upgrade")
        self.assertIn("version 8", " ".join(self.verified().problems))

    def test_a_4_gb_length_field_in_the_middle(self) -> None:
        log = good_log(2)
        bad_at = len(log)
        log += struct.pack("<IBI", 0xFFFFFFFF, 1, 0) + b"{}" + record(1, enqueue_body("after", seq=9))
        self.put("default.000000.log", log)
        self.refused("repair", offset=bad_at)
        report = self.verified()
        self.assertFalse(report.ok)
        self.assertIn(f"offset {bad_at}", " ".join(report.problems))

    def test_a_4_gb_length_field_at_the_tail_is_a_torn_tail(self) -> None:
        log = good_log(2)
        self.put("default.000000.log", log + struct.pack("<IBI", 0xFFFFFFFF, 1, 0) + b"{")
        report = self.verified()
        self.assertTrue(report.ok, report.problems)
        self.assertEqual((report.jobs, report.torn_bytes), (2, 10))
        tracemalloc.start()
        try:
            with Queue(self.dir) as q:
                self.assertEqual(len(q), 2)
                self.assertEqual(q.recovery.torn_bytes, 10)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertLess(peak, MEMORY_BOUND)
        self.assertEqual(os.path.getsize(os.path.join(self.dir, "default.000000.log")), len(log))

    def test_a_good_crc_over_bad_json(self) -> None:
        log = good_log(1)
        bad_at = len(log)
        log += record(1, b'{"id": "x", "payload": ') + record(1, enqueue_body("after", seq=5))
        self.put("default.000000.log", log)
        self.refused("repair", offset=bad_at)
        self.assertIn("bad json", " ".join(self.verified().problems))

    def test_a_json_body_that_is_not_an_object(self) -> None:
        log = good_log(1)
        bad_at = len(log)
        self.put("default.000000.log", log + record(3, b"[1,2,3]") + record(1, enqueue_body("after", seq=5)))
        self.refused("repair", offset=bad_at)

    def test_an_unknown_record_type_in_the_middle(self) -> None:
        log = good_log(1)
        bad_at = len(log)
        self.put("default.000000.log", log + record(42, {"id": "j0"}) + record(1, enqueue_body("after", seq=5)))
        exc = self.refused("repair", offset=bad_at)
        self.assertIn("42", str(exc))
        self.assertFalse(self.verified().ok)

    def test_an_unknown_record_type_at_the_end_is_not_cut(self) -> None:
        """Could be a newer nobroker's record, not a torn write: refuse rather than drop it."""
        log = good_log(1)
        self.put("default.000000.log", log + record(42, {"id": "j0"}))
        self.refused("repair", "newer", offset=len(log))

    def test_a_record_with_the_wrong_field_types(self) -> None:
        """A CRC-valid record whose fields have the wrong types: a clear error, not a TypeError."""
        body = enqueue_body("a")
        body["attempts"] = "many"
        body["priority"] = None
        self.put("default.000000.log", header() + record(1, body) + record(2, {"id": "a", "at": 1, "deadline": "soon",
                                                                                 "attempts": 1, "token": "t"}))  # fmt: skip
        before = self.tree()
        try:
            with Queue(self.dir) as q:
                q.stats()
                q.list_jobs()
                q.enqueue("more")
                q.lease(5)
        except CorruptLogError as exc:
            self.assertIn("repair", str(exc))
            before.pop("default.lock", None)
            after = self.tree()
            after.pop("default.lock", None)
            self.assertEqual(after, before)
        self.verified()

    def test_control_records_with_bad_fields_are_refused_with_their_offset(self) -> None:
        """SNOOZE, PAUSE, RESUME and RUN_NOW (issue 15) check every field before replay changes anything."""
        bad_bodies = [
            (12, {"id": "j0", "at": 1, "attempts": "x", "available_at": 2}),
            (12, {"id": "j0", "at": 1, "attempts": -1, "available_at": 2}),
            (12, {"id": "j0", "at": 1, "attempts": 0}),
            (13, {"at": 1, "kind": 5}),
            (13, {"at": 1, "kind": ""}),
            (14, {"at": 1}),
            (15, {"id": "j0", "at": 1, "available_at": "now"}),
        ]
        for rtype, body in bad_bodies:
            with self.subTest(rtype=rtype, body=body):
                for name in os.listdir(self.dir):
                    os.unlink(os.path.join(self.dir, name))
                log = good_log(1)
                self.put("default.000000.log", log + record(rtype, body) + record(1, enqueue_body("after", seq=5)))
                self.refused("repair", offset=len(log))

    def test_limit_records_whose_fields_make_no_sense(self) -> None:
        """A CRC-valid LIMIT or UNLIMIT with fields a writer never writes: refused at its offset, nothing changed."""
        bad = [
            (23, {"at": 1.0, "kind": "a", "concurrency": 0}),
            (23, {"at": 1.0, "kind": 5, "concurrency": 1}),
            (23, {"at": 1.0, "kind": "a", "rate": 5, "per": 1.0}),  # a rate without its bucket
            (23, {"at": 1.0, "kind": "a", "rate": 2, "per": 1.0, "tokens": "x", "tokens_at": 1.0}),
            (23, {"at": 1.0, "kind": "a", "concurrency": 1, "burst": 3}),
            (24, {"at": 1.0, "kind": ["a"]}),
            (24, {"at": 1.0}),
        ]
        for rtype, body in bad:
            with self.subTest(rtype=rtype, body=body):
                first = header() + record(1, enqueue_body("a"))
                self.put("default.000000.log", first + record(rtype, body) + record(3, {"id": "a", "at": 2.0}))
                self.refused("repair", offset=len(first))

    def test_duplicate_keys_last_one_wins_everywhere(self) -> None:
        body = json.dumps(enqueue_body("a"), separators=(",", ":"))
        body = body[:-1] + ',"payload":{"second":true}}'
        self.put("default.000000.log", header() + record(1, body.encode()))
        with Queue(self.dir) as q:
            self.assertEqual(q.get("a").payload, {"second": True})
        report = self.verified()
        self.assertTrue(report.ok, report.problems)
        views = list(inspect_log(self.dir))
        self.assertEqual(views[1].body["payload"], {"second": True})  # type: ignore[index]

    def test_a_payload_nested_980_deep_by_an_older_release_still_opens(self) -> None:
        """Older releases accepted nesting up to the interpreter's limit: such a log reads back."""
        levels = 980
        body = json.dumps(enqueue_body("deep"), separators=(",", ":")).replace(
            '"payload":{"n":"deep"}', '"payload":' + "[" * levels + "1" + "]" * levels
        )
        self.put("default.000000.log", header() + record(1, body.encode()))
        self.assertTrue(self.verified().ok)
        with Queue(self.dir) as q:
            value, depth = q.get("deep").payload, 0
            while isinstance(value, list):  # not assertEqual: comparing 980 levels recurses
                value, depth = value[0], depth + 1
            self.assertEqual((depth, value), (levels, 1))
            q.ack(q.lease_one())  # type: ignore[arg-type]
            q.compact()
        with Queue(self.dir) as q:
            self.assertEqual(q.stats().done + len(q), 0)

    def test_a_pointer_file_holding_garbage(self) -> None:
        self.put("default.000000.log", good_log(1))
        self.put("default.current", b"\x00\xffgarbage\n")
        self.refused("repair", "verify")
        self.assertFalse(self.verified().ok)

    def test_an_empty_pointer_file(self) -> None:
        self.put("default.000000.log", good_log(1))
        self.put("default.current", b"")
        self.refused("repair", "verify")

    def test_a_negative_generation(self) -> None:
        self.put("default.000000.log", good_log(1))
        self.put("default.current", b"-1\n")
        self.refused("repair", "verify")
        self.assertFalse(self.verified().ok)

    def test_a_huge_generation(self) -> None:
        self.put("default.000000.log", good_log(1))
        self.put("default.current", b"99999999999999999999999\n")
        self.refused("repair", "verify")
        self.assertFalse(self.verified().ok)

    def test_the_last_generation_cannot_be_compacted_past(self) -> None:
        self.put("default.999999.log", header(999_999) + record(1, enqueue_body("a")))
        self.put("default.current", b"999999\n")
        with Queue(self.dir) as q:
            self.assertEqual(len(q), 1)
            before = self.tree()
            with self.assertRaises(CompactionError) as caught:
                q.compact()
            self.assertIn("999999", str(caught.exception).replace(",", ""))
            self.assertEqual(self.tree(), before, "a refused compaction left files behind")
            q.enqueue("still works")
        self.assertTrue(self.verified().ok)

    def test_a_generation_whose_header_disagrees_with_its_name(self) -> None:
        self.put("default.000003.log", header(generation=7) + record(1, enqueue_body("a")))
        self.put("default.current", b"3\n")
        self.refused("repair", "verify", "restore", "backup")

    def test_a_missing_generation_file(self) -> None:
        self.put("default.000001.log", header(1) + record(1, enqueue_body("a")))
        self.put("default.current", b"3\n")
        self.refused("repair", "restore")
        report = self.verified()
        self.assertFalse(report.ok)
        self.assertIn("missing", " ".join(report.problems))

    def test_a_missing_pointer_with_later_generations(self) -> None:
        self.put("default.000002.log", header(2) + record(1, enqueue_body("a")))
        self.refused("repair", "verify")

    def test_an_empty_log_file(self) -> None:
        self.put("default.000000.log", b"")
        self.refused("delete", "restore", offset=0)
        self.assertFalse(self.verified().ok)

    def test_a_log_shorter_than_its_header(self) -> None:
        self.put("default.000000.log", header()[:9])
        self.refused("not a nobroker log", "shorter", "restore", "delete")

    def test_verify_reports_exactly_what_it_found(self) -> None:
        log = good_log(3) + record(2, {"id": "j1", "at": 2.0, "deadline": 40.0, "attempts": 1, "token": "t"})
        log += record(3, {"id": "j1", "at": 3.0})
        self.put("default.000000.log", log + b"\x05\x00")
        report = self.verified()
        self.assertTrue(report.ok, report.problems)
        self.assertEqual((report.generation, report.records, report.jobs), (0, 5, 3))
        self.assertEqual(report.counts, {"ready": 2, "leased": 0, "done": 1, "dead": 0})
        self.assertEqual(report.torn_bytes, 2)
        self.assertEqual(os.path.getsize(os.path.join(self.dir, "default.000000.log")), len(log) + 2, "verify wrote")


class HostileNames(Folder):
    """Names that become file names are matched whole: ``$`` alone lets a final newline through."""

    BAD_NAMES = ("x\n", "emails\n", "x\r\n", "x\n\n", "\nx", "x/y", "..", ".hidden", "x.log", "x.tmp", "")

    def test_a_queue_name_with_a_trailing_newline_is_refused_and_creates_nothing(self) -> None:
        for name in self.BAD_NAMES:
            with self.subTest(name=name):
                with self.assertRaises(ValueError) as caught:
                    Queue(self.dir, name)
                self.assertIn("not allowed", str(caught.exception))
                self.assertEqual(os.listdir(self.dir), [], "a refused name created files")
        with Queue(self.dir, "x") as q:  # the same name without the newline is fine
            q.enqueue("ok")

    def test_the_cli_refuses_it_too(self) -> None:
        from tests.clisupport import run_main

        result = run_main(["--dir", self.dir, "--queue", "x\n", "enqueue", "hello"])
        self.assertEqual(result.code, 2, result.err)
        self.assertIn("not allowed", result.err)
        self.assertEqual(len(result.err.strip().splitlines()), 1, result.err)
        self.assertEqual(os.listdir(self.dir), [])

    def test_file_names_with_a_trailing_newline_are_not_queue_files(self) -> None:
        from nobroker.filestore.log import list_generations
        from nobroker.filestore.fs import OS_FILESYSTEM
        from nobroker.filestore.admin import list_queues

        self.put("default.000000.log", good_log(1))
        self.put("default.000001.log\n", header(1))
        self.put("other.lock\n", b"")
        self.put("default.\u0661\u0661\u0661\u0661\u0661\u0661.log", header(1))  # six Arabic-Indic digits
        self.assertEqual(list_generations(OS_FILESYSTEM, self.dir, "default"), [0])
        self.assertEqual(list_queues(self.dir), ["default"])

    def test_postgresql_schema_and_role_names_are_matched_whole(self) -> None:
        from nobroker.postgres import check_identifier

        self.assertEqual(check_identifier("nobroker", "schema"), "nobroker")
        for name in ("nobroker\n", "x\n", "a b", "1x"):
            with self.subTest(name=name), self.assertRaises(ValueError):
                check_identifier(name, "schema")


class HostileNumbers(Folder):
    def test_the_cli_refuses_huge_integer_seconds_in_one_line(self) -> None:
        from tests.clisupport import run_main

        huge = "1" + "0" * 400
        run_main(["--dir", self.dir, "enqueue", "x", "--id", "j"])
        self.assertEqual(run_main(["--dir", self.dir, "lease"]).code, 0)
        for argv in (
            ["enqueue", "y", "--delay", huge], ["lease", "--visibility-timeout", huge], ["extend", "j", huge],
            ["nack", "j", "--delay", huge], ["work", "examples.handlers:ok", "--idle-timeout", huge],
        ):  # fmt: skip
            with self.subTest(argv=argv[0]):
                result = run_main(["--dir", self.dir, *argv])
                self.assertEqual(result.code, 2, result.err)
                self.assertNotIn("Traceback", result.err)
                self.assertNotIn("Overflow", result.err)
        with Queue(self.dir) as q:
            self.assertEqual(len(q), 1)


class HostilePayloads(Folder):
    def setUp(self) -> None:
        super().setUp()
        self.q = Queue(self.dir)
        self.addCleanup(self.q.close)

    def stored_exactly_or_refused(self, payload: Any) -> str:
        try:
            job = self.q.enqueue(payload)
        except SerializationError as exc:
            self.assertEqual(len(self.q), 0, "a refused payload left a job behind")
            return str(exc)
        self.assertEqual(self.q.get(job.id).payload, payload)
        with Queue(self.dir) as again:
            self.assertEqual(again.get(job.id).payload, payload, "stored, but does not read back")
        self.assertTrue(verify(self.dir).ok)
        return "stored"

    def test_a_5000_digit_integer(self) -> None:
        huge = 7 * 10**4999  # 5,000 digits: more than Python's int-to-text limit (4,300)
        message = self.stored_exactly_or_refused(huge)
        if message != "stored":
            self.assertIn("not JSON", message)

    def test_nesting_100000_deep(self) -> None:
        deep: Any = []
        for _ in range(100_000):
            deep = [deep]
        message = self.stored_exactly_or_refused(deep)
        self.assertIn("nested", message)
        deep_dict: Any = {}
        for _ in range(100_000):
            deep_dict = {"a": deep_dict}
        self.assertIn("nested", self.stored_exactly_or_refused(deep_dict))

    def test_nesting_that_fits_is_kept(self) -> None:
        deep: Any = "bottom"
        for _ in range(MAX_JSON_DEPTH):
            deep = [deep]
        self.assertEqual(self.stored_exactly_or_refused(deep), "stored")
        with self.assertRaises(SerializationError) as caught:
            self.q.enqueue([deep])
        self.assertIn(f"{MAX_JSON_DEPTH} levels", str(caught.exception))
        self.assertEqual(len(self.q), 1)

    def test_nesting_is_measured_in_the_json_not_in_strings_that_look_like_it(self) -> None:
        text = "[" * 5000 + "{" * 5000
        self.assertEqual(self.stored_exactly_or_refused({"looks": text, "deep": [[[text]]]}), "stored")
        wide = [[[i]] for i in range(10_000)]  # many arrays, three levels
        self.assertEqual(self.stored_exactly_or_refused(wide), "stored")

    def test_a_50_mb_string(self) -> None:
        big = "x" * (50 * 1024 * 1024)
        tracemalloc.start()
        try:
            with self.assertRaises(SerializationError) as caught:
                self.q.enqueue(big)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertIn("limit", str(caught.exception))
        self.assertIn("elsewhere", str(caught.exception))
        self.assertLess(peak, MEMORY_BOUND, f"refusing a 50 MB payload allocated {peak:,} bytes")
        self.assertEqual(len(self.q), 0)

    def test_nan_and_infinity(self) -> None:
        for value in (math.nan, math.inf, -math.inf, {"x": [math.nan]}):
            with self.subTest(value=value):
                with self.assertRaises(SerializationError) as caught:
                    self.q.enqueue(value)
                self.assertIn("not JSON", str(caught.exception))
        self.assertEqual(len(self.q), 0)

    def test_lone_surrogates_are_kept(self) -> None:
        self.assertEqual(self.stored_exactly_or_refused({"s": "\ud800 and \udfff", "k\udc00": 1}), "stored")

    def test_bytes_and_other_objects_are_refused(self) -> None:
        for value in (b"bytes", bytearray(b"x"), {1, 2}, object(), {"k": b"v"}, {(1, 2): "tuple key"}):
            with self.subTest(value=type(value).__name__):
                with self.assertRaises(SerializationError) as caught:
                    self.q.enqueue(value)
                self.assertIn("not JSON", str(caught.exception))
        self.assertEqual(len(self.q), 0)

    def test_hostile_results_and_errors(self) -> None:
        self.q.enqueue("x")
        job = self.q.lease_one()
        assert job is not None
        with self.assertRaises(SerializationError):
            self.q.ack(job, result=math.nan)
        with self.assertRaises(SerializationError):
            self.q.ack(job, result="r" * (2 * 1024 * 1024))
        self.q.nack(job, error="e" * 100_000 + "\ud800", delay=0)
        with Queue(self.dir) as again:
            self.assertLessEqual(len(again.get(job.id).last_error or ""), 8 * 1024)

    def test_a_job_at_every_limit_at_once_survives_compaction_and_repair(self) -> None:
        """The limits compose: whatever each operation accepts, the job's record fits MAX_RECORD_BYTES."""
        emoji = "\U0001f600"  # 12 bytes of JSON as the escapes \ud83d\ude00
        name, payload = emoji * MAX_NAME_CHARS, "p" * (MAX_PAYLOAD_BYTES - 2)  # the quotes make it the limit
        result = [emoji * ((MAX_RESULT_BYTES - 4) // 12)]
        self.q.close()
        q = Queue(self.dir, auto_compact=None)  # the done job must still be there for repair to rewrite
        q.enqueue(payload, job_id=emoji * MAX_ID_CHARS, kind=name, dedupe_key=name, max_attempts=MAX_ATTEMPTS_LIMIT,
                  timeout=MAX_SECONDS)  # fmt: skip
        with self.assertRaises(SerializationError):
            q.enqueue(payload + "p")
        # A full attempt history (issue 15), each attempt by a worker label at its longest.
        label = mock.patch("nobroker.filestore.leases.worker_label", return_value="w" * MAX_WORKER_CHARS)
        label.start()
        self.addCleanup(label.stop)
        for _ in range(MAX_ATTEMPT_HISTORY):
            job = q.lease_one(kinds=[name])
            assert job is not None
            q.nack(job, delay=0)
        job = q.lease_one(kinds=[name])
        assert job is not None
        q.nack(job, error=emoji * MAX_ERROR_CHARS, traceback=emoji * MAX_TRACEBACK_CHARS, delay=0)
        job = q.lease_one(kinds=[name])
        assert job is not None
        q.set_stage(job, name)
        before = q.get(job.id)
        self.assertEqual(len(before.attempt_history), MAX_ATTEMPT_HISTORY)
        q.compact()  # writes the live job's whole state into one record
        with Queue(self.dir) as again:
            self.assertEqual(again.get(job.id), before)
        q.ack(job, result=result)
        done = q.get(job.id)
        q.close()
        # Repair rewrites done jobs too (result and all): give it damage to repair around.
        log = next(n for n in os.listdir(self.dir) if n.endswith(".log"))
        with open(os.path.join(self.dir, log), "ab") as f:
            f.write(struct.pack("<IBI", 2, 3, 0) + b"{}" + record(3, {"id": "nobody", "at": 1.0}))
        self.assertTrue(repair(self.dir).repaired)
        with Queue(self.dir) as again:
            self.assertEqual(again.get(job.id), done)
            self.assertEqual(again.compact().jobs_dropped, 1)

    def test_nothing_is_written_outside_the_queue_folder(self) -> None:
        for value in (b"x", math.nan, "s" * 1000, 9 * 10**4999):
            try:
                self.q.enqueue(value)
            except SerializationError:
                pass
        self.assertEqual(os.listdir(self.parent), ["q"])


if __name__ == "__main__":
    unittest.main()
