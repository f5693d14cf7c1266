"""The fast paths of a plain enqueue (filestore/plain_jobs.py; leases._plain_job for one job) against the general one.

Owns: the proof that enqueueing plain jobs through the fast path writes the
very bytes the general path writes, leaves the same state in memory and
hands back the same Jobs; that an id it draws which a job already holds,
or draws twice, sends the batch down the general path with nothing changed; and that the
payload checks it shares with the facade still refuse what they refused;
and that the facade's batch codec (stored_json_many: the whole list
encoded and decoded once) gives what stored_json gives payload by payload,
and refuses keys that collide whatever the containers say of themselves.
Imports: the standard library, nobroker and tests.support.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import os
import pickle
import random
import unittest
from typing import Any
from unittest import mock

from nobroker import Job, JobState, Queue, SerializationError
from nobroker.codec import stored_json, stored_json_many
from nobroker.filestore import index, leases, plain_jobs
from nobroker.filestore.replay import QueueState
from nobroker.filestore.state_form import capture
from nobroker.queue.calls import enqueue_many
from nobroker.storage import EnqueueSpec, SharedSpecs
from tests.support import FakeClock, TempDirTestCase

#: What a snapshot's ints hold that depends on when the id table grew, not on the jobs.
_TABLE_SIZES = ("_mask", "_shift", "_table_limit")


def _seeded_random(seed: int) -> Any:
    """An os.urandom that gives the same bytes in every run of a test."""
    rng = random.Random(seed)
    return lambda n: rng.randbytes(n)


class PlainPath(TempDirTestCase):
    def run_workload(self, name: str, fast: bool) -> tuple[bytes, dict[str, Any], list[bytes], list[Any]]:
        """One workload into its own folder: the log's bytes, the state as a snapshot holds it, and every Job returned."""
        directory = os.path.join(self.dir, name)
        rng = random.Random(11)
        clock = FakeClock()
        jobs: list[Any] = []
        calls = []
        real = plain_jobs.enqueue_plain

        def counted(*args: Any) -> Any:
            answer = real(*args) if fast else None
            if len(args[3]) >= plain_jobs.MIN_JOBS:
                calls.append(answer is not None)
            return answer

        real_one = leases._plain_job
        singles = []

        def counted_one(*args: Any) -> Any:
            answer = real_one(*args) if fast else None
            singles.append(answer is not None)
            return answer

        with (
            mock.patch.object(os, "urandom", _seeded_random(5)), mock.patch.object(plain_jobs, "enqueue_plain", counted),
            mock.patch.object(leases, "_plain_job", counted_one),
        ):  # fmt: skip
            with Queue(directory, clock=clock, auto_compact=None) as q:
                for _ in range(40):
                    size = rng.choice([1, 2, 7, 300])
                    payloads = [rng.choice([{"n": rng.random()}, "é\u2603", [1, {"a": None}], 7, None]) for _ in range(size)]
                    kind, priority = rng.choice(["default", "mail", 'odd "kind"']), rng.choice([0, 3, -2])
                    if size == 1 and rng.random() < 0.5:
                        jobs.append(q.enqueue(payloads[0], kind=kind, priority=priority))
                    else:
                        jobs += q.enqueue_many(payloads, kind=kind, priority=priority, max_attempts=rng.choice([None, 2]))
                    clock.advance(rng.choice([0.0, 0.25, 1e-6]))
                    if rng.random() < 0.2:
                        for job in q.lease(3):
                            q.ack(job)
                captured = capture(q.storage._state)  # type: ignore[attr-defined]
                fields, blocks = json.loads("".join(captured.fields_json())), captured.blocks
        self.assertEqual(any(calls) and all(calls), fast, "every batch took the path this run asked for")
        self.assertEqual(any(singles) and all(singles), fast, "every single plain job took the path this run asked for")
        with open(os.path.join(directory, "default.000000.log"), "rb") as f:
            log = f.read()
        for name in _TABLE_SIZES:
            fields["ints"].pop(name)
        return log, fields, [bytes(block) for i, block in enumerate(blocks) if i != 2], jobs  # block 2: the id table

    def test_the_fast_path_writes_and_holds_what_the_general_path_does(self) -> None:
        general = self.run_workload("general", fast=False)
        fast = self.run_workload("fast", fast=True)
        self.assertEqual(fast[0], general[0], "the log's bytes differ")
        self.assertEqual(fast[1], general[1], "the state's fields differ")
        self.assertEqual(fast[2], general[2], "the cold rows differ")
        self.assertEqual(fast[3], general[3], "the Jobs returned differ")

    def test_a_drawn_id_a_job_holds_or_drawn_twice_takes_the_general_path(self) -> None:
        q = Queue(self.dir, auto_compact=None)
        self.addCleanup(q.close)
        held = q.enqueue_many([{"i": i} for i in range(20)])
        hot = q.enqueue({"hot": True}, delay=60)  # delayed: an Entry, not a cold row
        twice = os.urandom(8) * 2  # the same id drawn for both jobs of a batch
        for taken in (held[13], hot, None):
            draws = [twice if taken is None else bytes.fromhex(taken.id) + os.urandom(8), os.urandom(16)]
            with mock.patch.object(leases.os, "urandom", lambda n: draws.pop(0)[:n]):
                fresh = q.enqueue_many([{"new": 1}, {"new": 2}])
            self.assertEqual(draws, [], "the general path drew again")
            self.assertNotIn(twice[:8].hex() if taken is None else taken.id, [job.id for job in fresh], "handed out again")
            self.assertNotEqual(fresh[0].id, fresh[1].id)
            if taken is not None:
                self.assertEqual(q.get(taken.id).payload, taken.payload)
            self.assertEqual([q.get(job.id).payload for job in fresh], [{"new": 1}, {"new": 2}])
            if taken is None:
                continue
            draws = [bytes.fromhex(taken.id), os.urandom(8)]  # one job alone (leases._plain_job)
            with mock.patch.object(leases.os, "urandom", lambda n: draws.pop(0)[:n] if draws else os.urandom(n)):
                single = q.enqueue({"new": 3})
            self.assertNotEqual(single.id, taken.id, "the held id was handed out again")
            self.assertEqual(q.get(taken.id).payload, taken.payload)
            self.assertEqual(q.get(single.id).payload, {"new": 3})
        self.assertEqual(len(q), 29)
        self.assertEqual([q.get(job.id).id for job in held], [job.id for job in held], "a refused batch left a trace")
        q.close()
        again = Queue(self.dir, auto_compact=None)
        self.addCleanup(again.close)
        self.assertEqual(len(again), 29)

    def test_a_drawn_id_a_job_holds_in_the_id_table_being_emptied_takes_the_general_path(self) -> None:
        q = Queue(self.dir, auto_compact=None)
        self.addCleanup(q.close)
        held = q.enqueue_many([{"i": i} for i in range(20)])
        state = q.storage._state  # type: ignore[attr-defined]
        with mock.patch.object(index, "GROW_STEP", 0):  # no row moves to the new table meanwhile
            state._start_growing()
            draws = [bytes.fromhex(held[13].id) + os.urandom(8), os.urandom(16)]
            with mock.patch.object(leases.os, "urandom", lambda n: draws.pop(0)[:n]):
                fresh = q.enqueue_many([{"new": 1}, {"new": 2}])
            self.assertEqual(draws, [], "the general path drew again")
        self.assertNotIn(held[13].id, [job.id for job in fresh], "handed out again")
        self.assertEqual([q.get(job.id).payload for job in held + fresh], [{"i": i} for i in range(20)] + [{"new": 1}, {"new": 2}])
        q.close()
        again = Queue(self.dir, auto_compact=None)
        self.addCleanup(again.close)
        self.assertEqual(len(again), 22)

    def test_no_job_and_one_job_take_the_general_path(self) -> None:
        state = QueueState()
        self.assertIsNone(plain_jobs.enqueue_plain(state, 16, 1.5, []))
        one = enqueue_many(5, [{"a": 1}], 0, 0.0, None, None, "default", None)
        self.assertIsNone(plain_jobs.enqueue_plain(state, 16, 1.5, one))
        self.assertIsNone(plain_jobs.enqueue_plain(state, 16, 1.5, list(one) * 2), "specs one by one: the general path")
        two = enqueue_many(5, [{"a": 1}] * 2, 0, 0.0, None, None, "default", None)
        self.assertIsNotNone(plain_jobs.enqueue_plain(state, 16, 1.5, two))
        self.assertEqual(len(state), 2)

    def test_a_batch_without_ids_reaches_the_storage_as_columns_that_read_as_its_specs(self) -> None:
        payloads: list[Any] = [{"a": (1,)}, "b", 3]
        specs = enqueue_many(7, payloads, 2, 1.5, None, None, "mail", None, 9.0, "g")
        self.assertIsInstance(specs, SharedSpecs)
        assert isinstance(specs, SharedSpecs)
        self.assertEqual(specs.texts, ['{"a":[1]}', '"b"', "3"])
        self.assertEqual(specs.payloads, [{"a": [1]}, "b", 3])
        each = [EnqueueSpec(p, t, 2, 1.5, 7, None, "mail", None, 9.0, "g") for p, t in zip(specs.payloads, specs.texts)]
        self.assertEqual((len(specs), list(specs), specs[1], specs[-1], specs[1:]), (3, each, each[1], each[2], each[1:]))
        with_ids = enqueue_many(7, payloads, 2, 1.5, None, ["x", None, None], "mail", None, 9.0, "g")
        self.assertEqual(with_ids, [each[0]._replace(job_id="x"), *each[1:]], "jobs with ids: a spec each")
        self.assertNotIsInstance(enqueue_many(7, payloads, 2, 1.5, None, None, "mail", [None, "k", None]), SharedSpecs)

    def test_a_plain_job_is_a_job_like_any_other(self) -> None:
        q = Queue(self.dir, auto_compact=None)
        self.addCleanup(q.close)
        fast = q.enqueue_many([{"a": 1}, {"b": [2]}], priority=3, max_attempts=2, kind="mail")
        self.assertEqual([job.payload for job in fast], [{"a": 1}, {"b": [2]}])
        self.assertEqual(fast, [q.get(job.id) for job in fast])
        for job in fast:
            same = Job(**{field.name: getattr(job, field.name) for field in dataclasses.fields(Job)})
            self.assertEqual(job, same)
            self.assertEqual(repr(job), repr(same))
            self.assertEqual(job.to_dict(), same.to_dict())
            self.assertEqual(dataclasses.asdict(job), dataclasses.asdict(same))
            self.assertEqual(Job(**vars(job)), same)
            for copied in (pickle.loads(pickle.dumps(job)), copy.copy(job), copy.deepcopy(job), job.snapshot()):
                self.assertEqual(copied, same)
            self.assertEqual(dataclasses.replace(job, attempts=1), dataclasses.replace(same, attempts=1))
            self.assertFalse(job.cancelled)
            job.state = JobState.DONE
            self.assertIs(job.state, JobState.DONE)
            self.assertIs(q.get(job.id).state, JobState.READY, "a Job is a snapshot")

    def test_payloads_the_facade_refuses_are_still_refused(self) -> None:
        q = Queue(self.dir, auto_compact=None)
        self.addCleanup(q.close)
        deep: Any = []
        for _ in range(150):
            deep = [deep]
        for bad, why in (({1: "a", "1": "b"}, "keys"), (deep, "nested"), ({"x": {1, 2}}, "not JSON-serialisable")):
            with self.assertRaisesRegex(SerializationError, why):
                q.enqueue_many([{"fine": True}, bad])
            with self.assertRaisesRegex(SerializationError, why):
                q.enqueue(bad)
        self.assertEqual(len(q), 0, "a refused batch wrote nothing")
        self.assertEqual(q.enqueue_many([{1: "one"}, (1, 2)])[0].payload, {"1": "one"})



