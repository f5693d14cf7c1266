"""Stopping a long run on a signal, in two stages: the first asks, a second Ctrl-C insists.

Owns: StopSignals, the one handling of SIGINT and SIGTERM for everything that
runs until stopped: ``Worker.run()`` (``handle_signals``), ``nobroker work``,
and with Ctrl-C alone ``nobroker enqueue --count`` and ``nobroker serve``.
Imports: nothing from nobroker.

A signal handler runs in the main thread between two bytecodes, possibly
while that thread holds one of the caller's locks. So the handler only
records the first signal (``first``) and sets an Event no other code of the
main thread touches; ``on_stop`` (which may take locks: ``Worker.stop``) is
called from a watcher thread. A second SIGINT raises KeyboardInterrupt at
once; a second SIGTERM changes nothing. Handlers are installed only in the
main thread (Python allows no other) and the previous ones are back when the
block ends.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

#: Longest ``restore()`` waits for an ``on_stop`` still running on the watcher
#: thread; past it the (daemon) thread is left to finish alone rather than hang an exit.
WATCHER_JOIN_SECONDS = 5.0


class StopSignals:
    """SIGINT/SIGTERM, two stages: the first is recorded and handed to ``on_stop``; a second Ctrl-C raises.

    ``graceful=False``: the first SIGINT raises KeyboardInterrupt too, after
    being recorded (for a command that stops on KeyboardInterrupt and only
    needs to know that it came). Use as a context manager, or
    ``install()``/``restore()``.
    """

    def __init__(
        self,
        on_stop: Callable[[int], None] | None = None,
        *,
        signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
        graceful: bool = True,
        name: str = "nobroker-signals",
    ) -> None:
        self.first: int | None = None
        self._on_stop = on_stop
        self._signals = signals
        self._graceful = graceful
        self._name = name
        self._previous: dict[int, Any] = {}
        self._wake = threading.Event()
        self._finished = False
        self._watcher: threading.Thread | None = None

    @property
    def first_name(self) -> str:
        """The first signal's name (SIGINT), for a log line; "" before any."""
        if self.first is None:
            return ""
        try:
            return signal.Signals(self.first).name
        except ValueError:
            return str(self.first)

    def __enter__(self) -> StopSignals:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def install(self) -> None:
        """Put the handlers in place (main thread only; elsewhere this does nothing)."""
        assert not self._previous, "installed twice"
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self._signals:
            try:
                self._previous[signum] = signal.signal(signum, self.handle)
            except (ValueError, OSError):  # not allowed here (an embedding interpreter)
                continue
        if self._on_stop is not None and self._previous:
            self._finished = False
            self._watcher = threading.Thread(target=self._watch, name=self._name, daemon=True)
            self._watcher.start()

    def restore(self) -> None:
        """Put the previous handlers back and let the watcher go."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            # After the handlers are gone: nothing can set the Event from the main thread now.
            self._finished = True
            self._wake.set()
            watcher.join(WATCHER_JOIN_SECONDS)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler: plain attribute writes and one Event, nothing that takes a lock of the caller's."""
        if self.first is not None:
            if signum == signal.SIGINT:
                # The second Ctrl-C: leave now. Running jobs are not acked;
                # their leases expire and they are delivered again.
                raise KeyboardInterrupt
            return
        self.first = signum
        self._wake.set()
        if not self._graceful and signum == signal.SIGINT:
            raise KeyboardInterrupt

    def _watch(self) -> None:
        self._wake.wait()
        if not self._finished and self.first is not None:
            assert self._on_stop is not None, "a watcher runs only for an on_stop"
            self._on_stop(self.first)
