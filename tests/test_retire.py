"""Letting go of a generation left behind (filestore/retire.py).

Owns: a retired state is emptied and its file closed, in a thread or in
place; a follower's operation returns without waiting for it; close waits
for it; the queue answers the same either way. Imports: the standard
library, nobroker and tests.support.
"""

from __future__ import annotations

import threading
import unittest
from typing import Any
from unittest import mock

from nobroker import Queue
from nobroker.filestore import retire
from nobroker.filestore.log import LogFile
from nobroker.filestore.replay import QueueState
from nobroker.filestore.storage import FileStorage
from tests.support import FakeClock, TempDirTestCase

NAME = "q"


def storage_of(q: Queue) -> FileStorage:
    storage = q.storage
    assert isinstance(storage, FileStorage)
    return storage


class TakingApart(unittest.TestCase):
    def test_a_state_is_emptied_a_step_at_a_time(self) -> None:
        state = QueueState()
        state.leases.extend((float(i), i, str(i)) for i in range(retire.RETIRE_STEP * 3 + 5))
        state.active_keys.update({("k", str(i)): str(i) for i in range(retire.RETIRE_STEP * 2 + 1)})
        state.ready["k"] = [(0, i, str(i)) for i in range(retire.RETIRE_STEP * 2)]
        state.paused.update(str(i) for i in range(retire.RETIRE_STEP + 3))
        leases, keys, ready = state.leases, state.active_keys, state.ready["k"]
        retire.take_apart([state])
        self.assertEqual((leases, keys, ready, state.ready, state.paused), ([], {}, [], {}, set()))

    def test_in_a_thread_then_joined(self) -> None:
        state = QueueState()
        state.leases.extend((float(i), i, str(i)) for i in range(10_000))
        leases = state.leases
        retiring = retire.Retiring()
        started = threading.Event()
        real = retire.take_apart

        def watched(items: Any) -> None:
            started.set()
            real(items)

        with mock.patch.object(retire, "take_apart", watched):
            retiring.let_go([state], in_thread=True)
            retiring.join()
        self.assertTrue(started.is_set())
        self.assertEqual(leases, [])
        self.assertIsNone(retiring.thread)

    def test_nothing_to_let_go_starts_no_thread(self) -> None:
        retiring = retire.Retiring()
        retiring.let_go([], in_thread=True)
        self.assertIsNone(retiring.thread)


class FollowingAFlip(TempDirTestCase):
    def test_the_old_generation_is_let_go_in_a_thread_and_close_waits_for_it(self) -> None:
        clock = FakeClock()
        a = Queue(self.dir, NAME, clock=clock, auto_compact=None)
        b = Queue(self.dir, NAME, clock=clock, auto_compact=None)
        try:
            a.ack_many(a.lease(len(a.enqueue_many([{"i": i} for i in range(400)])) // 2))
            b.stats()
            b_storage = storage_of(b)
            old_log = b_storage._log
            a.compact()
            closed_in: list[str] = []
            real_close = LogFile.close

            def close(log: LogFile) -> None:
                if log is old_log:
                    closed_in.append(threading.current_thread().name)
                real_close(log)

            with mock.patch.object(LogFile, "close", close):
                b.enqueue("b follows")
                b_storage._retiring.join()
            self.assertEqual(closed_in, ["nobroker-retire"])
            self.assertEqual(b_storage.generation, 1)
            self.assertEqual([j.to_dict() for j in b.list_jobs()], [j.to_dict() for j in a.list_jobs()])
        finally:
            a.close()
            b.close()
        self.assertIsNone(b_storage._retiring.thread, "close joined the thread")

    def test_in_place_when_asked(self) -> None:
        clock = FakeClock()
        with mock.patch.object(FileStorage, "retire_in_thread", False):
            a = Queue(self.dir, NAME, clock=clock, auto_compact=None)
            b = Queue(self.dir, NAME, clock=clock, auto_compact=None)
            try:
                a.ack_many(a.lease(len(a.enqueue_many([{"i": i} for i in range(50)])) // 2))
                b.stats()
                a.compact()
                b.enqueue("b follows")
                self.assertIsNone(storage_of(b)._retiring.thread)
                self.assertEqual(len(b), len(a))
            finally:
                a.close()
                b.close()


if __name__ == "__main__":
    unittest.main()
