"""The public Queue: one facade, two storages.

Owns nothing itself: it names the package's faces, Queue and AsyncQueue. Each part of the
Queue is a class of its own module, over QueueBase; facade.py puts them
together.

The package, in its order (a module imports only modules above it):

    calls.py      the checks of every call's arguments, shared by Queue and AsyncQueue
    base.py       QueueBase: the options checked, the storage opened and held, close
    work.py       enqueue, lease, ack, nack, extend, set_stage; the wait for work
    looking.py    get, stats, listings, the DLQ; requeue_dead, purge, compact
    periodic.py   schedule, unschedule, schedules, enqueue_due
    control.py    cancel, snooze, pause, resume, paused, run_now, delete, wait
    roster.py     announce_worker, retire_worker, workers: who works the queue
    limiting.py   set_limit, clear_limit, limits: limits per kind
    explaining.py  explain: why a job is where it is (the reasons from explain.py)
    facade.py     Queue: the parts put together
    asyncqueue.py  AsyncQueue: the same calls awaited (PostgreSQL natively, files off the loop)

Imports: facade, asyncqueue.
"""

from __future__ import annotations

from typing import Any

from .facade import Queue


def __getattr__(name: str) -> Any:
    # AsyncQueue pulls in asyncio, which a Queue never needs.
    if name == "AsyncQueue":
        from .asyncqueue import AsyncQueue

        return AsyncQueue
    raise AttributeError(f"module 'nobroker.queue' has no attribute {name!r}")


__all__ = ["AsyncQueue", "Queue"]
