"""The storage-independent tests of bad input: refused before anything is written, on both storages.

Owns: ``BadInputSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks and helpers it uses): payloads that
are not JSON, too large or too deep, bad arguments and queue options, and
integer seconds too large for a float, all refused before anything is written;
the deepest values accepted read back from any stack depth. Imports: the
standard library, the public ``nobroker`` API and tests.semantics (its limits
and deep-stack helpers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nobroker import BackoffPolicy, JobNotFoundError, NobrokerError, Queue, SerializationError, Worker
from tests.semantics import DEEP_STACKS, HUGE_PAYLOAD_CHARS, NESTING_LIMIT, called_at_depth, nested

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics
else:
    _Base = object


class BadInputSemantics(_Base):
    """Bad input: what each storage must do, through the public Queue only."""

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
