"""Helpers shared by the snapshot and checkpoint test modules: a random workload, and what a caller sees of a queue.

Owns: NAME and SNAP (the queue these tests use, and its generation 0
snapshot), ``small_threshold`` (a snapshot at close after fewer records),
``workload`` (random operations through the public API: every record type,
compactions among them), ``picture`` (everything a caller can see of a
queue, then the order its jobs lease in), ``copy_dir``, and the checkpoint
tests' ``storage_of``, ``view`` and ``replayed_view`` (the view of a plain
replay of a copy, without any snapshot). Imports: the standard library,
nobroker and tests.support.
"""

from __future__ import annotations

import os
import random
import shutil
from typing import Any
from unittest import mock

from nobroker import Queue
from nobroker.filestore import snapshot
from nobroker.filestore.storage import FileStorage
from nobroker.limits import turns_to_fields
from tests.support import FakeClock

NAME = "q"
SNAP = f"{NAME}.000000.snap"


def small_threshold(records: int = 1) -> Any:
    return mock.patch.object(snapshot, "SNAPSHOT_MIN_RECORDS", records)


def workload(q: Queue, clock: FakeClock, rng: random.Random, steps: int) -> None:
    """Random operations through the public API: every record type, plus compaction now and then."""
    held: list[Any] = []
    for _ in range(steps):
        roll = rng.random()
        try:
            if roll < 0.35:
                q.enqueue(
                    {"n": rng.randrange(1000), "s": "x" * rng.randrange(5)},
                    priority=rng.choice((0, 0, 1, 5, -2)),
                    delay=rng.choice((0, 0, 0, 3.0, 60.0)),
                    job_id=f"user-{rng.randrange(200)}" if rng.random() < 0.15 else None,
                    kind=rng.choice(("default", "default", "mail", "pdf")),
                    dedupe_key=f"k{rng.randrange(20)}" if rng.random() < 0.1 else None,
                    max_attempts=rng.choice((None, 1, 3)),
                    group=rng.choice((None, None, "acme", "bolt")),
                )
            elif roll < 0.45:
                q.enqueue_many([{"m": i} for i in range(rng.randrange(1, 30))], priority=rng.choice((0, 2)))
            elif roll < 0.6:
                kinds = rng.choice((None, ["mail"], ["default", "pdf"]))
                held.extend(q.lease(rng.randrange(1, 4), kinds=kinds))
            elif roll < 0.7 and held:
                q.ack(held.pop(rng.randrange(len(held))), result=rng.choice((None, {"ok": True}, [1, 2.5])))
            elif roll < 0.78 and held:
                q.nack(held.pop(rng.randrange(len(held))), error="boom", delay=rng.choice((None, 0.0, 10.0)))
            elif roll < 0.83 and held:
                q.extend(rng.choice(held), rng.choice((5.0, 100.0)))
            elif roll < 0.87 and held:
                q.set_stage(rng.choice(held), rng.choice(("half", None, "late")))
            elif roll < 0.885 and held:
                job = rng.choice(held)  # a mark, or (the holder) the end of a cancelled attempt
                q.cancel(job, stopped=rng.random() < 0.5)
            elif roll < 0.89:
                q.cancel(rng.choice([j.id for j in q.list_jobs("ready", limit=20)] or ["none"]))
            elif roll < 0.895:
                kind = rng.choice(("mail", "pdf"))  # LIMIT / UNLIMIT; a lease of a rate-limited kind spends a token
                if rng.random() < 0.3:
                    q.clear_limit(kind)
                else:
                    q.set_limit(kind, concurrency=rng.choice((None, 1, 3)), rate=rng.choice((2, 10)), per=5.0,
                                group_concurrency=rng.choice((None, 1, 2)), weights=rng.choice((None, {"acme": 3})))  # fmt: skip
            elif roll < 0.9:
                q.requeue_dead()
            elif roll < 0.905:
                q.purge()
                held.clear()
            elif roll < 0.915:
                q.compact()
            elif roll < 0.925 and held:
                q.snooze(held.pop(rng.randrange(len(held))), rng.choice((0.0, 30.0)))
            elif roll < 0.93:
                kind = rng.choice((None, "mail", "pdf"))
                (q.resume if rng.random() < 0.6 else q.pause)(kind)
            elif roll < 0.935:
                q.run_now(rng.choice([j.id for j in q.list_jobs("delayed", limit=20)] or ["none"]))
            elif roll < 0.94:
                q.delete(rng.choice([j.id for j in q.list_jobs(limit=40)] or ["none"]))
            else:
                clock.advance(rng.choice((0.5, 4.0, 40.0)))
        except Exception as exc:  # a stale token after a reclaim, a taken dedupe key: part of the game
            if type(exc).__name__ not in (
                "NotLeasedError", "ValueError", "JobNotFoundError", "JobCancelledError", "JobFinishedError",
                "JobStateError",
            ):
                raise


