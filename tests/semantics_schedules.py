"""The shared semantic suite of periodic jobs: what q.schedule promises, whatever stores it.

Owns: ``ScheduleSemantics``, a mixin of tests for ``schedule``,
``unschedule``, ``schedules`` and ``enqueue_due`` (the look every Worker
takes), run against both storages through the hooks of tests.semantics
(``make_queue``, ``reopen``, ``advance``, ``now``, ``time_slack``).
Imports: the standard library and the public ``nobroker`` API only.

Every interval here is 100 s or more and the clock is moved, never slept
on, so the database clock's drift (``time_slack``) never moves a tick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nobroker import JobState, Queue, Schedule

if TYPE_CHECKING:
    import unittest

    _Base = unittest.TestCase
else:
    _Base = object

#: The catch_up="all" cap (nobroker.schedules.MAX_CATCH_UP_TICKS, as the docs state it).
CATCH_UP_CAP = 100
#: How late a tick may be and still fire under catch_up="none" (schedules.ON_TIME_SECONDS).
ON_TIME = 60.0


def tick(name: str, due: float) -> str:
    """A tick's job id, as the docs spell it."""
    return f"tick:{name}@{round(due * 1000)}"


class ScheduleSemantics(_Base):
    """Periodic jobs on any storage (mixed into a storage's QueueSemantics TestCase)."""

    if TYPE_CHECKING:  # the hooks, as tests.semantics.QueueSemantics declares them
        time_slack: float

        def make_queue(self, **options: Any) -> Queue: ...
        def reopen(self, q: Queue) -> Queue: ...
        def advance(self, seconds: float) -> None: ...
        def now(self) -> float: ...

    def ids(self, q: Queue) -> list[str]:
        return sorted(job.id for job in q.list_jobs())

    # ------------------------------------------------------------ defining
    def test_a_schedule_is_stored_with_its_next_run(self) -> None:
        q = self.make_queue()
        before = self.now()
        s = q.schedule("report", {"kind": "daily"}, every=100, kind="reports", priority=3)
        self.assertIsInstance(s, Schedule)
        self.assertEqual((s.name, s.every, s.cron, s.kind, s.priority, s.catch_up), ("report", 100.0, None, "reports", 3, "last"))
        self.assertEqual(s.payload, {"kind": "daily"})
        self.assertAlmostEqual(s.next_run, before + 100, delta=self.time_slack + 1e-6)
        q = self.reopen(q)
        (stored,) = q.schedules()
        self.assertEqual(stored.to_dict(), s.to_dict())
        self.assertEqual(len(q), 0, "defining a schedule enqueues nothing")

    def test_defining_the_same_schedule_again_keeps_its_cursor(self) -> None:
        q = self.make_queue()
        first = q.schedule("beat", "x", every=100)
        self.advance(150)
        again = q.schedule("beat", "x", every=100)
        self.assertEqual(again.next_run, first.next_run, "every process calls schedule() at start: it must not reset")
        self.assertEqual(len(q.enqueue_due()), 1)
        changed = q.schedule("beat", "y", every=100)
        self.assertGreater(changed.next_run, self.now(), "a new definition counts from now")
        self.assertEqual(changed.payload, "y")
        self.assertEqual(len(q.schedules()), 1)

    def test_bad_schedules_are_refused_and_nothing_is_written(self) -> None:
        q = self.make_queue()
        bad: list[tuple[type[Exception], dict[str, Any]]] = [
            (ValueError, {}),
            (ValueError, {"every": 10, "cron": "* * * * *"}),
            (ValueError, {"every": 0}),
            (ValueError, {"every": -5}),
            (ValueError, {"every": 0.001}),
            (TypeError, {"every": "10"}),
            (ValueError, {"cron": "61 * * * *"}),
            (ValueError, {"cron": "* * *"}),
            (ValueError, {"cron": "0 0 30 2 *"}),
            (TypeError, {"cron": 5}),
            (ValueError, {"cron": "0 9 * * *", "tz": "Mars/Olympus"}),
            (ValueError, {"every": 10, "tz": "Europe/Berlin"}),
            (ValueError, {"every": 10, "catch_up": "some"}),
            (ValueError, {"every": 10, "priority": 2**40}),
            (TypeError, {"every": 10, "priority": 1.5}),
            (ValueError, {"every": 10, "kind": ""}),
        ]
        for error, kwargs in bad:
            with self.subTest(kwargs=kwargs), self.assertRaises(error):
                q.schedule("s", "payload", **kwargs)
        with self.assertRaises(ValueError):
            q.schedule("", "payload", every=10)
        with self.assertRaises(ValueError):
            q.schedule("s" * 1000, "payload", every=10)
        with self.assertRaises(ValueError):  # not JSON
            q.schedule("s", {1, 2}, every=10)
        self.assertEqual(q.schedules(), [])
        self.assertEqual(self.reopen(q).schedules(), [])

    # ------------------------------------------------------------ ticking
    def test_each_due_tick_is_enqueued_once_with_its_id(self) -> None:
        q = self.make_queue()
        s = q.schedule("beat", {"n": 1}, every=100, kind="beats", priority=7)
        self.assertEqual(q.enqueue_due(), [], "nothing is due before the first tick")
        self.advance(101)
        (job,) = q.enqueue_due()
        self.assertEqual(job.id, tick("beat", s.next_run))
        self.assertEqual((job.payload, job.kind, job.priority, job.state), ({"n": 1}, "beats", 7, JobState.READY))
        self.assertEqual(q.enqueue_due(), [], "a tick is enqueued once")
        other = self.reopen(q)
        self.assertEqual(other.enqueue_due(), [], "and once across handles")
        self.assertEqual(other.schedules()[0].next_run, s.next_run + 100)
        self.advance(100)
        (second,) = other.enqueue_due()
        self.assertEqual(second.id, tick("beat", s.next_run + 100))
        self.assertEqual(self.ids(other), sorted([job.id, second.id]))

    def test_catch_up_all_enqueues_every_missed_tick_in_bounded_steps(self) -> None:
        q = self.make_queue()
        s = q.schedule("all", None, every=100, catch_up="all")
        self.advance(100 * (CATCH_UP_CAP + 50) + 30)  # the queue was left alone for 150 ticks
        first = q.enqueue_due()
        self.assertEqual(len(first), CATCH_UP_CAP, "one look enqueues at most the cap")
        rest = q.enqueue_due()
        self.assertEqual(len(rest), 50, "the next look takes the rest")
        expected = sorted(tick("all", s.next_run + 100 * k) for k in range(CATCH_UP_CAP + 50))
        self.assertEqual(sorted(j.id for j in first + rest), expected, "every tick, none twice")
        self.assertEqual(q.enqueue_due(), [])
        self.assertEqual(q.schedules()[0].next_run, s.next_run + 100 * (CATCH_UP_CAP + 50))

    def test_catch_up_last_enqueues_only_the_latest_missed_tick(self) -> None:
        q = self.make_queue()
        s = q.schedule("last", None, every=100, catch_up="last")
        self.advance(100 * 5 + 30)
        (job,) = q.enqueue_due()
        self.assertEqual(job.id, tick("last", s.next_run + 400))
        self.assertEqual(q.schedules()[0].next_run, s.next_run + 500)

    def test_catch_up_none_skips_late_ticks_and_fires_on_time_ones(self) -> None:
        q = self.make_queue()
        s = q.schedule("none", None, every=100, catch_up="none")
        self.advance(100 * 5 + ON_TIME + 10)  # the latest due tick is 70 s late: missed
        self.assertEqual(q.enqueue_due(), [])
        self.assertEqual(q.schedules()[0].next_run, s.next_run + 500, "the missed ticks are skipped for good")
        self.advance(100 - ON_TIME - 10 + 5)  # the next one, found 5 s after its time
        (job,) = q.enqueue_due()
        self.assertEqual(job.id, tick("none", s.next_run + 500))

    def test_cron_ticks_fall_on_the_wall_clock(self) -> None:
        q = self.make_queue()
        s = q.schedule("five", "x", cron="*/5 * * * *")
        self.assertEqual(s.next_run % 300, 0)
        self.assertLess(s.next_run - self.now(), 300 + self.time_slack)
        self.advance(s.next_run - self.now() + 1)
        (job,) = q.enqueue_due()
        self.assertEqual(job.id, tick("five", s.next_run))
        self.assertEqual(q.schedules()[0].next_run, s.next_run + 300)
        berlin = q.schedule("nine", "y", cron="0 9 * * *", tz="Europe/Berlin")
        self.assertIn(berlin.next_run % 3600, (0.0,), "09:00 in Berlin is a whole hour of UTC")

    # ------------------------------------------------------------ lifetime
    def test_unschedule_stops_the_ticks_and_keeps_enqueued_ones(self) -> None:
        q = self.make_queue()
        q.schedule("gone", None, every=100)
        self.advance(101)
        (job,) = q.enqueue_due()
        self.assertIs(q.unschedule("gone"), True)
        self.assertIs(q.unschedule("gone"), False)
        self.advance(1000)
        self.assertEqual(q.enqueue_due(), [])
        self.assertEqual(self.ids(self.reopen(q)), [job.id])

    def test_purge_and_compaction_keep_schedules_and_never_repeat_a_tick(self) -> None:
        q = self.make_queue()
        s = q.schedule("keep", None, every=100)
        self.advance(101)
        q.enqueue_due()
        leased = q.lease_one()
        assert leased is not None
        q.ack(leased)
        q.compact()  # the done tick is gone: only the stored cursor stops it coming back
        self.assertEqual(q.enqueue_due(), [])
        q.purge()
        q = self.reopen(q)
        self.assertEqual([x.name for x in q.schedules()], ["keep"])
        self.assertEqual(q.enqueue_due(), [])
        self.advance(100)
        self.assertEqual([j.id for j in q.enqueue_due()], [tick("keep", s.next_run + 100)])
