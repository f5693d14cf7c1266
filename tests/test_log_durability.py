"""What a LogFile counts as durable, when peers share the file, and what a lease waits for.

Owns the checks of LogFile's two marks (``written_end``, ``durable_end``)
under the one case a single process never meets: a peer rolls back records
that this process's own fsync had already covered, and this process then
writes its own records where they were; and of what a lease's answer rests
on (replay.py's ``enables_end``): a peer's records that could give it a job
are fsynced before it returns, a peer's acks and leases are not waited for.
Imports: the standard library, nobroker, nobroker.filestore and tests.support.
"""

from __future__ import annotations

import unittest

from nobroker import Queue
from nobroker.filestore.framing import HEADER_SIZE
from nobroker.filestore.fs import RealFileSystem
from nobroker.filestore.layout import log_path
from nobroker.filestore.log import LogFile
from tests.support import TempDirTestCase


class CountingFileSystem(RealFileSystem):
    def __init__(self) -> None:
        super().__init__()
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)


class RolledBackPeer(TempDirTestCase):
    def test_records_written_where_a_peer_rolled_back_are_fsynced(self) -> None:
        fs = CountingFileSystem()
        mine = LogFile.create(fs, self.dir, "q", 1, sync=True)
        peer = LogFile.open(RealFileSystem(), log_path(self.dir, "q", 1))
        end = mine.append(b"a" * 10, HEADER_SIZE)
        mine.sync_through(end)
        peers_end = peer.append(b"p" * 500, end)  # a peer's records after ours ...
        mine.note_end(peers_end)
        mine.sync_through(peers_end)  # ... which our next fsync covers too
        self.assertEqual(mine.durable_end, peers_end)
        peer.truncate(end)  # the peer's own fsync failed: it rolls its records back
        before = fs.fsyncs
        my_end = mine.append(b"b" * 10, end)  # our new records, where the peer's were
        self.assertLess(my_end, peers_end)
        self.assertLessEqual(mine.durable_end, end, "bytes written anew count as durable")
        mine.sync_through(my_end)
        self.assertEqual(fs.fsyncs, before + 1, "acknowledged without an fsync of its own bytes")
        self.assertLessEqual(mine.durable_end, mine.written_end)
        mine.close()
        peer.close()


class ReadingPastTheEnd(TempDirTestCase):
    def test_a_file_cut_short_of_an_end_noted_before_ends_the_reading(self) -> None:
        """A replay without the lock reads up to an end noted earlier; a file cut since must end it, not loop."""
        from nobroker.filestore.framing import FRAME_SIZE, FrameStatus

        for log_format in (1, 2):
            with self.subTest(log_format=log_format):
                folder = f"{self.dir}/v{log_format}"
                with Queue(folder, "q", log_format=log_format) as q:
                    q.enqueue_many(list(range(30)))
                path = log_path(folder, "q", 0)
                log = LogFile.open(RealFileSystem(), path, writable=False)
                try:
                    frames = [fr for fr in log.scan(HEADER_SIZE) if fr.status is FrameStatus.OK]
                    end = frames[-1].offset + FRAME_SIZE + frames[-1].length
                    with open(path, "r+b") as f:
                        f.truncate(end - 3)  # the last record cut after the end was noted
                    read = list(log.scan(HEADER_SIZE, end))
                finally:
                    log.close()
                self.assertEqual(len([fr for fr in read if fr.status is FrameStatus.OK]), len(frames) - 1)
                self.assertIsNot(read[-1].status, FrameStatus.OK, "the cut record ends the reading")


class WhatALeaseRestsOn(TempDirTestCase):
    """Two queue objects on one folder are two peers: each its own file, lock and marks."""

    def _peers(self) -> tuple[Queue, Queue, CountingFileSystem]:
        fs = CountingFileSystem()
        mine = Queue(self.dir, filesystem=fs, auto_compact=None)
        peer = Queue(self.dir, auto_compact=None)
        self.addCleanup(mine.close)
        self.addCleanup(peer.close)
        return mine, peer, fs

    def test_a_lease_after_a_peers_acks_does_not_wait_for_their_fsync(self) -> None:
        mine, peer, fs = self._peers()
        mine.enqueue_many([{"i": i} for i in range(4)])  # fsynced by us: what our leases rest on
        peer.ack(peer.lease_one())  # a peer's lease and ack: nothing a lease of ours could take
        before = fs.fsyncs
        job = mine.lease_one()
        self.assertIsNotNone(job)
        self.assertEqual(fs.fsyncs, before, "a lease waited for an fsync of a peer's ack")

    def test_a_lease_of_a_peers_new_job_waits_for_its_fsync(self) -> None:
        mine, peer, fs = self._peers()
        mine.enqueue({"mine": 1})
        mine.ack(mine.lease_one())  # everything so far fsynced by us
        peer.enqueue({"peer's": 1})  # durable by the peer's fsync, which we cannot know of
        before = fs.fsyncs
        job = mine.lease_one()
        self.assertIsNotNone(job)
        self.assertEqual(fs.fsyncs, before + 1, "a lease handed out a job no fsync of ours covered")

    def test_a_lease_after_a_peers_nack_waits_for_its_fsync(self) -> None:
        mine, peer, fs = self._peers()
        mine.enqueue({"i": 1})
        peer.nack(peer.lease_one(), error="again", delay=0)  # the job is runnable again: by this record
        before = fs.fsyncs
        self.assertIsNotNone(mine.lease_one())
        self.assertEqual(fs.fsyncs, before + 1)

    def test_under_a_limit_a_lease_waits_for_a_peers_ack(self) -> None:
        mine, peer, fs = self._peers()
        mine.set_limit("default", concurrency=1)
        mine.enqueue_many([{"i": i} for i in range(2)])
        peer.ack(peer.lease_one())  # the ack frees the one slot our lease takes
        before = fs.fsyncs
        self.assertIsNotNone(mine.lease_one())
        self.assertEqual(fs.fsyncs, before + 1, "a lease under a limit rested on a peer's ack without its fsync")


if __name__ == "__main__":
    unittest.main()
