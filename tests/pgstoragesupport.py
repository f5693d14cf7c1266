"""Helpers shared by the PostgreSQL storage's test modules: a queue per test, the bounds they wait by, a fork.

Owns: ``PostgresStorageCase`` (a fresh queue name per test, ``self.name``, and
``open_queue``, which may name another queue and migrates as a Queue does by
default), the bounds these tests wait by (PATIENCE), NO_BACKOFF, SRC_DIR
for the processes they start and ``_fork``, the multiprocessing context
their child processes are forked from. Imports: the standard library, the
public ``nobroker`` API and tests.pgsupport.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

from nobroker import BackoffPolicy, Queue
from tests.pgsupport import PostgresTestCase, fresh_name

SRC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
#: Generous bound for anything that should happen "soon" on a busy shared machine.
PATIENCE = 60.0
NO_BACKOFF = BackoffPolicy(base=0, jitter=0)

_fork = multiprocessing.get_context("fork")


class PostgresStorageCase(PostgresTestCase):
    """A PostgresTestCase whose every test has a fresh queue name (``self.name``) and ``open_queue``."""

    def open_queue(self, name: str | None = None, **options: Any) -> Queue:
        q = Queue(self.dsn, name or self.name, schema=self.schema, **options)
        self.addCleanup(q.close)
        return q

    def setUp(self) -> None:
        super().setUp()
        self.name = fresh_name("q")
