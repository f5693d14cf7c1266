"""Helpers shared by the compaction tests: a big queue with some of it done, and the file storage behind a Queue.

Owns: ``build`` (a queue of n jobs, one in ``done_every`` acked; returns the
live and the done ids) and ``storage`` (a Queue's FileStorage, for the
tests that reach its compaction hook). Imports: the standard library and
nobroker.
"""

from __future__ import annotations

import os

from nobroker import Queue
from nobroker.filestore.storage import FileStorage


def build(directory: str, n: int, done_every: int = 3) -> tuple[set[str], set[str]]:
    """A queue of ``n`` jobs, one in ``done_every`` acked (the oldest); returns (live ids, done ids)."""
    n_done = n // done_every
    with Queue(directory, fsync=False, auto_compact=None, visibility_timeout=3600) as q:
        ids = []
        for start in range(0, n, 5_000):
            ids += [j.id for j in q.enqueue_many([{"i": i, "pad": "x" * 100} for i in range(start, min(n, start + 5_000))])]
        q.ack_many(q.lease(n_done))
    os.sync()
    return set(ids[n_done:]), set(ids[:n_done])


def storage(q: Queue) -> FileStorage:
    s = q._open_storage()  # noqa: SLF001 - the tests reach the file storage's compaction hook
    assert isinstance(s, FileStorage)
    return s
