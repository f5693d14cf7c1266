"""What a Worker was made with, read-only.

Owns: MadeWith, the Worker's base: its options as read-only properties
(nobroker 0.1.2's Worker had them as attributes). Imports: protocol, outcome.
"""

from __future__ import annotations

from .outcome import Handler
from .protocol import WorkQueue


class MadeWith:
    """The Worker's options, read back; the Worker sets the fields in its __init__."""

    _queue: WorkQueue
    _handler: Handler
    _concurrency: int
    _poll_interval: float
    _max_jobs: int | None
    _idle_timeout: float | None
    _handle_signals: bool
    _timeout: float | None

    @property
    def concurrency(self) -> int:
        """How many jobs this worker runs at once."""
        return self._concurrency

    @property
    def queue(self) -> WorkQueue:
        return self._queue

    @property
    def handler(self) -> Handler:
        return self._handler

    @property
    def poll_interval(self) -> float:
        return self._poll_interval

    @property
    def max_jobs(self) -> int | None:
        return self._max_jobs

    @property
    def idle_timeout(self) -> float | None:
        return self._idle_timeout

    @property
    def handle_signals(self) -> bool:
        return self._handle_signals

    @property
    def timeout(self) -> float | None:
        """The time limit of every job that has none of its own (None: no limit)."""
        return self._timeout
