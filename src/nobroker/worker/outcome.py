"""What became of a job: the handler's outcome, and the counts of one run.

Owns: WorkerStats (what one ``Worker.run()`` did, one bucket per leased
job), Outcome (a result to ack, or an error text and traceback to nack
with) and ``call_handler`` (``call_async_handler`` on the event loop), which
turns whatever the handler did (returned, raised, returned a result that
cannot be stored) into one Outcome.
Imports: errors, jobs, codec.
"""

from __future__ import annotations

import dataclasses
import inspect
import traceback as traceback_module
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..codec import stored_json
from ..errors import PermanentError, SerializationError, Snooze
from ..jobs import MAX_ERROR_CHARS, MAX_RESULT_BYTES, MAX_TRACEBACK_CHARS, Job

Handler = Callable[[Any], Any]


@dataclass
class WorkerStats:
    """What one ``Worker.run()`` did. Every leased job ends in exactly one bucket.

    ``succeeded``: handler returned and the ack was recorded. ``failed``: the
    handler raised and the job went back for a retry. ``dead``: the job went
    to the dead-letter queue: the handler raised (retries exhausted, or
    PermanentError), or it returned a result that cannot be stored (not JSON,
    over the limit), which is never retried: the work is done. ``lost_leases``: the lease was no longer ours when the
    worker came to ack or nack (it expired and was delivered elsewhere, or an
    operator finished the job), so the outcome was not recorded by us.
    ``cancelled``: the job was cancelled while its handler ran (``q.cancel``),
    and its attempt ended cancelled, whatever the handler did. ``snoozed``:
    the handler raised ``Snooze(seconds)`` and the job went back to ready
    for later without spending an attempt (``q.snooze``).
    Not buckets of their own (such a job is counted failed or dead too):
    ``timed_out``, handlers that ran past their time limit (the attempt
    failed with "timed out after S s"), and of those ``abandoned``, the ones on
    a thread that could not be stopped (left to finish in the background; a
    new thread took its place and its late outcome is ignored).
    """

    leased: int = 0
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    lost_leases: int = 0
    cancelled: int = 0
    snoozed: int = 0
    timed_out: int = 0
    abandoned: int = 0

    def to_dict(self) -> dict[str, int]:
        """The counts as a JSON-ready dict (``cancelled``, ``snoozed``, ``timed_out``, ``abandoned`` only when not 0)."""
        out = dataclasses.asdict(self)
        for name in ("cancelled", "snoozed", "timed_out", "abandoned"):
            if not out[name]:
                del out[name]
        return out


@dataclass
class Outcome:
    """What the handler produced: a result to ack, or an error text to nack with."""

    result: Any = None
    error: str | None = None
    permanent: bool = False
    #: Seconds the handler asked to snooze for (it raised Snooze): not a failure.
    snooze: float | None = None
    #: What the handler raised, if it did (its traceback is kept with the job and logged).
    exc: BaseException | None = None

    def failed(self, exc: BaseException, *, permanent: bool = False) -> None:
        self.error, self.permanent, self.exc = error_text(exc), permanent, exc

    def traceback(self) -> str | None:
        if self.exc is None:
            return None
        return "".join(traceback_module.format_exception(self.exc))[-MAX_TRACEBACK_CHARS:]


def error_text(exc: BaseException) -> str:
    """``"<ExcType>: <message>"``, cut to the length the queue keeps."""
    message = str(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    return text


def unstorable(exc: SerializationError) -> Outcome:
    """The handler did its work but its result cannot be stored: dead, for running it again would repeat the work."""
    text = f"the handler's result cannot be stored, so the job is not run again: {exc}"
    return Outcome(error=text[:MAX_ERROR_CHARS], permanent=True)


def call_handler(
    handler: Handler, job: Job, run_awaitable: Callable[[Awaitable[Any]], Any]
) -> tuple[Outcome, BaseException | None]:
    """Run the handler for one job: its Outcome, and what must stop the worker once the job is settled.

    SystemExit and the like are retried like any failure, then handed back
    to be raised (the second value); ``run_awaitable`` runs what an async
    handler returned.
    """
    outcome = Outcome()
    escaping: BaseException | None = None
    try:
        result = handler(job)
        if inspect.isawaitable(result):
            result = run_awaitable(result)
        outcome.result = result
    except Snooze as exc:
        outcome.snooze = exc.seconds
    except PermanentError as exc:
        outcome.failed(exc, permanent=True)
    except Exception as exc:
        outcome.failed(exc)
    except BaseException as exc:  # SystemExit and the like: retry the job, then stop the worker
        outcome.failed(exc)
        escaping = exc
    return _storable(outcome), escaping


async def call_async_handler(handler: Handler, job: Job) -> tuple[Outcome, BaseException | None]:
    """``call_handler`` for an async handler, awaited on the event loop itself.

    A handler cancelled from inside (its own code, a library) has failed,
    like any other exception: the job is retried and the worker goes on. A
    hard stop cancels the running handlers too, but then nothing is sent.
    """
    import asyncio  # loaded already: this runs on the event loop

    outcome = Outcome()
    escaping: BaseException | None = None
    try:
        result = handler(job)
        if inspect.isawaitable(result):
            result = await result
        outcome.result = result
    except Snooze as exc:
        outcome.snooze = exc.seconds
    except PermanentError as exc:
        outcome.failed(exc, permanent=True)
    except (Exception, asyncio.CancelledError) as exc:
        outcome.failed(exc)
    except BaseException as exc:  # SystemExit and the like: retry the job, then stop the worker
        outcome.failed(exc)
        escaping = exc
    return _storable(outcome), escaping


def is_async_handler(handler: Handler) -> bool:
    """Is ``handler`` an ``async def`` function, or an object whose ``__call__`` is one?"""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))


def _storable(outcome: Outcome) -> Outcome:
    """The outcome, or the one that says its result cannot be stored (checked here, before the ack)."""
    if outcome.error is None and outcome.snooze is None and outcome.result is not None:
        try:
            stored_json(outcome.result, what="result", limit=MAX_RESULT_BYTES)
        except SerializationError as exc:
            return unstorable(exc)
    return outcome
