"""A running Worker's announcement: who it is, told to its queue at start, at each tick, and taken back at a clean stop.

Owns: Announcer (the WorkerInfo of this worker, the thread that heartbeats it
every ANNOUNCE_SECONDS with the jobs running now, and the retirement at a
clean stop). Imports: announcements.

The announcement is for people (``nobroker workers``, the dashboard,
/metrics), not for correctness: a storage error while announcing is logged
and the worker goes on (its jobs' leases are what fence them), and a queue
without ``announce_worker`` (any object with lease/ack/nack/extend) is
simply not announced to. A worker killed without a clean stop leaves its
announcement behind; its heartbeat then grows old and it is shown as gone.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..announcements import ANNOUNCE_SECONDS, WorkerInfo, new_worker_id

logger = logging.getLogger("nobroker.worker")


class Announcer:
    """``start()`` announces and starts heartbeating; ``stop(retire=)`` ends it (and with ``retire``, takes it back)."""

    def __init__(
        self, queue: Any, name: str, kinds: Sequence[str] | None, concurrency: int, running: Callable[[], int],
        *, interval: float = ANNOUNCE_SECONDS,
    ) -> None:  # fmt: skip
        self._queue = queue
        self._name = name
        self._kinds = None if kinds is None else tuple(kinds)
        self._concurrency = concurrency
        self._running = running
        self._interval = interval
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._complained = False
        self.info: WorkerInfo | None = None

    @staticmethod
    def wanted(queue: Any) -> bool:
        return callable(getattr(queue, "announce_worker", None)) and callable(getattr(queue, "retire_worker", None))

    def start(self) -> None:
        now = time.time()
        self.info = WorkerInfo(
            id=new_worker_id(), name=self._name, host=socket.gethostname()[:255] or "localhost", pid=os.getpid(),
            kinds=self._kinds, concurrency=self._concurrency, started_at=now, running=0, heartbeat_at=now,
        )  # fmt: skip
        self._announce()
        self._thread = threading.Thread(target=self._main, name=f"{self._name}-announce", daemon=True)
        self._thread.start()

    def stop(self, *, retire: bool) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if retire and self.info is not None:
            try:
                self._queue.retire_worker(self.info.id)
            except Exception as exc:
                logger.warning("%s: could not take back its announcement: %s", self._name, exc)

    def _main(self) -> None:
        while not self._stopping.wait(self._interval):
            self._announce()

    def _announce(self) -> None:
        assert self.info is not None, "start() made the announcement"
        self.info = WorkerInfo(**{**self.info.__dict__, "running": self._running(), "heartbeat_at": time.time()})
        try:
            self._queue.announce_worker(self.info)
        except Exception as exc:  # for people, not for correctness: say so once, go on
            if not self._complained:
                self._complained = True
                logger.warning("%s: announcing itself failed (it keeps working; tried again each tick): %s", self._name, exc)
