"""A process that holds more than 1,024 files: every wait of the library still works.

select() refuses a descriptor numbered 1,024 or more, and the pipes a queue,
a Worker's pool or its children open get such numbers in a process that
holds many files or sockets already (a web server, a worker beside one).
Imports: nobroker and tests.support. Waits for what happens, never for a
time.
"""

from __future__ import annotations

import os
import threading
import unittest
from typing import Any

from nobroker import Queue, Worker
from nobroker.waiting import readable, ready
from tests.support import TempDirTestCase

#: Descriptors held open before the queue opens its own: theirs then number above FD_SETSIZE.
HELD = 1100
#: Generous bound for anything that should happen "soon" on a busy shared machine.
PATIENCE = 60.0


def hold_many(test: unittest.TestCase) -> None:
    """Open HELD descriptors for the rest of ``test`` (skips where the limit of open files is lower)."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError):
        test.skipTest("no limit of open files to read here")
    if soft != resource.RLIM_INFINITY and soft < HELD + 200:
        test.skipTest(f"the limit of open files is {soft}")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(HELD)]
    test.addCleanup(lambda: [os.close(fd) for fd in held])


class HighDescriptors(TempDirTestCase):
    def test_ready_sees_a_descriptor_numbered_above_1024(self) -> None:
        r, w = os.pipe()
        high_r, high_w = os.dup2(r, 1500), os.dup2(w, 1501)
        for fd in (r, w, high_r, high_w):
            self.addCleanup(os.close, fd)
        self.assertEqual(ready([high_r], [high_w], 0), (set(), {high_w}))
        os.write(high_w, b"x")
        self.assertEqual(readable([high_r], PATIENCE), {high_r})

    def test_a_descriptor_that_is_not_open_is_an_error_as_select_says(self) -> None:
        r, w = os.pipe()
        os.close(r)
        os.close(w)
        with self.assertRaises(OSError):
            ready([r], [], 0)

    def test_an_idle_wait_ends_when_its_interrupt_is_readable(self) -> None:
        hold_many(self)
        q = Queue(self.dir)
        self.addCleanup(q.close)
        r, w = os.pipe()
        high_r, high_w = os.dup2(r, 1600), os.dup2(w, 1601)
        for fd in (r, w, high_r, high_w):
            self.addCleanup(os.close, fd)
        os.write(high_w, b"x")  # readable before the wait begins: it ends at once, whenever that is
        ended: list[bool] = []
        waiting = threading.Thread(target=lambda: ended.append(q.wait_for_jobs(3600.0, interrupt=high_r)), daemon=True)
        waiting.start()
        waiting.join(PATIENCE)  # were the descriptors beyond the wait, it would sleep out its hour
        self.assertEqual(ended, [False], "the interrupt ended the wait")

    @unittest.skipUnless(hasattr(os, "fork"), "processes= needs os.fork")
    def test_a_pool_of_processes_runs(self) -> None:
        hold_many(self)
        q = Queue(os.path.join(self.dir, "q"), fsync=False)
        self.addCleanup(q.close)
        q.enqueue_many(list(range(20)))

        def handler(job: Any) -> int:
            return os.getpid()

        stats = Worker(q, handler, processes=2, max_jobs=20, handle_signals=False).run()
        self.assertEqual((stats.leased, stats.succeeded), (20, 20))


if __name__ == "__main__":
    unittest.main()
