"""The storage-independent tests of the counters (issue 17): kept by the storage, only growing.

Owns: ``CounterSemantics``, a mixin run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks it uses: ``make_queue``, ``reopen``,
``advance``). Imports: the standard library and the public ``nobroker`` API only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nobroker import BackoffPolicy, JobState, Queue
from nobroker.jobs import COUNTER_NAMES

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics  # its hooks: make_queue, reopen, advance
else:
    _Base = object

NO_BACKOFF = BackoffPolicy(base=0.0, jitter=0.0)


def row(enqueued: int = 0, succeeded: int = 0, failed: int = 0, dead: int = 0, cancelled: int = 0) -> dict[str, int]:
    return dict(zip(COUNTER_NAMES, (enqueued, succeeded, failed, dead, cancelled)))


class CounterSemantics(_Base):
    """Counters: what each storage must count, and keep, through the public Queue only."""

    def busy_queue(self) -> tuple[Queue, dict[str, dict[str, int]]]:
        """A queue where every counter has moved, and what its counters must say."""
        q = self.make_queue(max_attempts=2, backoff=NO_BACKOFF, visibility_timeout=5)
        q.enqueue_many(["a", "b"], kind="mail")
        q.enqueue("c", kind="mail", job_id="c")
        q.enqueue("c-again", kind="mail", job_id="c")  # idempotent: not enqueued again
        q.enqueue_many(["x", "y", "z"])
        mail = q.lease(3, kinds=["mail"])
        q.ack(mail[0])
        q.nack(mail[1], error="once")  # failed, retried
        q.nack(mail[2], permanent=True, error="never")  # dead
        again = q.lease_one(kinds=["mail"])
        assert again is not None and again.attempts == 2
        q.nack(again, error="twice")  # its second attempt: dead
        x = q.lease_one(kinds=["default"])
        assert x is not None
        self.advance(10)  # x's lease expires: a failure, retried, counted once it is reclaimed
        q.cancel(q.enqueue("w", kind="mail"))
        q.enqueue("later", delay=60)
        self.assertEqual(q.lease(1, kinds=["none-of-these"]), [])  # reclaimed by now on every storage
        expected = {"mail": row(enqueued=4, succeeded=1, failed=1, dead=2, cancelled=1),
                    "default": row(enqueued=4, failed=1)}  # fmt: skip
        return q, expected

    def test_counters_count_each_outcome_per_kind(self) -> None:
        q = self.make_queue()
        self.assertEqual(q.counters(), {})
        q, expected = self.busy_queue()
        self.assertEqual(q.counters(), expected)

    def test_counters_survive_reopen_compaction_and_purge(self) -> None:
        q, expected = self.busy_queue()
        q = self.reopen(q)
        self.assertEqual(q.counters(), expected)
        q.compact()  # the done and dead jobs' history goes; the counts stay
        self.assertEqual(q.counters(), expected)
        q = self.reopen(q)
        self.assertEqual(q.counters(), expected)
        job = q.enqueue("after", kind="mail")
        expected["mail"]["enqueued"] += 1
        q.ack(q.lease_one(kinds=["mail"]) or job)
        expected["mail"]["succeeded"] += 1
        q.compact()
        q = self.reopen(q)
        self.assertEqual(q.counters(), expected)
        self.assertGreater(q.purge(), 0)
        self.assertEqual(q.counters(), expected, "a purge keeps the counters")
        q = self.reopen(q)
        self.assertEqual(q.counters(), expected)
        q.compact()
        self.assertEqual(self.reopen(q).counters(), expected)

    def test_counters_hold_through_the_lease_under_limits(self) -> None:
        # A queue with limits leases under them (PostgreSQL: limit_ops.lease, its own upkeep first):
        # the expired leases it reclaims count as they do on a queue without limits.
        q = self.make_queue(max_attempts=2, backoff=NO_BACKOFF, visibility_timeout=5)
        q.set_limit("mail", concurrency=1)
        q.set_limit("sms", rate=1, per=1)
        q.enqueue_many(["a", "b", "c"], kind="mail")
        q.enqueue("s", kind="sms")
        taken = q.lease(4)
        self.assertEqual(sorted(job.kind for job in taken), ["mail", "sms"], "one slot of mail, sms's one token")
        a = next(job for job in taken if job.kind == "mail")
        q.ack(next(job for job in taken if job.kind == "sms"))
        self.assertEqual(q.lease(4), [], "mail's slot is held")
        self.advance(10)  # a's lease expires: the lease under limits reclaims it first (a failure, retried)
        [again] = q.lease(4)
        self.assertEqual((again.id, again.attempts), (a.id, 2))
        q.ack(again)
        [b] = q.lease(4)
        q.nack(b, permanent=True, error="never")  # dead
        [c] = q.lease(4)
        q.nack(c, error="once")  # failed, retried
        [c] = q.lease(4)
        self.advance(10)  # its second attempt expires: dead when the next lease under limits reclaims it
        self.assertEqual(q.lease(4), [])
        expected = {"mail": row(enqueued=3, succeeded=1, failed=2, dead=2), "sms": row(enqueued=1, succeeded=1)}
        self.assertEqual(q.counters(), expected)
        q = self.reopen(q)
        q.compact()
        self.assertEqual(self.reopen(q).counters(), expected, "and kept through a reopen and a compaction")

    def test_requeue_and_an_idempotent_enqueue_count_nothing(self) -> None:
        q = self.make_queue(max_attempts=1, backoff=NO_BACKOFF)
        q.enqueue("a", job_id="a")
        q.nack(q.lease_one() or "a", error="boom")
        self.assertIs(q.get("a").state, JobState.DEAD)
        self.assertEqual(q.requeue_dead(), 1)
        q.enqueue("a", job_id="a")
        self.assertEqual(q.counters(), {"default": row(enqueued=1, dead=1)})
