"""Helpers shared by the hostile-input tests: log files built byte by byte, and a folder watched for changes.

Owns: MEMORY_BOUND (twice MAX_RECORD_BYTES: what opening, verifying or
refusing may allocate at its peak), the format version 1 writers (``header``,
``record``, ``enqueue_body``, ``good_log``: built here with struct and zlib,
from DESIGN.md section 4, not with nobroker's own encoder) and ``Folder``
(a parent folder holding only the queue folder, so writes outside it are
visible; ``put``, ``tree``, ``refused``: a refused open raises
CorruptLogError, changes nothing and stays within the bound; ``verified``:
maintenance.verify within the bound). Imports: the standard library,
nobroker's public API and maintenance.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import tracemalloc
import unittest
import zlib
from typing import Any

from nobroker import CorruptLogError, Queue
from nobroker.jobs import MAX_RECORD_BYTES
from nobroker.filestore.admin import verify

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
