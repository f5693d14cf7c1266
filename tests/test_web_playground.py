"""The playground, web/playground.html, in headless Chromium: its queue behaves, and its bytes are Python's.

Owns: ``PlaygroundTest``: the page driven through ``window.playground`` and
its buttons (enqueue, lease, crash, recover, repair, the recipes, a dropped
or picked log file); the log bytes it writes decode with the real Python
reader and replay into the same jobs; a log Python wrote decodes in the page
to the same records as ``nobroker.maintenance.inspect_log`` (damage found at
the same offsets); the same operations write the same bytes in both; its
JSON, floats and CRC are byte-identical to Python's. Imports: the standard
library, nobroker, tests.support and tests.pagesupport.
"""

from __future__ import annotations

import base64
import json
import math
import os
import pathlib
import random
import re
import unittest
from typing import Any
from unittest import mock

from nobroker import Queue
from nobroker.filestore import admin as maintenance
from nobroker.filestore.framing import encode_record
from tests.pagesupport import PLAYGROUND, _PageTest
from tests.support import FakeClock


class PlaygroundTest(_PageTest):
    def setUp(self) -> None:
        super().setUp()
        self.open(PLAYGROUND)
        self.js("playground.reset()")

    def tearDown(self) -> None:
        self.assert_clean()
        super().tearDown()

    def test_enqueue_lease_crash_recover(self) -> None:
        self.js("playground.enqueue({n: 1}); playground.enqueue({n: 2}); playground.lease(1)")
        self.assertEqual(self.js("playground.counts()")["leased"], 1)
        torn = self.js("playground.crash({op: 'enqueue'})")
        self.assertLess(torn["written"], torn["size"])
        self.assertEqual(self.js("playground.status().process"), "crashed")
        report = self.js("playground.recover()")
        self.assertTrue(report["ok"])
        self.assertEqual(report["torn_bytes"], torn["written"])
        self.assertEqual(report["records"], 3)
        counts = self.js("playground.counts()")
        self.assertEqual(counts, {"ready": 1, "delayed": 0, "leased": 1, "done": 0, "dead": 0, "total": 2})
        # The page shows the same numbers it reports.
        shown = self.js("Object.fromEntries([...document.querySelectorAll('[data-count]')].map(e => [e.dataset.count, Number(e.querySelector('.n').textContent)]))")
        self.assertEqual(shown, counts)

    def test_a_torn_ack_is_cut_and_the_job_stays_leased(self) -> None:
        self.js("playground.enqueue({n: 1}); playground.lease(1); playground.crash({op: 'ack', fraction: 0.5})")
        self.assertTrue(self.js("playground.recover()")["ok"])
        self.assertEqual(self.js("playground.counts()")["leased"], 1)

    def test_a_flipped_bit_with_records_after_it_is_refused_then_repaired(self) -> None:
        self.js("for (let i = 0; i < 3; i++) playground.enqueue({n: i})")
        flip = self.js("playground.flipBit({offset: 16 + 9 + 5, bit: 0})")
        self.assertEqual(flip["offset"], 30)
        report = self.js("playground.recover()")
        self.assertFalse(report["ok"])
        self.assertEqual(report["error"], "CorruptLogError")
        self.assertEqual(report["offset"], 16)
        self.assertIn("offset 16", report["message"])
        with self.assertRaisesRegex(Exception, "CorruptLogError"):
            self.js("playground.enqueue({n: 9})")
        repaired = self.js("playground.repair()")
        self.assertEqual(repaired["records_kept"], 2)
        self.assertEqual(self.js("playground.counts()")["ready"], 2)

    def test_every_recipe_runs_to_its_story(self) -> None:
        expected = {
            "crash-and-recover": {"ready": 2, "done": 1},
            "lease-expires": {"leased": 1},
            "late-ack": {"done": 1},
            "dead-letter": {"ready": 1, "dead": 0},
            "compaction": {"ready": 2, "done": 0},
            "bit-rot": {"ready": 2},
        }
        self.assertEqual(sorted(self.js("playground.recipes()")), sorted(expected))
        for name, counts in expected.items():
            with self.subTest(recipe=name):
                out = self.js(f"playground.runRecipe({json.dumps(name)})")
                for state, n in counts.items():
                    self.assertEqual(out["counts"][state], n, out)
        self.assertEqual(self.js("playground.runRecipe('late-ack')")["notes"]["refused"], "NotLeasedError")
        self.assertEqual(self.js("playground.status().generation"), 0)
        self.assertEqual(self.js("playground.runRecipe('compaction')")["notes"]["result"]["new_generation"], 1)
        self.assertEqual(self.js("playground.files()").get("default.current"), 2)

    def test_expired_lease_is_reclaimed_and_a_late_ack_refused(self) -> None:
        job = self.js("playground.enqueue({n: 1}); playground.lease(1, {visibility_timeout: 30})[0]")
        self.js("playground.advance(31)")
        with self.assertRaisesRegex(Exception, "NotLeasedError"):
            self.js(f"playground.ack({json.dumps(job)})")
        types = [r["type_name"] for r in self.js("playground.log()")]
        self.assertEqual(types, ["HEADER", "ENQUEUE", "LEASE", "RECLAIM"])

    # ------------------------------------------------------------ the page writes, Python reads
    def test_records_the_playground_writes_open_in_python(self) -> None:
        self.js(
            """
            const p = playground;
            p.enqueue({to: "ada@example.com", "2": 2.0, note: "caf\\u00e9 \\ud83d\\ude00 </script>"}, {priority: 3});
            p.enqueue([1, 2.5, null, true], {job_id: "order-42", kind: "email", dedupe_key: "k"});
            p.enqueue("delayed", {delay: 10, max_attempts: 1});
            const [a, b] = p.lease(2, {visibility_timeout: 30});
            p.ack(a, {result: {pages: 12}});
            p.nack(b, {error: "smtp timeout", delay: 0.25});
            p.advance(11);
            const [c] = p.lease(1);
            p.extend(c, 60);
            p.setStage(c, "encoding");
            """
        )
        data = base64.b64decode(self.js("playground.bytesBase64()"))
        self.write_log(data)
        views = list(maintenance.inspect_log(self.dir))
        page = self.js("playground.log()")
        self.assertEqual([v.damage for v in views], [None] * len(views))
        self.assert_same_records(views, page)
        self.assertEqual(maintenance.verify(self.dir).ok, True)

        now = self.js("playground.now()")
        with Queue(self.dir, clock=lambda: now) as q:
            self.assertEqual(q.recovery.torn_bytes, 0)
            page_jobs = self.js("playground.jobs()")
            self.assertEqual(len(q), len(page_jobs))
            for pj in page_jobs:
                job = q.get(pj["id"]).to_dict()
                for key in ("payload", "priority", "state", "attempts", "max_attempts", "available_at", "enqueued_at",
                            "lease_deadline", "lease_token", "last_error", "seq", "kind", "dedupe_key", "stage", "result"):  # fmt: skip
                    self.assertEqual(job[key], pj[key], f"{pj['id']}.{key}")

    def test_a_compacted_generation_opens_in_python(self) -> None:
        self.js("for (let i = 0; i < 4; i++) playground.enqueue({n: i}); for (const j of playground.lease(3)) playground.ack(j); playground.lease(1); playground.compact()")
        data = base64.b64decode(self.js("playground.bytesBase64()"))
        self.write_log(data, generation=1)
        pathlib.Path(self.dir, "default.current").write_text("1\n")
        views = list(maintenance.inspect_log(self.dir))
        self.assertEqual(views[0].body, {"version": 1, "generation": 1})
        self.assert_same_records(views, self.js("playground.log()"))
        now = self.js("playground.now()")
        with Queue(self.dir, clock=lambda: now) as q:
            self.assertEqual(q.stats().to_dict(), self.js("playground.counts()"))

    # ------------------------------------------------------------ Python writes, the page reads
    def test_a_log_python_wrote_decodes_in_the_page_like_inspect(self) -> None:
        clock = FakeClock()
        with Queue(self.dir, clock=clock, visibility_timeout=30.0, max_attempts=2) as q:
            q.enqueue({"to": "ada@example.com", "big": 2**60, "f": 1.0, "tiny": 1e-7, "s": "\u00e9\ud83d\ude00\x7f"})
            q.enqueue(["x"], priority=5, delay=2.5, kind="email", dedupe_key="welcome")
            q.enqueue_many([{"n": i} for i in range(3)], job_ids=[f"batch-{i}" for i in range(3)])
            first = q.lease_one()
            assert first is not None
            q.ack(first, result={"ok": True, "ratio": 0.1})
            second = q.lease_one()
            assert second is not None
            q.nack(second, error="boom", delay=1.0)
            third = q.lease_one()
            assert third is not None
            q.extend(third, 45.5)
            q.set_stage(third, "half way")
            clock.advance(60.0)
            q.lease(2)
            dead = q.lease_one()
            if dead is not None:
                q.nack(dead, permanent=True, error="no such user")
            q.requeue_dead()
        views = list(maintenance.inspect_log(self.dir))
        self.assertGreater(len(views), 12)
        data = self.log_bytes()
        page = self.js(f"playground.decodeBase64({json.dumps(base64.b64encode(data).decode())})")
        self.assert_same_records(views, page)
        # Byte for byte: the page re-encodes every body Python wrote to the same JSON.
        self.assertTrue(all(r.get("canonical", True) for r in page), [r for r in page if r.get("canonical") is False])

    def test_damage_in_a_python_log_is_found_at_the_same_offset(self) -> None:
        clock = FakeClock()
        with Queue(self.dir, clock=clock) as q:
            for i in range(4):
                q.enqueue({"n": i})
        data = self.log_bytes()
        views = list(maintenance.inspect_log(self.dir))
        third = views[3].offset
        end = len(data.rstrip(b"\0"))  # where the records end: format version 2 has room after them
        self.assertGreater(len(data), end + 100, "no room after the records")
        stray = views[2].offset, views[3].offset  # a whole record, copied into the room
        cases = {
            "torn tail": data[: end - 7] + bytes(len(data) - end + 7),
            "short frame": data[: views[-1].offset + 5],
            "bit flip mid-log": data[: third + 12] + bytes([data[third + 12] ^ 0x10]) + data[third + 13 :],
            "bad length": data[:third] + b"\xff\xff\xff\x7f" + data[third + 4 :],
            "a byte in the room": data[: end + 40] + b"\x05" + data[end + 41 :],
            "a record in the room": data[: end + 50] + data[stray[0] : stray[1]] + data[end + 50 + stray[1] - stray[0] :],
        }
        for label, damaged in cases.items():
            with self.subTest(case=label):
                self.write_log(damaged)
                py = list(maintenance.inspect_log(self.dir))
                page = self.js(f"playground.decodeBase64({json.dumps(base64.b64encode(damaged).decode())})")
                self.assert_same_records(py, page)
                self.assertIsNotNone(py[-1].damage)
                self.assertIsNotNone(page[-1]["damage"])
                # Both agree whether valid records follow the damage (refuse) or not (torn tail).
                follows = re.search(r"valid records follow at offset (\d+)", py[-1].damage or "")
                self.assertEqual(page[-1].get("valid_after"), int(follows.group(1)) if follows else None)

    def test_the_page_opens_a_python_log_and_replays_the_same_jobs(self) -> None:
        clock = FakeClock()
        with Queue(self.dir, clock=clock) as q:
            for i in range(3):
                q.enqueue({"n": i}, priority=i)
            job = q.lease_one()
            assert job is not None
            q.nack(job, error="later", delay=5.0)
            py_jobs = {j.id: j.to_dict() for j in q.list_jobs()}
            py_counts = q.stats().to_dict()
        data = self.log_bytes()
        report = self.js(f"playground.reset({{start: {clock()!r}}}); playground.load({json.dumps(base64.b64encode(data).decode())}, 'default.000000.log')")
        self.assertTrue(report["ok"])
        self.assertEqual(self.js("playground.counts()"), py_counts)
        for pj in self.js("playground.jobs()"):
            for key in ("state", "attempts", "available_at", "last_error", "seq", "priority", "payload"):
                self.assertEqual(pj[key], py_jobs[pj["id"]][key], key)

    # ------------------------------------------------------------ as a person uses it
    def test_the_buttons_drive_the_queue(self) -> None:
        self.js(
            """{
            const $ = (id) => document.getElementById(id);
            $('payload').value = '{"x": 1.0, "y": "\u00e9"}';
            $('btnEnqueue').click();
            $('btnEnqueue').click();
            $('btnLease').click();
            $('btnAck').click();
            true }
            """
        )
        self.assertEqual(self.js("playground.counts()")["done"], 1)
        first = self.js("playground.log()")[1]
        self.assertEqual(first["type_name"], "ENQUEUE")
        self.assertIn('"payload":{"x":1.0,"y":"\\u00e9"}', first["json"])
        self.js("document.getElementById('btnLease').click(); document.querySelector('[data-adv=\"31\"]').click(); document.getElementById('btnAck').click(); true")
        # The ack came after the lease expired: refused, and said so on the page.
        self.assertIn("NotLeasedError", self.js("document.getElementById('feed').textContent"))
        self.js("document.getElementById('btnCrash').click(); true")
        self.assertEqual(self.js("playground.status().process"), "crashed")
        self.assertTrue(self.js("document.getElementById('btnEnqueue').disabled"))
        self.assertIn("torn", self.js("[...document.querySelectorAll('#hex .b')].map(b => b.className).join(' ')"))
        self.js("document.getElementById('btnRecover').click(); true")
        self.assertEqual(self.js("playground.status().process"), "running")
        self.assertEqual(self.js("document.querySelector('#hex .b.torn')"), None)

    def test_a_dropped_or_picked_log_file_is_decoded_like_inspect(self) -> None:
        clock = FakeClock()
        with Queue(self.dir, clock=clock) as q:
            q.enqueue({"n": 1})
            job = q.lease_one()
            assert job is not None
            q.ack(job)
            q.enqueue({"n": 2})
        full = self.log_bytes()
        end = len(full.rstrip(b"\0"))  # where the records end (format version 2 has room after them)
        data = full[: end - 5] + bytes(len(full) - end + 5)  # and a torn tail: the last record cut short
        self.write_log(data)
        views = list(maintenance.inspect_log(self.dir))
        encoded = json.dumps(base64.b64encode(data).decode())
        deliver = {
            "drop": "document.getElementById('drop').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}))",
            "picker": "(() => { const input = document.getElementById('filePick'); input.files = dt.files; input.dispatchEvent(new Event('change')); })()",
        }
        for how, action in deliver.items():
            with self.subTest(how=how):
                self.js("document.querySelector('#inspect tbody').textContent = ''; true")
                rows = self.js(
                    f"""(async () => {{
                      const bytes = Uint8Array.from(atob({encoded}), c => c.charCodeAt(0));
                      const dt = new DataTransfer();
                      dt.items.add(new File([bytes], 'default.000000.log'));
                      {action};
                      const body = document.querySelector('#inspect tbody');
                      for (let i = 0; i < 250 && !body.rows.length; i++) await new Promise(r => setTimeout(r, 20));
                      return [...body.rows].map(r => [...r.cells].map(c => c.textContent));
                    }})()"""
                )
                self.assertEqual([(int(r[0]), r[2]) for r in rows], [(v.offset, v.type_name) for v in views])
                self.assertIn((views[-1].damage or "").split(": ", 1)[1], rows[-1][3])
                self.assertIn("torn tail", self.js("document.getElementById('inspectSummary').textContent"))
        self.js("document.getElementById('btnLoadFile').click(); true")
        self.assertEqual(self.js("playground.counts()"), {"ready": 0, "delayed": 0, "leased": 0, "done": 1, "dead": 0, "total": 1})

    def test_the_same_operations_write_the_same_bytes_in_both(self) -> None:
        """Python's Queue and the page, driven through one script with the same clock, ids and tokens."""
        start = 1_700_000_000.0
        clock = FakeClock(start)
        # The page writes 0.1.2's LEASE records: no worker label, so no attempt history either.
        no_label = mock.patch("nobroker.filestore.leases.worker_label", return_value=None)
        no_label.start()
        self.addCleanup(no_label.stop)
        with Queue(self.dir, clock=clock, auto_compact=None, log_format=1) as q:  # the page writes version 1
            q.enqueue({"to": "ada@example.com", "n": 1.25}, job_id="a", priority=1)
            q.enqueue(["x", 1.5, "\u00e9"], job_id="b", kind="email", dedupe_key="k", delay=2.0)
            q.enqueue("c", job_id="c", max_attempts=1)
            (a,) = q.lease(1)
            q.ack(a, result={"pages": 3})
            clock.advance(2.5)
            b, c = q.lease(2)
            q.nack(b, error="boom", delay=1.0)
            q.extend(c, 10.0)
            q.set_stage(c, "half")
            clock.advance(15.0)
            q.lease(1)  # reclaims c (its last attempt: dead), then leases b again
            q.requeue_dead()
            before = self.log_bytes(0)
            q.compact()
            after = self.log_bytes(1)
            py_jobs = [j.to_dict() for j in q.list_jobs()]
        # Generation 0 is gone after the compaction; read the leases' tokens from its bytes.
        tokens = [json.loads(rec[9:])["token"] for rec in self.records_of(before)[1:] if rec[4] == 2]
        self.assertEqual(len(tokens), 4)
        self.js(
            f"""{{
            const p = playground;
            p.reset({{start: {start!r}, tokens: {json.dumps(tokens)}}});
            p.enqueue({{to: "ada@example.com", n: 1.25}}, {{job_id: "a", priority: 1}});
            p.enqueue(["x", 1.5, "\u00e9"], {{job_id: "b", kind: "email", dedupe_key: "k", delay: 2.0}});
            p.enqueue("c", {{job_id: "c", max_attempts: 1}});
            const [a] = p.lease(1);
            p.ack(a, {{result: {{pages: 3}}}});
            p.advance(2.5);
            const [b, c] = p.lease(2);
            p.nack(b, {{error: "boom", delay: 1.0}});
            p.extend(c, 10.0);
            p.setStage(c, "half");
            p.advance(15.0);
            p.lease(1);
            p.requeueDead();
            }} true"""
        )
        page_before = base64.b64decode(self.js("playground.bytesBase64()"))
        self.assertEqual(self.records_of(page_before), self.records_of(before))
        self.assertEqual(page_before, before)
        self.js("playground.compact(); true")
        page_after = base64.b64decode(self.js("playground.bytesBase64()"))
        self.assertEqual(self.records_of(page_after), self.records_of(after))
        self.assertEqual(page_after, after)
        self.assertEqual(self.js("playground.jobs()"), py_jobs)

    def records_of(self, data: bytes) -> list[bytes]:
        """The frames of a log, so a mismatch names the record."""
        out, pos = [data[:16]], 16
        while pos < len(data):
            length = int.from_bytes(data[pos : pos + 4], "little")
            out.append(data[pos : pos + 9 + length])
            pos += 9 + length
        return out

    # ------------------------------------------------------------ identical bytes
    def test_json_and_crc_are_byte_identical_to_python(self) -> None:
        rng = random.Random(20261130)
        floats = [1.0, 0.1, -0.0, 0.0, 100.0, 1e16, 1e15, 1e-5, 1e-4, 1e22, 5e-324, 1.7976931348623157e308,
                  123456789.123, 1700000000.0, 1700000000.25, 2.5e-8, 1.5e300, 9007199254740993.0]  # fmt: skip
        floats += [rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30) for _ in range(300)]
        floats += [rng.random() + rng.randint(0, 2**31) for _ in range(100)]
        values: list[Any] = [
            {"id": "j1", "at": 1700000000.0, "deadline": 1700000030.5, "attempts": 1, "token": "ab"},
            {"floats": floats},
            {"ints": [0, -1, 2**53 + 1, -(2**63), 10**30]},
            {"s": "caf\u00e9 \U0001f600 \ud800 \x00\x1f\x7f\x80 \"q\" \\ / </script> \u2028"},
            {"b": 1, "2": 2, "1": 3, "a": {"z": [], "y": {}}},
            {"nested": [[[{"deep": [True, False, None]}]]]},
            {"unicode_keys": {"\u00fc": 1, "\u4e2d": 2}},
        ]
        texts = [json.dumps(v, separators=(",", ":"), ensure_ascii=True, allow_nan=False) for v in values]
        got = self.js(f"{json.dumps(texts)}.map(t => playground.canonicalJson(t))")
        for want, have in zip(texts, got):
            self.assertEqual(have, want)
        for rtype, value in enumerate(values, start=1):
            text = texts[rtype - 1]
            page = base64.b64decode(self.js(f"playground.encodeRecordBase64({rtype}, {json.dumps(text)})"))
            self.assertEqual(page, encode_record(rtype, value))
        # Floats one by one too, so a failure names the number.
        reprs = self.js(f"{json.dumps([f for f in floats if math.isfinite(f)])}.map(f => playground.floatRepr(f))")
        for f, r in zip(floats, reprs):
            if f != 0.0 or math.copysign(1, f) > 0:
                self.assertEqual(r, repr(f))

    # ------------------------------------------------------------ helpers
    def write_log(self, data: bytes, generation: int = 0) -> str:
        path = os.path.join(self.dir, f"default.{generation:06d}.log")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return path

    def log_bytes(self, generation: int = 0) -> bytes:
        return pathlib.Path(self.dir, f"default.{generation:06d}.log").read_bytes()

    def assert_same_records(self, views: list[Any], page: list[dict[str, Any]]) -> None:
        """Same offsets, lengths, types and bodies; damage at the same place."""
        self.assertEqual(len(page), len(views), [(r["offset"], r["type_name"]) for r in page])
        for view, rec in zip(views, page):
            where = f"record at offset {view.offset}"
            self.assertEqual(rec["offset"], view.offset, where)
            self.assertEqual(rec["type_name"], view.type_name, where)
            self.assertEqual(rec["type"], view.type, where)
            self.assertEqual(rec["length"], view.length, where)
            self.assertEqual(rec["body"], view.body, where)
            self.assertEqual(rec["damage"], view.damage, where)


if __name__ == "__main__":
    unittest.main()
