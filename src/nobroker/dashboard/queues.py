"""The queues one dashboard shows: the one it started on, and the others of the same folder or database.

Owns: QueueSet (names listed on demand, queues opened on first use and kept
open until the dashboard stops) and UnknownQueueError. Imports: errors, queue
(for annotations only). The queues are any objects with the public Queue
methods, listed and opened by callables the caller passes, so this module
never chooses a storage, never creates a queue and works the same on both
storages.

``nobroker serve`` passes ``nobroker.list_queues`` and ``Queue(...,
create=False)``: a queue that is not there is never made by looking at it.

The first queue is offered beside the listed ones only while it is listed
itself, or nothing else is: on PostgreSQL a queue is the rows that carry its
name, so an empty ``default`` opened by name is not there at all, and a page
over a schema holding only ``app`` opens on ``app``, not on an empty
``default``. It still answers to its name (``?queue=default``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import NobrokerError

if TYPE_CHECKING:  # for the annotations only
    from ..queue import Queue

#: Most queues one dashboard holds open besides its first (each holds files or a
#: database connection); asking for one more is refused until it restarts.
MAX_OPEN_QUEUES = 64
#: Most queues whose counts one listing reads (each is opened to count it); the rest are listed by name.
MAX_COUNTED_QUEUES = 32


class UnknownQueueError(NobrokerError, LookupError):
    """A request named a queue that this dashboard does not offer (the answer is a 404)."""


class QueueSet:
    """The first queue, plus every queue ``list_names()`` names, opened by ``open_queue(name)`` when first asked for.

    Without ``list_names`` and ``open_queue`` it offers the first queue only.
    """

    def __init__(
        self,
        first: Queue,
        *,
        list_names: Callable[[], list[str]] | None = None,
        open_queue: Callable[[str], Queue] | None = None,
    ) -> None:
        if (list_names is None) != (open_queue is None):
            raise ValueError("list_names and open_queue go together: pass both, or neither")
        self.first = first
        self._list_names = list_names
        self._open_queue = open_queue
        self._opened: dict[str, Queue] = {}
        self._lock = threading.Lock()

    @property
    def first_name(self) -> str:
        return self.first.name

    def names(self) -> list[str]:
        """Every queue offered, sorted: the listed ones, and the first one while it is listed or nothing else is."""
        return self.offered()[0]

    def offered(self) -> tuple[list[str], str]:
        """The queues offered (as ``names()``) and the one a page opens on: the first if offered, else the first listed."""
        listed = self._list_names() if self._list_names is not None else []
        if self.first_name in listed or not listed:
            return sorted({self.first_name, *listed}), self.first_name
        names = sorted(set(listed))
        return names, names[0]

    def get(self, name: str | None) -> Queue:
        """The queue called ``name`` (None or "": the first); UnknownQueueError if it is not offered."""
        if not name or name == self.first_name:
            return self.first
        with self._lock:
            queue = self._opened.get(name)
            if queue is not None:
                return queue
            offered = self.names()
            if self._open_queue is None or name not in offered:
                shown = ", ".join(repr(n) for n in offered[:20]) + (", ..." if len(offered) > 20 else "")
                raise UnknownQueueError(f"no queue named {name!r} here (queues: {shown})")
            if len(self._opened) >= MAX_OPEN_QUEUES:
                raise UnknownQueueError(
                    f"this dashboard already holds {MAX_OPEN_QUEUES} other queues open; restart it to look at {name!r}"
                )
            queue = self._open_queue(name)
            self._opened[name] = queue
            return queue

    def open_queues(self) -> list[Queue]:
        """The queues open now: the first, and those opened since (what the counters' sampler samples)."""
        with self._lock:
            return [self.first, *self._opened.values()]

    def close(self) -> None:
        """Close the queues this set opened (the first belongs to the caller)."""
        with self._lock:
            opened, self._opened = list(self._opened.values()), {}
        for queue in opened:
            queue.close()


__all__ = ["QueueSet", "UnknownQueueError", "MAX_OPEN_QUEUES", "MAX_COUNTED_QUEUES"]
