"""The storage-independent semantic suite: what a Queue promises, whatever stores it.

Owns: ``QueueSemantics``, a mixin of tests for DESIGN.md section 3 and the
public Queue API of the brief, written once and run against every storage.
Imports: the standard library and the public ``nobroker`` API only (never a
storage module), so the same tests describe both storages.

A storage wires it up by subclassing ``QueueSemantics`` together with a
``unittest.TestCase`` and implementing the hooks:

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

from nobroker import (
    BackoffPolicy,
    CompactionResult,
    Job,
    JobNotFoundError,
    JobState,
    NobrokerError,
    NotLeasedError,
    Queue,
    QueueClosedError,
    QueueStats,
    RecoveryReport,
    SerializationError,
    Worker,
)

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
    """Semantic tests shared by every storage. Not a TestCase itself: unittest collects only subclasses."""

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

    # ------------------------------------------------------------ enqueue
    def test_enqueue_returns_a_ready_job_with_every_field_set(self) -> None:
        q = self.make_queue()
        t = self.now()
        job = q.enqueue({"x": 1})
        self.assertIsInstance(job, Job)
        self.assertIsInstance(job.id, str)
        self.assertTrue(job.id)
        self.assertEqual(job.payload, {"x": 1})
        self.assertEqual(job.priority, 0)
        self.assertIs(job.state, JobState.READY)
        self.assertEqual(job.attempts, 0)
        self.assertEqual(job.max_attempts, 5)
        self.assert_time(job.enqueued_at, t)
        self.assert_time(job.available_at, t)
        self.assertIsNone(job.lease_deadline)
        self.assertIsNone(job.lease_token)
        self.assertIsNone(job.last_error)
        self.assertEqual(job.kind, "default")
        self.assertIsNone(job.dedupe_key)
        self.assertIsNone(job.stage)
        self.assertIsNone(job.result)
        self.assertEqual(q.get(job.id).to_dict(), job.to_dict())
        self.assertEqual(job.to_dict()["state"], "ready")
        self.assert_survives_reopen(q)

    def test_nul_is_refused_in_names_and_mended_in_error_texts_the_same_on_both_storages(self) -> None:
        q = self.make_queue()
        refused = {
            "job_id": lambda: q.enqueue("x", job_id="a\x00b"),
            "kind": lambda: q.enqueue("x", kind="k\x00"),
            "dedupe_key": lambda: q.enqueue_many(["x"], dedupe_keys=["\x00"]),
            "get": lambda: q.get("a\x00"),
            "list_jobs kind": lambda: q.list_jobs(kind="\x00"),
            "schedule name": lambda: q.schedule("s\x00", every=60),
        }
        for what, call in refused.items():
            with self.subTest(what), self.assertRaises(ValueError):
                call()
        self.assertEqual((len(q), q.schedules()), (0, []), "a refused call wrote something")
        q.enqueue("x")
        job = self.only_lease(q)
        with self.assertRaises(ValueError):
            q.set_stage(job, "st\x00ge")
        q.nack(job, error="bad \x00 byte", traceback="line \x00 \ud800 end", delay=0)
        stored = self.reopen(q).get(job.id)
        self.assertEqual((stored.last_error, stored.traceback), ("bad \ufffd byte", "line \ufffd \ufffd end"))

    def test_enqueue_uses_the_queue_max_attempts_unless_given(self) -> None:
        q = self.make_queue(max_attempts=3)
        self.assertEqual(q.enqueue("a").max_attempts, 3)
        self.assertEqual(q.enqueue("b", max_attempts=9).max_attempts, 9)

    def test_seq_grows_and_ids_are_unique(self) -> None:
        q = self.make_queue()
        jobs = [q.enqueue(i) for i in range(5)] + q.enqueue_many([5, 6, 7])
        seqs = [job.seq for job in jobs]
        self.assertEqual(seqs, sorted(seqs))
        self.assertEqual(len(set(seqs)), len(seqs))
        self.assertEqual(len({job.id for job in jobs}), len(jobs))

    def test_payloads_round_trip_exactly(self) -> None:
        q = self.make_queue()
        ids = []
        for payload in ROUND_TRIP_PAYLOADS:
            job = q.enqueue(payload)
            self.assertEqual(job.payload, payload)
            ids.append(job.id)
        q = self.assert_survives_reopen(q)
        for job_id, payload in zip(ids, ROUND_TRIP_PAYLOADS):
            got = q.get(job_id).payload
            self.assertEqual(got, payload)
            self.assertIs(type(got), type(payload))
        leased = q.lease(len(ids))
        self.assertEqual(sorted(job.id for job in leased), sorted(ids))
        for job in leased:
            self.assertEqual(job.payload, ROUND_TRIP_PAYLOADS[ids.index(job.id)])

    def test_enqueue_returns_the_payload_as_stored_not_the_callers_object(self) -> None:
        q = self.make_queue()
        given: list[Any] = [{1: "a", 2.5: None, "t": [(1, 2)]}, (1, (2, {"k": ()})), {"x": {None: 1, False: 2}}]
        stored = [{"1": "a", "2.5": None, "t": [[1, 2]]}, [1, [2, {"k": []}]], {"x": {"null": 1, "false": 2}}]
        one = q.enqueue(given[0])
        many = q.enqueue_many(given)
        self.assertEqual([job.payload for job in [one, *many]], [stored[0], *stored])
        given[0][1] = "changed later"
        self.assertEqual(one.payload, stored[0], "the returned Job holds the caller's object")
        self.assertEqual(many[0].payload, stored[0])
        q = self.reopen(q)
        self.assertEqual([q.get(job.id).payload for job in [one, *many]], [stored[0], *stored])

    def test_a_flat_payload_comes_back_as_a_copy_of_plain_values(self) -> None:
        # An object of plain values under plain keys is copied, not decoded again: the copy
        # must still be the caller's object as stored, plain types only, never the object itself.
        class Key(str):
            pass

        class Number(float):
            pass

        q = self.make_queue()
        flat = {"resize": "photo.jpg", "w": 640, "ratio": 1.5, "ok": True, "none": None}
        job = q.enqueue(flat)
        flat["w"] = 1
        self.assertIsNot(job.payload, flat)
        self.assertEqual(job.payload, {"resize": "photo.jpg", "w": 640, "ratio": 1.5, "ok": True, "none": None})
        odd = q.enqueue({Key("k"): Number(2.5), "n": Number(1.0)})
        self.assertEqual(odd.payload, {"k": 2.5, "n": 1.0})
        self.assertEqual([type(key) for key in odd.payload], [str, str])
        self.assertEqual([type(value) for value in odd.payload.values()], [float, float])
        q = self.reopen(q)
        self.assertEqual(q.get(job.id).payload, job.payload)
        self.assertEqual(q.get(odd.id).payload, odd.payload)

    def test_keys_that_collide_as_json_text_are_refused_before_anything_is_written(self) -> None:
        q = self.make_queue()
        q.enqueue("already there")
        colliding = [{1: "a", "1": "b"}, {"deep": [{"n": {True: 1, "true": 2}}]}, {None: 0, "null": 1}]
        for payload in colliding:
            with self.subTest(payload=payload):
                self.assert_unchanged_by(q, lambda p=payload: q.enqueue(p), SerializationError)
                self.assert_unchanged_by(q, lambda p=payload: q.enqueue_many(["fine", p, "fine"]), SerializationError)
        with self.assertRaises(SerializationError) as caught:
            q.enqueue_many(["fine", {2: "x", "2": "y"}])
        self.assertIn("payload 1", str(caught.exception))
        self.assertIn('"2"', str(caught.exception))
        q.enqueue_many(["a", "b"])
        a, b = sorted(q.lease(2), key=lambda job: job.payload)
        self.assert_unchanged_by(q, lambda: q.ack(a, result={1: "a", "1": "b"}), SerializationError)
        self.assert_unchanged_by(q, lambda: q.ack_many([a, b], results=[None, {"x": {0: 1, "0": 2}}]), SerializationError)
        q.ack(a, result=(1, {2: ()}))
        self.assertEqual(q.get(a.id).result, [1, {"2": []}])

    def test_a_large_payload_under_the_limit_round_trips(self) -> None:
        q = self.make_queue()
        payload = {"blob": "y" * (1024 * 1024)}
        job = q.enqueue(payload)
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.get(job.id).payload, payload)

    def test_delay_sets_available_at_and_hides_the_job_until_then(self) -> None:
        q = self.make_queue()
        t = self.now()
        job = q.enqueue("later", delay=30)
        self.assertIs(job.state, JobState.READY)
        self.assert_time(job.enqueued_at, t)
        self.assert_time(job.available_at, t + 30)
        self.assertEqual(q.lease(), [])
        self.assertIsNone(q.lease_one())
        q = self.assert_survives_reopen(q)
        self.advance(29)
        self.assertEqual(q.lease(), [])
        self.advance(2)
        self.assertEqual(self.lease_ids(q), [job.id])

    def test_priority_higher_first(self) -> None:
        q = self.make_queue()
        low = q.enqueue("low", priority=-1)
        mid = q.enqueue("mid", priority=0)
        high = q.enqueue("high", priority=5)
        top = q.enqueue("top", priority=2**31 - 1)
        bottom = q.enqueue("bottom", priority=-(2**31))
        self.assertEqual(q.get(high.id).priority, 5)
        q = self.assert_survives_reopen(q)
        self.assertEqual(
            [q.lease_one().id for _ in range(5)],  # type: ignore[union-attr]
            [top.id, high.id, mid.id, low.id, bottom.id],
        )

    def test_equal_priorities_come_out_fifo(self) -> None:
        q = self.make_queue()
        first = [q.enqueue(i, priority=3).id for i in range(4)]
        others = [q.enqueue(i).id for i in range(4)]
        more = [job.id for job in q.enqueue_many(["a", "b", "c"], priority=3)]
        self.assertEqual(self.lease_ids(q, 2), first[:2])
        self.assertEqual(self.lease_ids(q, 5), first[2:] + more)
        self.assertEqual([q.lease_one().id for _ in range(4)], others)  # type: ignore[union-attr]

    def test_delayed_high_priority_job_never_blocks_ready_work(self) -> None:
        q = self.make_queue(visibility_timeout=600)  # the ready ones' leases outlast the delay
        delayed = [q.enqueue(f"later{i}", priority=100, delay=60) for i in range(3)]
        ready = [q.enqueue("now", priority=-5), q.enqueue("now too", priority=-5)]
        self.assertEqual(self.lease_ids(q, 10), [job.id for job in ready])
        self.assertEqual(q.lease(), [])
        self.advance(61)
        self.assertEqual(self.lease_ids(q, 10), [job.id for job in delayed])

    def test_a_due_delayed_job_competes_by_priority(self) -> None:
        q = self.make_queue()
        old_low = q.enqueue("old, low", priority=0)
        urgent = q.enqueue("urgent, delayed", priority=10, delay=5)
        self.advance(6)
        self.assertEqual(self.lease_ids(q, 2), [urgent.id, old_low.id])

    def test_enqueue_many_returns_one_job_per_payload_in_order(self) -> None:
        q = self.make_queue()
        t = self.now()
        jobs = q.enqueue_many([{"i": i} for i in range(5)], priority=2, delay=10, max_attempts=7, kind="batch")
        self.assertEqual([job.payload for job in jobs], [{"i": i} for i in range(5)])
        for job in jobs:
            self.assertIs(job.state, JobState.READY)
            self.assertEqual(job.priority, 2)
            self.assertEqual(job.max_attempts, 7)
            self.assertEqual(job.kind, "batch")
            self.assert_time(job.available_at, t + 10)
            self.assertEqual(q.get(job.id).to_dict(), job.to_dict())
        self.assertEqual(len(q), 5)
        self.assertEqual(q.stats().delayed, 5)
        q = self.assert_survives_reopen(q)
        self.advance(11)
        self.assertEqual(self.lease_ids(q, 10, kinds=["batch"]), [job.id for job in jobs])

    def test_enqueue_many_with_job_ids_is_idempotent_per_id(self) -> None:
        q = self.make_queue()
        existing = q.enqueue("first", job_id="x")
        jobs = q.enqueue_many(["again", "new"], job_ids=["x", "y"])
        self.assertEqual([job.id for job in jobs], ["x", "y"])
        self.assertEqual(jobs[0].payload, "first")
        self.assertEqual(jobs[0].seq, existing.seq)
        self.assertEqual(jobs[1].payload, "new")
        self.assertEqual(len(q), 2)
        q = self.assert_survives_reopen(q)
        again = q.enqueue_many(["z", "z"], job_ids=["x", "y"])
        self.assertEqual([job.payload for job in again], ["first", "new"])
        self.assertEqual(len(q), 2)
        self.assertEqual(sorted(self.lease_ids(q)), ["x", "y"])

    def test_enqueue_many_job_ids_of_the_wrong_length_write_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        self.assert_unchanged_by(q, lambda: q.enqueue_many(["a", "b"], job_ids=["only-one"]), ValueError)
        self.assert_unchanged_by(q, lambda: q.enqueue_many(["a", "b"], dedupe_keys=["k1", "k2", "k3"]), ValueError)

    def test_enqueue_many_with_one_bad_payload_writes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        self.assert_unchanged_by(q, lambda: q.enqueue_many(["ok", b"bytes", "ok"]), SerializationError)
        self.assert_unchanged_by(q, lambda: q.enqueue_many(["ok", float("nan")]), SerializationError)
        q = self.assert_survives_reopen(q)
        self.assertEqual(len(q), 1)

    # ------------------------------------------------------------ lease
    def test_lease_takes_count_and_returns_what_it_can(self) -> None:
        q = self.make_queue()
        jobs = q.enqueue_many(list(range(5)))
        q.enqueue("delayed", delay=100)
        first = q.lease(3)
        self.assertEqual([job.id for job in first], [job.id for job in jobs[:3]])
        second = q.lease(3)
        self.assertEqual([job.id for job in second], [job.id for job in jobs[3:]])
        self.assertEqual(q.lease(3), [])
        for job in first + second:
            self.assertIs(job.state, JobState.LEASED)
            self.assertIs(q.get(job.id).state, JobState.LEASED)
        stats = q.stats()
        self.assertEqual((stats.ready, stats.delayed, stats.leased), (0, 1, 5))
        self.assert_survives_reopen(q)

    def test_lease_on_an_empty_queue_returns_at_once(self) -> None:
        q = self.make_queue()
        self.assertEqual(q.lease(), [])
        self.assertEqual(q.lease(10), [])
        self.assertIsNone(q.lease_one())
        self.assertEqual(q.stats().to_dict()["total"], 0)

    def test_lease_default_count_is_one(self) -> None:
        q = self.make_queue()
        q.enqueue_many([1, 2, 3])
        self.assertEqual(len(q.lease()), 1)
        job = q.lease_one()
        self.assertIsNotNone(job)
        assert job is not None
        self.assertIs(job.state, JobState.LEASED)

    def test_each_lease_adds_an_attempt_and_a_new_token(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        tokens = []
        for attempt in (1, 2, 3):
            job = self.only_lease(q)
            self.assertEqual(job.attempts, attempt)
            self.assertIsInstance(job.lease_token, str)
            self.assertTrue(job.lease_token)
            tokens.append(job.lease_token)
            self.assertEqual(q.get(job.id).attempts, attempt)
            self.assertEqual(q.get(job.id).lease_token, job.lease_token)
            q.nack(job, delay=0)
            self.assertEqual(q.get(job.id).attempts, attempt, "nack must not count a second attempt")
        self.assertEqual(len(set(tokens)), 3)

    def test_lease_deadline_uses_the_default_visibility_timeout(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        t = self.now()
        job = self.only_lease(q)
        self.assert_time(job.lease_deadline, t + 30.0)
        self.assert_time(q.get(job.id).lease_deadline, t + 30.0)

    def test_lease_deadline_uses_the_queue_visibility_timeout(self) -> None:
        q = self.make_queue(visibility_timeout=12)
        q.enqueue("work")
        self.advance(3)
        t = self.now()
        job = self.only_lease(q)
        self.assert_time(job.lease_deadline, t + 12)
        self.assert_survives_reopen(q)

    def test_lease_deadline_per_call_visibility_timeout(self) -> None:
        q = self.make_queue(visibility_timeout=12)
        q.enqueue_many(["a", "b"])
        t = self.now()
        (a,) = q.lease(1, visibility_timeout=5)
        self.assert_time(a.lease_deadline, t + 5)
        b = q.lease_one(visibility_timeout=7.5)
        assert b is not None
        self.assert_time(b.lease_deadline, t + 7.5)

    def test_a_leased_job_is_not_delivered_again_before_its_deadline(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        q.enqueue("work")
        self.only_lease(q)
        self.advance(9)
        self.assertEqual(q.lease(), [])
        q = self.reopen(q)
        self.assertEqual(q.lease(), [])

    # ------------------------------------------------------------ ack
    def test_ack_marks_the_job_done(self) -> None:
        q = self.make_queue()
        job = q.enqueue("work")
        leased = self.only_lease(q)
        self.assertIsNone(q.ack(leased))
        done = q.get(job.id)
        self.assertIs(done.state, JobState.DONE)
        self.assertEqual(done.attempts, 1)
        self.assertEqual(done.payload, "work")
        self.assertEqual(q.stats().done, 1)
        self.assertEqual(q.lease(), [])
        q = self.assert_survives_reopen(q)
        self.assertIs(q.get(job.id).state, JobState.DONE)
        self.assertEqual(q.lease(), [])

    def test_acking_a_done_job_again_is_harmless(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        q.ack(job)
        before = self.snapshot(q)
        q.ack(job)
        q.ack(job.id)
        self.assertEqual(self.snapshot(q), before)
        q = self.reopen(q)
        q.ack(job)
        self.assertEqual(self.snapshot(q), before)

    def test_a_done_job_shows_no_lease(self) -> None:
        q = self.make_queue()
        q.enqueue_many(["one", "many-a", "many-b"])
        one, a, b = sorted(q.lease(3), key=lambda job: job.payload != "one")
        q.ack(one)
        q.ack_many([a, b], results=["ra", None])
        for _ in range(2):  # as written, then as replayed
            for job in (one, a, b):
                done = q.get(job.id)
                self.assertIs(done.state, JobState.DONE)
                self.assertEqual((done.lease_token, done.lease_deadline), (None, None))
            self.assertEqual([j.lease_token for j in q.list_jobs(JobState.DONE)], [None] * 3)
            q.ack(one)  # acking again under the lease that finished it stays harmless
            q.ack_many([a, b])
            with self.assertRaises(NotLeasedError):
                q.ack(self.stale(one))
            q = self.reopen(q)

    def test_ack_with_a_stale_token_is_refused_and_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.assert_unchanged_by(q, lambda: q.ack(self.stale(job)), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.ack(self.stale(job), result={"r": 1}), NotLeasedError)
        self.assertIs(q.get(job.id).state, JobState.LEASED)
        q.ack(job)
        self.assertIs(q.get(job.id).state, JobState.DONE)

    def test_a_bare_id_skips_the_token_check(self) -> None:
        q = self.make_queue(backoff=EXACT)
        a, b, c, d = q.enqueue_many(["a", "b", "c", "d"])
        self.lease_ids(q, 4)
        t = self.now()
        self.assertEqual(q.set_stage(c.id, "step").stage, "step")
        self.assertEqual(q.get(c.id).stage, "step")
        self.assert_time(q.extend(c.id, 100).lease_deadline, t + 100)
        q.ack(a.id)
        self.assertIs(q.get(a.id).state, JobState.DONE)
        nacked = q.nack(b.id, error="operator", delay=0)
        self.assertIs(nacked.state, JobState.READY)
        self.assertEqual(q.get(b.id).last_error, "operator")
        q.ack(c.id, result="ok")
        self.assertEqual(q.get(c.id).result, "ok")
        self.assertIs(q.nack(d.id, permanent=True).state, JobState.DEAD)
        self.assert_survives_reopen(q)

    def test_ack_many_acks_every_held_lease_and_names_the_first_refusal(self) -> None:
        q = self.make_queue()
        q.enqueue_many(["a", "b", "c", "d"])
        a, b, c, d = sorted(q.lease(4), key=lambda job: job.payload)
        q.ack_many([a, b], results=[{"n": 1}, None])
        self.assertEqual([q.get(a.id).state, q.get(b.id).state], [JobState.DONE, JobState.DONE])
        self.assertEqual(q.get(a.id).result, {"n": 1})
        q.ack_many([a])  # already done under the same lease: harmless
        e = q.enqueue("e")
        e = q.lease_one()
        with self.assertRaises(NotLeasedError):
            q.ack_many([c, self.stale(d), e])
        self.assertIs(q.get(c.id).state, JobState.DONE, "the jobs before the refusal were acked")
        self.assertIs(q.get(e.id).state, JobState.DONE, "the jobs after the refusal were acked")
        self.assertIs(q.get(d.id).state, JobState.LEASED, "the refused one is untouched")
        q.ack_many([d.id])
        q.ack_many([])
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.stats().done, 5)

    def test_ack_many_refuses_a_stale_copy_beside_the_lease_it_copies(self) -> None:
        q = self.make_queue()
        q.enqueue_many(["a", "b", "c"])
        a, b, c = sorted(q.lease(3), key=lambda job: job.payload)
        for batch in ([a, self.stale(a)], [self.stale(b), b]):
            with self.subTest(order=[job.lease_token == "not-a-token-we-issued" for job in batch]):
                with self.assertRaises(NotLeasedError) as caught:
                    q.ack_many(batch)
                self.assertIn(batch[0].id, str(caught.exception))
                self.assertIs(q.get(batch[0].id).state, JobState.DONE, "the real lease was acked")
        q.ack_many([c, c, c.id])  # the same lease twice, and by id: nothing stale there
        self.assertIs(q.get(c.id).state, JobState.DONE)

    def test_ack_result_is_kept_and_returned_by_get(self) -> None:
        q = self.make_queue()
        results = {"plain": 7, "dict": {"url": "s3://x", "sizes": [1, 2]}, "none": None, "text": "ok"}
        ids = {}
        for name, result in results.items():
            q.enqueue(name)
            job = self.only_lease(q)
            q.ack(job, result=result)
            ids[name] = job.id
        for name, result in results.items():
            self.assertEqual(q.get(ids[name]).result, result)
        q = self.assert_survives_reopen(q)
        for name, result in results.items():
            self.assertEqual(q.get(ids[name]).result, result)
        self.assertEqual({job.id: job.result for job in q.list_jobs(JobState.DONE)}, {ids[n]: r for n, r in results.items()})

    def test_ack_result_must_be_json_and_within_the_limit(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.assert_unchanged_by(q, lambda: q.ack(job, result=b"bytes"), SerializationError)
        self.assert_unchanged_by(q, lambda: q.ack(job, result=object()), SerializationError)
        self.assert_unchanged_by(q, lambda: q.ack(job, result=float("inf")), SerializationError)
        self.assert_unchanged_by(q, lambda: q.ack(job, result="r" * (RESULT_LIMIT_BYTES + 1)), SerializationError)
        self.assertIs(q.get(job.id).state, JobState.LEASED)
        q.ack(job, result="small")
        self.assertEqual(q.get(job.id).result, "small")

    # ------------------------------------------------------------ nack
    def test_nack_with_a_delay_makes_the_job_ready_after_it(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.advance(2)
        t = self.now()
        back = q.nack(job, error="boom", delay=7)
        self.assertIsInstance(back, Job)
        self.assertIs(back.state, JobState.READY)
        self.assertEqual(back.attempts, 1)
        self.assertEqual(back.last_error, "boom")
        self.assert_time(back.available_at, t + 7)
        self.assertIsNone(back.lease_token)
        self.assertEqual(q.get(job.id).to_dict(), back.to_dict())
        self.assertEqual(q.stats().delayed, 1)
        self.assertEqual(q.lease(), [])
        q = self.assert_survives_reopen(q)
        self.advance(6)
        self.assertEqual(q.lease(), [])
        self.advance(2)
        again = self.only_lease(q)
        self.assertEqual((again.id, again.attempts), (job.id, 2))

    def test_nack_with_zero_delay_is_ready_at_once(self) -> None:
        q = self.make_queue(backoff=EXACT)
        q.enqueue("work")
        job = self.only_lease(q)
        q.nack(job, delay=0)
        self.assertEqual(self.lease_ids(q), [job.id])

    def test_nack_without_delay_uses_the_jittered_backoff_window(self) -> None:
        q = self.make_queue(backoff=JITTERED)
        q.enqueue("work")
        job = self.only_lease(q)
        t = self.now()
        back = q.nack(job, error="first")
        self.assertIs(back.state, JobState.READY)
        self.assert_between(back.available_at, t + 5, t + 10, "first retry must land in [base*(1-jitter), base]")
        self.assertEqual(q.lease(), [])
        q = self.assert_survives_reopen(q)
        self.advance(10.5)
        job = self.only_lease(q)
        t = self.now()
        back = q.nack(job, error="second")
        self.assert_between(back.available_at, t + 10, t + 20, "second retry must land in [10, 20]")
        self.assertEqual(back.last_error, "second")

    def test_nack_backoff_grows_by_the_factor(self) -> None:
        q = self.make_queue(backoff=EXACT, max_attempts=10)
        q.enqueue("work")
        for expected in (10, 20, 40, 80):
            job = self.only_lease(q)
            t = self.now()
            back = q.nack(job)
            self.assert_time(back.available_at, t + expected)
            self.advance(expected - 1)
            self.assertEqual(q.lease(), [])
            self.advance(2)

    def test_nack_sends_the_job_to_the_dlq_once_attempts_reach_max(self) -> None:
        q = self.make_queue(max_attempts=2, backoff=EXACT)
        job = q.enqueue("doomed")
        first = self.only_lease(q)
        self.assertIs(q.nack(first, error="e1", delay=0).state, JobState.READY)
        second = self.only_lease(q)
        self.assertEqual(second.attempts, 2)
        dead = q.nack(second, error="e2", delay=0)
        self.assertIs(dead.state, JobState.DEAD)
        self.assertEqual(dead.attempts, 2)
        self.assertEqual(dead.last_error, "e2")
        self.assertIsNone(dead.lease_token)
        self.assertEqual(q.get(job.id).to_dict(), dead.to_dict())
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        self.assertEqual(q.lease(), [])
        self.assertEqual(q.stats().dead, 1)
        q = self.assert_survives_reopen(q)
        self.advance(1000)
        self.assertEqual(q.lease(), [])

    def test_a_job_max_attempts_overrides_the_queue(self) -> None:
        q = self.make_queue(max_attempts=5)
        one = q.enqueue("once", max_attempts=1)
        many = q.enqueue("many", max_attempts=3)
        q.lease(2)
        self.assertIs(q.nack(one.id, delay=0).state, JobState.DEAD)
        for _ in range(2):
            self.assertIs(q.nack(many.id, delay=0).state, JobState.READY)
            self.assertEqual(self.lease_ids(q), [many.id])
        self.assertIs(q.nack(many.id, delay=0).state, JobState.DEAD)
        self.assertEqual(q.get(many.id).attempts, 3)
        self.assert_survives_reopen(q)

    def test_nack_permanent_goes_dead_at_once(self) -> None:
        q = self.make_queue(max_attempts=5)
        job = q.enqueue("bad input")
        leased = self.only_lease(q)
        dead = q.nack(leased, error="cannot parse", permanent=True)
        self.assertIs(dead.state, JobState.DEAD)
        self.assertEqual(dead.attempts, 1)
        self.assertEqual(dead.last_error, "cannot parse")
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        self.assert_survives_reopen(q)

    def test_a_traceback_is_kept_beside_last_error_until_the_next_failure(self) -> None:
        q = self.make_queue(max_attempts=3, visibility_timeout=10, backoff=BackoffPolicy(base=0))
        job = q.enqueue("work")
        trace = "Traceback (most recent call last):\n  File \"h.py\", line 3, in handle\nValueError: nope\n"
        nacked = q.nack(self.only_lease(q), error="ValueError: nope", traceback=trace)
        self.assertEqual((nacked.last_error, nacked.traceback), ("ValueError: nope", trace))
        self.assertEqual(q.get(job.id).to_dict()["traceback"], trace)
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.get(job.id).traceback, trace)
        q.nack(self.only_lease(q), error="no traceback this time")
        self.assertEqual((q.get(job.id).last_error, q.get(job.id).traceback), ("no traceback this time", None))
        long = "x" * (TRACEBACK_LIMIT_CHARS + 100) + "\nKeyError: the end"
        dead = q.nack(self.only_lease(q), error="KeyError: the end", traceback=long, permanent=True)
        self.assertIs(dead.state, JobState.DEAD)
        self.assertEqual(dead.traceback, long[-TRACEBACK_LIMIT_CHARS:], "the end of a long traceback is kept")
        q = self.assert_survives_reopen(q)
        q.requeue_dead()
        self.assertEqual(q.get(job.id).traceback, dead.traceback, "a requeue keeps the last failure")
        self.only_lease(q, visibility_timeout=10)
        self.advance(11)  # the lease expires: ready again, the last failure (error, traceback) kept
        shown = q.get(job.id)
        self.assertEqual((shown.state, shown.last_error, shown.traceback), (JobState.READY, "KeyError: the end", dead.traceback))

    def test_a_lease_that_expires_on_its_last_attempt_drops_the_old_traceback(self) -> None:
        q = self.make_queue(max_attempts=2, visibility_timeout=10, backoff=BackoffPolicy(base=0))
        job = q.enqueue("work")
        q.nack(self.only_lease(q), error="ValueError: first", traceback="Traceback ...\nValueError: first\n")
        self.only_lease(q)
        self.advance(11)
        for _ in range(2):  # as a read shows it, then as the reclaim wrote it
            shown = q.get(job.id)
            self.assertEqual((shown.state, shown.last_error, shown.traceback), (JobState.DEAD, "lease expired on attempt 2 of 2", None))
            q.lease()

    def test_nack_with_a_stale_token_is_refused_and_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.assert_unchanged_by(q, lambda: q.nack(self.stale(job), error="late"), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.nack(self.stale(job), permanent=True), NotLeasedError)
        self.assertIs(q.nack(job, delay=0).state, JobState.READY)

    # ------------------------------------------------------------ lease expiry
    def test_an_expired_lease_comes_back_after_the_backoff(self) -> None:
        q = self.make_queue(backoff=JITTERED)
        job = q.enqueue("work")
        first = self.only_lease(q, visibility_timeout=10)
        deadline = first.lease_deadline
        assert deadline is not None
        self.advance(11)
        reclaim_time = self.now()
        self.assertEqual(q.lease(), [], "an expired lease backs off like a nack")
        back = q.get(job.id)
        self.assertIs(back.state, JobState.READY)
        self.assertEqual(back.attempts, 1)
        self.assertIsNone(back.lease_token)
        self.assert_between(back.available_at, deadline + 5, reclaim_time + 10)
        q = self.assert_survives_reopen(q)
        self.advance(11)
        second = self.only_lease(q)
        self.assertEqual(second.id, job.id)
        self.assertEqual(second.attempts, 2)
        self.assertNotEqual(second.lease_token, first.lease_token)

    def test_an_expired_lease_counts_towards_the_dlq(self) -> None:
        q = self.make_queue(max_attempts=1, visibility_timeout=10)
        job = q.enqueue("work")
        self.only_lease(q)
        self.advance(11)
        self.assertEqual(q.lease(), [])
        dead = q.get(job.id)
        self.assertIs(dead.state, JobState.DEAD)
        self.assertEqual(dead.attempts, 1)
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        self.assert_survives_reopen(q)

    def test_ready_lists_both_halves_runnable_and_delayed_as_stats_counts_them(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        now = q.enqueue("now")
        later = q.enqueue("later", delay=100, kind="k")
        expired = q.enqueue("expired", priority=5, kind="k")
        self.assertEqual(self.only_lease(q).id, expired.id)
        self.advance(11)  # its lease expired 1 s ago: a read shows it delayed by the backoff (10 s)
        stats = q.stats()
        listed = {name: [j.id for j in q.list_jobs(name)] for name in ("ready", "runnable", "delayed")}
        self.assertEqual(listed, {"ready": [now.id, later.id, expired.id], "runnable": [now.id], "delayed": [later.id, expired.id]})
        self.assertEqual((len(listed["runnable"]), len(listed["delayed"])), (stats.ready, stats.delayed))
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY)], listed["ready"], "what 0.1.2 code gets")
        self.assertEqual([j.id for j in q.list_jobs("delayed", limit=1, offset=1)], [expired.id])
        self.assertEqual([j.id for j in q.list_jobs("delayed", kind="k")], [later.id, expired.id])
        self.assertEqual(q.list_jobs("runnable", kind="k"), [])
        self.advance(10)  # the backoff after its deadline is over, though no write recorded the reclaim
        self.assertEqual([j.id for j in q.list_jobs("runnable")], [now.id, expired.id])
        self.assertEqual([j.id for j in q.list_jobs("delayed")], [later.id])
        self.assertEqual((q.stats().ready, q.stats().delayed), (2, 1))
        with self.assertRaises(ValueError) as caught:
            q.list_jobs("sleeping")
        self.assertIn("runnable, delayed", str(caught.exception))

    def test_the_backoff_of_an_expired_lease_runs_from_its_deadline(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        job = q.enqueue("work")
        first = self.only_lease(q)
        self.advance(100)  # long after the deadline and the 10 s backoff after it
        again = self.only_lease(q)  # reclaimed and leased again by one call
        self.assertEqual((again.id, again.attempts), (job.id, 2))
        self.assertNotEqual(again.lease_token, first.lease_token)

    def test_reads_show_an_expired_lease_as_dead_before_any_write(self) -> None:
        q = self.make_queue(max_attempts=1, visibility_timeout=10)
        job = q.enqueue("work")
        self.only_lease(q)
        self.advance(11)
        expected = {"ready": 0, "delayed": 0, "leased": 0, "done": 0, "dead": 1, "total": 1}
        self.assertEqual(q.stats().to_dict(), expected)
        shown = q.get(job.id)
        self.assertIs(shown.state, JobState.DEAD)
        self.assertEqual((shown.lease_deadline, shown.lease_token), (None, None))
        self.assertEqual(shown.last_error, "lease expired on attempt 1 of 1")
        self.assertEqual([j.id for j in q.dlq()], [job.id])
        self.assertEqual([j.id for j in q.list_jobs(JobState.DEAD)], [job.id])
        self.assertEqual(q.list_jobs(JobState.LEASED), [])
        self.assertEqual([j.to_dict() for j in q.list_jobs()], [shown.to_dict()])
        self.assertEqual(q.lease(), [])  # a write records the reclaim: what the reads showed
        self.assertEqual(q.get(job.id).to_dict(), shown.to_dict())
        self.assertEqual(q.stats().to_dict(), expected)

    def test_reads_show_an_expired_lease_ready_again_after_the_backoff(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        first, second = q.enqueue_many(["first", "second"])
        leased = self.only_lease(q)
        self.assertEqual(leased.id, first.id)
        assert leased.lease_deadline is not None
        self.advance(11)
        self.assertEqual(q.stats().to_dict(), {"ready": 1, "delayed": 1, "leased": 0, "done": 0, "dead": 0, "total": 2})
        shown = q.get(first.id)
        self.assertIs(shown.state, JobState.READY)
        self.assertEqual((shown.attempts, shown.lease_deadline, shown.lease_token), (1, None, None))
        # The attempt failed at the deadline: the backoff (10 s after one failure) runs from there.
        self.assert_time(shown.available_at, leased.lease_deadline + 10)
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY)], [first.id, second.id])
        self.assertEqual(q.list_jobs(JobState.LEASED), [])
        self.assertEqual(q.dlq(), [])
        self.assertEqual(self.only_lease(q).id, second.id)  # the reclaim is written: first waits
        self.assert_time(q.get(first.id).available_at, leased.lease_deadline + 10)
        self.assertEqual(q.stats().to_dict(), {"ready": 0, "delayed": 1, "leased": 1, "done": 0, "dead": 0, "total": 2})

    def test_reads_show_an_expired_lease_runnable_when_the_backoff_is_zero(self) -> None:
        q = self.make_queue(backoff=BackoffPolicy(base=0), visibility_timeout=10)
        job = q.enqueue("work")
        self.only_lease(q)
        self.advance(11)
        self.assertEqual(q.stats().to_dict(), {"ready": 1, "delayed": 0, "leased": 0, "done": 0, "dead": 0, "total": 1})
        self.assertIs(q.get(job.id).state, JobState.READY)
        self.assertEqual(self.only_lease(q).id, job.id)

    def test_the_expired_holder_is_refused_once_the_job_is_redelivered(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        q.enqueue("work")
        old = self.only_lease(q)
        self.advance(11)
        self.assertEqual(q.lease(), [])
        self.advance(11)
        new = self.only_lease(q)
        self.assertEqual(new.id, old.id)
        self.assert_unchanged_by(q, lambda: q.ack(old), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.ack(old, result="late"), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.nack(old, error="late"), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.extend(old, 60), NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.set_stage(old, "late"), NotLeasedError)
        self.assertEqual(q.get(new.id).lease_token, new.lease_token)
        q.ack(new, result="fresh")
        self.assertEqual(q.get(new.id).result, "fresh")

    def test_a_refusal_says_what_really_happened(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        q.enqueue("work")
        job = self.only_lease(q)
        q.ack(job)
        for action in (lambda: q.nack(job, error="x"), lambda: q.extend(job, 5), lambda: q.set_stage(job, "x")):
            with self.assertRaises(NotLeasedError) as caught:
                action()
            self.assertIn("already done (acked under this lease); nothing changed", str(caught.exception))
            self.assertNotIn("expired", str(caught.exception))
        q.enqueue("again")
        nacked = self.only_lease(q)
        q.nack(nacked, delay=100)
        with self.assertRaises(NotLeasedError) as caught:
            q.extend(nacked, 5)
        self.assertIn("it is ready, not leased (your lease ended: it expired, or the job was nacked)", str(caught.exception))
        q.enqueue("third")
        old = self.only_lease(q)
        self.advance(11)
        self.assertEqual(q.lease(), [])
        self.advance(11)
        q.ack(self.only_lease(q))
        with self.assertRaises(NotLeasedError) as caught:
            q.nack(old)
        self.assertIn("it is done, finished under a later lease after yours ended", str(caught.exception))
        with self.assertRaises(NotLeasedError) as caught:
            q.extend(old.id, 5)
        self.assertIn("it is done, not leased", str(caught.exception))

    def test_a_lease_whose_holder_vanished_is_delivered_again(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        job = q.enqueue("work")
        first = self.only_lease(q)
        q = self.assert_survives_reopen(q)  # the holder is gone; its lease is still on record
        self.assertEqual(q.lease(), [])
        self.advance(11)
        self.assertEqual(q.lease(), [])
        self.advance(11)
        again = self.only_lease(q)
        self.assertEqual((again.id, again.attempts), (job.id, 2))
        self.assertNotEqual(again.lease_token, first.lease_token)

    def test_ack_after_the_deadline_is_refused(self) -> None:
        q = self.make_queue(backoff=EXACT, visibility_timeout=10)
        job = q.enqueue("work")
        leased = self.only_lease(q)
        self.advance(11)
        with self.assertRaises(NotLeasedError):
            q.ack(leased)
        self.assertIsNot(q.get(job.id).state, JobState.DONE)
        with self.assertRaises(NotLeasedError):
            q.extend(leased, 30)
        self.assertIsNot(q.get(job.id).state, JobState.LEASED)

    # ------------------------------------------------------------ extend
    def test_extend_sets_the_deadline_from_now(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        q.enqueue("slow")
        job = self.only_lease(q)
        self.advance(4)
        t = self.now()
        extended = q.extend(job, 20)
        self.assertIsInstance(extended, Job)
        self.assert_time(extended.lease_deadline, t + 20)
        self.assertIs(extended.state, JobState.LEASED)
        self.assertEqual(extended.attempts, 1)
        self.assertEqual(extended.lease_token, job.lease_token, "a heartbeat keeps the lease it extends")
        self.assertEqual(q.get(job.id).to_dict(), extended.to_dict())
        # A heartbeat never drifts: extending again by the same amount sets the same deadline.
        again = q.extend(job, 20)
        self.assert_time(again.lease_deadline, t + 20)
        q = self.assert_survives_reopen(q)
        # A shorter extension moves the deadline closer, not further.
        self.advance(1)
        shorter = q.extend(job, 5)
        self.assert_time(shorter.lease_deadline, t + 6)

    def test_an_extended_lease_outlives_its_first_deadline(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        q.enqueue("slow")
        job = self.only_lease(q)
        for _ in range(3):
            self.advance(8)
            q.extend(job, 10)
            self.assertEqual(q.lease(), [])
        q.ack(job)
        self.assertIs(q.get(job.id).state, JobState.DONE)
        self.assertEqual(q.get(job.id).attempts, 1)

    def test_extend_with_a_stale_token_is_refused_and_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.assert_unchanged_by(q, lambda: q.extend(self.stale(job), 60), NotLeasedError)

    # ------------------------------------------------------------ stage
    def test_set_stage_is_visible_in_get_and_list_jobs(self) -> None:
        q = self.make_queue()
        q.enqueue("video")
        job = self.only_lease(q)
        staged = q.set_stage(job, "encoding")
        self.assertIsInstance(staged, Job)
        self.assertEqual(staged.stage, "encoding")
        self.assertIs(staged.state, JobState.LEASED)
        self.assertEqual(staged.lease_token, job.lease_token)
        self.assertEqual(q.get(job.id).stage, "encoding")
        self.assertEqual([j.stage for j in q.list_jobs(JobState.LEASED)], ["encoding"])
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.set_stage(job, "uploading").stage, "uploading")
        self.assertEqual(q.get(job.id).stage, "uploading")
        self.assertIsNone(q.set_stage(job, None).stage)
        self.assertIsNone(q.get(job.id).stage)
        q.set_stage(job, "finishing")
        q.ack(job)
        self.assertIs(q.get(job.id).state, JobState.DONE)

    def test_set_stage_with_a_stale_token_is_refused_and_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.assert_unchanged_by(q, lambda: q.set_stage(self.stale(job), "x"), NotLeasedError)

    # ------------------------------------------------------------ DLQ and requeue
    def kill(self, q: Queue, count: int) -> list[Job]:
        """Enqueue ``count`` jobs and send them all to the DLQ with one failure each."""
        jobs = q.enqueue_many([f"dead{i}" for i in range(count)], max_attempts=1, kind=DOOMED_KIND)
        leased = q.lease(count, kinds=[DOOMED_KIND])
        self.assertEqual(len(leased), count)
        for job in leased:
            self.assertIs(q.nack(job, error="boom").state, JobState.DEAD)
        return jobs

    def test_requeue_dead_one_resets_its_attempts(self) -> None:
        q = self.make_queue()
        a, b, c = self.kill(q, 3)
        self.advance(5)
        t = self.now()
        self.assertEqual(q.requeue_dead(b.id), 1)
        revived = q.get(b.id)
        self.assertIs(revived.state, JobState.READY)
        self.assertEqual(revived.attempts, 0)
        self.assertLessEqual(revived.available_at, t + self.time_slack + 1e-6)
        self.assertEqual(revived.payload, b.payload)
        self.assertEqual(sorted(j.id for j in q.dlq()), sorted([a.id, c.id]))
        q = self.assert_survives_reopen(q)
        job = self.only_lease(q)
        self.assertEqual((job.id, job.attempts), (b.id, 1))
        self.assertEqual(q.requeue_dead(b.id), 0, "a job that is not dead is not requeued")

    def test_requeue_dead_none_revives_the_whole_dlq(self) -> None:
        q = self.make_queue()
        jobs = self.kill(q, 3)
        q.enqueue("alive")
        self.assertEqual(q.requeue_dead(), 3)
        self.assertEqual(q.dlq(), [])
        for job in jobs:
            got = q.get(job.id)
            self.assertIs(got.state, JobState.READY)
            self.assertEqual(got.attempts, 0)
        self.assertEqual(q.stats().ready, 4)
        self.assertEqual(q.requeue_dead(), 0)
        q = self.assert_survives_reopen(q)
        self.assertEqual(len(q.lease(10)), 4)

    def test_a_requeued_job_gets_all_its_attempts_again(self) -> None:
        q = self.make_queue(max_attempts=2)
        job = q.enqueue("flaky")
        for _ in range(2):
            q.nack(self.only_lease(q), delay=0)
        self.assertIs(q.get(job.id).state, JobState.DEAD)
        q.requeue_dead(job.id)
        self.assertIs(q.nack(self.only_lease(q), delay=0).state, JobState.READY)
        self.assertIs(q.nack(self.only_lease(q), delay=0).state, JobState.DEAD)

    def test_dlq_lists_dead_jobs_only(self) -> None:
        q = self.make_queue()
        q.enqueue("alive")
        dead = self.kill(q, 4)
        listed = q.dlq()
        self.assertEqual([j.id for j in listed], [j.id for j in q.list_jobs(JobState.DEAD)])
        self.assertEqual(sorted(j.id for j in listed), sorted(j.id for j in dead))
        for job in listed:
            self.assertIs(job.state, JobState.DEAD)
            self.assertEqual(job.last_error, "boom")
        self.assertEqual(len(q.dlq(limit=2)), 2)
        self.assertEqual([j.id for j in q.dlq(limit=2)], [j.id for j in listed[:2]])

    # ------------------------------------------------------------ purge and compact
    def test_purge_removes_every_job_and_returns_the_count(self) -> None:
        q = self.make_queue()
        self.kill(q, 2)
        q.enqueue_many(["r1", "r2"])
        q.enqueue("later", delay=100)
        q.enqueue("leased")
        q.lease(2)
        q.ack(self.only_lease(q))  # one done
        total = len(q)
        self.assertEqual(total, 6)
        self.assertEqual(q.purge(), 6)
        self.assertEqual(len(q), 0)
        self.assertEqual(q.stats().to_dict(), QueueStats().to_dict())
        self.assertEqual(q.list_jobs(), [])
        self.assertEqual(q.dlq(), [])
        self.assertEqual(q.lease(), [])
        self.assertEqual(q.purge(), 0)
        q = self.assert_survives_reopen(q)
        self.assertEqual(len(q), 0)
        self.advance(1000)
        self.assertEqual(q.lease(), [])

    def test_compact_drops_done_jobs_and_keeps_the_rest_unchanged(self) -> None:
        q = self.make_queue(visibility_timeout=60)
        done = q.enqueue_many(["d1", "d2", "d3"], priority=9)
        for job in q.lease(3):
            q.ack(job, result={"r": job.payload})
        dead = self.kill(q, 1)[0]
        ready = q.enqueue("ready", job_id="keep-me")
        delayed = q.enqueue("delayed", delay=500, kind="other")
        leased_job = q.enqueue("leased", priority=2, dedupe_key="k1")
        leased = self.only_lease(q)
        self.assertEqual(leased.id, leased_job.id)  # highest priority first
        q.set_stage(leased, "busy")
        keep = {job_id: d for job_id, d in self.snapshot(q).items() if d["state"] != "done"}
        self.assertEqual(set(keep), {dead.id, ready.id, delayed.id, leased_job.id})
        result = q.compact()
        self.assertIsInstance(result, CompactionResult)
        self.assertEqual(result.jobs_dropped, 3)
        self.assertEqual(result.jobs_kept, 4)
        self.assertEqual(result.bytes_reclaimed, result.bytes_before - result.bytes_after)
        self.assertTrue(result.describe().endswith("kept 4 jobs, dropped 3 completed"), result.describe())
        self.assertEqual(self.snapshot(q), keep)
        for job in done:
            with self.assertRaises(JobNotFoundError):
                q.get(job.id)
        self.assertEqual(q.stats().done, 0)
        self.assertEqual(len(q), 4)
        q = self.assert_survives_reopen(q)
        self.assertEqual(self.snapshot(q), keep)
        # The dedupe key of the active job still holds after compaction.
        self.assertEqual(q.enqueue("dup", dedupe_key="k1").id, leased_job.id)
        self.assertEqual(q.enqueue("dup", job_id="keep-me").payload, "ready")
        # The kept lease is still the same lease: its holder can finish it.
        q.ack(leased)
        self.assertIs(q.get(leased.id).state, JobState.DONE)
        self.assertEqual(q.compact().jobs_dropped, 1)

    def test_compact_of_a_queue_without_done_jobs_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue_many(["a", "b"])
        self.only_lease(q)
        before = self.snapshot(q)
        result = q.compact()
        self.assertEqual(result.jobs_dropped, 0)
        self.assertEqual(self.snapshot(q), before)

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

    # ------------------------------------------------------------ kind
    def test_lease_kinds_picks_only_those_kinds(self) -> None:
        q = self.make_queue()
        mail = q.enqueue("mail", kind="email")
        sms = q.enqueue("sms", kind="sms", priority=5)
        plain = q.enqueue("plain")
        self.assertEqual((mail.kind, sms.kind, plain.kind), ("email", "sms", "default"))
        self.assertIsNone(q.lease_one(kinds=["push"]))
        self.assertEqual(self.lease_ids(q, 10, kinds=["email"]), [mail.id])
        self.assertEqual(self.lease_ids(q, 10, kinds=["email", "default"]), [plain.id])
        self.assertEqual(self.lease_ids(q, 10), [sms.id])
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.get(sms.id).kind, "sms")

    def test_lease_without_kinds_takes_every_kind(self) -> None:
        q = self.make_queue()
        ids = [q.enqueue(k, kind=k).id for k in ("a", "b", "default")]
        self.assertEqual(self.lease_ids(q, 10), ids)

    def test_list_jobs_by_kind(self) -> None:
        q = self.make_queue()
        a1 = q.enqueue(1, kind="a")
        q.enqueue(2, kind="b")
        a2 = q.enqueue(3, kind="a")
        self.assertEqual([j.id for j in q.list_jobs(kind="a")], [a1.id, a2.id])
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY, kind="a", limit=1)], [a1.id])

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

    # ------------------------------------------------------------ get, list_jobs, stats, len
    def test_get_of_an_unknown_id_raises_job_not_found(self) -> None:
        q = self.make_queue()
        with self.assertRaises(JobNotFoundError):
            q.get("no-such-job")
        q.enqueue("x")
        with self.assertRaises(JobNotFoundError):
            q.get("still-no-such-job")

    def test_acting_on_an_unknown_id_is_refused_and_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        self.only_lease(q)
        refused = (JobNotFoundError, NotLeasedError)
        self.assert_unchanged_by(q, lambda: q.ack("no-such-job"), refused)
        self.assert_unchanged_by(q, lambda: q.nack("no-such-job"), refused)
        self.assert_unchanged_by(q, lambda: q.extend("no-such-job", 10), refused)
        self.assert_unchanged_by(q, lambda: q.set_stage("no-such-job", "x"), refused)

    def test_list_jobs_is_oldest_first_with_state_filter_limit_and_offset(self) -> None:
        q = self.make_queue(max_attempts=1)
        jobs = [q.enqueue(i, priority=i % 3) for i in range(6)]
        ids = [job.id for job in jobs]
        self.assertEqual([j.id for j in q.list_jobs()], ids)
        leased = q.lease(2)  # priority 2 first: jobs 2 and 5
        self.assertEqual([j.id for j in leased], [ids[2], ids[5]])
        q.ack(leased[0])
        q.nack(leased[1])  # max_attempts=1: dead
        self.assertEqual([j.id for j in q.list_jobs()], ids)
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY)], [ids[0], ids[1], ids[3], ids[4]])
        self.assertEqual([j.id for j in q.list_jobs(JobState.DONE)], [ids[2]])
        self.assertEqual([j.id for j in q.list_jobs(JobState.DEAD)], [ids[5]])
        self.assertEqual(q.list_jobs(JobState.LEASED), [])
        self.assertEqual([j.id for j in q.list_jobs(limit=2)], ids[:2])
        self.assertEqual([j.id for j in q.list_jobs(limit=2, offset=2)], ids[2:4])
        self.assertEqual([j.id for j in q.list_jobs(offset=4)], ids[4:])
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY, limit=2, offset=1)], [ids[1], ids[3]])
        self.assertEqual(q.list_jobs(offset=10), [])
        for job in q.list_jobs():
            self.assertEqual(job.to_dict(), q.get(job.id).to_dict())

    def test_list_jobs_ready_includes_delayed_jobs(self) -> None:
        q = self.make_queue()
        now = q.enqueue("now")
        later = q.enqueue("later", delay=60)
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY)], [now.id, later.id])

    def test_stats_count_every_state_and_tell_delayed_from_ready(self) -> None:
        q = self.make_queue(max_attempts=1)
        self.assertEqual(q.stats().to_dict(), {"ready": 0, "delayed": 0, "leased": 0, "done": 0, "dead": 0, "total": 0})
        q.enqueue_many(["d", "x", "a"])
        q.ack(self.only_lease(q))
        q.nack(self.only_lease(q))
        q.enqueue("leased", priority=1)
        self.only_lease(q)
        q.enqueue_many(["r1", "r2"])
        q.enqueue("later", delay=60)
        q.enqueue("later too", delay=120)
        stats = q.stats()
        self.assertIsInstance(stats, QueueStats)
        expected = {"ready": 3, "delayed": 2, "leased": 1, "done": 1, "dead": 1, "total": 8}
        self.assertEqual(stats.to_dict(), expected)
        self.assertEqual((stats.ready, stats.delayed, stats.leased, stats.done, stats.dead, stats.total), tuple(expected.values()))
        self.assertEqual(len(q), 8)
        q = self.assert_survives_reopen(q)
        self.advance(61)
        self.assertEqual((q.stats().ready, q.stats().delayed), (4, 1))
        self.advance(60)
        self.assertEqual((q.stats().ready, q.stats().delayed), (5, 0))

    def test_len_counts_every_job_held(self) -> None:
        q = self.make_queue(max_attempts=1)
        self.assertEqual(len(q), 0)
        q.enqueue_many(list(range(4)))
        q.enqueue("delayed", delay=10)
        self.assertEqual(len(q), 5)
        q.ack(self.only_lease(q))
        q.nack(self.only_lease(q))
        self.only_lease(q)
        self.assertEqual(len(q), 5)
        q.compact()
        self.assertEqual(len(q), 4)

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

    # ------------------------------------------------------------ bad input
    def test_non_json_payloads_raise_serialization_error_and_write_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        bad: dict[str, Any] = {
            "bytes": b"raw",
            "object": object(),
            "nan": float("nan"),
            "inf in a dict": {"x": float("inf")},
            "set": {1, 2},
            "bytes in a list": ["ok", b"no"],
        }
        for name, payload in bad.items():
            with self.subTest(payload=name):
                self.assert_unchanged_by(q, lambda: q.enqueue(payload), SerializationError)
        q = self.assert_survives_reopen(q)
        self.assertEqual(len(q), 1)

    def test_a_too_large_payload_raises_serialization_error_and_writes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        huge = "x" * HUGE_PAYLOAD_CHARS
        self.assert_unchanged_by(q, lambda: q.enqueue(huge), SerializationError)
        self.assert_unchanged_by(q, lambda: q.enqueue({"blob": huge}, job_id="big"), SerializationError)
        huge = ""  # frees the memory before the next checks
        with self.assertRaises(JobNotFoundError):
            q.get("big")
        q = self.assert_survives_reopen(q)
        self.assertEqual(len(q), 1)

    def test_serialization_error_is_a_value_error_and_a_nobroker_error(self) -> None:
        q = self.make_queue()
        with self.assertRaises(ValueError):
            q.enqueue(b"bytes")
        with self.assertRaises(NobrokerError):
            q.enqueue(b"bytes")

    def test_bad_priority_is_refused_and_writes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        for bad in ("high", 2**31, -(2**31) - 1, float("nan")):
            with self.subTest(priority=bad):
                self.assert_unchanged_by(q, lambda: q.enqueue("x", priority=bad), (ValueError, TypeError))
                self.assert_unchanged_by(q, lambda: q.enqueue_many(["x"], priority=bad), (ValueError, TypeError))

    def test_bad_delay_is_refused_and_writes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        for bad in (-1, float("nan"), float("inf"), "soon"):
            with self.subTest(delay=bad):
                self.assert_unchanged_by(q, lambda: q.enqueue("x", delay=bad), (ValueError, TypeError))
                self.assert_unchanged_by(q, lambda: q.enqueue_many(["x"], delay=bad), (ValueError, TypeError))

    def test_bad_max_attempts_is_refused_and_writes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        for bad in (0, -1, "3", 2.5):
            with self.subTest(max_attempts=bad):
                self.assert_unchanged_by(q, lambda: q.enqueue("x", max_attempts=bad), (ValueError, TypeError))

    def test_bad_lease_arguments_are_refused_and_change_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue_many(["a", "b"])
        for bad in (-1, "2", 1.5):
            with self.subTest(count=bad):
                self.assert_unchanged_by(q, lambda: q.lease(bad), (ValueError, TypeError))
        for bad_timeout in (-5, float("nan"), float("inf"), "10"):
            with self.subTest(visibility_timeout=bad_timeout):
                self.assert_unchanged_by(q, lambda: q.lease(1, visibility_timeout=bad_timeout), (ValueError, TypeError))
        self.assertEqual(len(q.lease(5)), 2)

    def test_bad_nack_delay_and_extend_seconds_are_refused(self) -> None:
        q = self.make_queue()
        q.enqueue("x")
        job = self.only_lease(q)
        for bad in (-1, float("nan"), float("inf"), "5"):
            with self.subTest(value=bad):
                self.assert_unchanged_by(q, lambda: q.nack(job, delay=bad), (ValueError, TypeError))
                self.assert_unchanged_by(q, lambda: q.extend(job, bad), (ValueError, TypeError))
        q.ack(job)

    def test_nesting_deeper_than_the_limit_is_refused_before_anything_is_written(self) -> None:
        q = self.make_queue()
        q.enqueue("keep")
        job = self.only_lease(q)
        for levels in (NESTING_LIMIT + 1, 991, 5_000):
            too_deep = nested(levels)
            with self.subTest(levels=levels):
                self.assert_unchanged_by(q, lambda: q.enqueue(too_deep), SerializationError)
                self.assert_unchanged_by(q, lambda: q.enqueue({"wrapped": nested(NESTING_LIMIT)}), SerializationError)
                self.assert_unchanged_by(q, lambda: q.enqueue_many(["fine", too_deep]), SerializationError)
                self.assert_unchanged_by(q, lambda: q.ack(job, result=too_deep), SerializationError)
                self.assert_unchanged_by(q, lambda: q.ack_many([job], results=[too_deep]), SerializationError)
                for deep_stack in DEEP_STACKS:  # refused the same way from deep inside a caller
                    self.assert_unchanged_by(
                        q, lambda: called_at_depth(deep_stack, lambda: q.enqueue(too_deep)), SerializationError
                    )
        with self.assertRaises(SerializationError) as caught:
            q.enqueue(nested(NESTING_LIMIT + 1))
        self.assertIn(f"{NESTING_LIMIT} levels", str(caught.exception))
        q.ack(job)

    def test_the_deepest_values_accepted_read_back_from_any_stack_depth(self) -> None:
        deepest = nested(NESTING_LIMIT - 1, {"bottom": True})  # 100 levels: the dict is one
        for frames in DEEP_STACKS:
            with self.subTest(frames=frames):
                q = self.make_queue(name=f"deep-{frames}")

                def use() -> tuple[list[Any], Queue, str]:
                    # Everything read is compared afterwards: comparing 100 levels recurses too.
                    job = q.enqueue(deepest)
                    q.enqueue_many([deepest, deepest])
                    seen = [q.get(job.id).payload, *(j.payload for j in q.list_jobs())]
                    leased = sorted(q.lease(3), key=lambda j: j.seq)
                    seen += [j.payload for j in leased]
                    q.ack(leased[0], result=deepest)
                    q.ack_many(leased[1:], results=[deepest, None])
                    seen.append(q.get(job.id).result)
                    q.enqueue(deepest, job_id="left")
                    return seen, self.reopen(q), job.id

                seen, again, done_id = called_at_depth(frames, use)
                self.assertEqual(seen, [deepest] * 8)
                self.assertEqual(called_at_depth(frames, lambda: again.get(done_id).result), deepest)
                self.assertEqual(called_at_depth(frames, lambda: again.get("left").payload), deepest)
                called_at_depth(frames, again.compact)
                left = called_at_depth(frames, again.lease_one)
                self.assertEqual(left.payload if left else None, deepest)

    def test_huge_integer_seconds_raise_value_error_not_overflow_error(self) -> None:
        """10**400 is an int no float can hold: every seconds value refuses it as out of range."""
        q = self.make_queue()
        q.enqueue("keep")
        job = self.only_lease(q)
        for huge in (10**400, -(10**400)):
            calls = {
                "enqueue(delay=)": lambda: q.enqueue("x", delay=huge),
                "enqueue_many(delay=)": lambda: q.enqueue_many(["x"], delay=huge),
                "lease(visibility_timeout=)": lambda: q.lease(1, visibility_timeout=huge),
                "extend()": lambda: q.extend(job, huge),
                "nack(delay=)": lambda: q.nack(job, delay=huge),
                "wait_for_jobs()": lambda: q.wait_for_jobs(huge),
                "Queue(visibility_timeout=)": lambda: self.make_queue(visibility_timeout=huge),
                "Queue(lock_timeout=)": lambda: self.make_queue(lock_timeout=huge),
                "BackoffPolicy(base=)": lambda: BackoffPolicy(base=huge),
                "BackoffPolicy(max_delay=)": lambda: BackoffPolicy(max_delay=huge),
                "Worker(poll_interval=)": lambda: Worker(q, print, poll_interval=huge),
                "Worker(idle_timeout=)": lambda: Worker(q, print, idle_timeout=huge),
            }
            for name, call in calls.items():
                with self.subTest(call=name, sign="+" if huge > 0 else "-"):
                    before = self.snapshot(q)
                    with self.assertRaises(ValueError) as caught:
                        call()
                    self.assertNotIsInstance(caught.exception, OverflowError)
                    self.assertLess(len(str(caught.exception)), 200, "the message quotes the whole number")
                    self.assertEqual(self.snapshot(q), before)
        q.ack(job)

    def test_bad_queue_options_are_refused(self) -> None:
        for options in ({"visibility_timeout": -1}, {"max_attempts": 0}, {"backoff": "fast"}):
            with self.subTest(options=options), self.assertRaises((ValueError, TypeError)):
                self.make_queue(**options)


__all__ = ["QueueSemantics", "JITTERED", "EXACT", "ROUND_TRIP_PAYLOADS"]
