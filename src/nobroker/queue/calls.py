"""The checks of every call's arguments, once for Queue and AsyncQueue.

Owns: one function per call that takes what a caller passed and returns
exactly what the storage is called with (``Job | id`` → ``(id, token)``,
payloads and results encoded once, defaults filled in), or raises the
TypeError or ValueError the caller should see. Imports: checks, jobs, codec,
limits, storage.

Queue (work.py, looking.py, control.py) and AsyncQueue (asyncqueue.py) both
call these and then their storage, so the two refuse bad input identically,
before any storage sees it, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .. import checks
from ..checks import JobRef
from ..codec import stored_json, stored_json_many
from ..jobs import (
    DEFAULT_KIND,
    LISTINGS,
    MAX_BATCH_JOBS,
    MAX_ERROR_CHARS,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_PRIORITY,
    MAX_RESULT_BYTES,
    MAX_TRACEBACK_CHARS,
    MIN_PRIORITY,
    JobState,
)
from ..limits import Limit, define
from ..storage import EnqueueSpec, SharedSpecs

#: What ``nack`` passes on: id, token, error, delay, permanent, traceback.
NackArgs = tuple[str, str | None, str | None, float | None, bool, str | None]


def spec(
    default_attempts: int, stored: tuple[str, Any], priority: int, delay: float, max_attempts: int | None,
    job_id: str | None, kind: str, dedupe_key: str | None, timeout: float | None = None, group: str | None = None,
) -> EnqueueSpec:  # fmt: skip
    """One job to add; ``stored``: its payload as stored_json gives it (the text, the value read back)."""
    if (
        type(delay) is float and not delay and kind is DEFAULT_KIND and max_attempts is None and job_id is None
        and dedupe_key is None and timeout is None and group is None
        and type(priority) is int and MIN_PRIORITY <= priority <= MAX_PRIORITY
    ):  # fmt: skip
        # Every argument at its default but the priority (the usual enqueue): nothing else to check.
        return EnqueueSpec(stored[1], stored[0], priority, 0.0, default_attempts, None, DEFAULT_KIND, None)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, got {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}, got {priority}")
    return EnqueueSpec(
        payload=stored[1],
        payload_json=stored[0],
        priority=priority,
        delay=checks.seconds(delay, "delay"),
        max_attempts=default_attempts if max_attempts is None else checks.attempts(max_attempts),
        job_id=None if job_id is None else checks.text(job_id, "job_id", MAX_ID_CHARS),
        kind=checks.text(kind, "kind", MAX_NAME_CHARS),
        dedupe_key=None if dedupe_key is None else checks.text(dedupe_key, "dedupe_key", MAX_NAME_CHARS),
        timeout=None if timeout is None else checks.seconds(timeout, "timeout", allow_zero=False),
        group=None if group is None else checks.text(group, "group", MAX_NAME_CHARS),
    )


def enqueue_one(
    default_attempts: int, payload: Any, priority: int, delay: float, max_attempts: int | None,
    job_id: str | None, kind: str, dedupe_key: str | None, timeout: float | None = None, group: str | None = None,
) -> list[EnqueueSpec]:  # fmt: skip
    """The one job ``enqueue`` adds, as the storage's list of one (``timeout``: its time limit, or None)."""
    stored = stored_json(payload)
    return [spec(default_attempts, stored, priority, delay, max_attempts, job_id, kind, dedupe_key, timeout, group)]


def enqueue_many(
    default_attempts: int, payloads: Iterable[Any], priority: int, delay: float, max_attempts: int | None,
    job_ids: Sequence[str | None] | None, kind: str, dedupe_keys: Sequence[str | None] | None,
    timeout: float | None = None, group: str | None = None,
) -> Sequence[EnqueueSpec]:  # fmt: skip
    """The jobs ``enqueue_many`` adds (empty: nothing to do); ``group``: every job's.

    Jobs without ids and dedupe keys differ only in their payload: they go to
    the storage as SharedSpecs, their fields checked once, with no object per job.
    """
    payloads = list(payloads)
    if len(payloads) > MAX_BATCH_JOBS:
        raise ValueError(f"enqueue_many takes at most {MAX_BATCH_JOBS:,} jobs per call, got {len(payloads):,}")
    job_ids = checks.per_job(job_ids, len(payloads), "job_ids")
    dedupe_keys = checks.per_job(dedupe_keys, len(payloads), "dedupe_keys")
    if not payloads:
        return []
    texts, stored = stored_json_many(payloads)
    # What every job of the batch shares is checked once, not once per job.
    first = spec(
        default_attempts, (texts[0], stored[0]), priority, delay, max_attempts, job_ids[0], kind, dedupe_keys[0], timeout,
        group,
    )  # fmt: skip
    if job_ids.count(None) == len(job_ids) and dedupe_keys.count(None) == len(dedupe_keys):
        return SharedSpecs(first, stored, texts)
    specs = [first]
    for payload, text, job_id, key in zip(stored[1:], texts[1:], job_ids[1:], dedupe_keys[1:]):
        specs.append(
            EnqueueSpec(
                payload, text, first.priority, first.delay, first.max_attempts,
                None if job_id is None else checks.text(job_id, "job_id", MAX_ID_CHARS), first.kind,
                None if key is None else checks.text(key, "dedupe_key", MAX_NAME_CHARS), first.timeout,
                first.group,
            )  # fmt: skip
        )
    return specs


