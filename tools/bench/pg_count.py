"""What each operation sends to PostgreSQL: statements and round trips, counted at the driver.

Owns: ``counting()`` (while it is open, every statement any psycopg
connection of this process sends is counted), Tally (what was counted), and
``per_operation`` (one operation run ``n`` times under counting, the tally
per run). The PostgreSQL benchmark (pg.py) prints these beside each figure,
for nobroker and for the hand-written baseline alike. Nothing is timed here.
Imports: psycopg.

A statement is one ``execute`` on a connection or a cursor. A round trip is
one wait for the server: each statement outside a pipeline is one, and a
pipeline block is one however many statements it holds (psycopg sends them
together and syncs once, at the end of the block). Not counted: the one
extra round trip psycopg spends the first time it prepares a statement on a
connection, and connecting. Every connection of the process counts, so the
NOTIFYs a queue sends on its second connection (wakeups.py) count too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class Tally:
    """Statements and round trips counted so far."""

    statements: int = 0
    round_trips: int = 0
    pipelines: int = 0  # pipeline blocks now open (their statements wait for the block's one sync)

    def sent(self) -> None:
        self.statements += 1
        if not self.pipelines:
            self.round_trips += 1


@contextmanager
def counting() -> Iterator[Tally]:
    """Count what every psycopg connection of this process sends until the block ends.

    psycopg's Cursor.execute (which Connection.execute goes through) and
    Connection.pipeline are wrapped at the class for the block's length, so
    connections opened before it count too, and so do connections of a
    subclass (nobroker's own, connection.py).
    """
    import psycopg

    tally = Tally()
    execute, pipeline = psycopg.Cursor.execute, psycopg.Connection.pipeline

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        tally.sent()
        return execute(self, *args, **kwargs)

    @contextmanager
    def counted_pipeline(self: Any) -> Iterator[Any]:
        before = tally.statements
        tally.pipelines += 1
        try:
            with pipeline(self) as pipe:
                yield pipe
        finally:
            tally.pipelines -= 1
            if tally.statements > before:
                tally.round_trips += 1

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Connection.pipeline = counted_pipeline  # type: ignore[method-assign, assignment]
    try:
        yield tally
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Connection.pipeline = pipeline  # type: ignore[method-assign]


def per_operation(tally: Tally, operation: Callable[[int], Any], n: int) -> tuple[float, float]:
    """(statements, round trips) per call of ``operation(i)``, over ``n`` calls."""
    assert n > 0, "at least one call"
    statements, round_trips = tally.statements, tally.round_trips
    for i in range(n):
        operation(i)
    return (tally.statements - statements) / n, (tally.round_trips - round_trips) / n


__all__ = ["Tally", "counting", "per_operation"]
