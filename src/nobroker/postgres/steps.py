"""An operation as the statements it sends, written once: run on a Connection, or awaited on an AsyncConnection.

Owns: the steps an operation yields (``one``, ``every``, ``run``, ``piped``,
``pause``, ``atomic``), ``Steps`` (the type of an operation written as a generator of
them), ``advance`` (one move of such a generator), and the two drivers that carry the steps out: ``drive`` on a psycopg
Connection (or connection.Session) and ``drive_async`` on an
AsyncConnection's session (asynclink.AsyncSession). Imports: nothing from
nobroker.

The operations (operations.py, queue_ops.py) never touch a connection: each
yields a step, say ``row = yield one(sql, params)``, and gets the rows back;
an error the statement raised is thrown into the operation at that yield,
so ``try: ... except UniqueViolation`` reads as it would around the call.
This is what lets Queue and AsyncQueue send the same statements, in the same
order, with the same meaning, without writing any of them twice (the style
of h11: the protocol as a pure state machine, the I/O at the edge).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import Any, TypeVar

T = TypeVar("T")

#: An operation: it yields steps, is sent each step's reply, and returns its result.
Steps = Generator[tuple[Any, ...], Any, T]

#: The kinds of step (the first item of each).
ONE, EVERY, RUN, PIPED, PAUSE, ATOMIC = range(6)


def one(sql: str, params: Any) -> tuple[Any, ...]:
    """Send a statement; the reply is its first row, or None."""
    return (ONE, sql, params)


def every(sql: str, params: Any) -> tuple[Any, ...]:
    """Send a statement; the reply is the list of its rows."""
    return (EVERY, sql, params)


def run(sql: str, params: Any) -> tuple[Any, ...]:
    """Send a statement whose rows do not matter; the reply is None."""
    return (RUN, sql, params)


def piped(first: str, sql: str, params: Any) -> tuple[Any, ...]:
    """Send ``first`` and then ``sql`` (same parameters) in one round trip; the reply is the rows of ``sql``."""
    return (PIPED, sql, params, first)


def pause(seconds: float) -> tuple[Any, ...]:
    """Wait ``seconds`` before the next step (time.sleep, or asyncio.sleep awaited)."""
    return (PAUSE, seconds)


def atomic(steps: Steps[Any]) -> tuple[Any, ...]:
    """Carry ``steps`` out in one transaction (committed when they return, rolled back when they raise); the reply is their result."""
    return (ATOMIC, steps)


def advance(steps: Generator[Any, Any, Any], reply: Any, error: BaseException | None) -> tuple[bool, Any]:
    """(True, the result) once the operation (or any generator driven so) returned; else (False, its next step)."""
    try:
        return False, (steps.send(reply) if error is None else steps.throw(error))
    except StopIteration as stop:
        return True, stop.value


def drive(session: Any, steps: Steps[T]) -> T:
    """Carry ``steps`` out on a synchronous connection (a Session: ``execute`` and ``pipeline``)."""
    done, step = advance(steps, None, None)
    while not done:
        try:
            reply, error = _do(session, step), None
        except Exception as exc:  # the statement's error, to the operation, which may handle it
            reply, error = None, exc
        done, step = advance(steps, reply, error)
    result: T = step
    return result


def _do(session: Any, step: tuple[Any, ...]) -> Any:
    kind = step[0]
    if kind == PAUSE:
        time.sleep(step[1])
        return None
    if kind == ATOMIC:
        with session.conn.transaction():
            return drive(session, step[1])
    if kind == PIPED:
        with session.pipeline():
            session.execute(step[3], step[2])
            cur = session.execute(step[1], step[2])
        return cur.fetchall()
    cur = session.execute(step[1], step[2])
    if kind == ONE:
        return cur.fetchone()
    return cur.fetchall() if kind == EVERY else None


async def drive_async(session: Any, steps: Steps[T]) -> T:
    """Carry ``steps`` out on an AsyncConnection's session, awaiting each statement: the event loop runs meanwhile."""
    done, step = advance(steps, None, None)
    while not done:
        try:
            reply, error = await _do_async(session, step), None
        except Exception as exc:  # as drive: to the operation
            reply, error = None, exc
        done, step = advance(steps, reply, error)
    result: T = step
    return result


async def _do_async(session: Any, step: tuple[Any, ...]) -> Any:
    kind = step[0]
    if kind == PAUSE:
        await asyncio.sleep(step[1])
        return None
    if kind == ATOMIC:
        async with session.conn.transaction():
            return await drive_async(session, step[1])
    if kind == PIPED:
        return await session.piped(step[3], step[1], step[2])
    cur = await session.execute(step[1], step[2])
    if kind == ONE:
        return await cur.fetchone()
    return await cur.fetchall() if kind == EVERY else None
