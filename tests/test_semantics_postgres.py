"""The shared semantic suite on the PostgreSQL storage.

Owns: the wiring of ``tests.semantics.QueueSemantics`` to PostgreSQL: one
migrated schema per run of this class, one fresh queue name per test, and a
clock moved by ``clock_offset`` (added to the database clock in every
statement) instead of sleeping. Imports: the standard library, the public
``nobroker`` API, tests.semantics and its semantics_* mixins, and
tests.pgsupport.
"""

from __future__ import annotations

import unittest
from typing import Any

from nobroker import Queue
from tests.pgsupport import PostgresTestCase, connect, fresh_name
from tests.semantics_ack_nack import AckNackSemantics
from tests.semantics_admin import AdminSemantics
from tests.semantics_bad_input import BadInputSemantics
from tests.semantics_dedupe import DedupeSemantics
from tests.semantics_enqueue import EnqueueSemantics
from tests.semantics_expiry import ExpirySemantics
from tests.semantics_lease import LeaseSemantics
from tests.semantics_lifecycle import LifecycleSemantics
from tests.semantics_reads import ReadSemantics
from tests.semantics_control import ControlSemantics
from tests.semantics_counters import CounterSemantics
from tests.semantics_control2 import Control2Semantics
from tests.semantics_timeouts import TimeoutSemantics
from tests.semantics_heartbeats import HeartbeatSemantics
from tests.semantics_limits import LimitSemantics
from tests.semantics_roster import RosterSemantics
from tests.semantics_schedules import ScheduleSemantics
from tests.semantics import QueueSemantics


class PostgresQueueSemantics(
    ControlSemantics, Control2Semantics, CounterSemantics, RosterSemantics, HeartbeatSemantics, TimeoutSemantics,
    LimitSemantics, QueueSemantics, ScheduleSemantics,
    EnqueueSemantics, LeaseSemantics, AckNackSemantics, ExpirySemantics, AdminSemantics, DedupeSemantics,
    ReadSemantics, LifecycleSemantics, BadInputSemantics, PostgresTestCase,
):
    """Every shared semantic test, on a fresh queue in a shared test schema."""

    #: The database clock keeps running between two readings within one check.
    time_slack = 0.5

    def setUp(self) -> None:
        super().setUp()
        self.prefix = fresh_name("q")
        self.offset = 0.0
        self.queues: list[Queue] = []
        self._options: dict[int, dict[str, Any]] = {}
        self._clock = connect(self.dsn)
        self.addCleanup(self._clock.close)

    # ------------------------------------------------------------ hooks
    def open_queue(self, **options: Any) -> Queue:
        q = Queue(self.dsn, schema=self.schema, clock_offset=self.offset, **options)
        self._options[id(q)] = options
        self.queues.append(q)
        self.addCleanup(q.close)
        return q

    def make_queue(self, **options: Any) -> Queue:
        options["name"] = f"{self.prefix}-{options.get('name', 'default')}"
        return self.open_queue(**options)

    def reopen(self, q: Queue) -> Queue:
        options = dict(self._options[id(q)])
        options["name"] = q.name
        q.close()
        return self.open_queue(**options)

    def advance(self, seconds: float) -> None:
        self.offset += seconds
        for q in self.queues:
            q.storage.clock_offset = self.offset  # type: ignore[attr-defined]

    def now(self) -> float:
        row = self._clock.execute("SELECT date_part('epoch', now()) + %s::float8", (self.offset,)).fetchone()
        return float(row[0])


if __name__ == "__main__":
    unittest.main()
