"""Which writes NOTIFY the queue's channel: at most one per window (5-20 ms), and none is lost.

Owns: NotifyGate. Every NOTIFY takes a database-wide lock at commit, so a
NOTIFY per enqueue serializes every process that enqueues; one per queue per
few milliseconds wakes idle workers just as fast. The window is NOTIFY_WINDOW
after a quiet moment and widens, up to WIDEST_WINDOW, while a steady stream
of writes fills every window (each NOTIFY wakes every idle worker, so more
of them would wake no one). A write that makes a job
runnable at once asks ``take()``: True means "NOTIFY in this statement". A
write that was told False calls ``owe()`` once it committed, and the gate
sends one NOTIFY (through ``send``) one more window after the window ends
(OWED_AFTER windows after the last NOTIFY), unless a later write notified
first; so the last job of a burst wakes a worker too, never before it is
visible. In a steady stream of writes the next write after each window
notifies in its own statement, so the thread sends nothing: waiting only
until the window ends, it would win that race every time and double the
NOTIFYs, each a statement and a commit of its own. Delayed jobs never notify: an idle worker wakes for
them at their time (listener.Listener asks when the next one is due).
Imports: nothing from nobroker.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("nobroker.postgres")

#: Seconds between two NOTIFYs of one queue from one process.
NOTIFY_WINDOW = 0.005
#: The widest the window grows to in a steady stream of writes: it doubles each time a window
#: held a write back and the next write came right after it, and is NOTIFY_WINDOW again after
#: a window with nothing held back (measured: 4 processes enqueuing at once lost 10% to
#: NOTIFY at 5 ms, nothing at 20 ms; an idle worker is woken by any of them).
WIDEST_WINDOW = 0.02
#: Windows after the last NOTIFY that an owed one goes out, unless a write notified meanwhile.
OWED_AFTER = 2


class NotifyGate:
    """The NOTIFY budget of one queue in one process, and the thread that sends what was owed."""

    def __init__(self, send: Callable[[], None], window: float = NOTIFY_WINDOW, widest: float = WIDEST_WINDOW) -> None:
        assert 0 < window, "a positive window"
        self._send = send
        self._window = window  # the narrowest: a write after a quiet moment
        self._widest = widest
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # Guarded by _lock.
        self._last = float("-inf")  # monotonic time of the last NOTIFY sent or asked for
        self._wide = window  # the window now: between _window and _widest
        self._held_back = False  # was a write told "no" since the last NOTIFY?
        self._owed = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def take(self) -> bool:
        """May the write about to run NOTIFY? (True: it must.)"""
        now = time.monotonic()
        with self._lock:
            since = now - self._last
            if since >= self._wide:
                streaming = self._held_back and since < 2 * self._wide  # a window full, and writes still coming
                self._wide = min(2 * self._wide, max(self._widest, self._window)) if streaming else self._window
                self._held_back = False
                self._last = now
                self._owed = False
                return True
            self._held_back = True
            return False

    def owe(self) -> None:
        """A write told not to NOTIFY has committed: make sure one NOTIFY follows it."""
        with self._lock:
            if self._closed:
                return
            if os.getpid() != self._pid:  # a forked child: the parent's thread is not ours
                self._pid, self._thread = os.getpid(), None
            elif self._owed and self._thread is not None:
                # Already owed: the thread sleeps until the window ends and then
                # sends it. Waking it for every write of a burst would only cost
                # a thread switch per write.
                return
            self._owed = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name="nobroker-notify", daemon=True)
                self._thread.start()
            else:
                self._wake.notify()

    def close(self) -> None:
        """Send what is owed now, and stop the thread."""
        with self._lock:
            owed, self._owed, self._closed = self._owed, False, True
            self._wake.notify_all()
        if owed:
            self._send_logged()

    def _main(self) -> None:
        with self._lock:
            while not self._closed:
                if not self._owed:
                    self._wake.wait()
                    continue
                left = self._last + self._wide * OWED_AFTER - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                self._owed = False
                self._last = time.monotonic()
                self._lock.release()
                try:
                    self._send_logged()
                finally:
                    self._lock.acquire()

    def _send_logged(self) -> None:
        try:
            self._send()
        except Exception as exc:  # a lost wake-up costs an idle worker one recheck, never a job
            logger.debug("sending an owed NOTIFY failed: %s", exc)


__all__ = ["NOTIFY_WINDOW", "OWED_AFTER", "WIDEST_WINDOW", "NotifyGate"]
