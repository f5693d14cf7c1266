"""The pure parts of limits per kind: the token bucket's arithmetic, the budget, the turns of fair share, and the words of ``holding``.

Owns: unit tests of nobroker.limits (no storage), one of the file
storage's replay of a limited lease under a clock that gives ints, and
``limit_holding`` (the text explain will show) on both storages.
Imports: the standard library, nobroker.limits and the public API,
tests.support / tests.pgsupport.
"""

from __future__ import annotations

import unittest

from nobroker import Queue
from nobroker.limits import (
    Bucket,
    Turns,
    budget,
    carried,
    choose,
    define,
    filled,
    from_fields,
    holding,
    seconds_to_slot,
    seconds_to_token,
    spent,
    taken,
    to_fields,
    turned,
    turns_from_fields,
    turns_to_fields,
)
from tests.pgsupport import drop_schema, fresh_name, require_postgres
from tests.support import TempDirTestCase


class TokenBucket(unittest.TestCase):
    def test_a_bucket_refills_at_the_rate_up_to_its_burst(self) -> None:
        limit = define("api", rate=10, per=2.0, burst=4)  # 5 tokens a second
        empty = Bucket(0.0, 100.0)
        self.assertEqual(filled(limit, empty, 100.0), 0.0)
        self.assertAlmostEqual(filled(limit, empty, 100.5), 2.5)
        self.assertEqual(filled(limit, empty, 200.0), 4.0, "never more than the burst")
        self.assertEqual(filled(limit, empty, 99.0), 0.0, "a clock behind adds nothing")
        self.assertAlmostEqual(seconds_to_token(limit, empty, 100.0), 0.2)
        self.assertEqual(seconds_to_token(limit, Bucket(1.0, 100.0), 100.0), 0.0)

    def test_each_lease_takes_one_token_and_a_spent_bucket_has_no_budget(self) -> None:
        limit = define("api", rate=2, per=1.0)
        bucket = Bucket(2.0, 0.0)
        self.assertEqual(budget(limit, bucket, 0, 0.0), 2)
        bucket = taken(limit, taken(limit, bucket, 0.0), 0.0)
        self.assertEqual((bucket.tokens, bucket.at), (0.0, 0.0))
        self.assertEqual(budget(limit, bucket, 0, 0.0), 0)
        self.assertTrue(spent(limit, 0, bucket, 0.0))
        self.assertFalse(spent(limit, 0, bucket, 0.5), "half a second later a token is back")
        after = taken(limit, bucket, 0.5)
        self.assertEqual(after.at, 0.5)
        self.assertAlmostEqual(after.tokens, 0.0)

    def test_concurrency_and_rate_together_give_the_smaller_budget(self) -> None:
        limit = define("k", concurrency=3, rate=10)
        full = Bucket(10.0, 0.0)
        self.assertEqual(budget(limit, full, 1, 0.0), 2)
        self.assertEqual(budget(limit, full, 3, 0.0), 0)
        self.assertEqual(budget(limit, Bucket(1.5, 0.0), 0, 0.0), 1)
        self.assertTrue(spent(limit, 3, full, 0.0))

    def test_a_changed_limit_keeps_its_tokens_up_to_the_new_burst(self) -> None:
        old = define("k", rate=10)
        new = define("k", rate=10, burst=2)
        self.assertEqual(carried(new, None, 5.0), Bucket(2.0, 5.0), "a new limit starts full")
        self.assertEqual(carried(new, (old, Bucket(7.0, 5.0)), 5.0), Bucket(2.0, 5.0))
        self.assertEqual(carried(new, (old, Bucket(0.0, 5.0)), 5.0), Bucket(0.0, 5.0))
        self.assertIsNone(carried(define("k", concurrency=1), (old, Bucket(3.0, 0.0)), 5.0))

    def test_the_wait_for_a_slot(self) -> None:
        limit = define("k", concurrency=2, rate=1, per=4.0)
        empty = Bucket(0.0, 0.0)
        self.assertEqual(seconds_to_slot(limit, empty, 0, True, 1.0), 3.0)
        self.assertIsNone(seconds_to_slot(limit, empty, 0, False, 1.0), "no job of the kind waits")
        self.assertIsNone(seconds_to_slot(limit, empty, 2, True, 1.0), "the slots free with a lease's end")
        self.assertEqual(seconds_to_slot(limit, Bucket(1.0, 0.0), 0, True, 1.0), 0.0)
        self.assertIsNone(seconds_to_slot(define("k", concurrency=2), None, 0, True, 1.0))

    def test_holding_names_the_limit_in_words(self) -> None:
        limit = define("mail", concurrency=2, rate=5, per=60.0)
        self.assertIsNone(holding(None, None, 0, 0.0))
        self.assertIsNone(holding(limit, Bucket(5.0, 0.0), 1, 0.0))
        text = holding(limit, Bucket(5.0, 0.0), 2, 0.0)
        assert text is not None
        self.assertIn("concurrency limit of kind 'mail'", text)
        self.assertIn("2 of 2", text)
        text = holding(limit, Bucket(0.0, 0.0), 0, 0.0)
        assert text is not None
        self.assertIn("rate limit of kind 'mail': 5 per 60 s", text)
        self.assertIn("in 12.000 s", text)


