"""What a failed or interrupted operation leaves: memory no further than the disk, nothing written, peers told.

Owns: a KeyboardInterrupt after a decision took records leaves memory no
further than the disk; a failed read of a job's payload, in any decision
that reads one, writes nothing and changes nothing; a writer that takes its
records back after a failed fsync makes a peer that read them start over
(PeersOfARollBack). Imports: the standard library, nobroker (its public API;
filestore.leases, filestore.log and filestore.fs, patched) and
tests.support.
"""

from __future__ import annotations

import errno
import os
import tempfile
import unittest
from collections.abc import Callable
from typing import Any

from nobroker import Queue, StorageError
from tests.support import file_bytes


class InterruptedDecision(unittest.TestCase):
    def test_an_interrupt_after_a_decision_took_records_leaves_memory_no_further_than_the_disk(self) -> None:
        """Batch.add applies a record in memory at once; a KeyboardInterrupt before the write must not keep it."""
        from unittest import mock

        from nobroker.filestore import leases

        real = leases.enqueue

        def then_interrupted(*args: object, **kwargs: object) -> object:
            real(*args, **kwargs)  # type: ignore[arg-type]
            raise KeyboardInterrupt

        with tempfile.TemporaryDirectory() as folder, Queue(os.path.join(folder, "q")) as q:
            q.enqueue("written", job_id="written")
            with mock.patch.object(leases, "enqueue", then_interrupted):
                with self.assertRaises(KeyboardInterrupt):
                    q.enqueue("never written", job_id="ghost")
            self.assertEqual([job.id for job in q.list_jobs()], ["written"], "memory kept a record never written")
            self.assertEqual(len(q), 1)
            with Queue(os.path.join(folder, "q")) as other:
                self.assertEqual(len(other), 1)


class PayloadReadFailure(unittest.TestCase):
    """A decision reads a job's payload before it adds a record: a failed read writes and changes nothing."""

    def _failing_reads(self) -> Any:
        from unittest import mock

        from nobroker.filestore.log import LogFile

        def fail(self: object, offset: int, job_id: str) -> dict[str, Any]:
            raise StorageError(f"reading job {job_id}: [Errno 5] Input/output error (injected)")

        return mock.patch.object(LogFile, "read_job_body", fail)

    def _sizes(self, folder: str) -> dict[str, bytes]:
        """Every log's bytes (a write into a version 2 file's room changes no size)."""
        return {name: file_bytes(os.path.join(folder, name)) for name in sorted(os.listdir(folder)) if name.endswith(".log")}

    def _check(self, name: str, setup: Callable[[Queue], Any], call: Callable[[Queue, Any], Any]) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "q")
            with Queue(path, visibility_timeout=60) as q:
                held = setup(q)
                before = [job.to_dict() for job in q.list_jobs()]
                sizes = self._sizes(path)
                with self._failing_reads(), self.assertRaises(StorageError, msg=name):
                    call(q, held)
                self.assertEqual(self._sizes(path), sizes, f"{name}: a failed payload read still wrote a record")
                self.assertEqual([job.to_dict() for job in q.list_jobs()], before, f"{name}: memory changed")
                if name == "lease":  # the job it popped is runnable again, in this process
                    self.assertEqual(q.lease_one().id, "a")  # type: ignore[union-attr]
            with Queue(path) as again:
                self.assertEqual(len(again.list_jobs()), len(before), name)

    def test_every_decision_that_reads_a_payload(self) -> None:
        def leased(q: Queue) -> Any:
            q.enqueue({"n": 1}, job_id="a")
            return q.lease_one()

        def ready(q: Queue) -> Any:
            q.enqueue({"n": 1}, job_id="a")

        def delayed(q: Queue) -> Any:
            q.enqueue({"n": 1}, job_id="a", delay=3600)

        cases: list[tuple[str, Callable[[Queue], Any], Callable[[Queue, Any], Any]]] = [
            ("lease", ready, lambda q, job: q.lease_one()),
            ("extend", leased, lambda q, job: q.extend(job, 30)),
            ("extend_many", leased, lambda q, job: q.extend_many([job], 30)),
            ("set_stage", leased, lambda q, job: q.set_stage(job, "half")),
            ("nack", leased, lambda q, job: q.nack(job, error="boom")),
            ("snooze", leased, lambda q, job: q.snooze(job, 5)),
            ("cancel a leased job", leased, lambda q, job: q.cancel(job)),
            ("cancel a ready job", ready, lambda q, job: q.cancel("a")),
            ("run_now", delayed, lambda q, job: q.run_now("a")),
            ("enqueue_many naming a held job", ready, lambda q, job: q.enqueue_many([{"n": 2}, {"n": 3}], job_ids=["b", "a"])),
        ]
        for name, setup, call in cases:
            with self.subTest(name):
                self._check(name, setup, call)


class PeersOfARollBack(unittest.TestCase):
    """A writer whose fsync failed takes its records back out; a peer that read them must start over.

    The peer read the records between the writer's append and its failed
    fsync. Once the writer cut them, a third process appends over the place
    they held: the peer must not read on from where they ended (the middle
    of someone else's record), or it sees damage that is not there, or cuts
    an acknowledged record as a "torn tail".
    """

    def _scene(self, folder: str, padding: int) -> tuple[Queue, list[Any]]:
        from nobroker.filestore.fs import RealFileSystem

        class FsyncFailsOnce(RealFileSystem):
            before_failing: Callable[[], Any] | None = None

            def fsync(self, fd: int) -> None:
                hook, FsyncFailsOnce.before_failing = FsyncFailsOnce.before_failing, None
                if hook is None:
                    return super().fsync(fd)
                hook()
                raise OSError(errno.EIO, "Input/output error (injected)")

        writer = Queue(folder, filesystem=FsyncFailsOnce(), auto_compact=None)
        peer, third = Queue(folder, auto_compact=None), Queue(folder, auto_compact=None)
        self.addCleanup(lambda: [q.close() for q in (writer, peer, third)])
        writer.enqueue({"first": True})
        FsyncFailsOnce.before_failing = peer.stats  # the peer reads the records before the fsync fails
        with self.assertRaises(StorageError):
            writer.enqueue_many([{"taken back": i, "pad": "x" * 50} for i in range(3)])
        acknowledged = [third.enqueue({"third": i, "pad": "y" * padding}) for i in range(1 if padding > 500 else 6)]
        return peer, acknowledged

    def test_a_peer_that_read_the_records_taken_back_never_reads_on_from_their_end(self) -> None:
        # One long record over the place the peer had read to (the peer would cut it as a torn tail),
        # and many short ones (the peer would see damage with valid records after it).
        for padding in (1000, 50):
            with self.subTest(padding=padding), tempfile.TemporaryDirectory() as folder:
                peer, acknowledged = self._scene(folder, padding)
                mine = peer.enqueue({"peer": True})
                self.assertEqual(len(peer), 2 + len(acknowledged))
                with Queue(folder) as again:
                    held = {job.id: job.payload for job in again.list_jobs()}
                    self.assertEqual(len(held), 2 + len(acknowledged))
                    for job in [mine, *acknowledged]:
                        self.assertEqual(held.get(job.id), job.payload, "an acknowledged job is gone")


if __name__ == "__main__":
    unittest.main()