def picture(directory: str, clock: FakeClock, snapshot_used: bool, leases: int = 50) -> dict[str, Any]:
    """Everything a caller can see of a queue, then the order in which its jobs lease."""
    q = Queue(directory, NAME, clock=clock, auto_compact=None)
    try:
        out: dict[str, Any] = {
            "jobs": [j.to_dict() for j in q.list_jobs()],
            "stats": q.stats().to_dict(),
            "dlq": [j.id for j in q.dlq()],
            "mail": [j.id for j in q.list_jobs(kind="mail")],
            "records": q.recovery.records,
            "bytes": q.recovery.bytes_read,
            "len": len(q),
            "paused": q.paused(),
        }
        storage = q.storage
        assert isinstance(storage, FileStorage)
        assert storage._snap_loaded == snapshot_used, "the snapshot was (not) loaded"
        state = storage._state
        out["seq"], out["anomalies"], out["live"] = state.next_seq, state.anomalies, state.live_bytes
        out["keys"] = dict(state.active_keys)
        out["limits"] = {kind: (held, bucket) for kind, (held, bucket) in state.limits.items()}
        out["leased_kinds"] = {kind: n for kind, n in state.leased_kinds.items() if n}
        out["leased_groups"] = state.groups.leased
        out["turns"] = {kind: turns_to_fields(turns) for kind, turns in state.turns.items()}  # passes behind the clock say nothing
        # What happens next: reclaims in deadline order, leases in priority and FIFO order.
        clock.advance(1000.0)
        out["leases"] = [(j.id, j.attempts) for j in q.lease(leases)]
        out["then"] = [(j.id, j.attempts) for j in q.lease(leases, kinds=["mail"])]
        out["new"] = q.enqueue("after").seq
        return out
    finally:
        # The leases above changed the log: put it back so both pictures start equal.
        q.close()


def copy_dir(src: str, dst: str) -> None:
    os.makedirs(dst, mode=0o700, exist_ok=True)
    for name in os.listdir(src):
        with open(os.path.join(src, name), "rb") as f:
            data = f.read()
        fd = os.open(os.path.join(dst, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def storage_of(q: Queue) -> FileStorage:
    storage = q.storage
    assert isinstance(storage, FileStorage)
    return storage


def view(q: Queue) -> dict[str, Any]:
    """What a caller sees of a queue (no lease: that would change it)."""
    return {
        "jobs": [j.to_dict() for j in q.list_jobs()],
        "stats": q.stats().to_dict(),
        "dlq": [j.id for j in q.dlq()],
        "len": len(q),
        "seq": storage_of(q)._state.next_seq,
        "live": storage_of(q)._state.live_bytes,
    }


def replayed_view(directory: str, clock: FakeClock) -> dict[str, Any]:
    """The view of a copy of ``directory`` without any snapshot: a plain replay of the log."""
    copy = directory + f"-replay{random.random()}"
    copy_dir(directory, copy)
    for entry in os.listdir(copy):
        if entry.endswith(".snap"):
            os.unlink(os.path.join(copy, entry))
    q = Queue(copy, NAME, clock=clock, auto_compact=None)
    try:
        assert not storage_of(q)._snap_loaded
        return view(q)
    finally:
        q.close()
        shutil.rmtree(copy, ignore_errors=True)  # beside the test's folder, not in it: nothing else removes it
