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

    def test_a_lease_under_limits_takes_the_best_jobs_of_few_kinds_and_of_many(self) -> None:
        # PostgreSQL takes a few kinds without a limit from each kind's head, and
        # many of them (more than 32) from the head of the whole queue: the same jobs.
        for kinds in (3, 40):
            with self.subTest(kinds=kinds):
                q = self.make_queue()
                q.set_limit("held", concurrency=1)
                held = q.enqueue_many([f"h{n}" for n in range(5)], kind="held", priority=5)
                jobs = [q.enqueue(f"k{n}", kind=f"k{n}", priority=n % 7) for n in range(kinds)]
                order = sorted([held[0], *jobs], key=lambda job: (-job.priority, job.seq))
                self.assertEqual([job.id for job in q.lease(10)], [job.id for job in order[:10]])
                rest = [job for job in order[10:] if job.kind != "held"]
                got = q.lease(kinds, kinds={job.kind for job in rest} | {"held"})
                self.assertEqual([job.id for job in got], [job.id for job in rest], "the held kind's slot is spent")
                q.purge()

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

    # ------------------------------------------------------------ groups and fair share
    def _lease_groups(self, q: Queue, n: int) -> list[str | None]:
        """Lease ``n`` jobs one at a time, acking each: the group of each, in order."""
        groups = []
        for _ in range(n):
            job = q.lease_one()
            assert job is not None, "a runnable job is left"
            groups.append(job.group)
            q.ack(job)
        return groups

    def test_a_job_keeps_its_group_and_without_a_fair_limit_the_order_is_priority_then_age(self) -> None:
        q = self.make_queue()
        plain = q.enqueue("plain", kind="k")
        a = q.enqueue_many(["a1", "a2"], kind="k", group="acme")
        b = q.enqueue("b1", kind="k", group="bolt", priority=3)
        self.assertIsNone(plain.group)
        self.assertEqual([j.group for j in a], ["acme", "acme"])
        self.assertEqual(q.get(b.id).group, "bolt")
        self.assertNotIn("group", plain.to_dict(), "a job without a group keeps the old shape")
        self.assertEqual(b.to_dict()["group"], "bolt")
        q = self.reopen(q)
        self.assertEqual([q.get(j.id).group for j in (plain, *a, b)], [None, "acme", "acme", "bolt"])
        self.assertEqual([j.payload for j in q.lease(10)], ["b1", "plain", "a1", "a2"])

    def test_fair_share_leases_the_small_group_within_the_first_30_leases(self) -> None:
        q = self.make_queue()
        q.enqueue_many([f"big{i}" for i in range(1000)], kind="k", group="big")
        q.enqueue_many([f"small{i}" for i in range(10)], kind="k", group="small")
        q.set_limit("k", weights={})
        first = self._lease_groups(q, 30)
        self.assertEqual(first.count("small"), 10, first)
        self.assertEqual(first[:4], ["big", "small", "big", "small"], "equal weights: the groups alternate")
        q.clear_limit("k")
        q.enqueue_many(["late0", "late1"], kind="k", group="small")
        self.assertEqual(self._lease_groups(q, 5), ["big"] * 5, "without a fair limit: oldest first, as ever")

    def test_weights_shift_the_shares_and_jobs_without_a_group_are_one_group(self) -> None:
        q = self.make_queue()
        q.set_limit("k", weights={"vip": 3})
        q.enqueue_many(list(range(200)), kind="k", group="free")
        q.enqueue_many(list(range(200)), kind="k")  # no group: one group of their own, weight 1
        q.enqueue_many(list(range(200)), kind="k", group="vip")
        got = self._lease_groups(q, 100)
        self.assertLessEqual(abs(got.count("vip") - 60), 1, got)
        self.assertLessEqual(abs(got.count("free") - 20), 1, got)
        self.assertLessEqual(abs(got.count(None) - 20), 1, got)
        q.set_limit("k", weights={"vip": 1, "free": 4})
        again = self._lease_groups(q, 60)
        self.assertLessEqual(abs(again.count("free") - 40), 1, again)

    def test_priorities_order_the_jobs_inside_a_group(self) -> None:
        q = self.make_queue()
        q.set_limit("k", weights={})
        q.enqueue_many(["a-low1", "a-low2"], kind="k", group="a")
        q.enqueue("a-high", kind="k", group="a", priority=5)
        q.enqueue_many(["b1", "b2"], kind="k", group="b")
        payloads = []
        for _ in range(5):
            job = q.lease_one()
            assert job is not None
            payloads.append(job.payload)
            q.ack(job)
        self.assertEqual(payloads, ["a-high", "b1", "a-low1", "b2", "a-low2"])

    def test_group_concurrency_holds_per_group_and_a_finished_or_expired_lease_frees_its_slot(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        q.set_limit("k", group_concurrency=2)
        for group in ("a", "b", "c"):
            q.enqueue_many([f"{group}{i}" for i in range(5)], kind="k", group=group)
        q.enqueue_many(["n1", "n2", "n3"], kind="k")
        q.enqueue_many(["o1", "o2"], kind="other", group="a")
        first = q.lease(50)
        by_group: dict[Any, int] = {}
        for job in first:
            if job.kind == "k":
                by_group[job.group] = by_group.get(job.group, 0) + 1
        self.assertEqual(by_group, {"a": 2, "b": 2, "c": 2, None: 3}, "jobs without a group are not counted by it")
        self.assertEqual(sum(1 for j in first if j.kind == "other"), 2, "another kind's groups are its own")
        self.assertEqual(q.lease(50), [])
        waiting = next(j for j in q.list_jobs("ready", limit=50) if j.group == "b")
        reasons = q.explain(waiting)
        self.assertIn("group concurrency limit", reasons[0], reasons)
        self.assertIn("'b'", reasons[0])
        q.ack(next(j for j in first if j.group == "b" and j.kind == "k"))
        again = q.lease(50)
        self.assertEqual([(j.kind, j.group) for j in again], [("k", "b")], "one slot of b freed: one job of b")
        self.advance(60)  # every lease expired (and its retry's backoff passed): their slots are free
        self.assertEqual(sorted(j.group for j in q.lease(50) if j.kind == "k" and j.group), ["a", "a", "b", "b", "c", "c"])

    def test_the_rotation_and_group_limits_survive_a_reopen_and_a_compaction(self) -> None:
        q = self.make_queue()
        q.set_limit("k", group_concurrency=5, weights={"a": 2})
        self.assertEqual(q.limits(), [Limit("k", group_concurrency=5, weights=(("a", 2),))])
        q.enqueue_many(list(range(30)), kind="k", group="a")
        q.enqueue_many(list(range(30)), kind="k", group="b")
        before = self._lease_groups(q, 4)
        q = self.reopen(q)
        q.compact()
        q = self.reopen(q)
        after = self._lease_groups(q, 8)
        self.assertEqual(before + after, ["a", "b", "a", "a", "b", "a", "a", "b", "a", "a", "b", "a"],
                         "one rotation, carried by the queue through a reopen and a compaction")  # fmt: skip
        self.assertEqual(q.limits()[0].group_concurrency, 5)

    def test_bad_groups_and_group_limits_are_refused_and_nothing_is_written(self) -> None:
        q = self.make_queue()
        for error, options in [
            (ValueError, {"group_concurrency": 0}),
            (TypeError, {"group_concurrency": "2"}),
            (TypeError, {"weights": [("a", 1)]}),
            (ValueError, {"weights": {"a": 0}}),
            (TypeError, {"weights": {"a": 1.5}}),
            (ValueError, {"weights": {"": 1}}),
            (TypeError, {"weights": {3: 1}}),
        ]:
            with self.subTest(options=options), self.assertRaises(error):
                q.set_limit("k", **options)
        self.assertEqual(q.limits(), [])
        for error, group in [(ValueError, ""), (TypeError, 5), (ValueError, "x" * 300), (ValueError, "a\x00b")]:
            with self.subTest(group=group), self.assertRaises(error):
                q.enqueue("x", group=group)  # type: ignore[arg-type]
            with self.subTest(group=group), self.assertRaises(error):
                q.enqueue_many(["x", "y"], group=group)  # type: ignore[arg-type]
        self.assertEqual(len(q), 0)
