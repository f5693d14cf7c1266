"""Hostile input: payloads, numbers and names nobroker must refuse or keep exactly.

Owns: ``HostileNames`` (queue names, file names and PostgreSQL identifiers
matched whole: a trailing newline is refused and creates nothing),
``HostileNumbers`` (huge integer seconds on the command line: one line, exit
2) and ``HostilePayloads`` (huge integers, deep nesting, 50 MB, NaN,
surrogates, bytes, hostile results and errors, a job at every limit at once
through compaction and repair). Each gets a specific error whose message
says what to do, no crash, bounded memory (tracemalloc peak under twice
MAX_RECORD_BYTES) and nothing written outside the queue folder. Hostile
files are tests/test_hostile_files.py's. Imports: the standard library,
nobroker's public API and maintenance, tests.hostilesupport and
tests.clisupport (inside two tests).
"""

from __future__ import annotations

import math
import os
import struct
import tracemalloc
import unittest
from unittest import mock
from typing import Any

from nobroker import Queue, SerializationError
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
    MAX_RESULT_BYTES,
)
from nobroker.filestore.admin import repair, verify
from tests.hostilesupport import MEMORY_BOUND, Folder, good_log, header, record


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
