"""The garbage collector paused while a state is built (filestore/bulk.py), and given back after."""

from __future__ import annotations

import gc
import os
import threading
import unittest
from typing import Any
from unittest import mock

from nobroker import Queue
from nobroker.filestore import bulk
from nobroker.filestore.bulk import paused_collector
from nobroker.filestore.replay import QueueState
from tests.support import WAIT_SECONDS, TempDirTestCase


class PausedCollector(unittest.TestCase):
    def setUp(self) -> None:
        self.addCleanup(gc.enable if gc.isenabled() else gc.disable)
        gc.enable()

    def test_paused_inside_and_back_after(self) -> None:
        with paused_collector():
            self.assertFalse(gc.isenabled())
        self.assertTrue(gc.isenabled())

    def test_back_after_an_error_too(self) -> None:
        with self.assertRaises(KeyError), paused_collector():
            raise KeyError("x")
        self.assertTrue(gc.isenabled())

    def test_a_collector_disabled_before_stays_disabled(self) -> None:
        gc.disable()
        with paused_collector():
            pass
        self.assertFalse(gc.isenabled())

    def test_two_threads_building_at_once_end_the_pause_with_the_last(self) -> None:
        inside, release = threading.Event(), threading.Event()

        def other() -> None:
            with paused_collector():
                inside.set()
                release.wait(WAIT_SECONDS)

        thread = threading.Thread(target=other)
        thread.start()
        try:
            self.assertTrue(inside.wait(WAIT_SECONDS))
            with paused_collector():
                self.assertFalse(gc.isenabled())
            self.assertFalse(gc.isenabled(), "the other thread still builds")
        finally:
            release.set()
            thread.join(WAIT_SECONDS)
        self.assertTrue(gc.isenabled())

    def test_a_build_that_leaves_many_objects_ends_with_one_full_collection(self) -> None:
        kept: list[Any] = []
        for size, collections in ((bulk.FULL_COLLECTION_AFTER // 10, 0), (bulk.FULL_COLLECTION_AFTER * 2, 1)):
            with self.subTest(size=size):
                gc.collect()
                before = gc.get_stats()[2]["collections"]
                with paused_collector():
                    kept = [[i] for i in range(size)]  # tracked objects, none garbage
                self.assertEqual(gc.get_stats()[2]["collections"] - before, collections)
                if collections:
                    self.assertLess(gc.get_count()[0], bulk.FULL_COLLECTION_AFTER, "the new objects are in the old generation")
        del kept

    @unittest.skipUnless(hasattr(os, "fork"), "needs fork")
    def test_a_child_forked_during_a_build_has_its_collector_back(self) -> None:
        with paused_collector():
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: was the collector given back, and does a pause still work?
                try:
                    ok = gc.isenabled()
                    with paused_collector():
                        ok = ok and not gc.isenabled()
                    ok = ok and gc.isenabled()
                    os.write(write, b"1" if ok else b"0")
                finally:
                    os._exit(0)
            os.close(write)
            answer = os.read(read, 1)
            os.close(read)
            os.waitpid(pid, 0)
        self.assertEqual(answer, b"1")


class OpeningPausesIt(TempDirTestCase):
    def test_records_are_replayed_with_the_collector_paused(self) -> None:
        with Queue(self.dir, auto_compact=None) as q:
            q.enqueue_many([{"i": i} for i in range(20)])
        seen: list[bool] = []
        real = QueueState.apply

        def apply(state: QueueState, *args: Any, **kwargs: Any) -> None:
            seen.append(gc.isenabled())
            real(state, *args, **kwargs)

        enabled = gc.isenabled()
        with mock.patch.object(QueueState, "apply", apply):
            Queue(self.dir, auto_compact=None).close()
        self.assertTrue(seen, "opening replayed no record")
        self.assertFalse(any(seen), "a record was replayed with the collector running")
        self.assertEqual(gc.isenabled(), enabled)


if __name__ == "__main__":
    unittest.main()
