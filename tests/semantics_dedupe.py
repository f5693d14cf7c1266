"""The storage-independent tests of idempotent enqueue: job_id and dedupe_key.

Owns: ``DedupeSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks and helpers it uses): a job_id held as
long as its job (until compaction or purge), and a dedupe_key held while its
job is active, per kind. Imports: the standard library and the public
``nobroker`` API only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nobroker import JobState

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics
else:
    _Base = object


class DedupeSemantics(_Base):
    """Idempotent enqueue: what each storage must do, through the public Queue only."""

    # ------------------------------------------------------------ job_id
    def test_job_id_enqueue_is_idempotent_while_ready(self) -> None:
        q = self.make_queue()
        first = q.enqueue({"order": 42}, job_id="order-42", priority=1)
        self.assertEqual(first.id, "order-42")
        second = q.enqueue({"order": "different"}, job_id="order-42", priority=9, delay=100)
        self.assertEqual(second.to_dict(), first.to_dict())
        self.assertEqual(len(q), 1)
        self.assertEqual(q.get("order-42").payload, {"order": 42})
        self.assertEqual(q.stats().ready, 1)

    def test_job_id_enqueue_is_idempotent_while_leased_and_schedules_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("work", job_id="j")
        leased = self.only_lease(q)
        before = self.snapshot(q)
        again = q.enqueue("work", job_id="j")
        self.assertEqual((again.id, again.state, again.seq), ("j", JobState.LEASED, leased.seq))
        self.assertEqual(self.snapshot(q), before)
        self.assertEqual(q.lease(), [])

    def test_job_id_of_a_done_job_is_held_until_compaction(self) -> None:
        q = self.make_queue()
        q.enqueue("work", job_id="once")
        q.ack(self.only_lease(q))
        again = q.enqueue("work", job_id="once")
        self.assertIs(again.state, JobState.DONE)
        self.assertEqual(q.lease(), [])
        q = self.assert_survives_reopen(q)
        self.assertIs(q.enqueue("work", job_id="once").state, JobState.DONE)
        self.assertEqual(q.lease(), [])
        q.compact()
        fresh = q.enqueue("work again", job_id="once")
        self.assertIs(fresh.state, JobState.READY)
        self.assertEqual(fresh.attempts, 0)
        self.assertEqual(fresh.payload, "work again")
        self.assertEqual(self.lease_ids(q), ["once"])

    def test_job_id_of_a_dead_job_is_held(self) -> None:
        q = self.make_queue()
        q.enqueue("work", job_id="doomed", max_attempts=1)
        q.nack(self.only_lease(q))
        again = q.enqueue("work", job_id="doomed")
        self.assertIs(again.state, JobState.DEAD)
        self.assertEqual(q.lease(), [])
        self.assertEqual(len(q), 1)

    def test_job_id_is_held_across_reopen(self) -> None:
        q = self.make_queue()
        first = q.enqueue("work", job_id="persist")
        q = self.reopen(q)
        again = q.enqueue("other", job_id="persist")
        self.assertEqual(again.to_dict(), first.to_dict())
        self.assertEqual(len(q), 1)

    def test_job_id_is_free_again_after_purge(self) -> None:
        q = self.make_queue()
        q.enqueue("old", job_id="p")
        q.purge()
        new = q.enqueue("new", job_id="p")
        self.assertEqual(new.payload, "new")
        self.assertIs(new.state, JobState.READY)
        self.assertEqual(len(q), 1)
        self.assert_survives_reopen(q)

    # ------------------------------------------------------------ dedupe_key
    def test_dedupe_key_returns_the_active_job(self) -> None:
        q = self.make_queue()
        first = q.enqueue({"user": 1}, dedupe_key="user-1")
        self.assertEqual(first.dedupe_key, "user-1")
        second = q.enqueue({"user": "other"}, dedupe_key="user-1", priority=7)
        self.assertEqual(second.id, first.id)
        self.assertEqual(second.payload, {"user": 1})
        self.assertEqual(len(q), 1)
        other = q.enqueue({"user": 2}, dedupe_key="user-2")
        self.assertNotEqual(other.id, first.id)
        self.assertEqual(len(q), 2)

    def test_dedupe_key_holds_while_delayed_and_while_leased(self) -> None:
        q = self.make_queue()
        first = q.enqueue("x", dedupe_key="k", delay=10)
        self.assertEqual(q.enqueue("y", dedupe_key="k").id, first.id)
        self.advance(11)
        leased = self.only_lease(q)
        again = q.enqueue("z", dedupe_key="k")
        self.assertEqual((again.id, again.state), (first.id, JobState.LEASED))
        self.assertEqual(len(q), 1)
        self.assertEqual(q.lease(), [])
        q.nack(leased, delay=0)
        self.assertEqual(q.enqueue("w", dedupe_key="k").id, first.id)

    def test_dedupe_key_is_free_again_once_done(self) -> None:
        q = self.make_queue()
        first = q.enqueue("x", dedupe_key="k")
        q.ack(self.only_lease(q))
        second = q.enqueue("y", dedupe_key="k")
        self.assertNotEqual(second.id, first.id)
        self.assertIs(second.state, JobState.READY)
        self.assertEqual(second.payload, "y")
        self.assertEqual(len(q), 2)
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.enqueue("z", dedupe_key="k").id, second.id)

    def test_dedupe_key_is_free_again_once_dead(self) -> None:
        q = self.make_queue()
        first = q.enqueue("x", dedupe_key="k")
        q.nack(self.only_lease(q), permanent=True)
        second = q.enqueue("y", dedupe_key="k")
        self.assertNotEqual(second.id, first.id)
        self.assertIs(second.state, JobState.READY)
        self.assertEqual(self.lease_ids(q), [second.id])

    def test_dedupe_keys_of_different_kinds_do_not_collide(self) -> None:
        q = self.make_queue()
        a = q.enqueue("a", kind="email", dedupe_key="same")
        b = q.enqueue("b", kind="sms", dedupe_key="same")
        self.assertNotEqual(a.id, b.id)
        self.assertEqual(q.enqueue("c", kind="sms", dedupe_key="same").id, b.id)
        self.assertEqual(len(q), 2)

    def test_dedupe_key_survives_reopen(self) -> None:
        q = self.make_queue()
        first = q.enqueue("x", dedupe_key="k")
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.enqueue("y", dedupe_key="k").id, first.id)
        self.assertEqual(len(q), 1)

    def test_enqueue_many_with_dedupe_keys(self) -> None:
        q = self.make_queue()
        existing = q.enqueue("old", dedupe_key="a")
        jobs = q.enqueue_many(["x", "y"], dedupe_keys=["a", "b"])
        self.assertEqual(jobs[0].id, existing.id)
        self.assertEqual(jobs[0].payload, "old")
        self.assertEqual(jobs[1].dedupe_key, "b")
        self.assertEqual(len(q), 2)
