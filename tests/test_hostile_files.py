"""Hostile files: logs and pointers nobroker must not trust, and must not crash on or guess about.

Owns: ``HostileFiles``: bad magic, a future version, 4 GB length fields (in
the middle, and at the tail, where it is a torn tail), a good CRC over bad
JSON, bodies that are not objects, unknown record types, records whose
fields have the wrong types (control and limit records among them),
duplicate keys, deep nesting an older release wrote, garbage, empty,
negative, huge or missing pointers and generations, empty and short logs.
Each gets a specific error whose message says what to do, no crash, bounded
memory, nothing changed by a refused open, and maintenance.verify reporting
exactly what it found. Imports: the standard library, nobroker's public API
and maintenance, tests.hostilesupport.
"""

from __future__ import annotations

import json
import os
import struct
import tracemalloc
import unittest

from nobroker import CompactionError, CorruptLogError, Queue
from nobroker.filestore.admin import inspect_log
from tests.hostilesupport import MEMORY_BOUND, Folder, enqueue_body, good_log, header, record


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


if __name__ == "__main__":
    unittest.main()
