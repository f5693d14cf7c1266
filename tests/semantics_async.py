"""AsyncQueue's shared semantic tests: the Queue's semantics awaited, through the public API only, on every storage.

Owns: ``AsyncSemantics``, the mixin (its hooks: ``make_queue``, ``advance``
to move the queue's clock, ``sync_twin``, a Queue on the same queue), and
the bounds its tests use (EXACT, PATIENCE, IDLE_WAIT). It runs on the file
storage always (tests/test_async_file.py: a temp folder and a FakeClock)
and on PostgreSQL (tests/test_pg_async.py: a migrated schema per class, the
clock moved by ``clock_offset``); it is not part of tests.semantics'
QueueSemantics. Nothing here is timed: a cancelled call is cancelled once it
is seen waiting. Imports: the standard library, the public ``nobroker`` API
and tests.semantics_roster (inside two tests).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from nobroker import (
    AsyncQueue,
    BackoffPolicy,
    JobNotFoundError,
    JobStateError,
    JobState,
    NotLeasedError,
    Queue,
    QueueClosedError,
    SerializationError,
)

#: Backoff without jitter, so a retry's time is exact.
EXACT = BackoffPolicy(base=1.0, factor=2.0, max_delay=300.0, jitter=0.0)
#: Generous bound for a call the test waits on (never a timing claim).
PATIENCE = 60.0
#: An idle wait the test cancels; its thread ends when a job wakes it (the next enqueue), at the latest then.
IDLE_WAIT = 10.0


class AsyncSemantics:
    """What an AsyncQueue must do on every storage, through its public API only."""

    # hooks: a fresh queue of this test, its clock moved, a sync Queue on the same queue
    async def make_queue(self, **options: Any) -> AsyncQueue:  # pragma: no cover
        raise NotImplementedError

    def advance(self, seconds: float) -> None:  # pragma: no cover
        raise NotImplementedError

    def sync_twin(self, q: AsyncQueue) -> Queue:  # pragma: no cover
        raise NotImplementedError

    # the TestCase's assertions
    assertEqual: Any
    assertIs: Any
    assertIsNone: Any
    assertRaises: Any
    assertIn: Any
    assertTrue: Any

    async def test_enqueue_lease_ack_round_trip(self) -> None:
        q = await self.make_queue()
        job = await q.enqueue({"n": 1}, priority=3)
        self.assertIs(job.state, JobState.READY)
        more = await q.enqueue_many(["a", "b"])
        leased = await q.lease(5)
        self.assertEqual([j.id for j in leased], [job.id, more[0].id, more[1].id], "priority, then FIFO")
        self.assertEqual({j.attempts for j in leased}, {1})
        await q.ack(leased[0], result={"ok": True})
        await q.ack_many(leased[1:])
        self.assertEqual((await q.get(job.id)).result, {"ok": True})
        stats = await q.stats()
        self.assertEqual((stats.done, stats.ready, stats.leased), (3, 0, 0))
        self.assertEqual(await q.count(), 3)
        self.assertIsNone(await q.lease_one())
        self.assertEqual([j.id for j in await q.list_jobs(JobState.DONE)], [job.id, more[0].id, more[1].id])
        await q.enqueue("stays")
        compacted = await q.compact()
        self.assertEqual((compacted.jobs_dropped, compacted.jobs_kept), (3, 1))
        self.assertEqual(await q.purge(), 1)
        self.assertEqual(await q.count(), 0)

    async def test_nack_retries_after_the_backoff_then_dead(self) -> None:
        q = await self.make_queue(backoff=EXACT, max_attempts=2)
        job = await q.enqueue("flaky")
        first = await q.lease_one()
        self.assertIs((await q.nack(first, error="boom")).state, JobState.READY)  # type: ignore[arg-type]
        self.assertEqual(await q.lease(), [], "not before its backoff")
        self.advance(1.5)
        second = await q.lease_one()
        assert second is not None
        self.assertEqual(second.attempts, 2)
        self.assertIs((await q.nack(second, error="boom")).state, JobState.DEAD)
        self.assertEqual([j.id for j in await q.dlq()], [job.id])
        self.assertEqual(await q.requeue_dead(), 1)
        self.assertIs((await q.get(job.id)).state, JobState.READY)

    async def test_extend_and_extend_many_fence_by_token(self) -> None:
        q = await self.make_queue(visibility_timeout=10)
        await q.enqueue_many(["a", "b"])
        a, b = await q.lease(2)
        self.assertEqual((await q.extend(a, 60)).lease_token, a.lease_token)
        self.assertEqual([j.id for j in await q.extend_many([b, a], 60)], [b.id, a.id])
        stale = dataclasses.replace(b, lease_token="never-issued")
        with self.assertRaises(NotLeasedError):
            await q.extend_many([a, stale], 60)
        with self.assertRaises(NotLeasedError):
            await q.ack(stale)
        self.advance(30)
        self.assertEqual(await q.lease(), [], "renewed leases outlive their first deadline")
        await q.ack_many([a, b])

    async def test_idempotent_enqueue_and_dedupe_keys(self) -> None:
        q = await self.make_queue()
        first = await q.enqueue("x", job_id="same")
        again = await q.enqueue("y", job_id="same")
        self.assertEqual((again.id, again.payload), (first.id, "x"))
        keyed = await q.enqueue("k", dedupe_key="key")
        self.assertEqual((await q.enqueue("k2", dedupe_key="key")).id, keyed.id)
        self.assertEqual(await q.count(), 2)

    async def test_bad_input_is_refused_before_anything_is_written(self) -> None:
        q = await self.make_queue()
        await q.enqueue("keep")
        for bad, error in (
            (lambda: q.enqueue("x", priority="high"), TypeError),
            (lambda: q.enqueue("x", delay=-1), ValueError),
            (lambda: q.enqueue_many(["x"], job_ids=["a", "b"]), ValueError),
            (lambda: q.lease(-1), ValueError),
            (lambda: q.extend_many(["nope"], 0), ValueError),
            (lambda: q.ack(7), TypeError),
            (lambda: q.list_jobs("sideways"), ValueError),
            (lambda: q.enqueue(object()), Exception),
        ):
            with self.assertRaises(error):
                await bad()
        self.assertEqual(await q.count(), 1)
        with self.assertRaises(JobNotFoundError):
            await q.get("no-such-job")

    async def test_cancel_and_schedules(self) -> None:
        q = await self.make_queue()
        job = await q.enqueue("stop")
        self.assertIs((await q.cancel(job.id)).state, JobState.CANCELLED)
        schedule = await q.schedule("tick", {"t": 1}, every=60)
        self.assertEqual([s.spec.name for s in await q.schedules()], ["tick"])
        self.advance(61)
        added = await q.enqueue_due()
        self.assertEqual([j.payload for j in added], [{"t": 1}])
        self.assertTrue(added[0].id.startswith("tick:tick@"))
        self.assertTrue(await q.unschedule(schedule.spec.name))
        self.assertEqual(await q.schedules(), [])

    async def test_counters_and_workers_as_a_queue_reads_them(self) -> None:
        from tests.semantics_roster import info

        q = await self.make_queue()
        await q.enqueue_many(["a", "b"], kind="mail")
        [job] = await q.lease(1)
        await q.ack(job)
        counted = await q.counters()
        self.assertEqual(counted["mail"], {"enqueued": 2, "succeeded": 1, "failed": 0, "dead": 0, "cancelled": 0})
        twin = self.sync_twin(q)
        self.assertEqual(twin.counters(), counted)
        worker = info()
        twin.announce_worker(worker)
        self.assertEqual(await q.workers(), [worker])
    async def test_workers_announce_heartbeat_and_retire_as_a_queue_sees_them(self) -> None:
        from tests.semantics_roster import info

        q = await self.make_queue()
        twin = self.sync_twin(q)
        one = info()
        two = info(kinds=None, name="w-2", started_at=one.started_at + 30)
        await q.announce_worker(one)
        await q.announce_worker(two)
        self.assertEqual(twin.workers(), [one, two], "oldest start first, every field kept")
        later = dataclasses.replace(one, running=0, heartbeat_at=one.heartbeat_at + 5)
        await q.announce_worker(later)  # a heartbeat replaces the announcement
        self.assertEqual(await q.workers(), [later, two])
        await q.retire_worker(one.id)
        await q.retire_worker(one.id)  # twice: nothing
        self.assertEqual(twin.workers(), [two])
        for bad in (info(id="../../etc"), info(concurrency=0), info(heartbeat_at=float("nan"))):
            with self.assertRaises(SerializationError):
                await q.announce_worker(bad)
        with self.assertRaises(TypeError):
            await q.retire_worker(7)  # type: ignore[arg-type]
        self.assertEqual(await q.workers(), [two], "a refused call wrote nothing")

    async def test_snooze_pause_run_now_delete_and_wait(self) -> None:
        q = await self.make_queue()
        job = await q.enqueue("nap", kind="mail")
        leased = await q.lease_one()
        assert leased is not None
        snoozed = await q.snooze(leased, 600)
        self.assertEqual((snoozed.state, snoozed.attempts), (JobState.READY, 0), "no attempt spent")
        with self.assertRaises(NotLeasedError):
            await q.snooze(leased, 5)  # its lease is gone
        self.assertIsNone(await q.lease_one(), "snoozed: not before its time")
        self.assertEqual((await q.run_now(job.id)).id, job.id)
        await q.pause("mail")
        await q.pause()
        self.assertEqual(await q.paused(), [None, "mail"])
        self.assertEqual(self.sync_twin(q).paused(), [None, "mail"], "stored in the queue")
        await q.resume()
        self.assertIsNone(await q.lease_one(), "the kind stays paused")
        await q.resume("mail")
        self.assertEqual(await q.paused(), [])
        again = await q.lease_one()
        assert again is not None and again.id == job.id
        with self.assertRaises(JobStateError):
            await q.delete(job.id)  # leased
        waiting = asyncio.create_task(q.wait(job.id, PATIENCE))
        await asyncio.sleep(0)
        await q.ack(again)
        self.assertIs((await asyncio.wait_for(waiting, PATIENCE)).state, JobState.DONE)
        pending = await q.enqueue("never")
        with self.assertRaises(TimeoutError):
            await q.wait(pending, 0.2)
        self.assertIs((await q.delete(pending.id)).state, JobState.READY)
        with self.assertRaises(JobNotFoundError):
            await q.delete(pending.id)
        with self.assertRaises(ValueError):
            await q.pause("")

    async def test_limits_are_set_obeyed_listed_and_cleared(self) -> None:
        q = await self.make_queue()
        self.assertIsNone(await q.set_limit("mail"), "neither concurrency nor rate: cleared (there was none)")
        limit = await q.set_limit("mail", concurrency=2)
        assert limit is not None
        self.assertEqual([(lim.kind, lim.concurrency) for lim in await q.limits()], [("mail", 2)])
        self.assertEqual(self.sync_twin(q).limits(), await q.limits(), "stored in the queue")
        await q.enqueue_many(list(range(5)), kind="mail")
        await q.enqueue("other", kind="sms")
        leased = await q.lease(10)
        self.assertEqual(sorted(job.kind for job in leased), ["mail", "mail", "sms"], "the limit, not the count")
        self.assertEqual(await q.lease(10), [], "both slots held")
        await q.ack(next(job for job in leased if job.kind == "mail"))
        self.assertEqual([job.kind for job in await q.lease(10)], ["mail"], "an ack frees one slot")
        await q.set_limit("rated", rate=1, per=10)
        await q.enqueue_many(["r1", "r2"], kind="rated")
        self.assertEqual([job.payload for job in await q.lease(10, kinds=["rated"])], ["r1"], "a burst of one")
        wait = await q.seconds_to_slot(kinds=["rated"])
        assert wait is not None
        self.assertTrue(0 < wait <= 10, wait)
        self.assertEqual(await q.lease(10, kinds=["rated"]), [], "the token is spent")
        self.advance(10.5)
        self.assertEqual([job.payload for job in await q.lease(10, kinds=["rated"])], ["r2"], "a token again")
        for bad, error in (
            (lambda: q.set_limit("mail", concurrency=-1), ValueError),
            (lambda: q.set_limit("mail", concurrency="2"), TypeError),
            (lambda: q.set_limit("bad\x00kind", concurrency=1), ValueError),
            (lambda: q.clear_limit("bad\x00kind"), ValueError),
            (lambda: q.set_limit("mail", concurrency=1, burst=3), ValueError),
        ):
            with self.assertRaises(error):
                await bad()
        self.assertEqual([lim.kind for lim in await q.limits()], ["mail", "rated"], "nothing written by a refusal")
        self.assertEqual((await q.limits())[0].concurrency, 2)
        self.assertTrue(await q.clear_limit("mail"))
        self.assertFalse(await q.clear_limit("mail"))
        self.assertIsNone(await q.set_limit("rated", concurrency=None))
        self.assertEqual(await q.limits(), [])

    async def test_groups_and_a_group_limit_are_awaited_as_the_queue_has_them(self) -> None:
        q = await self.make_queue()
        limit = await q.set_limit("report", group_concurrency=1, weights={"vip": 2})
        assert limit is not None
        self.assertEqual(self.sync_twin(q).limits(), [limit], "stored in the queue")
        await q.enqueue_many(["a1", "a2"], kind="report", group="acme")
        vip = await q.enqueue("v1", kind="report", group="vip")
        self.assertEqual(vip.group, "vip")
        self.assertEqual(sorted((job.group, job.payload) for job in await q.lease(10)), [("acme", "a1"), ("vip", "v1")])
        self.assertEqual(await q.lease(10), [], "one of each group at once")
        waiting = (await q.list_jobs("ready"))[0]
        self.assertIn("group concurrency limit", (await q.explain(waiting))[0])
        with self.assertRaises(ValueError):
            await q.enqueue("x", group="")
        with self.assertRaises(TypeError):
            await q.set_limit("report", weights={"vip": "2"})

    async def test_explain_is_awaited_and_names_a_limit_as_the_queue_does(self) -> None:
        q = await self.make_queue()
        await q.set_limit("mail", concurrency=1)
        first, second = await q.enqueue("first", kind="mail"), await q.enqueue("second", kind="mail")
        self.assertEqual([r.code for r in await q.explain(first)], ["first_in_line"])
        self.assertEqual([r.code for r in await q.explain(second.id)], ["work_ahead"])
        leased = await q.lease_one()
        assert leased is not None and leased.id == first.id
        self.assertEqual((await q.explain(leased))[0].code, "leased")
        reasons = await q.explain(second)
        self.assertEqual([r.code for r in reasons], ["limit"])
        self.assertIn("the concurrency limit of kind 'mail'", reasons[0])
        self.assertEqual(reasons, self.sync_twin(q).explain(second), "the same words as the Queue's")
        await q.ack(leased)
        self.assertEqual([r.code for r in await q.explain(first)], ["done"])
        with self.assertRaises(JobNotFoundError):
            await q.explain("no-such-job")

    async def test_explain_names_a_pause_as_the_queue_does(self) -> None:
        q = await self.make_queue()
        job = await q.enqueue("m", kind="mail")
        await q.pause("mail")
        reasons = await q.explain(job)
        self.assertEqual([r.code for r in reasons], ["paused"])
        self.assertEqual(reasons, self.sync_twin(q).explain(job), "the same words as the Queue's")
        await q.resume("mail")
        self.assertEqual([r.code for r in await q.explain(job)], ["first_in_line"])

    async def test_calls_run_together_and_a_sync_queue_sees_them(self) -> None:
        q = await self.make_queue()
        jobs = await asyncio.gather(*(q.enqueue(n) for n in range(20)))
        self.assertEqual(len({job.id for job in jobs}), 20)
        twin = self.sync_twin(q)
        self.assertEqual(len(twin), 20)
        leased = twin.lease(20)
        await q.ack_many(leased)
        self.assertEqual(twin.stats().done, 20)

    async def test_a_cancelled_call_leaves_the_queue_usable(self) -> None:
        q = await self.make_queue()
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(q.wait_for_jobs(IDLE_WAIT), 0.2)  # nothing comes: cancelled while it waits
        job = await q.enqueue("after")
        self.assertEqual((await q.lease_one()).id, job.id)  # type: ignore[union-attr]

    async def test_a_closed_queue_refuses_calls(self) -> None:
        q = await self.make_queue()
        await q.enqueue("x")
        await q.close()
        await q.close()  # twice is harmless
        with self.assertRaises(QueueClosedError):
            await q.enqueue("y")
