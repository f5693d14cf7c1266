"""What a LogFile counts as durable, when peers share the file.

Owns the checks of LogFile's two marks (``written_end``, ``durable_end``)
under the one case a single process never meets: a peer rolls back records
that this process's own fsync had already covered, and this process then
writes its own records where they were. Imports: the standard library,
nobroker.filestore and tests.support.
"""

from __future__ import annotations

import unittest

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


if __name__ == "__main__":
    unittest.main()
