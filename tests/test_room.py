"""Room to grow in the cold store: its row columns and row list are never copied whole under the file lock.

Owns: the helpers of filestore/room.py, and the two places that use them: a
state loaded from a snapshot comes with room (its first write does not
copy every row), and JobRows.tidy (outside the file lock) makes room before
it runs out. Growth is read from the containers' allocations
(``sys.getsizeof``), never timed. Imports: the standard library, nobroker
and tests.support.
"""

from __future__ import annotations

import json
import sys
import unittest
from unittest import mock

from nobroker import Queue
from nobroker.filestore.index import _ROW_BYTES
from nobroker.filestore import room
from nobroker.filestore.replay import QueueState
from nobroker.filestore.room import (
    ROOM_FROM_ROWS, bytes_room, bytes_with_room, keep_bytes_room, keep_list_room, list_room, list_with_room, room_wanted,
)  # fmt: skip
from nobroker.filestore.state_form import capture, from_snapshot
from tests.support import TempDirTestCase

#: Jobs in the queues below: enough rows for room to be kept.
JOBS = ROOM_FROM_ROWS + 4_000


class Helpers(unittest.TestCase):
    def test_small_containers_get_no_room(self) -> None:
        self.assertEqual(room_wanted(ROOM_FROM_ROWS - 1), 0)
        buf = bytearray(b"x" * 100)
        before = sys.getsizeof(buf)
        keep_bytes_room(buf, 10, 10)
        self.assertEqual(sys.getsizeof(buf), before)
        self.assertEqual(bytes_with_room(b"ab" * 8, 2), bytearray(b"ab" * 8))

    def test_a_bytearray_made_with_room_holds_the_data_and_the_room(self) -> None:
        rows, width = ROOM_FROM_ROWS * 2, 3
        data = bytes(range(256)) * (rows * width // 256)
        buf = bytes_with_room(memoryview(data), width)
        self.assertEqual(buf, data)
        self.assertGreaterEqual(bytes_room(buf), room_wanted(rows) * width)
        size = sys.getsizeof(buf)
        buf += b"z" * width * (room_wanted(rows) - 1)
        self.assertEqual(sys.getsizeof(buf), size, "filling the room never reallocates")
        self.assertEqual(buf[: len(data)], data)

    def test_a_list_made_with_room(self) -> None:
        items = list_with_room(None, ROOM_FROM_ROWS)
        self.assertEqual(items, [None] * ROOM_FROM_ROWS)
        self.assertGreaterEqual(list_room(items), room_wanted(ROOM_FROM_ROWS))

    def test_keeping_room_makes_it_once_it_runs_low_and_keeps_the_contents(self) -> None:
        rows = ROOM_FROM_ROWS * 2
        buf = bytearray(b"\x07" * rows)  # made to its size: no room
        keep_bytes_room(buf, 1, rows)
        self.assertGreaterEqual(bytes_room(buf), room_wanted(rows) // 2)
        self.assertEqual(buf, b"\x07" * rows)
        size = sys.getsizeof(buf)
        keep_bytes_room(buf, 1, rows)
        self.assertEqual(sys.getsizeof(buf), size, "room enough: nothing is done")
        items = [1] * rows
        keep_list_room(items)
        self.assertGreaterEqual(list_room(items), room_wanted(rows) // 2)
        self.assertEqual(items, [1] * rows)

    def test_an_interpreter_that_gives_the_room_back_stops_the_keeping(self) -> None:
        self.addCleanup(setattr, room, "KEEPING", room.KEEPING)
        rows = ROOM_FROM_ROWS * 2
        with mock.patch.object(room, "bytes_room", return_value=0):  # as if the cut had given it back
            keep_bytes_room(bytearray(rows), 1, rows)
        self.assertFalse(room.KEEPING)
        self.assertEqual(room_wanted(rows), 0, "no more room is made: it would copy every row at each tidy()")
        items = [0] * rows
        size = sys.getsizeof(items)
        keep_list_room(items)
        self.assertEqual(sys.getsizeof(items), size)


class LoadedState(TempDirTestCase):
    def state(self, q: Queue) -> QueueState:
        return q.storage._state  # type: ignore[attr-defined,no-any-return]

    def big_queue(self) -> None:
        with Queue(self.dir, auto_compact=None) as q:
            for start in range(0, JOBS, 20_000):
                q.enqueue_many([{"i": i} for i in range(start, min(JOBS, start + 20_000))])
        # The clean close left a snapshot: the next open loads it (checked below).

    def test_the_first_write_after_loading_a_snapshot_copies_no_row(self) -> None:
        self.big_queue()
        with Queue(self.dir, auto_compact=None) as q:
            state = self.state(q)
            self.assertEqual((state.n_cold, len(state.hot)), (JOBS, 0), "loaded from the snapshot, every job cold")
            columns, rows = state._columns, state._rows
            self.assertGreaterEqual(bytes_room(columns), room_wanted(JOBS) * _ROW_BYTES // 2)
            self.assertGreaterEqual(list_room(rows), room_wanted(JOBS) // 2)
            sizes = sys.getsizeof(columns), sys.getsizeof(rows)
            q.enqueue({"after": "loading"})
            self.assertIs(state, self.state(q))
            self.assertEqual((state.n_cold, len(state.hot)), (JOBS + 1, 0))
            self.assertEqual((sys.getsizeof(columns), sys.getsizeof(rows)), sizes, "the write grew into the room")
            self.assertEqual(q.get(q.list_jobs(limit=1)[0].id).payload, {"i": 0})

    def test_a_state_built_from_a_snapshot_has_room_before_any_tidy(self) -> None:
        self.big_queue()
        with Queue(self.dir, auto_compact=None) as q:
            captured = capture(self.state(q))
        state = from_snapshot(json.loads("".join(captured.fields_json())), [memoryview(b) for b in captured.blocks])
        self.assertEqual((state.n_cold, len(state._rows)), (JOBS, JOBS))
        self.assertGreaterEqual(bytes_room(state._columns), room_wanted(JOBS) * _ROW_BYTES)
        self.assertGreaterEqual(list_room(state._rows), room_wanted(JOBS))

    def test_tidy_makes_room_before_the_rows_outgrow_it(self) -> None:
        self.big_queue()
        with Queue(self.dir, auto_compact=None) as q:
            state = self.state(q)
            writes = 0
            while len(state._rows) < JOBS * 3 // 2:  # several times the room the load left
                q.enqueue_many([{"more": i} for i in range(2_000)])  # tidy() runs after each write
                writes += 1
                rows = len(state._rows)
                self.assertGreaterEqual(bytes_room(state._columns), room_wanted(rows) * _ROW_BYTES // 2, f"write {writes}")
                self.assertGreaterEqual(list_room(state._rows), room_wanted(rows) // 2, f"write {writes}")
            self.assertEqual(len(q), JOBS + writes * 2_000)


if __name__ == "__main__":
    unittest.main()
