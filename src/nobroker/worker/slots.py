"""A Worker's slots: how many jobs run, how many wait to be settled, since when it idles.

Owns: Slots, the counts the leasing loop, the runners and a drain share, and
the lock and condition they are kept under (the Worker guards its other
shared state with the same lock). A slot is taken when a job is leased,
freed when its handler is done (``release``: its ack may still be on its
way, so the next lease can share that write), and the job is settled when
its ack or nack is written (``finish``); a drain waits for every job leased
to be settled. A handler thread that leases its own next job passes its
slot on (``pass_on``, then ``passed_on``): the slot stays taken meanwhile,
so the leasing loop never fills it too. Imports: heartbeat.
"""

from __future__ import annotations

import threading
import time

from .heartbeat import Running


class Slots:
    """The slots in use and the jobs not yet settled, under ``lock``; ``freed`` is notified at each change."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.freed = threading.Condition(self.lock)  # a slot freed (or a stop): what the leasing loop waits for
        self.settled = threading.Condition(self.lock)  # a job settled: what a drain waits for
        self.inflight = 0  # jobs whose handler has not returned: the slots in use
        self.unsettled = 0  # jobs leased and not yet settled (acked, nacked): what a drain waits for
        self.idle_since = time.monotonic()

    def taken(self, count: int) -> None:
        """``count`` jobs were leased and start now."""
        with self.lock:
            self.inflight += count
            self.unsettled += count
            self.idle_since = time.monotonic()

    def release(self, entry: Running) -> None:
        """A job's handler is done and its outcome handed on: its slot is free, while its ack may still be written."""
        with self.lock:
            self._release(entry)

    def finish(self, entry: Running) -> None:
        """A job was settled: nothing more to do for it (its slot is free too)."""
        with self.lock:
            self._release(entry)
            self.unsettled -= 1
            assert self.unsettled >= 0, "every job is settled once"
            self.settled.notify_all()

    def pass_on(self, entry: Running) -> None:
        """A job's handler is done, and its thread leases its own next job: the slot stays taken for that one.

        Counted as not yet settled meanwhile, so a drain waits for the lease's
        outcome; ``passed_on`` says what the lease found.
        """
        with self.lock:
            assert not entry.released, "a slot is passed on by the job that holds it"
            entry.released = True
            self.unsettled += 1

    def passed_on(self, found: bool) -> None:
        """The lease after ``pass_on``: a job runs in the slot (``found``), or the slot is free after all."""
        with self.lock:
            if found:
                self.idle_since = time.monotonic()
                return
            self.unsettled -= 1
            self._free_one()
            self.settled.notify_all()

    def _release(self, entry: Running) -> None:
        if entry.released:
            return
        entry.released = True
        self._free_one()

    def _free_one(self) -> None:
        self.inflight -= 1
        assert self.inflight >= 0, "every job frees its slot once"
        if self.inflight == 0:
            self.idle_since = time.monotonic()
        self.freed.notify_all()

    def wait_settled(self, slice_seconds: float) -> None:
        """Return once every job leased is settled (waking every ``slice_seconds`` to look again)."""
        with self.lock:
            while self.unsettled > 0:
                self.settled.wait(slice_seconds)
