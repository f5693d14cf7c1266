"""The Queue's worker announcements: who is working this queue right now.

Owns: RosterMethods. Imports: announcements, calls, base.
"""

from __future__ import annotations

from ..announcements import WorkerInfo, checked
from . import calls
from .base import QueueBase


class RosterMethods(QueueBase):
    """Worker announcements (see Queue). A running Worker calls the first two itself."""

    def announce_worker(self, info: WorkerInfo) -> None:
        """Announce (or heartbeat) a worker: its announcement replaces the one before of the same id.

        Bad fields are refused with SerializationError before anything is
        written. Announcements of workers whose heartbeat is PRUNE_AFTER old
        are removed meanwhile (see nobroker.announcements).
        """
        self._open_storage().announce_worker(checked(info))

    def retire_worker(self, worker_id: str) -> None:
        """Remove a worker's announcement (it stopped cleanly); nothing if there is none."""
        self._open_storage().retire_worker(calls.worker_id(worker_id))

    def workers(self) -> list[WorkerInfo]:
        """The workers that announced themselves, oldest first; ``info.gone(now)`` tells one that stopped heartbeating."""
        return self._open_storage().workers()