class IntegerClock(TempDirTestCase):
    def test_a_lease_takes_its_token_when_the_clock_gives_ints(self) -> None:
        now = [100]
        q = Queue(self.dir, clock=lambda: now[0])
        self.addCleanup(q.close)
        q.set_limit("a", rate=1, per=10.0)
        q.enqueue_many([1, 2, 3], kind="a")
        self.assertEqual(len(q.lease(5)), 1)
        self.assertEqual(q.lease(5), [])
        now[0] = 110
        self.assertEqual(len(q.lease(5)), 1)


class FairShareTurns(unittest.TestCase):
    def test_equal_weights_alternate_and_ties_go_to_the_best_job(self) -> None:
        limit, turns = define("k", weights={}), Turns()
        order = []
        heads = {"a": (0, 1), "b": (0, 2)}  # a's best job is older
        for _ in range(6):
            groups = sorted(heads)
            chosen = choose(limit, turns, [(g, heads[g], 0) for g in groups])
            assert chosen is not None
            order.append(groups[chosen])
            turned(limit, turns, groups[chosen])
        self.assertEqual(order, ["a", "b", "a", "b", "a", "b"])

    def test_weights_give_shares_and_an_idle_group_comes_back_without_credit(self) -> None:
        limit, turns = define("k", weights={"vip": 3}), Turns()
        taken_by: dict[object, int] = {"vip": 0, "x": 0}
        for _ in range(400):
            groups = ["vip", "x"]
            g = groups[choose(limit, turns, [(g, (0, 0), 0) for g in groups]) or 0]
            taken_by[g] += 1
            turned(limit, turns, g)
        self.assertLessEqual(abs(taken_by["vip"] - 300), 1)
        # "new" never ran: it starts at the clock, so it gets its share from now, not 400 leases at once.
        run = []
        for _ in range(10):
            groups = ["new", "vip", "x"]
            chosen = choose(limit, turns, [(g, (0, 0), 0) for g in groups])
            assert chosen is not None
            run.append(groups[chosen])
            turned(limit, turns, groups[chosen])
        self.assertLessEqual(run.count("new"), 3, run)
        self.assertGreaterEqual(run.count("new"), 1, run)

    def test_a_group_at_its_concurrency_is_passed_over_but_jobs_without_a_group_never_are(self) -> None:
        limit = define("k", group_concurrency=2)
        self.assertEqual(choose(limit, None, [("a", (0, 1), 2), ("b", (0, 2), 1)]), 1)
        self.assertIsNone(choose(limit, None, [("a", (0, 1), 2)]))
        self.assertEqual(choose(limit, None, [("a", (0, 1), 2), (None, (0, 2), 99)]), 1)

    def test_the_stored_forms_round_trip_and_nonsense_is_refused(self) -> None:
        limit = define("k", concurrency=3, group_concurrency=2, weights={"b": 2, "a": 5})
        self.assertEqual(limit.weights, (("a", 5), ("b", 2)))
        self.assertEqual(from_fields(to_fields(limit, None)), (limit, None))
        self.assertNotIn("group_concurrency", to_fields(define("k", concurrency=3), None), "the shape before groups stays")
        turns = Turns()
        for group in ("a", None, "a"):
            turned(limit, turns, group)
        back = turns_from_fields(turns_to_fields(turns))
        self.assertEqual(back.clock, turns.clock)
        self.assertEqual(back.passes, {g: p for g, p in (turns.passes or {}).items() if p > turns.clock})
        for bad in ([], {"clock": "x", "passes": []}, {"clock": 1.0, "passes": [[1, 2.0]]}, {"clock": 1.0},
                    {"clock": float("inf"), "passes": []}, {"clock": 1.0, "passes": [["a", True]]}):  # fmt: skip
            with self.subTest(bad=bad), self.assertRaises(TypeError):
                turns_from_fields(bad)


class StorageSaysWhichLimitHolds:
    """``storage.limit_holding(kind)``: what explain will show for a ready job held back by its kind's limit."""

    def open(self) -> Queue:  # pragma: no cover - the storage's class has it
        raise NotImplementedError

    def test_the_storage_names_the_limit_that_holds_a_kind_back(self) -> None:
        q = self.open()
        q.set_limit("a", concurrency=1)
        q.enqueue_many([1, 2], kind="a")
        storage = q.storage  # type: ignore[attr-defined]
        self.assertIsNone(storage.limit_holding("a"))  # type: ignore[attr-defined]
        self.assertEqual(len(q.lease(5)), 1)
        text = storage.limit_holding("a")
        self.assertIn("concurrency limit of kind 'a': 1 of 1", text)  # type: ignore[attr-defined]
        self.assertIsNone(storage.limit_holding("b"))  # type: ignore[attr-defined]


class FileStorageSays(StorageSaysWhichLimitHolds, TempDirTestCase):
    def open(self) -> Queue:
        q = Queue(self.dir)
        self.addCleanup(q.close)
        return q


class PostgresStorageSays(StorageSaysWhichLimitHolds, unittest.TestCase):
    def open(self) -> Queue:
        dsn = require_postgres(self)
        schema = fresh_name("nbhold")
        self.addCleanup(drop_schema, schema)
        q = Queue(dsn, schema=schema, name="hold")
        self.addCleanup(q.close)
        return q


if __name__ == "__main__":
    unittest.main()
