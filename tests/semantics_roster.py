"""The storage-independent tests of worker announcements (issue 17): announce, heartbeat, gone, retire, prune.

Owns: ``RosterSemantics``, a mixin run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose ``make_queue`` and ``reopen`` it uses).
Imports: the standard library and the public ``nobroker`` API only.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any

from nobroker import Queue, SerializationError, Worker
from nobroker.announcements import GONE_AFTER, PRUNE_AFTER, WorkerInfo, new_worker_id

if TYPE_CHECKING:
    import unittest

    _Base = unittest.TestCase
else:
    _Base = object

WAIT_SECONDS = 30.0


def info(**changes: Any) -> WorkerInfo:
    now = time.time()
    base = WorkerInfo(
        id=new_worker_id(), name="w-1", host="box.example", pid=4242, kinds=("mail", "sms"), concurrency=4,
        started_at=now - 60, running=2, heartbeat_at=now,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


class RosterSemantics(_Base):
    """Worker announcements through the public Queue only."""

    def make_queue(self, **options: Any) -> Queue:  # pragma: no cover - the storage's class has it
        raise NotImplementedError

    def reopen(self, q: Queue) -> Queue:  # pragma: no cover
        raise NotImplementedError

    def test_announce_heartbeat_and_retire(self) -> None:
        q = self.make_queue()
        self.assertEqual(q.workers(), [])
        one, two = info(), info(kinds=None, name="w-2", started_at=time.time() - 30)
        q.announce_worker(one)
        q.announce_worker(two)
        self.assertEqual(q.workers(), [one, two], "oldest start first, every field kept")
        later = dataclasses.replace(one, running=0, heartbeat_at=one.heartbeat_at + 5)
        q.announce_worker(later)  # a heartbeat replaces the announcement
        self.assertEqual(self.reopen(q).workers(), [later, two])
        q = self.reopen(q)
        q.retire_worker(one.id)
        q.retire_worker(one.id)  # twice: nothing
        self.assertEqual(q.workers(), [two])
        self.assertFalse(two.gone(time.time()))
        self.assertTrue(two.gone(two.heartbeat_at + GONE_AFTER))

    def test_an_old_announcement_is_pruned_by_the_next_one(self) -> None:
        q = self.make_queue()
        now = time.time()
        killed = info(heartbeat_at=now - PRUNE_AFTER - 1, started_at=now - PRUNE_AFTER - 100)
        quiet = info(heartbeat_at=now - GONE_AFTER - 1, started_at=now - 200)
        q.announce_worker(killed)
        q.announce_worker(quiet)
        self.assertEqual([w.id for w in q.workers()], [quiet.id], "a long-gone worker is forgotten")
        self.assertTrue(q.workers()[0].gone(time.time()))

    def test_bad_announcements_are_refused_before_anything_is_written(self) -> None:
        q = self.make_queue()
        for bad in (
            info(id="../../etc"), info(id="ABCDEF0123456789"), info(name=""), info(host="x" * 300), info(pid=-1),
            info(concurrency=0), info(kinds=("ok", "")), info(kinds=("k",) * 300), info(heartbeat_at=float("nan")),
            info(running=True),
        ):  # fmt: skip
            with self.subTest(bad=str(bad)[:90]), self.assertRaises(SerializationError):
                q.announce_worker(bad)
        self.assertEqual(q.workers(), [])

    def test_user_strings_are_kept_as_they_are(self) -> None:
        q = self.make_queue()
        odd = info(name='<img src=x onerror=alert(1)>', host="h\u00f6st\u2028\"'", kinds=("<b>k</b>", "a,b"))
        q.announce_worker(odd)
        self.assertEqual(q.workers(), [odd])

    def test_a_running_worker_announces_itself_and_takes_it_back_at_a_clean_stop(self) -> None:
        q = self.make_queue()
        q.enqueue("x", kind="mail")
        started = threading.Event()
        release = threading.Event()

        def handler(job: Any) -> None:
            started.set()
            release.wait(WAIT_SECONDS)

        worker = Worker(q, handler, concurrency=3, kinds=["mail"], name="mailer", handle_signals=False, idle_timeout=60)
        runner = threading.Thread(target=worker.run)
        runner.start()
        try:
            self.assertTrue(started.wait(WAIT_SECONDS))
            [me] = q.workers()
            self.assertEqual((me.name, me.kinds, me.concurrency), ("mailer", ("mail",), 3))
            self.assertLess(abs(me.started_at - time.time()), 60)
        finally:
            release.set()
            worker.stop()
            runner.join(WAIT_SECONDS)
        self.assertEqual(q.workers(), [])
