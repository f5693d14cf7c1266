"""The operations on a whole queue, and the reads: what an operator runs beside the work.

Owns: requeue_dead, purge, the bounded pruning of finished jobs, compaction,
folding the kept counts, and the reads (get, stats, counters, count, listings,
the next due time, a NOTIFY owed), each written as the steps it sends, as
operations.py's are; pruning and compaction as runs of their own, a batch
each (``Runs``). storage.py runs them on the side connection, so the
work's connection never waits behind them. Imports: errors, jobs, storage,
driver, fragments, rows, steps, operations, enqueueing.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from ..errors import StorageError
from ..jobs import COUNTER_NAMES, Counters, Job, QueueStats
from ..storage import job_not_found
from . import operations as ops
from .driver import pg_errors
from .enqueueing import ENQUEUE_TRIES
from .fragments import MAX_PRUNE_SPAN, PRUNE_BATCH
from .operations import Target
from .rows import row_job
from .steps import Steps, every, one, run


def requeue_dead(t: Target, job_id: str | None, notify: bool) -> Steps[int]:
    params = t.with_backoff(id=job_id, chan=t.channel, notify=notify)
    for _try in range(ENQUEUE_TRIES):
        try:
            count = len((yield from ops.upkeep_then(t, t.sql.notifying("requeue", notify), params)))
        except pg_errors.UniqueViolation:
            continue  # a job with the same dedupe key became active meanwhile: look again
        if count or job_id is None:
            return count
        row = yield one(t.sql["requeue_why"], params)
        if row is None:
            raise job_not_found(job_id, t.queue)
        state, holder, key = row
        if state == "dead" and holder is not None:
            raise ValueError(
                f"job {job_id} cannot be requeued: job {holder} is active with the same dedupe key {key!r}"
            )
        return 0
    raise StorageError(f"requeue_dead kept conflicting with concurrent enqueues after {ENQUEUE_TRIES} tries")


def purge(t: Target) -> Steps[int]:
    count: int = (yield one(t.sql["purge"], t.params()))[0]
    return count


#: The runs of an operation of many runs (storage.Plan's shape): each (what, its steps, may it run twice).
Runs = Generator[tuple[str, Callable[[], Steps[Any]], bool], Any, Any]


def pruning(t: Target, states: tuple[str, ...], keep: float, *, batches: int | None = None, what: str = "prune") -> Runs:
    """The runs that delete jobs in ``states`` finished ``keep`` seconds ago or more, PRUNE_BATCH at a time.

    Each batch is a run of its own (one statement, one transaction), so no
    lock, and no transaction a vacuum must wait for, outlives one batch, and
    the reads that share the connection (a dashboard's) wait for one batch at
    most, never for the whole. ``batches``: stop after this many, in all
    (None: until none is left); ``what``: the operation, as errors name it.
    Returns how many it deleted.
    """
    assert states and set(states) <= {"done", "dead", "cancelled"}, states
    dropped, done = 0, 0
    for state in states:
        after: int | None = 0  # seqs start at 1
        span = PRUNE_BATCH
        while after is not None and (batches is None or done < batches):
            start, width = after, span
            deleted, after, span = yield what, lambda: prune_batch(t, state, keep, start, width), True  # noqa: B023
            dropped += deleted
            done += 1
    return dropped


def prune_batch(t: Target, state: str, keep: float, after: int, span: int) -> Steps[tuple[int, int | None, int]]:
    """One batch of ``pruning``: up to PRUNE_BATCH jobs in ``state`` after seq ``after``, within ``span`` seqs.

    Returns how many it deleted, where the next batch starts (None: this
    state has none left) and the next one's span. Each state's batches walk
    its jobs in seq order, each from where the one before it stopped, so the
    work of a batch does not grow with what the batches before it deleted.
    The span narrows when a batch is full (it may have read up to ``span``
    rows for PRUNE_BATCH) and widens, up to MAX_PRUNE_SPAN, when one finds
    few: other queues' jobs (or live ones) between this state's.
    """
    deleted, taken, last, beyond = yield one(t.sql["prune"], t.params(state=state, keep=keep, after=after, span=span))
    assert deleted <= taken <= PRUNE_BATCH, "a batch deletes only what it took"
    # Whether the span may hold more is what the batch took: a job it took that changed
    # meanwhile stays (the DELETE checks its state again), and the span's rest still waits.
    if taken == PRUNE_BATCH:
        assert last is not None and last > after, "each full batch moves on"
        return deleted, last, max(PRUNE_BATCH, span // 2)
    if beyond is None:
        return deleted, None, span
    assert beyond - 1 > after, "each batch moves on"
    return deleted, beyond - 1, min(MAX_PRUNE_SPAN, span * 2) if taken < PRUNE_BATCH // 2 else span


#: The states compaction and done_retention prune together: a cancelled job is kept as a done one is.
FINISHED_KEPT_AS_DONE = ("done", "cancelled")


def compaction(t: Target, keep: float) -> Runs:
    """The runs of a compaction: done and cancelled jobs finished ``keep`` seconds ago or more deleted, a batch a run; (dropped, kept)."""
    yield "compact", lambda: ops.upkeep(t), True
    dropped = yield from pruning(t, FINISHED_KEPT_AS_DONE, keep, what="compact")
    kept = yield "compact", lambda: count(t), True
    return dropped, kept


def upkeep_pruning(t: Target, retentions: tuple[tuple[tuple[str, ...], float | None], ...], batches: int) -> Runs:
    """The runs of a round of automatic pruning: at most ``batches`` batches for each (states, retention)
    whose retention is not None, then the counts folded. Returns how many it deleted."""
    dropped = 0
    for states, keep in retentions:
        if keep is not None:
            dropped += yield from pruning(t, states, keep, batches=batches)
    yield "prune", lambda: fold_counts(t), True
    return dropped


#: Rows of count differences a read sums before it folds them into one per state.
FOLD_COUNTS_AT = 1000


def fold_counts(t: Target) -> Steps[None]:
    """Fold the queue's rows of count differences into one per state (stats stays a sum of a few rows)."""
    yield run(t.sql["fold_counts"], t.params())


# ---------------------------------------------------------------- reads
def get(t: Target, job_id: str) -> Steps[Job]:
    row = yield one(t.sql["get"], t.with_backoff(id=job_id))
    if row is None:
        raise job_not_found(job_id, t.queue)
    return row_job(row)


def stats(t: Target) -> Steps[QueueStats]:
    ready, delayed, leased, done, dead, cancelled, rows = yield one(t.sql["stats"], t.with_backoff())
    if rows > FOLD_COUNTS_AT:
        yield from fold_counts(t)
    return QueueStats(
        ready=int(ready), delayed=int(delayed), leased=int(leased), done=int(done), dead=int(dead),
        cancelled=int(cancelled),
    )


def counters(t: Target) -> Steps[Counters]:
    """The counters per kind (sql/010), the queue's rows of differences folded once they are many."""
    rows = yield every(t.sql["counters"], t.params())
    if sum(row[-1] for row in rows) > FOLD_COUNTS_AT:
        yield run(t.sql["fold_counters"], t.params())
    return {row[0]: dict(zip(COUNTER_NAMES, (int(n) for n in row[1:-1]))) for row in rows}


def count(t: Target) -> Steps[int]:
    total, rows = yield one(t.sql["count"], t.params())
    if rows > FOLD_COUNTS_AT:
        yield from fold_counts(t)
    return int(total)


def notify(conn: Any, t: Target) -> None:
    """NOTIFY the queue's channel, on its own (what a write that did not notify owed)."""
    conn.execute("SELECT pg_notify(%s, '')", (t.channel,))


def next_due(conn: Any, t: Target) -> float | None:
    """Seconds until the queue's next scheduled job or lease comes due (None: there is none)."""
    row = conn.execute(t.sql["next_due"], t.params()).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def list_jobs(t: Target, listing: str | None, limit: int | None, offset: int, kind: str | None) -> Steps[list[Job]]:
    reach = None if limit is None else limit + offset  # where the page ends
    params = t.with_backoff(kind=kind, limit=limit, offset=offset, reach=reach)
    statement = "list" if listing is None else f"list_{listing}"
    return [row_job(row) for row in (yield every(t.sql[statement], params))]
