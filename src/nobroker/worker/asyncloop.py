"""The event loop that runs async handlers: one thread, started on first need.

Owns: EventLoopThread. ``submit`` starts a coroutine as a task on it (an
``async def`` handler's job: no thread waits for it); ``run`` blocks the
calling thread until an awaitable is done (what a plain handler returned).
``abort`` cancels everything still running. asyncio itself is imported only
when an async handler first runs: a worker with a plain handler never loads
it. Imports: nothing from nobroker.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio
    import concurrent.futures

#: Longest ``abort()`` waits for the lock guarding the running futures: an
#: interrupt may have landed while a handler thread held it.
ABORT_LOCK_SECONDS = 1.0


async def _await_any(awaitable: Awaitable[Any]) -> Any:
    # run_coroutine_threadsafe takes only coroutines; this wraps futures and
    # other awaitables a handler may return.
    return await awaitable


class EventLoopThread:
    """One asyncio loop on a thread of its own; ``run(awaitable)`` blocks the caller until it is done."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Guarded by _lock: what abort() must cancel.
        self._futures: set[concurrent.futures.Future[Any]] = set()

    def ensure(self) -> asyncio.AbstractEventLoop:
        """The loop, started now if it is not running yet."""
        import asyncio

        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=self._main, args=(loop,), name=self._name, daemon=True)
                self._loop, self._thread = loop, thread
                thread.start()
            return self._loop

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop) -> None:
        import asyncio

        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            # Tasks a handler started and left behind: cancel them so closing
            # the loop does not warn about pending tasks.
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Start ``coroutine`` as a task on the loop; ``abort`` cancels it if it still runs then."""
        import asyncio

        future = asyncio.run_coroutine_threadsafe(coroutine, self.ensure())
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._futures.discard(future)

    def run(self, awaitable: Awaitable[Any]) -> Any:
        """Run ``awaitable`` on the loop and return its result (or raise what it raised)."""
        import asyncio

        loop = self.ensure()
        coroutine: Coroutine[Any, Any, Any]
        coroutine = awaitable if inspect.iscoroutine(awaitable) else _await_any(awaitable)
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        with self._lock:
            self._futures.add(future)
        try:
            return future.result()
        finally:
            with self._lock:
                self._futures.discard(future)

    def stop(self) -> None:
        """Stop the loop and wait for its thread (every handler has returned by now)."""
        with self._lock:
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()

    def abort(self) -> None:
        """Let go at once: cancel what runs and stop the loop, waiting for nothing."""
        if self._lock.acquire(timeout=ABORT_LOCK_SECONDS):
            try:
                futures, loop = list(self._futures), self._loop
            finally:
                self._lock.release()
        else:  # pragma: no cover - only if the interrupt landed inside this lock
            futures, loop = [], self._loop
        for future in futures:
            future.cancel()
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