class _SaysEqual(dict):  # type: ignore[type-arg]
    """A dict whose == says yes to anything: it must not fool the proof that no keys collided."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


class _ListSaysEqual(list):  # type: ignore[type-arg]
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


class _Number(enum.IntEnum):
    ONE = 1


class _Text(str):
    pass


def _types(value: Any) -> Any:
    """``value``'s shape: the type of it and of every key and value inside it."""
    if isinstance(value, dict):
        return (type(value), [(type(k), _types(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value), [_types(v) for v in value])
    return type(value)


class BatchJson(unittest.TestCase):
    """stored_json_many: the whole list encoded and decoded once, exactly what stored_json gives value by value."""

    def assert_as_one_by_one(self, values: list[Any]) -> None:
        texts, stored = stored_json_many(values)
        one_by_one = [stored_json(value) for value in values]
        self.assertEqual(texts, [text for text, _ in one_by_one])
        self.assertEqual(stored, [value for _, value in one_by_one])
        self.assertEqual(_types(stored), _types([value for _, value in one_by_one]), "a key or value of another type")
        for given, got in zip(values, stored):
            if isinstance(given, (dict, list, tuple)):
                self.assertIsNot(got, given, "the caller's object, not the stored one")

    def test_every_shape_of_batch_gives_what_each_payload_gives_alone(self) -> None:
        nested = {"a": [1, {"b": None}], "c": {"d": "e"}}
        batches: list[list[Any]] = [
            [{"w": 640, "s": "photo.jpg"}] * 3,  # dicts of plain values: copied, not decoded
            [{"n": i, "f": i / 3, "t": True} for i in range(50)],
            [{"s": "a},{b"}, {"s": "},{"}, {}],  # the separator inside a string: encoded one by one
            [{}, {}],
            [nested, {"x": 1}],  # a container inside: decoded
            [{1: "int key", 2.5: "float key", None: 0, False: 2}, {"t": (1, 2)}],  # keys made strings, a tuple made a list
            [[1, 2], (3, 4), "s", 5, None, 2.5],  # not all dicts
            [{"[": "{"}, {"k": "[{"}],  # brackets in strings
            [{"n": _Number.ONE, "s": _Text("x")}, {_Text("k"): 1}, {True: 1}],  # subclasses and keys made strings
            [{"f": 0.1, "e": 1e300, "z": -0.0, "b": False, "n": None, "i": -(2**70)}],
            [_SaysEqual(a=1), {"b": 2}],  # a subclass: decoded
            [{"deep": _ListSaysEqual([1, 2])}],
            ["\ud800 lone", {"é": "\u2603"}],
        ]
        for values in batches:
            with self.subTest(values=values):
                self.assert_as_one_by_one(values)

    def test_later_changes_to_the_callers_dicts_change_nothing(self) -> None:
        values = [{"a": 1}, {"b": {"c": 2}}]
        texts, stored = stored_json_many(values[:1])
        texts2, stored2 = stored_json_many(values)
        values[0]["a"] = 9
        values[1]["b"]["c"] = 9
        self.assertEqual((texts, stored, texts2, stored2), (['{"a":1}'], [{"a": 1}], ['{"a":1}', '{"b":{"c":2}}'], [{"a": 1}, {"b": {"c": 2}}]))

    def test_keys_that_collide_are_refused_whatever_the_containers_say_of_themselves(self) -> None:
        for values in (
            [{"fine": 1}, {1: "a", "1": "b"}],
            [{"fine": 1}, _SaysEqual({1: "a", "1": "b"})],
            [{"fine": [1]}, {"x": _SaysEqual({True: 1, "true": 2})}],
            [{"fine": 1}, _ListSaysEqual([{None: 1, "null": 2}])],
            [_SaysEqual(fine=1), {"x": {2: 1, "2": 2}}],
        ):
            with self.subTest(values=values), self.assertRaisesRegex(SerializationError, "payload 1 has two keys"):
                stored_json_many(values)


if __name__ == "__main__":
    unittest.main()
