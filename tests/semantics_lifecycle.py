"""The storage-independent tests of a queue handle's lifecycle: close, with, properties, wait_for_jobs.

Owns: ``LifecycleSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks and helpers it uses): close and the
context manager, the properties, and wait_for_jobs. Imports: the standard
library and the public ``nobroker`` API only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nobroker import QueueClosedError, RecoveryReport

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics
else:
    _Base = object


class LifecycleSemantics(_Base):
    """A queue handle's lifecycle: what each storage must do, through the public Queue only."""

    # ------------------------------------------------------------ lifecycle
    def test_a_closed_queue_refuses_every_operation(self) -> None:
        q = self.make_queue()
        job = q.enqueue("x")
        q.close()
        q.close()  # closing twice is harmless
        calls = {
            "enqueue": lambda: q.enqueue("y"),
            "enqueue_many": lambda: q.enqueue_many(["y"]),
            "lease": lambda: q.lease(),
            "lease_one": lambda: q.lease_one(),
            "ack": lambda: q.ack(job.id),
            "nack": lambda: q.nack(job.id),
            "extend": lambda: q.extend(job.id, 10),
            "extend_many": lambda: q.extend_many([job.id], 10),
            "set_stage": lambda: q.set_stage(job.id, "s"),
            "get": lambda: q.get(job.id),
            "stats": lambda: q.stats(),
            "list_jobs": lambda: q.list_jobs(),
            "dlq": lambda: q.dlq(),
            "requeue_dead": lambda: q.requeue_dead(),
            "purge": lambda: q.purge(),
            "compact": lambda: q.compact(),
        }
        for name, call in calls.items():
            with self.subTest(method=name), self.assertRaises(QueueClosedError):
                call()
        q = self.reopen(q)
        self.assertEqual(q.get(job.id).to_dict(), job.to_dict())

    def test_the_context_manager_closes_the_queue(self) -> None:
        q = self.make_queue()
        with q as entered:
            self.assertIs(entered, q)
            job = q.enqueue("x")
        with self.assertRaises(QueueClosedError):
            q.enqueue("y")
        q = self.reopen(q)
        self.assertEqual([j.id for j in q.list_jobs()], [job.id])

    def test_properties(self) -> None:
        q = self.make_queue()
        self.assertIsInstance(q.path, str)
        self.assertIsInstance(q.name, str)
        self.assertTrue(q.name)
        self.assertIsInstance(q.recovery, RecoveryReport)
        self.assertIs(q.durable, True)

    def test_wait_for_jobs_is_a_bounded_hint(self) -> None:
        import time

        q = self.make_queue()
        start = time.monotonic()
        # Bounded, not timed: a wait of 0.05 s that lasted a minute would be a hang.
        self.assertIsInstance(q.wait_for_jobs(0.05), bool)
        self.assertLess(time.monotonic() - start, 60.0)
        q.enqueue("x")
        start = time.monotonic()
        self.assertIsInstance(q.wait_for_jobs(0.05), bool)
        self.assertLess(time.monotonic() - start, 60.0)

    def test_wait_for_jobs_ends_at_once_when_its_interrupt_is_readable(self) -> None:
        import os
        import time

        q = self.make_queue()
        self.assertIsInstance(q.wakes_waiters(), bool)
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        self.addCleanup(os.close, write_end)
        os.write(write_end, b"x")
        start = time.monotonic()
        self.assertFalse(q.wait_for_jobs(600.0, interrupt=read_end))
        self.assertLess(time.monotonic() - start, 60.0)
        self.assertEqual(os.read(read_end, 10), b"x", "the wait must leave the interrupt readable")
        with self.assertRaises(TypeError):
            q.wait_for_jobs(0.01, interrupt="3")  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            q.wait_for_jobs(0.01, interrupt=-1)
