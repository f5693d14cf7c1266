"""Signals in this process: the Worker's handlers are installed while it runs and restored after; StopSignals.

Owns: ``SignalHandlerTests`` and ``StopSignalsTests`` (the two-stage stop
the Worker and the CLI share). Imports: the standard library, the public
``nobroker`` API, nobroker.worker.signals and tests.workersupport. Signals
are raised for real, from the main thread only.
"""

from __future__ import annotations

import signal
import threading
import unittest
from typing import Any

from nobroker import Worker
from nobroker.worker.signals import StopSignals
from tests.workersupport import PATIENCE, QueueTestCase


class SignalHandlerTests(QueueTestCase):
    def test_signal_handlers_installed_while_running_and_restored_after(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.skipTest("signal handlers can only be installed from the main thread")
        queue = self.open_queue()
        queue.enqueue("x")

        def sentinel(signum: int, frame: Any) -> None:
            pass

        previous = signal.signal(signal.SIGTERM, sentinel)
        self.addCleanup(signal.signal, signal.SIGTERM, previous)
        during: list[Any] = []
        worker = Worker(queue, lambda job: during.append(signal.getsignal(signal.SIGTERM)), max_jobs=1)
        worker.run()
        self.assertEqual(during, [worker._on_signal])
        self.assertIs(signal.getsignal(signal.SIGTERM), sentinel)

    def test_handle_signals_false_leaves_handlers_alone(self) -> None:
        queue = self.open_queue()
        queue.enqueue("x")
        before = signal.getsignal(signal.SIGINT)
        during: list[Any] = []
        Worker(queue, lambda job: during.append(signal.getsignal(signal.SIGINT)), max_jobs=1,
               handle_signals=False).run()
        self.assertEqual(during, [before])


class StopSignalsTests(unittest.TestCase):
    """The two-stage stop the Worker and the CLI share (signal.raise_signal runs the handler before it returns)."""

    def setUp(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.skipTest("signal handlers can only be installed from the main thread")

    def test_the_first_signal_asks_once_a_second_sigterm_changes_nothing_a_second_ctrl_c_insists(self) -> None:
        before = signal.getsignal(signal.SIGTERM)
        asked: list[int] = []
        called = threading.Event()

        def on_stop(signum: int) -> None:
            asked.append(signum)
            called.set()

        with StopSignals(on_stop) as signals:
            signal.raise_signal(signal.SIGTERM)
            self.assertTrue(called.wait(PATIENCE), "on_stop was never called")
            signal.raise_signal(signal.SIGTERM)
            with self.assertRaises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
        self.assertEqual((signals.first, signals.first_name, asked), (signal.SIGTERM, "SIGTERM", [signal.SIGTERM]))
        self.assertIs(signal.getsignal(signal.SIGTERM), before)

    def test_not_graceful_raises_at_the_first_ctrl_c_and_remembers_it(self) -> None:
        sigterm = signal.getsignal(signal.SIGTERM)
        with StopSignals(signals=(signal.SIGINT,), graceful=False) as signals:
            self.assertIs(signal.getsignal(signal.SIGTERM), sigterm, "only the signals named are handled")
            with self.assertRaises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
        self.assertEqual(signals.first, signal.SIGINT)


if __name__ == "__main__":
    unittest.main()
