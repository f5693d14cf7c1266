"""The file storage's counters, from the log alone: no snapshot or checkpoint to lean on.

Owns the file-only checks of the counters (the shared ones are in
tests/semantics_counters.py): a compacted generation's opening PURGE carries
them (also past an online compaction with records copied after the jobs, and
through repair), a bad ``counters`` field is refused naming the offset, and
a queue opened without its snapshot counts exactly what it counted with one.
Imports: the standard library, nobroker and tests.support.
"""

from __future__ import annotations

import glob
import json
import os
import struct
import zlib

from nobroker import BackoffPolicy, CorruptLogError, Queue
from nobroker.filestore.admin import inspect_log, repair
from tests.support import FakeClock, TempDirTestCase, records_end

NO_BACKOFF = BackoffPolicy(base=0.0, jitter=0.0)


class CountersFromTheLog(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.clock = FakeClock()

    def open(self) -> Queue:
        q = Queue(self.dir, clock=self.clock, max_attempts=1, backoff=NO_BACKOFF)
        self.addCleanup(q.close)
        return q

    def caches_removed(self) -> None:
        """Drop every snapshot and checkpoint: the next open replays the log itself."""
        for path in glob.glob(os.path.join(self.dir, "*.snap")) + glob.glob(os.path.join(self.dir, "*.ckpt*")):
            os.unlink(path)

    def fill(self, q: Queue) -> None:
        for n in range(5):
            q.enqueue(n, kind="even" if n % 2 == 0 else "odd")
        for job in q.lease(3):
            q.ack(job)
        q.nack(q.lease_one() or "x", error="boom")  # dead: max_attempts 1
        q.cancel(q.enqueue("c", kind="odd"))

    def test_the_log_alone_carries_the_counters_through_every_compaction(self) -> None:
        q = self.open()
        self.fill(q)
        expected = q.counters()
        self.assertEqual(expected["even"], {"enqueued": 3, "succeeded": 2, "failed": 0, "dead": 0, "cancelled": 0})
        self.assertEqual(expected["odd"], {"enqueued": 3, "succeeded": 1, "failed": 0, "dead": 1, "cancelled": 1})
        for round_ in range(3):
            q.compact()
            q.close()
            self.caches_removed()
            q = self.open()
            self.assertEqual(q.counters(), expected, f"after compaction {round_ + 1}")
        opening = [view for view in inspect_log(self.dir)][1]
        self.assertEqual(opening.type_name, "PURGE")
        self.assertIn("counters", opening.body)

    def test_records_a_peer_appends_during_an_online_compaction_count_once(self) -> None:
        q = self.open()
        self.fill(q)
        peer = self.open()
        original = peer.storage._copy_appended  # type: ignore[attr-defined]

        calls = []

        def copy_with_a_peer_writing(new, old, lock, **kw):  # type: ignore[no-untyped-def]
            # Another object of the queue appends before each copy: while the jobs are written,
            # while the state moves into the new generation, while its checkpoint is written.
            q.enqueue("meanwhile", kind="odd")
            calls.append(kw)
            return original(new, old, lock, **kw)

        peer.storage._copy_appended = copy_with_a_peer_writing  # type: ignore[attr-defined]
        peer.compact()
        expected = q.counters()
        self.assertGreaterEqual(len(calls), 2)
        self.assertEqual(expected["odd"]["enqueued"], 3 + len(calls))
        self.assertEqual(peer.counters(), expected)
        q.close()
        peer.close()
        self.caches_removed()
        self.assertEqual(self.open().counters(), expected)

    def test_repair_carries_the_counters(self) -> None:
        q = self.open()
        self.fill(q)
        expected = q.counters()
        q.close()
        self.caches_removed()
        log = glob.glob(os.path.join(self.dir, "default.*.log"))[0]
        with open(log, "ab") as f:  # damage with a valid record after it: repair needed
            f.write(b"\x05\x00\x00\x00\x03garbage" + frame(3, {"id": "nope", "at": 1.0}))
        with self.assertRaises(CorruptLogError):
            self.open()
        self.assertTrue(repair(self.dir).repaired)
        self.caches_removed()
        self.assertEqual(self.open().counters(), expected)

    def test_a_purge_with_bad_counters_is_refused_naming_its_offset(self) -> None:
        q = self.open()
        q.enqueue("a")
        q.close()
        self.caches_removed()
        log = glob.glob(os.path.join(self.dir, "default.*.log"))[0]
        offset = records_end(log)
        for bad in ({"default": [1, 2]}, {"default": [-1, 0, 0, 0, 0]}, [1], {"default": [1.5, 0, 0, 0, 0]}):
            with self.subTest(bad=bad):
                with open(log, "r+b") as f:
                    f.truncate(offset)
                    f.seek(offset)
                    f.write(frame(8, {"at": 1.0, "counters": bad}))
                with self.assertRaises(CorruptLogError) as caught:
                    Queue(self.dir).close()
                self.assertIn(str(offset), str(caught.exception))


def frame(rtype: int, body: dict) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    return struct.pack("<IBI", len(data), rtype, zlib.crc32(bytes([rtype]) + data)) + data
