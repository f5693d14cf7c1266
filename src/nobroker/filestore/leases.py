"""The writer's decisions: what each operation appends, and the values replay must never invent.

Owns: one decision per writing operation (enqueue, lease, ack, ack_many,
nack, extend, extend_many, set_stage, cancel, requeue_dead, purge, and the reclaim of expired
leases that precedes them all), each a function of the state, the time and
the operation's arguments that adds records to a batch; and the rules behind
them: ids, fencing tokens, deadlines, jittered retry and reclaim times, when
a job is dead; a lease under limits (which kinds it may take: limit_ops.py).
Imports: errors, jobs, codec, storage, framing, entry, records, index,
replay, plain_jobs, limit_ops. Ids, tokens and the refusals both storages share come from
nobroker.storage.

A decision runs under the file lock, after the read forward, with the state
as of that moment (``batch.state``). It refuses (raises) before it adds any
record of its own; records it added before a refusal (ack_many) are still
true and are written (ack_many, extend_many). It reads the clock value it is given and the random
source; what it chooses is written into records as absolute values, so
replay (which only reads records) stays a pure function of the bytes.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..codec import load_json
from ..errors import JobNotFoundError, NotLeasedError
from ..jobs import BackoffPolicy, Job, JobState
from ..storage import (
    EnqueueSpec,
    cancel_refusal,
    finished_refusal,
    job_not_found,
    new_job_id,
    new_token,
    refusal,
    worker_label,
)
from . import limit_ops, plain_jobs, records
from .entry import CANCELLED, DEAD, DONE, LEASED, READY, Entry
from .framing import RecordType, frame
from .index import ID_TEXT, id_number
from .replay import QueueState

_rng = random.SystemRandom()
#: The kinds a lease skips while nothing is paused.
_NONE_PAUSED: frozenset[str] = frozenset()

#: A job's payload read back from its record (the storage's, under the file lock).
JobOf = Callable[[Entry], Job]
#: Only the payload of that record. A decision reads it before it adds a record:
#: a read that fails (EIO, a damaged record) must leave the batch as it was.
PayloadOf = Callable[[Entry], Any]


class Batch(Protocol):
    """What a decision writes into (commit.Batch): each record is applied to ``state`` as it is added."""

    state: QueueState
    pos: int  # where the next record will start
    wakes: bool  # does the batch make work runnable (worth waking a worker)?
    lean: bool  # the log is format version 4 (records.available_text)

    def add(self, record: records.Record, text: bytes | None = None) -> int: ...

    def add_job(self, entry: Entry, data: bytes, number: int = -2) -> None: ...

    def add_jobs(self, data: bytes, count: int) -> None: ...


# ---------------------------------------------------------------- the decisions
def reclaim(batch: Batch, now: float, backoff: BackoffPolicy) -> None:
    """Beat three: every lease whose deadline passed counts as a failed attempt."""
    state = batch.state
    for entry in state.expired(now):
        if state.limits and limit_ops.frees_slot(state, entry):
            batch.wakes = True
        if entry.cancel_requested:  # a cancelled job's lease ends cancelled, never in a retry
            batch.add(records.cancel(entry.id, now))
        elif exhausted(entry):
            batch.add(records.dead(entry.id, now, expiry_error(entry)))
        else:
            batch.add(records.reclaim(entry.id, now, reclaim_time(entry, backoff)))


def enqueue(batch: Batch, now: float, specs: Sequence[EnqueueSpec], job_of: JobOf) -> list[Job]:
    """New jobs, READY at once or after their delay; an id or dedupe key the queue holds returns that job."""
    state = batch.state
    if len(specs) == 1:
        job = _plain_job(batch, now, specs[0])
        if job is not None:
            return [job]
    # A batch of plain jobs (no id, dedupe key, delay or time limit of their own): in bulk.
    # One job alone costs less the general way, without the bulk path's setup.
    plain = plain_jobs.enqueue_plain(state, batch.pos, now, specs, batch.lean)
    if plain is not None:
        batch.add_jobs(plain[0], len(plain[1]))
        return plain[1]
    out: list[Job] = []
    created: dict[str, Any] = {}  # id -> payload, for jobs this very call adds
    # One random read for the whole batch; each new job takes 8 bytes of it, as the
    # number its 16 hex digits spell (the index keys cold jobs by it: never parsed back).
    fresh = os.urandom(8 * len(specs))
    times: dict[int, str] = {}
    held = _held(state, specs, job_of)
    for k, spec in enumerate(specs):
        existing = None if spec.job_id is None and spec.dedupe_key is None else _existing(state, spec)
        if existing is not None:
            if existing.id in created:  # its record is not on disk yet
                out.append(existing.to_job(created[existing.id]))
            else:
                out.append(held[existing.id])
            continue
        job_id = spec.job_id
        number = -2  # not known: QueueState.add works it out
        if job_id is None:
            number = int.from_bytes(fresh[8 * k : 8 * k + 8], "big")
            job_id = ID_TEXT % number
            while state.holds_number(job_id, number) or job_id in created:
                job_id = new_job_id()
                number = id_number(job_id)
        available_at = now + spec.delay if spec.delay else now
        entry = Entry.fresh(
            job_id, spec.priority, spec.max_attempts, available_at, now, state.next_seq,
            spec.kind, spec.dedupe_key, 0, spec.timeout, spec.group,
        )  # fmt: skip
        body = records.enqueue_body(entry, spec.payload_json, times, batch.lean)
        batch.add_job(entry, frame(RecordType.ENQUEUE, body), number)
        created[job_id] = spec.payload
        out.append(entry.to_job(spec.payload))
    return out


def _plain_job(batch: Batch, now: float, spec: EnqueueSpec) -> Job | None:
    """One new job with no id, dedupe key, delay, time limit or group (the usual enqueue), without an Entry.

    None, with nothing changed, when it is not such a job or cannot be a
    cold row: the general path then takes it.
    """
    if spec.job_id is not None or spec.dedupe_key is not None or spec.delay or spec.timeout is not None or spec.group is not None:
        return None
    state = batch.state
    number = int.from_bytes(os.urandom(8), "big")
    job_id = ID_TEXT % number
    if state.holds_number(job_id, number):
        return None  # one chance in 2**64: the general path draws again
    seq, offset = state.next_seq, batch.pos
    data = frame(RecordType.ENQUEUE, records.new_job_body(number, spec, now, seq, batch.lean))
    if not state.add_new(number, job_id, seq, offset, len(data), now, spec.priority, spec.max_attempts, spec.kind):
        return None
    batch.add_jobs(data, 1)
    return Job(job_id, spec.payload, spec.priority, JobState.READY, 0, spec.max_attempts, now, now, None, None, None, seq, spec.kind)


def _held(state: QueueState, specs: Sequence[EnqueueSpec], job_of: JobOf) -> dict[str, Job]:
    """The jobs the queue already holds that ``specs`` name by id or dedupe key, read before any record (see PayloadOf)."""
    held: dict[str, Job] = {}
    for spec in specs:
        if spec.job_id is not None or spec.dedupe_key is not None:
            existing = _existing(state, spec)
            if existing is not None and existing.id not in held:
                held[existing.id] = job_of(existing)
    return held


def _existing(state: QueueState, spec: EnqueueSpec) -> Entry | None:
    if spec.job_id is not None:
        entry = state.get(spec.job_id)
        if entry is not None:
            return entry
    if spec.dedupe_key is not None:
        holder = state.active_keys.get((spec.kind, spec.dedupe_key))
        if holder is not None:
            return state.get(holder)
    return None


def lease(
    batch: Batch, now: float, count: int, visibility_timeout: float, kinds: frozenset[str] | None, payload_of: PayloadOf
) -> list[Job]:
    """Up to ``count`` runnable jobs (of these ``kinds``, none paused), best first: attempts + 1, a new token, a deadline."""
    state = batch.state
    state.promote(now)
    taken: list[Job] = []
    if None in state.paused:  # the whole queue is paused (control_ops.pause)
        return taken
    skip = frozenset(k for k in state.paused if k is not None) if state.paused else _NONE_PAUSED
    by = worker_label()
    while len(taken) < count:
        # Under limits, each pick sees the LEASE records the ones before it added.
        entry = state.pop_ready(now, limit_ops.lease_kinds(state, now, kinds) if state.limits else kinds, skip)
        if entry is None:
            break
        # Read the payload now, while the file lock pins the generation that
        # entry.offset points into, and before the record: a failed read
        # must not leave the job leased under a token nobody was given.
        try:
            payload = payload_of(entry)
        except BaseException:
            state.unpop(entry, now)  # popped, never leased: back where it was
            raise
        deadline, attempts, token = now + visibility_timeout, entry.attempts + 1, new_token()
        batch.add(
            records.lease(entry.id, now, deadline, attempts, token, by),
            records.lease_text(entry.id, now, deadline, attempts, token, by, visibility_timeout if batch.lean else None),
        )  # fmt: skip
        taken.append(entry.to_job(payload))
    if taken and len(taken) == count and state.counts[READY] > state.n_delayed:
        # One wake-up may stand for many jobs: a full lease that leaves
        # runnable ones behind passes it on to the next idle worker.
        batch.wakes = True
    return taken


def leased_entry(state: QueueState, queue: str, job_id: str, token: str | None, action: str) -> Entry:
    """The job ``token`` holds the lease of (None: an operator's call by id), or the refusal of ``action``."""
    entry = state.get(job_id)
    if entry is None:
        raise job_not_found(job_id, queue)
    if not holds_lease(entry, token):
        held = entry.finished_token if entry.state is DONE else entry.lease_token
        raise refusal(action, job_id, entry.state.value, token, held)
    return entry


def ack(batch: Batch, now: float, queue: str, job_id: str, token: str | None, result_json: str | None, result: Any) -> None:
    """DONE, with ``result`` (decoded from ``result_json`` by the facade: what replay holds)."""
    if finished_under(batch.state.get(job_id), token):
        return  # acking a finished job again is harmless
    entry = leased_entry(batch.state, queue, job_id, token, "ack")
    if entry.cancel_requested:
        raise cancel_refusal("ack", job_id)
    _ending(batch, entry)
    batch.add(records.ack(job_id, now, with_result=result_json is not None, result=result),
              records.ack_text(job_id, now, result_json))  # fmt: skip


def ack_many(batch: Batch, now: float, queue: str, items: list[tuple[str, str | None, str | None]]) -> None:
    """Every ack that holds its lease; then the first refusal, if any (the acks before it are still written)."""
    first_refusal: Exception | None = None
    for job_id, token, result_json in items:
        if finished_under(batch.state.get(job_id), token):
            continue  # acking a finished job again is harmless
        try:
            entry = leased_entry(batch.state, queue, job_id, token, "ack")
            if entry.cancel_requested:
                raise cancel_refusal("ack", job_id)
        except (NotLeasedError, JobNotFoundError) as exc:
            first_refusal = first_refusal or exc
            continue
        _ending(batch, entry)
        if result_json is None:
            batch.add(records.ack(job_id, now), records.ack_text(job_id, now, None))
        else:
            record = records.ack(job_id, now, with_result=True, result=load_json(result_json))
            batch.add(record, records.ack_text(job_id, now, result_json))
    if first_refusal is not None:
        raise first_refusal


def nack(
    batch: Batch, now: float, queue: str, backoff: BackoffPolicy, job_id: str, token: str | None,
    error: str | None, delay: float | None, permanent: bool, traceback: str | None, payload_of: PayloadOf,
) -> Job:  # fmt: skip
    """READY again after ``delay`` or the backoff; DEAD if ``permanent`` or its attempts are used up."""
    entry = leased_entry(batch.state, queue, job_id, token, "nack")
    if entry.cancel_requested:
        raise cancel_refusal("nack", job_id)
    payload = payload_of(entry)  # before any record (see PayloadOf)
    _ending(batch, entry)
    if permanent or exhausted(entry):
        batch.add(records.dead(job_id, now, error, traceback))
    else:
        available_at = retry_time(entry, now, backoff, delay)
        batch.add(records.nack(job_id, now, entry.attempts, available_at, error, traceback))
    return entry.to_job(payload)


def extend(batch: Batch, now: float, queue: str, job_id: str, token: str | None, seconds: float, payload_of: PayloadOf) -> Job:
    """The lease's deadline becomes ``now + seconds`` (never further and further out)."""
    entry = leased_entry(batch.state, queue, job_id, token, "extend")
    payload = payload_of(entry)  # before the record (see PayloadOf)
    batch.add(records.extend(job_id, now, now + seconds))
    return entry.to_job(payload)


def extend_many(
    batch: Batch, now: float, queue: str, items: list[tuple[str, str | None]], seconds: float, payload_of: PayloadOf
) -> list[Job]:
    """Every lease that still holds renewed to ``now + seconds``; then the first refusal, if any.

    One EXTEND record per renewed job, all in one write. The renewals before
    and after a refused job are written whatever it was refused for.
    """
    renewed: list[Job] = []
    first_refusal: Exception | None = None
    for job_id, token in items:
        try:
            entry = leased_entry(batch.state, queue, job_id, token, "extend")
        except (NotLeasedError, JobNotFoundError) as exc:
            first_refusal = first_refusal or exc
            continue
        payload = payload_of(entry)  # before the record (see PayloadOf)
        batch.add(records.extend(job_id, now, now + seconds))
        renewed.append(entry.to_job(payload))
    if first_refusal is not None:
        raise first_refusal
    return renewed


def set_stage(batch: Batch, now: float, queue: str, job_id: str, token: str | None, stage: str | None, payload_of: PayloadOf) -> Job:
    entry = leased_entry(batch.state, queue, job_id, token, "set the stage of")
    payload = payload_of(entry)  # before the record (see PayloadOf)
    batch.add(records.stage(job_id, now, stage))
    return entry.to_job(payload)


def cancel(batch: Batch, now: float, queue: str, job_id: str, token: str | None, stopped: bool, payload_of: PayloadOf) -> Job:
    """Ready → cancelled; leased → marked (or, ``stopped``, cancelled: the holder's handler stopped)."""
    entry = batch.state.get(job_id)
    if entry is None:
        raise job_not_found(job_id, queue)
    if entry.state in (DONE, DEAD, CANCELLED):
        raise finished_refusal("cancel", job_id, entry.state.value)
    if entry.state is LEASED and stopped and not holds_lease(entry, token):
        raise refusal("end the cancelled attempt of", job_id, entry.state.value, token, entry.lease_token)
    payload = payload_of(entry)  # before any record (see PayloadOf)
    if entry.state is LEASED and not stopped:
        if not entry.cancel_requested:
            batch.add(records.cancel(job_id, now, requested=True))
        return entry.to_job(payload)
    if entry.state is LEASED:
        _ending(batch, entry)
    batch.add(records.cancel(job_id, now))
    after = batch.state.get(job_id)  # a cold job's Entry was built for the look only
    assert after is not None and after.state is CANCELLED, "a cancel ends the job cancelled"
    return after.to_job(payload)


def requeue_dead(batch: Batch, now: float, queue: str, job_id: str | None) -> int:
    """Dead jobs (one, or all) READY again with attempts reset; one whose dedupe key is taken stays dead."""
    state = batch.state
    if job_id is not None:
        entry = state.get(job_id)
        if entry is None:
            raise job_not_found(job_id, queue)
        if entry.state is not DEAD:
            return 0
        candidates = [entry]
    else:
        candidates = list(state.entries(DEAD))
    count = 0
    for entry in candidates:
        if entry.dedupe_key is not None:
            holder = state.active_keys.get((entry.kind, entry.dedupe_key))
            if holder is not None and holder != entry.id:
                if job_id is not None:
                    raise ValueError(
                        f"job {job_id} cannot be requeued: job {holder} is active with the same "
                        f"dedupe key {entry.dedupe_key!r}"
                    )
                continue
        batch.add(records.requeue(entry.id, now, now))
        count += 1
    return count


def purge(batch: Batch, now: float) -> int:
    """Every job gone; returns how many there were."""
    count = len(batch.state)
    batch.add(records.purge(now))
    return count


def _ending(batch: Batch, entry: Entry) -> None:
    """A lease ends: if that frees a slot of a concurrency limit, wake a waiter for it."""
    if batch.state.limits and limit_ops.frees_slot(batch.state, entry):
        batch.wakes = True


# ---------------------------------------------------------------- the rules
def retry_time(entry: Entry, now: float, backoff: BackoffPolicy, delay: float | None) -> float:
    """Absolute time a failed attempt may run again: explicit delay, else backoff with jitter."""
    if delay is None:
        delay = backoff.delay_for(entry.attempts, _rng)
    return now + delay


def reclaim_time(entry: Entry, backoff: BackoffPolicy) -> float:
    """When a job whose lease expired may run again: its deadline plus the backoff, with jitter.

    The failed attempt ended at the deadline, so the backoff counts from there,
    not from whenever a writer happens to record the reclaim: then a read can
    say when the job comes back without waiting for that writer (as_reclaimed).
    """
    assert entry.lease_deadline is not None, "only a leased job's lease expires"
    return entry.lease_deadline + backoff.delay_for(entry.attempts, _rng)


def exhausted(entry: Entry) -> bool:
    return entry.attempts >= entry.max_attempts


def expiry_error(entry: Entry | Job) -> str:
    return f"lease expired on attempt {entry.attempts} of {entry.max_attempts}"


def lease_expired(entry: Entry, now: float) -> bool:
    """Is this a lease whose deadline has passed (a reclaim not recorded yet, if ``now`` is a read's)?"""
    deadline = entry.lease_deadline
    return entry.state is JobState.LEASED and deadline is not None and deadline <= now


def as_reclaimed(entry: Entry, backoff: BackoffPolicy) -> dict[str, Any]:
    """The fields the reclaim of this expired lease will give its job, for reads: they never write.

    Dead once its attempts are used up (with the error a reclaim records);
    otherwise ready again at ``lease_deadline + backoff.nominal_delay``, the
    backoff's delay before jitter (see reclaim_time). The writer that records
    the reclaim draws the jitter, which may bring the job back up to
    ``jitter`` of that delay sooner than a read says, never later.
    """
    if entry.cancel_requested:
        return {"state": JobState.CANCELLED, "lease_deadline": None, "lease_token": None, "cancel_requested": False}
    if exhausted(entry):
        return {
            "state": JobState.DEAD, "last_error": expiry_error(entry), "traceback": None,
            "lease_deadline": None, "lease_token": None,
        }  # fmt: skip
    assert entry.lease_deadline is not None, "only a leased job's lease expires"
    available_at = entry.lease_deadline + backoff.nominal_delay(entry.attempts)
    return {"state": JobState.READY, "available_at": available_at, "lease_deadline": None, "lease_token": None}


def finished_under(entry: Entry | None, token: Any) -> bool:
    """Is the job done, finished by this token's lease (or is ``token`` None, an operator)?"""
    return entry is not None and entry.state is JobState.DONE and (token is None or entry.finished_token == token)


def holds_lease(entry: Entry, token: Any) -> bool:
    """Does ``token`` (None: an operator acting by id) currently hold the job's lease?"""
    if entry.state is not JobState.LEASED:
        return False
    return token is None or entry.lease_token == token
