"""The checks of every argument a caller passes to the Queue, shared by its methods.

Owns: job_ref (``Job | id`` → ``(id, token)``), kind_set, seconds, attempts,
text (ids, kinds, keys, stages) and per_job: each raises the TypeError or
ValueError a caller should see, before anything is written. Imports: jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .jobs import MAX_ATTEMPTS_LIMIT, MAX_ID_CHARS, MAX_NAME_CHARS, MAX_SECONDS, Job, finite_float, shown

JobRef = Job | str


def job_ref(job: JobRef) -> tuple[str, str | None]:
    if isinstance(job, Job):
        return job.id, job.lease_token
    if isinstance(job, str):
        return text(job, "job id", MAX_ID_CHARS), None
    raise TypeError(f"expected a Job or a job id string, got {type(job).__name__}")


def kind_set(kinds: Iterable[str] | str | None) -> frozenset[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        kinds = [kinds]
    return frozenset(text(k, "kind", MAX_NAME_CHARS) for k in kinds)


def seconds(value: Any, what: str, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {type(value).__name__}")
    number = finite_float(value)  # checked before any conversion that could overflow (10**400)
    if number is None or number < 0 or (number == 0 and not allow_zero) or number > MAX_SECONDS:
        bound = "> 0" if not allow_zero else ">= 0"
        raise ValueError(f"{what} must be finite, {bound} and at most {MAX_SECONDS:g} seconds, got {shown(value)}")
    return number


def attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise ValueError(f"max_attempts must be an int from 1 to {MAX_ATTEMPTS_LIMIT:,}, got {value!r}")
    return value


def text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")
    if not value or len(value) > limit:
        raise ValueError(f"{what} must be 1 to {limit} characters, got {len(value)}")
    if "\x00" in value:  # PostgreSQL text cannot hold it, so neither storage takes it
        raise ValueError(f"{what} cannot contain the NUL character, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be valid Unicode text (it contains a lone surrogate)") from None
    return value


def informational(value: str | None) -> str | None:
    """An error text or traceback as both storages keep it: NUL and lone surrogates become U+FFFD.

    Only informational, so it is mended rather than refused.
    """
    if value is None:
        return None
    text = value.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: UTF-16 keeps it as a unit, its decoder replaces it
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def per_job(values: Sequence[Any] | None, n: int, what: str) -> list[Any]:
    if values is None:
        return [None] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{what} has {len(values)} entries for {n} payloads")
    return values
