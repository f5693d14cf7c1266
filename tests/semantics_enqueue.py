"""The storage-independent tests of enqueue: the job it returns, payloads, delay, priority, enqueue_many.

Owns: ``EnqueueSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks and helpers it uses): the fields of
the job enqueue returns, payloads kept exactly, delay, priority and FIFO
order, and enqueue_many written whole or not at all. Imports: the standard
library, the public ``nobroker`` API and tests.semantics
(ROUND_TRIP_PAYLOADS).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nobroker import Job, JobState, SerializationError
from tests.semantics import ROUND_TRIP_PAYLOADS

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics
else:
    _Base = object


class EnqueueSemantics(_Base):
    """Enqueue: what each storage must do, through the public Queue only."""

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
