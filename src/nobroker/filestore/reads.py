"""The read-only queries: a job, the counts, the listings, as of now.

Owns: what get, stats and list_jobs answer from a replayed state at a
read's ``now``. Reads never write, yet show the queue as of now: a lease
whose deadline passed shows as the reclaim a writer will record
(leases.as_reclaimed), though no writer has come by yet. Only those leases
cost anything extra: state.expired walks just the top of the lease heap.
Imports: jobs, storage, entry, replay, leases.

These are functions of the state, the time and the backoff; the storage
runs them under the shared lock after reading forward (Committer._read) and
hands them ``job_of``, which reads a job's payload back from its record.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator
from operator import attrgetter

from ..jobs import BackoffPolicy, Job, JobState, QueueStats, attempt_history
from ..storage import job_not_found
from . import leases
from .entry import CANCELLED, DEAD, READY, Entry
from .leases import JobOf
from .replay import QueueState

_ROW = attrgetter("row")  # where a job sits in the state's enqueue order
#: The listings an expired lease's job joins, by where its reclaim puts it (see listed).
_WITHIN = {"dead": ("dead",), "cancelled": ("cancelled",), "ready": ("runnable", "delayed"), "runnable": ("runnable",), "delayed": ("delayed",)}


def shown(entry: Entry, now: float, backoff: BackoffPolicy, job_of: JobOf) -> Job:
    """The job as a read at ``now`` shows it."""
    job = job_of(entry)
    if leases.lease_expired(entry, now):
        fields = leases.as_reclaimed(entry, backoff)
        if entry.leased_at is not None:  # the attempt shows as the reclaim will record it: expired at the deadline
            ended = entry.ended_attempt(now, entry.lease_deadline, fields["state"])  # type: ignore[arg-type]
            fields["attempt_history"] = attempt_history(entry.history, ended)
        return dataclasses.replace(job, **fields)
    return job


def get(state: QueueState, queue: str, job_id: str, now: float, backoff: BackoffPolicy, job_of: JobOf) -> Job:
    entry = state.get(job_id)
    if entry is None:
        raise job_not_found(job_id, queue)
    return shown(entry, now, backoff, job_of)


def stats(state: QueueState, now: float, backoff: BackoffPolicy) -> QueueStats:
    """The counts per state, expired leases counted where their reclaim will put them."""
    counted = state.stats(now)
    expired = state.expired(now)
    if not expired:
        return counted
    counts = dataclasses.asdict(counted)  # every state, cancelled too (to_dict leaves it out at 0)
    for entry in expired:
        moved = reclaimed_listing(entry, now, backoff)
        counts["leased"] -= 1
        counts["ready" if moved == "runnable" else moved] += 1
    return QueueStats(**counts)


def list_jobs(
    state: QueueState, listing: str | None, limit: int | None, offset: int, kind: str | None,
    now: float, backoff: BackoffPolicy, job_of: JobOf,
) -> list[Job]:  # fmt: skip
    """The jobs of ``listing`` (and ``kind``), oldest first, after skipping ``offset``, at most ``limit``."""
    out: list[Job] = []
    skipped = 0
    for entry in listed(state, listing, now, backoff):
        if kind is not None and entry.kind != kind:
            continue
        if skipped < offset:
            skipped += 1
            continue
        out.append(shown(entry, now, backoff, job_of))
        if limit is not None and len(out) >= limit:
            break
    return out


def listed(state: QueueState, listing: str | None, now: float, backoff: BackoffPolicy) -> Iterator[Entry]:
    """The jobs a read at ``now`` shows in ``listing`` (one of LISTINGS, or None: all), oldest first.

    Ready and delayed as stats() counts them; a lease that expired joins
    where its reclaim will put it.
    """
    state.promote(now)
    if listing == "delayed":
        own: Iterator[Entry] = state.delayed_entries()
    elif listing == "runnable":
        own = (e for e in state.entries(READY) if not state.is_delayed(e))
    else:
        own = state.entries(None if listing is None else JobState(listing))
    expired = state.expired(now)
    if listing in (None, "done") or not expired:
        return own
    if listing == "leased":
        return (e for e in own if not leases.lease_expired(e, now))
    joining = [e for e in expired if reclaimed_listing(e, now, backoff) in _WITHIN[listing]]
    joining.sort(key=_ROW)
    return heapq.merge(own, joining, key=_ROW)


def reclaimed_listing(entry: Entry, now: float, backoff: BackoffPolicy) -> str:
    """Where an expired lease's job is listed: dead, delayed or runnable (see leases.as_reclaimed)."""
    shown_as = leases.as_reclaimed(entry, backoff)
    if shown_as["state"] is DEAD or shown_as["state"] is CANCELLED:
        return str(shown_as["state"].value)
    return "delayed" if shown_as["available_at"] > now else "runnable"
