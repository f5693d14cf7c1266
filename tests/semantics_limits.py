"""The storage-independent tests of limits per kind (issue 16): concurrency and rate limits.

Owns: ``LimitSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks it uses: ``make_queue``, ``reopen``,
``advance``). Imports: the standard library and the public ``nobroker`` API only.

The limits across processes (real workers, SIGKILL, a rate over ten
seconds) are tests/test_limits_processes.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nobroker import Limit, Queue

if TYPE_CHECKING:
    import unittest

    _Base = unittest.TestCase
else:
    _Base = object


class LimitSemantics(_Base):
    """set_limit, clear_limit, limits, and leases under them, through the public Queue only."""

    def make_queue(self, **options: Any) -> Queue:  # pragma: no cover - the storage's class has it
        raise NotImplementedError

    def reopen(self, q: Queue) -> Queue:  # pragma: no cover
        raise NotImplementedError

    def advance(self, seconds: float) -> None:  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------ concurrency
    def test_a_concurrency_limit_holds_and_a_finished_lease_frees_its_slot(self) -> None:
        q = self.make_queue()
        self.assertEqual(q.set_limit("mail", concurrency=2), Limit("mail", concurrency=2))
        low = q.enqueue_many(["m1", "m2", "m3"], kind="mail")
        high = q.enqueue("urgent", kind="mail", priority=5)
        others = q.enqueue_many(["o1", "o2", "o3"], kind="other")
        first = q.lease(10)
        self.assertEqual(sorted(j.payload for j in first if j.kind == "mail"), ["m1", "urgent"],
                         "priorities still order the jobs of a limited kind")  # fmt: skip
        self.assertEqual(sorted(j.id for j in first if j.kind == "other"), sorted(j.id for j in others),
                         "a limited kind never holds other kinds back")  # fmt: skip
        self.assertEqual(q.lease(10), [], "both slots are taken")
        self.assertEqual(q.lease(10, kinds=["mail"]), [])
        q.ack(next(j for j in first if j.id == high.id))
        again = q.lease(10)
        self.assertEqual([j.id for j in again], [low[1].id], "one slot freed: one job, the oldest of its priority")
        leased_mail = [j for j in first + again if j.kind == "mail" and j.id != high.id]
        q.nack(leased_mail[0], delay=0)
        self.assertEqual(len(q.lease(10)), 1, "a nack frees the slot too")

    def test_an_expired_lease_frees_its_slot(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        q.set_limit("mail", concurrency=2)
        q.enqueue_many([f"m{i}" for i in range(5)], kind="mail")
        self.assertEqual(len(q.lease(10)), 2)
        self.advance(5)
        self.assertEqual(q.lease(10), [])
        self.advance(6)  # both leases expired: their slots are free at the next lease
        self.assertEqual(len(q.lease(10)), 2)
        self.assertEqual(q.lease(10), [])

    def test_lease_one_and_kinds_skip_a_spent_kind(self) -> None:
        q = self.make_queue()
        q.set_limit("a", concurrency=1)
        q.enqueue_many(["a1", "a2"], kind="a", priority=9)
        b = q.enqueue("b1", kind="b")
        self.assertEqual(q.lease_one().payload, "a1")  # type: ignore[union-attr]
        got = q.lease_one()
        self.assertIsNotNone(got)
        self.assertEqual(got.id, b.id, "the spent kind's better job does not stand in the way")  # type: ignore[union-attr]
        self.assertIsNone(q.lease_one())
        self.assertEqual(q.lease(5, kinds=["a", "b"]), [])

    # ------------------------------------------------------------ rate
    def test_a_rate_limit_lets_through_its_burst_then_one_token_per_interval(self) -> None:
        q = self.make_queue(visibility_timeout=1000)  # no lease expires while the clock moves on
        self.assertEqual(q.set_limit("api", rate=2, per=1.0, burst=3), Limit("api", rate=2, per=1.0, burst=3))
        q.enqueue_many([f"c{i}" for i in range(20)], kind="api")
        q.enqueue("free", kind="other")
        first = q.lease(10)
        self.assertEqual(sorted(j.payload for j in first), ["c0", "c1", "c2", "free"], "the burst, and the other kind")
        self.assertEqual(q.lease(10), [], "the budget is spent")
        wait = q.seconds_to_slot()
        self.assertIsNotNone(wait)
        assert wait is not None
        self.assertGreater(wait, 0.0)
        self.assertLessEqual(wait, 0.5 + 1e-6, "one token every half second")
        self.assertIsNone(q.seconds_to_slot(["other"]), "no spent limit among these kinds")
        self.advance(0.5)
        self.assertEqual([j.payload for j in q.lease(10)], ["c3"])
        self.advance(100)
        self.assertEqual(len(q.lease(10)), 3, "a bucket refills up to its burst, no further")
        self.assertEqual(q.lease(10), [])

    def test_the_burst_defaults_to_the_rate(self) -> None:
        q = self.make_queue()
        q.set_limit("api", rate=4, per=60)
        q.enqueue_many(list(range(10)), kind="api")
        self.assertEqual(len(q.lease(10)), 4)
        self.advance(14)  # 4 per minute: not a whole token yet
        self.assertEqual(q.lease(10), [])
        self.advance(2)
        self.assertEqual(len(q.lease(10)), 1)

    # ------------------------------------------------------------ stored in the queue
    def test_limits_and_a_spent_bucket_survive_a_reopen_a_compaction_and_a_purge(self) -> None:
        q = self.make_queue()
        q.set_limit("b", concurrency=3)
        q.set_limit("a", rate=1, per=3600, burst=1)
        self.assertEqual(q.limits(), [Limit("a", rate=1, per=3600.0, burst=1), Limit("b", concurrency=3)])
        q.enqueue_many(["x", "y"], kind="a")
        self.assertEqual(len(q.lease(10)), 1)
        q = self.reopen(q)
        self.assertEqual([lim.kind for lim in q.limits()], ["a", "b"])
        self.assertEqual(q.lease(10), [], "the bucket is spent in every process that opens the queue")
        q.compact()
        self.assertEqual(q.lease(10), [], "a compaction carries the bucket")
        q = self.reopen(q)
        self.assertEqual(q.lease(10), [])
        self.assertEqual(q.purge(), 2)
        self.assertEqual([lim.kind for lim in q.limits()], ["a", "b"], "a purge removes jobs, not limits")

    def test_setting_the_same_limit_again_keeps_its_tokens_and_clearing_removes_it(self) -> None:
        q = self.make_queue()
        q.set_limit("a", rate=1, per=3600)
        q.enqueue_many(["x", "y", "z"], kind="a")
        self.assertEqual(len(q.lease(10)), 1)
        q.set_limit("a", rate=1, per=3600)
        self.assertEqual(q.lease(10), [], "the same limit again is no new bucket")
        q.set_limit("a", rate=1, per=3600, burst=5)
        self.assertEqual(q.lease(10), [], "a changed limit keeps the tokens it had")
        self.assertTrue(q.clear_limit("a"))
        self.assertFalse(q.clear_limit("a"))
        self.assertEqual(q.limits(), [])
        self.assertEqual(len(q.lease(10)), 2, "without its limit the kind runs freely")
        q.set_limit("a", concurrency=1)
        self.assertIsNone(q.set_limit("a"), "set_limit without a limit clears the kind's")
        self.assertEqual(q.limits(), [])
        q.set_limit("a", concurrency=1, rate=10)
        self.assertEqual(q.limits(), [Limit("a", concurrency=1, rate=10)])
        q.set_limit("a", concurrency=None, rate=10)
        self.assertEqual(q.limits(), [Limit("a", rate=10)], "a new limit replaces the whole old one")

    def test_bad_limits_are_refused_and_nothing_is_written(self) -> None:
        q = self.make_queue()
        bad: list[tuple[type[Exception], dict[str, Any]]] = [
            (ValueError, {"concurrency": 0}),
            (ValueError, {"rate": -1}),
            (TypeError, {"concurrency": 1.5}),
            (TypeError, {"concurrency": True}),
            (ValueError, {"rate": 10, "per": 0}),
            (ValueError, {"rate": 10, "per": float("nan")}),
            (TypeError, {"rate": 10, "per": "1"}),
            (ValueError, {"burst": 5}),
            (ValueError, {"concurrency": 2, "burst": 5}),
            (ValueError, {"concurrency": 10**7}),
        ]
        for error, options in bad:
            with self.subTest(options=options), self.assertRaises(error):
                q.set_limit("k", **options)
        with self.assertRaises(ValueError):
            q.set_limit("", concurrency=1)
        with self.assertRaises(TypeError):
            q.set_limit(None, concurrency=1)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            q.clear_limit(3)  # type: ignore[arg-type]
        self.assertEqual(q.limits(), [])
