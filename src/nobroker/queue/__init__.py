"""The public Queue: one facade, two storages.

Owns nothing itself: it names the package's face, Queue. Each part of the
Queue is a class of its own module, over QueueBase; facade.py puts them
together.

The package, in its order (a module imports only modules above it):

    base.py       QueueBase: the options checked, the storage opened and held, close
    work.py       enqueue, lease, ack, nack, extend, set_stage; the wait for work
    looking.py    get, stats, listings, the DLQ; requeue_dead, purge, compact
    periodic.py   schedule, unschedule, schedules, enqueue_due
    control.py    cancel, snooze, pause, resume, paused, run_now, delete, wait
    facade.py     Queue: the parts put together

Imports: facade.
"""

from __future__ import annotations

from .facade import Queue

__all__ = ["Queue"]
