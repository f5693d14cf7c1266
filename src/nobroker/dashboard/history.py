"""The last hour of each queue's counters, sampled in memory: what the page's chart is drawn from.

Owns: CounterHistory (per queue, a bounded ring of (time, totals) samples
of ``queue.counters()`` added up over the kinds) and the Sampler thread that
takes one every SAMPLE_SECONDS of each queue the dashboard holds open.
Imports: jobs, queue (for annotations only).

The counters are kept by the storage (they survive restarts and compaction);
the samples are not: a dashboard that restarts starts with an empty chart,
which fills again from its next samples (a rate needs two). What happened
while no dashboard ran is not lost: it shows in the first rate after the
restart only as a jump of the totals, which the page does not draw (a rate
over a gap longer than GAP_SECONDS is left out).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..jobs import COUNTER_NAMES, Counters

if TYPE_CHECKING:  # for the annotations only: any object with the public Queue methods works
    from ..queue import Queue

logger = logging.getLogger("nobroker.dashboard")

#: Seconds between two samples of a queue's counters.
SAMPLE_SECONDS = 10.0
#: How far back the chart reaches (seconds), and so how many samples are kept per queue.
HISTORY_SECONDS = 3600.0
MAX_SAMPLES = int(HISTORY_SECONDS / SAMPLE_SECONDS) + 1
#: Two samples further apart than this are not drawn as one rate (the dashboard was stopped, or stalled).
GAP_SECONDS = 3 * SAMPLE_SECONDS
#: Most queues whose history is kept (one per queue the dashboard holds open, and its first).
MAX_QUEUES = 65

Sample = tuple[float, dict[str, int]]


def totals(counters: Counters) -> dict[str, int]:
    """The counters added up over the kinds: ``{"enqueued": n, ...}``."""
    out = dict.fromkeys(COUNTER_NAMES, 0)
    for row in counters.values():
        for name in COUNTER_NAMES:
            out[name] += int(row.get(name, 0))
    return out


class CounterHistory:
    """Samples by queue name; ``add`` skips one that comes sooner than half an interval after the last."""

    def __init__(self, interval: float = SAMPLE_SECONDS) -> None:
        assert interval > 0, "a sampling interval is positive"
        self.interval = interval
        self._samples: dict[str, collections.deque[Sample]] = {}
        self._lock = threading.Lock()

    def add(self, name: str, counters: Counters, now: float) -> bool:
        """Keep a sample of ``counters`` taken at ``now``; False if the last one is too recent (or too many queues)."""
        with self._lock:
            ring = self._samples.get(name)
            if ring is None:
                if len(self._samples) >= MAX_QUEUES:
                    return False
                ring = self._samples[name] = collections.deque(maxlen=MAX_SAMPLES)
            if ring and now - ring[-1][0] < self.interval / 2:
                return False
            ring.append((now, totals(counters)))
            return True

    def due(self, name: str, now: float) -> bool:
        """Is a sample of ``name`` owed (none yet, or the last one an interval old)?"""
        with self._lock:
            ring = self._samples.get(name)
            return not ring or now - ring[-1][0] >= self.interval

    def samples(self, name: str, now: float) -> list[Sample]:
        """The samples of the last HISTORY_SECONDS, oldest first."""
        with self._lock:
            ring = self._samples.get(name, ())
            return [(at, dict(values)) for at, values in ring if now - at <= HISTORY_SECONDS]


class Sampler:
    """The thread that samples every open queue's counters each ``history.interval`` seconds until ``stop()``."""

    def __init__(
        self, history: CounterHistory, queues: Callable[[], Iterable[Queue]], lock: threading.Lock,
    ) -> None:  # fmt: skip
        self.history = history
        self._queues = queues
        self._lock = lock
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="nobroker-dashboard-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def sample(self, queue: Queue) -> None:
        """One sample of ``queue`` now, if one is owed (also called by a request, so a new page has a point at once)."""
        if not self.history.due(queue.name, time.time()):
            return
        with self._lock:
            counters = queue.counters()
        self.history.add(queue.name, counters, time.time())

    def _main(self) -> None:
        while not self._stopping.wait(self.history.interval):
            for queue in list(self._queues()):
                try:
                    self.sample(queue)
                except Exception as exc:  # a queue gone bad must not end the sampling of the others
                    logger.warning("dashboard: sampling the counters of %s failed: %s", queue.name, exc)


__all__ = ["CounterHistory", "Sampler", "totals", "SAMPLE_SECONDS", "HISTORY_SECONDS", "GAP_SECONDS"]
