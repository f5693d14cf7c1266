"""Many processes on one PostgreSQL queue: every job claimed exactly once; one dedupe key, one job.

Owns: the part of ``PostgresStorageTests`` that forks four processes at
once, and the children they run (``_claim_all``, ``_enqueue_same_key``).
Imports: the standard library, the public ``nobroker`` API and
tests.pgstoragesupport. The processes are real, forked, and released
together by one event.
"""

from __future__ import annotations

import os
import unittest
from typing import Any

from nobroker import Queue
from tests.pgstoragesupport import PATIENCE, PostgresStorageCase, _fork


def _claim_all(dsn: str, schema: str, name: str, start: Any, out: Any, batch: int) -> None:
    """A worker process: lease and ack until the queue is empty; report what it took."""
    taken: list[str] = []
    with Queue(dsn, name, schema=schema, migrate=False) as q:
        start.wait(PATIENCE)
        while True:
            jobs = q.lease(batch)
            if not jobs:
                break
            for job in jobs:
                q.ack(job)
                taken.append(job.id)
    out.put(taken)


def _enqueue_same_key(dsn: str, schema: str, name: str, start: Any, out: Any) -> None:
    with Queue(dsn, name, schema=schema, migrate=False) as q:
        start.wait(PATIENCE)
        out.put(sorted({q.enqueue({"pid": os.getpid()}, dedupe_key="one").id for _ in range(20)}))


class PostgresStorageTests(PostgresStorageCase):
    """Behaviour of the PostgreSQL storage beyond the shared semantic suite: many processes at once."""

    def test_four_processes_claim_disjoint_complete_sets(self) -> None:
        q = self.open_queue()
        ids = [job.id for job in q.enqueue_many(list(range(400)))]
        for batch in (1, 7):
            with self.subTest(batch=batch):
                if batch != 1:
                    ids = [job.id for job in q.enqueue_many(list(range(400)))]
                start, out = _fork.Event(), _fork.Queue()
                procs = [_fork.Process(target=_claim_all, args=(self.dsn, self.schema, self.name, start, out, batch))
                         for _ in range(4)]  # fmt: skip
                for p in procs:
                    p.start()
                start.set()
                taken = [out.get(timeout=PATIENCE * 4) for _ in procs]
                for p in procs:
                    p.join(PATIENCE)
                    self.assertEqual(p.exitcode, 0)
                every = [job_id for part in taken for job_id in part]
                self.assertEqual(len(every), len(set(every)), "a job was delivered to two processes")
                self.assertEqual(sorted(every), sorted(ids), "a job was never delivered")
                self.assertEqual(q.stats().done, len(ids) * (1 if batch == 1 else 2))

    def test_concurrent_enqueues_with_one_dedupe_key_make_one_job(self) -> None:
        start, out = _fork.Event(), _fork.Queue()
        procs = [_fork.Process(target=_enqueue_same_key, args=(self.dsn, self.schema, self.name, start, out))
                 for _ in range(4)]  # fmt: skip
        for p in procs:
            p.start()
        start.set()
        seen = [out.get(timeout=PATIENCE * 2) for _ in procs]
        for p in procs:
            p.join(PATIENCE)
        self.assertEqual(len({job_id for ids in seen for job_id in ids}), 1)
        self.assertEqual(len(self.open_queue()), 1)


if __name__ == "__main__":
    unittest.main()
