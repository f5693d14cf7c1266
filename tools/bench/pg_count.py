"""What each operation sends to PostgreSQL: statements and round trips, counted at the driver.

Owns: ``counting()`` (while it is open, every connection psycopg opens in this
process is wrapped and counted), Tally (what was counted), and
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


class _Cursor:
    """A psycopg cursor whose executes are counted; everything else is the cursor's own."""

    def __init__(self, cursor: Any, tally: Tally) -> None:
        self._cursor, self._tally = cursor, tally

    def execute(self, *args: Any, **kwargs: Any) -> _Cursor:
        self._tally.sent()
        self._cursor.execute(*args, **kwargs)
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor)

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cursor.close()


class _Connection:
    """A psycopg connection whose statements and round trips are counted; everything else is its own."""

    def __init__(self, conn: Any, tally: Tally) -> None:
        self._conn, self._tally = conn, tally

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self._tally.sent()
        return self._conn.execute(*args, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> _Cursor:
        return _Cursor(self._conn.cursor(*args, **kwargs), self._tally)

    @contextmanager
    def pipeline(self) -> Iterator[Any]:
        tally = self._tally
        before = tally.statements
        tally.pipelines += 1
        try:
            with self._conn.pipeline() as pipe:
                yield pipe
        finally:
            tally.pipelines -= 1
            if tally.statements > before:
                tally.round_trips += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __enter__(self) -> _Connection:
        self._conn.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._conn.__exit__(*exc)


@contextmanager
def counting() -> Iterator[Tally]:
    """Count what every connection opened meanwhile sends (psycopg.connect is wrapped until the block ends)."""
    import psycopg

    tally = Tally()
    real = psycopg.connect

    def connect(*args: Any, **kwargs: Any) -> _Connection:
        return _Connection(real(*args, **kwargs), tally)

    psycopg.connect = connect  # type: ignore[assignment]
    try:
        yield tally
    finally:
        psycopg.connect = real  # type: ignore[assignment]


def per_operation(tally: Tally, operation: Callable[[int], Any], n: int) -> tuple[float, float]:
    """(statements, round trips) per call of ``operation(i)``, over ``n`` calls."""
    assert n > 0, "at least one call"
    statements, round_trips = tally.statements, tally.round_trips
    for i in range(n):
        operation(i)
    return (tally.statements - statements) / n, (tally.round_trips - round_trips) / n


__all__ = ["Tally", "counting", "per_operation"]
