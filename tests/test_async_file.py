"""AsyncQueue on the file storage: the shared AsyncQueue semantics, and what only the file storage shows.

Owns: ``FileAsyncQueueTests`` (``AsyncSemantics`` on a temp folder with a
FakeClock, each call the Queue's run off the event loop; a wait runs in
slices and still returns the finished job; ``conn=`` is refused).
Imports: the standard library, the public ``nobroker`` API, tests.support
and tests.semantics_async.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import unittest
from typing import Any

from nobroker import AsyncQueue, JobState, Queue
from tests.semantics_async import PATIENCE, AsyncSemantics
from tests.support import FakeClock


class FileAsyncQueueTests(AsyncSemantics, unittest.IsolatedAsyncioTestCase):
    """AsyncQueue on the file storage: each call the Queue's, run off the event loop."""

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="nobroker-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.clock = FakeClock()

    async def make_queue(self, **options: Any) -> AsyncQueue:
        q = AsyncQueue(self.dir, clock=self.clock, **options)
        self.addAsyncCleanup(q.close)
        return await q.open()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def sync_twin(self, q: AsyncQueue) -> Queue:
        twin = Queue(self.dir, q.name, clock=self.clock)
        self.addCleanup(twin.close)
        return twin

    async def test_a_wait_runs_in_slices_and_still_returns_the_finished_job(self) -> None:
        """Off the loop, a wait is the Queue's in slices of FINISH_RECHECK (a cancelled one holds its thread that long)."""
        q = await self.make_queue()
        job = await q.enqueue("later")
        leased = await q.lease_one()
        assert leased is not None
        waiting = asyncio.create_task(q.wait(job.id, PATIENCE))
        await asyncio.sleep(1.5)  # past the first slice: its TimeoutError is not the caller's
        self.assertFalse(waiting.done(), "still waiting: the job is leased")
        await q.ack(leased)
        self.assertIs((await asyncio.wait_for(waiting, PATIENCE)).state, JobState.DONE)

    async def test_conn_is_refused_on_the_file_storage(self) -> None:
        q = await self.make_queue()
        with self.assertRaises(ValueError):
            await q.enqueue("x", conn=object())


if __name__ == "__main__":
    unittest.main()