def lease(
    default_timeout: float, count: int, visibility_timeout: float | None, kinds: Iterable[str] | None
) -> tuple[int, float, frozenset[str] | None]:
    """(count, visibility timeout, kinds) for the storage; a count of 0 means "lease nothing"."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(f"count must be a non-negative int, got {count!r}")
    timeout = default_timeout if visibility_timeout is None else checks.seconds(
        visibility_timeout, "visibility_timeout", allow_zero=False
    )
    return min(count, MAX_BATCH_JOBS), timeout, checks.kind_set(kinds)


def ack(job: JobRef, result: Any) -> tuple[str, str | None, str | None, Any]:
    """(id, token, result JSON, result as read back)."""
    job_id, token = checks.job_ref(job)
    result_json = None
    if result is not None:
        result_json, result = stored_json(result, what="result", limit=MAX_RESULT_BYTES)
    return job_id, token, result_json, result


def ack_many(jobs: Iterable[JobRef], results: Sequence[Any] | None) -> list[tuple[str, str | None, str | None]]:
    """(id, token, result JSON) per job (an empty list: nothing to do)."""
    refs = _refs(jobs, "ack_many")
    results = checks.per_job(results, len(refs), "results")
    return [
        (job_id, token, None if result is None else stored_json(result, what="result", limit=MAX_RESULT_BYTES)[0])
        for (job_id, token), result in zip(refs, results)
    ]


def nack(job: JobRef, error: str | None, delay: float | None, permanent: bool, traceback: str | None) -> NackArgs:
    job_id, token = checks.job_ref(job)
    if error is not None:
        error = checks.informational(str(error)[:MAX_ERROR_CHARS])
    if traceback is not None:
        traceback = checks.informational(str(traceback)[-MAX_TRACEBACK_CHARS:])
    if delay is not None:
        delay = checks.seconds(delay, "delay")
    return job_id, token, error, delay, bool(permanent), traceback


def extend(job: JobRef, seconds: float) -> tuple[str, str | None, float]:
    job_id, token = checks.job_ref(job)
    return job_id, token, checks.seconds(seconds, "seconds", allow_zero=False)


def extend_many(jobs: Iterable[JobRef], seconds: float) -> tuple[list[tuple[str, str | None]], float]:
    """((id, token) per job, seconds); an empty list: nothing to do."""
    return _refs(jobs, "extend_many"), checks.seconds(seconds, "seconds", allow_zero=False)


def _refs(jobs: Iterable[JobRef], call: str) -> list[tuple[str, str | None]]:
    refs = [checks.job_ref(job) for job in jobs]
    if len(refs) > MAX_BATCH_JOBS:
        raise ValueError(f"{call} takes at most {MAX_BATCH_JOBS:,} jobs per call, got {len(refs):,}")
    return refs


def stage(job: JobRef, stage: str | None) -> tuple[str, str | None, str | None]:
    job_id, token = checks.job_ref(job)
    if stage is not None:
        stage = checks.text(stage, "stage", MAX_NAME_CHARS)
    return job_id, token, stage


def worker_id(value: str) -> str:
    """retire_worker's id: a string (an id no worker announced removes nothing)."""
    if not isinstance(value, str):
        raise TypeError(f"worker_id must be a string, got {type(value).__name__}")
    return value


def job_id(value: str) -> str:
    return checks.text(value, "job_id", MAX_ID_CHARS)


def listing(
    state: JobState | str | None, limit: int | None, offset: int, kind: str | None
) -> tuple[str | None, int | None, int, str | None]:
    """(listing, limit, offset, kind) for the storage; a limit of 0 means "list nothing"."""
    name = None
    if state is not None:
        name = state.value if isinstance(state, JobState) else state
        if name not in LISTINGS:
            raise ValueError(f"state must be one of {', '.join(LISTINGS)} (or None: every job); got {state!r}")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"offset must be a non-negative int, got {offset!r}")
    if kind is not None:
        kind = checks.text(kind, "kind", MAX_NAME_CHARS)
    return name, limit, offset, kind


def cancel(job: JobRef, stopped: bool) -> tuple[str, str | None, bool]:
    job_id, token = checks.job_ref(job)
    return job_id, token, bool(stopped)


def snooze(job: JobRef, seconds: float) -> tuple[str, str | None, float]:
    job_id, token = checks.job_ref(job)
    return job_id, token, checks.seconds(seconds, "seconds")


def kind(value: str | None) -> str | None:
    """A kind to pause or resume; None is the whole queue."""
    return None if value is None else checks.text(value, "kind", MAX_NAME_CHARS)


def ref_id(job: JobRef) -> str:
    """The id of ``Job | id`` (run_now, delete, wait act by id: a token changes nothing)."""
    return checks.job_ref(job)[0]


def wait(job: JobRef, timeout: float) -> tuple[str, float]:
    return ref_id(job), checks.seconds(timeout, "timeout")


def limit(
    kind: str, concurrency: Any, rate: Any, per: Any, burst: Any, group_concurrency: Any = None, weights: Any = None
) -> tuple[str, Limit | None]:
    """set_limit's arguments: the kind, and its limit (None: no concurrency, rate, burst, group_concurrency or weights: clear it)."""
    if concurrency is None and rate is None and burst is None and group_concurrency is None and weights is None:
        return limit_kind(kind), None
    checked = define(kind, concurrency, rate, per, burst, group_concurrency, weights)
    return checked.kind, checked


def limit_kind(kind: str) -> str:
    """clear_limit's kind."""
    return checks.text(kind, "kind", MAX_NAME_CHARS)
