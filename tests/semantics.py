"""The storage-independent semantic suite: what a Queue promises, whatever stores it.

Owns: ``QueueSemantics``, the base of the semantic suite for DESIGN.md
section 3 and the public Queue API of the brief: the hooks a storage
implements, the helpers and the constants its tests/semantics_*.py mixins
share. The tests themselves are in those mixins, by concern (enqueue, lease,
ack_nack, expiry, admin, dedupe, reads, lifecycle, bad_input, control, ...;
tests/semantics_async.py is AsyncQueue's suite, a mixin of its own),
each written once and run against every storage. Imports: the standard
library and the public ``nobroker`` API only (never a storage module), so the
same tests describe both storages.

A storage wires it up by subclassing ``QueueSemantics`` and the mixins
together with a ``unittest.TestCase`` (tests/test_semantics_file.py,
tests/test_semantics_postgres.py) and implementing the hooks:

- ``make_queue(**options)``: a fresh, empty queue for this test; ``options``
  go to ``Queue`` (visibility_timeout, max_attempts, backoff, ...).
- ``reopen(q)``: close ``q`` and open the same queue again, same options.
- ``advance(seconds)``: move the queue's clock forward. Tests never sleep to
  reach a deadline; they move the clock.
- ``now()``: the queue's clock now, for checking deadlines and available_at.

``time_slack`` is how far two readings of the queue's clock may drift apart
inside one test: zero for a fake clock, a little for a database clock that
keeps running while the test runs.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from nobroker import BackoffPolicy, Job, Queue

if TYPE_CHECKING:  # the mixin runs as a TestCase; this gives checkers the assert methods
    import unittest

    _Base = unittest.TestCase
else:
    _Base = object

#: A backoff whose first retry lands in [5, 10] s, then [10, 20] s, ...
JITTERED = BackoffPolicy(base=10.0, factor=2.0, max_delay=300.0, jitter=0.5)
#: The same without jitter, so delays are exact: 10, 20, 40, ...
EXACT = BackoffPolicy(base=10.0, factor=2.0, max_delay=300.0, jitter=0.0)
#: Payloads every storage must give back exactly (JSON values both storages can hold).
ROUND_TRIP_PAYLOADS: list[Any] = [
    {"to": "a@example.com", "n": 3, "tags": ["x", "y"], "nested": {"ok": True, "none": None}},
    [1, "two", 3.5, None, False, {"k": []}],
    "plain text with 'quotes', \"double quotes\", a; semicolon -- and a newline\n",
    "unicode: żółć 日本語 emoji 🎉",
    42,
    -7,
    2**53,
    0.25,
    True,
    None,
    {},
    [],
    "",
]
#: The kind the DLQ helper uses, so its lease never takes a test's other jobs.
DOOMED_KIND = "doomed"
#: A payload far above every storage's size limit.
HUGE_PAYLOAD_CHARS = 50 * 1024 * 1024
#: A result just above the 1 MiB limit the brief sets for ack(result=...).
RESULT_LIMIT_BYTES = 1024 * 1024
#: How much of a traceback the queue keeps (its last 16 KiB of characters).
TRACEBACK_LIMIT_CHARS = 16 * 1024
#: The documented nesting limit of payloads and results (README, Limits): arrays and objects.
NESTING_LIMIT = 100
#: Caller stack depths (frames) the deepest accepted values must read back from: 600, and
#: one that leaves the storage's own calls room (60 frames) but the nesting none.
DEEP_STACKS = (600, sys.getrecursionlimit() - 60)


def nested(levels: int, bottom: Any = 1) -> Any:
    """``bottom`` inside ``levels`` lists."""
    for _ in range(levels):
        bottom = [bottom]
    return bottom


def called_at_depth(frames: int, action: Any) -> Any:
    """``action()`` called with the stack ``frames`` deep (counted from the outermost frame)."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back

    def down(remaining: int) -> Any:
        return down(remaining - 1) if remaining > 0 else action()

    return down(frames - depth)


class QueueSemantics(_Base):
    """The hooks and helpers of the semantic tests shared by every storage. Not a TestCase itself."""

    #: Seconds two readings of the queue's clock may differ by within one check.
    time_slack: float = 1e-6

    # ------------------------------------------------------------ hooks
    def make_queue(self, **options: Any) -> Queue:
        """A fresh, empty queue for this test, with ``options`` passed to Queue."""
        raise NotImplementedError

    def reopen(self, q: Queue) -> Queue:
        """Close ``q`` and open the same queue again with the same options."""
        raise NotImplementedError

    def advance(self, seconds: float) -> None:
        """Move the queue's clock forward by ``seconds``."""
        raise NotImplementedError

    def now(self) -> float:
        """The queue's clock now (epoch seconds)."""
        raise NotImplementedError

    # ------------------------------------------------------------ helpers
    def snapshot(self, q: Queue) -> dict[str, dict[str, Any]]:
        """Every job the queue holds, as full dicts keyed by id."""
        return {job.id: job.to_dict() for job in q.list_jobs()}

    def assert_survives_reopen(self, q: Queue) -> Queue:
        """Reopen ``q`` and check every job (all fields), the stats and len are unchanged."""
        jobs_before = self.snapshot(q)
        stats_before = q.stats().to_dict()
        len_before = len(q)
        q2 = self.reopen(q)
        self.assertEqual(self.snapshot(q2), jobs_before, "jobs changed across reopen")
        self.assertEqual(q2.stats().to_dict(), stats_before, "stats changed across reopen")
        self.assertEqual(len(q2), len_before)
        return q2

    def assert_time(self, actual: float | None, expected: float, msg: str | None = None) -> None:
        self.assertIsNotNone(actual, msg)
        assert actual is not None
        self.assertAlmostEqual(actual, expected, delta=self.time_slack + 1e-6, msg=msg)

    def assert_between(self, value: float | None, low: float, high: float, msg: str | None = None) -> None:
        self.assertIsNotNone(value, msg)
        assert value is not None
        slack = self.time_slack + 1e-6
        self.assertGreaterEqual(value, low - slack, msg)
        self.assertLessEqual(value, high + slack, msg)

    def lease_ids(self, q: Queue, count: int = 100, **kwargs: Any) -> list[str]:
        return [job.id for job in q.lease(count, **kwargs)]

    def only_lease(self, q: Queue, **kwargs: Any) -> Job:
        """Lease exactly one job (and fail if there is none)."""
        jobs = q.lease(1, **kwargs)
        self.assertEqual(len(jobs), 1, "expected one job to lease")
        return jobs[0]

    def assert_unchanged_by(self, q: Queue, action: Any, error: type[BaseException] | tuple[type[BaseException], ...]) -> None:
        """``action()`` raises ``error`` and leaves every job and the stats as they were."""
        before = self.snapshot(q)
        stats = q.stats().to_dict()
        with self.assertRaises(error):
            action()
        self.assertEqual(self.snapshot(q), before)
        self.assertEqual(q.stats().to_dict(), stats)

    def stale(self, job: Job) -> Job:
        """The same job under a token that was never issued."""
        return dataclasses.replace(job, lease_token="not-a-token-we-issued")


__all__ = ["QueueSemantics", "JITTERED", "EXACT", "ROUND_TRIP_PAYLOADS"]
