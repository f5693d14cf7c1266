"""What each record type says: one encoder and one decoder per type.

Owns: the bodies of the records of format version 1 (DESIGN.md section 4),
their keys in the order they are written, and reading their fields back
with the checks of entry.py. An encoder returns ``(type, body)`` for
framing.encode_record; a decoder takes a decoded body and returns its fields
checked, or raises KeyError, TypeError or ValueError (replay turns those
into CorruptLogError). Imports: jobs, framing, entry.

ENQUEUE has more than one writer's shape: a new job's body is built from a
template with its payload spliced in (``enqueue_body``), and a compaction
rewrites a live job's body with its current fields (``rewritten_job``). Its
decoder is Entry itself (entry.py), or the cold store's inlined fast path
(replay.QueueState._enqueue). In format version 4 (framing.LEAN_VERSION)
an ENQUEUE leaves out an available_at equal to its enqueued_at, and a LEASE
says how long it is for in place of its deadline and attempt
(``lease_text``, ``decode_lease``).

Keys appear in the order nobroker has always written them; 0.1.2's fields
are left out where they hold the default every reader takes for an absent
key (``READ_DEFAULTS``), and fields added after 0.1.2 appear only when set,
so a log written without the newer features stays one 0.1.2 reads as we do.
"""

from __future__ import annotations

import json
from typing import Any

from ..jobs import DEFAULT_KIND
from .entry import READ_MAX_ATTEMPTS, Entry, check_int, check_text, check_time, check_traceback
from .framing import RecordType

Record = tuple[RecordType, dict[str, Any]]

#: What every reader (Entry, replay's fast path, nobroker 0.1.2's Job.from_dict, the playground)
#: takes for each of 0.1.2's ENQUEUE fields that a body leaves out.
READ_DEFAULTS: dict[str, Any] = {
    "priority": 0, "state": "ready", "attempts": 0, "max_attempts": READ_MAX_ATTEMPTS, "lease_deadline": None,
    "lease_token": None, "last_error": None,
}  # fmt: skip

# A new job's fields at their defaults are left out: state "ready", attempts 0,
# priority 0, max_attempts 5 (READ_MAX_ATTEMPTS), and no lease_deadline,
# lease_token or last_error. Every reader (Entry, replay's fast path, nobroker
# 0.1.2's Job.from_dict, the playground) reads an absent key as exactly that
# default, and each costs 13 to 22 bytes a job (118 of them for a plain job).
# A compaction leaves them out too (job_fields).
# In format version 4 (framing.LEAN_VERSION) an available_at equal to enqueued_at
# is left out too: every reader takes the enqueued_at then (about 34 bytes a job).
# The fourth %s below is ``available_text``'s.
_ENQUEUE_TEXT = '{"id":%s,"payload":%s%s%s,"enqueued_at":%s,"seq":%d'
_ENQUEUE_TEXT_PRIORITY = '{"id":%s,"payload":%s,"priority":%d%s%s,"enqueued_at":%s,"seq":%d'
#: The same two, for a job whose id the library made from a number (index.ID_TEXT's digits).
_NEW_JOB = _ENQUEUE_TEXT.replace('"id":%s', '"id":"%016x"')
_NEW_JOB_PRIORITY = _ENQUEUE_TEXT_PRIORITY.replace('"id":%s', '"id":"%016x"')
_HEX_ID = frozenset("0123456789abcdef")
#: Every key job_fields may write (0.1.2's, then those written only when set). A rewritten job body
#: takes each from the job as it is now, never from its older body: a key left out because the job
#: no longer has it (a stage the next lease cleared, a traceback an expired last attempt dropped,
#: an available_at equal to the enqueued_at) stays out. Only keys a newer nobroker wrote are kept.
JOB_FIELD_KEYS = frozenset({
    *READ_DEFAULTS, "available_at", "enqueued_at", "seq", "kind", "dedupe_key", "stage", "result", "traceback",
    "cancel_requested", "timeout", "group", "attempt_history", "leased_at", "leased_by",
})  # fmt: skip


# ---------------------------------------------------------------- ENQUEUE
def max_attempts_text(max_attempts: int) -> str:
    """A new job's ``,"max_attempts":N`` as its ENQUEUE body carries it: nothing for the default every reader assumes."""
    return "" if max_attempts == READ_MAX_ATTEMPTS else ',"max_attempts":%d' % max_attempts


def available_text(available: str, enqueued: str, lean: bool) -> str:
    """A job's ``,"available_at":T`` as its ENQUEUE body carries it: nothing, in a ``lean`` log, when it is the enqueued_at."""
    return "" if lean and available == enqueued else ',"available_at":' + available


def enqueue_body(entry: Entry, payload_json: str, times: dict[int, str] | None = None, lean: bool = False) -> bytes:
    """The body of a new job's ENQUEUE record: the same bytes ``json.dumps(body)`` gives.

    Built from a template, with the payload spliced in as the JSON the facade
    already made while validating it: encoding it twice, or going through a
    dict, would double the cost of every enqueue. ``lean``: the log is format
    version 4 (see available_text).
    """
    quoted = _quoted(entry.id)
    # A batch shares its time objects: their repr (what json.dumps writes for a
    # number) is worked out once per object, not twice per job. Keyed by id(),
    # not value, because 5 and 5.0 are equal keys with different text; the
    # entries keep the objects alive for the whole batch.
    if times is None:
        times = {}
    available = times.get(id(entry.available_at))
    if available is None:
        available = times[id(entry.available_at)] = repr(entry.available_at)
    enqueued = times.get(id(entry.enqueued_at))
    if enqueued is None:
        enqueued = times[id(entry.enqueued_at)] = repr(entry.enqueued_at)
    available = available_text(available, enqueued, lean)
    if entry.priority:
        text = _ENQUEUE_TEXT_PRIORITY % (
            quoted, payload_json, entry.priority, max_attempts_text(entry.max_attempts), available, enqueued, entry.seq
        )  # fmt: skip
    else:
        text = _ENQUEUE_TEXT % (quoted, payload_json, max_attempts_text(entry.max_attempts), available, enqueued, entry.seq)
    if entry.kind != DEFAULT_KIND:
        text += ',"kind":' + json.dumps(entry.kind)
    if entry.dedupe_key is not None:
        text += ',"dedupe_key":' + json.dumps(entry.dedupe_key)
    if entry.timeout is not None:  # a key 0.1.2 ignores; left out when unused
        text += ',"timeout":' + repr(entry.timeout)
    if entry.group is not None:  # the same
        text += ',"group":' + json.dumps(entry.group)
    return (text + "}").encode("ascii")


def new_job_body(number: int, spec: Any, now: float, seq: int, lean: bool = False) -> bytes:
    """``enqueue_body`` of a plain job ready now (no dedupe key, time limit or group) whose id spells ``number``."""
    at = repr(now)
    available = available_text(at, at, lean)
    text = (
        _NEW_JOB_PRIORITY % (number, spec.payload_json, spec.priority, max_attempts_text(spec.max_attempts), available, at, seq)
        if spec.priority
        else _NEW_JOB % (number, spec.payload_json, max_attempts_text(spec.max_attempts), available, at, seq)
    )
    if spec.kind != DEFAULT_KIND:
        text += ',"kind":' + json.dumps(spec.kind)
    return (text + "}").encode("ascii")


def job_fields(entry: Entry, lean: bool = False) -> dict[str, Any]:
    """The mutable fields as an ENQUEUE body carries them (a compaction rewrites them), in 0.1.2's order.

    Those at the default every reader takes for an absent key are left out,
    as a new job's ENQUEUE leaves them out: a waiting job's compacted record
    is about 120 bytes shorter, and reads like a new one. ``lean`` (format
    version 4): an available_at equal to the enqueued_at too.
    """
    fields: tuple[tuple[str, Any], ...] = (
        ("priority", entry.priority), ("state", entry.state.value), ("attempts", entry.attempts),
        ("max_attempts", entry.max_attempts), ("available_at", entry.available_at), ("enqueued_at", entry.enqueued_at),
        ("lease_deadline", entry.lease_deadline), ("lease_token", entry.lease_token), ("last_error", entry.last_error),
        ("seq", entry.seq),
    )  # fmt: skip
    defaults = READ_DEFAULTS
    out = {key: value for key, value in fields if key not in defaults or value != defaults[key]}
    if lean and entry.available_at == entry.enqueued_at:
        del out["available_at"]
    # Newer fields only when used, so a log without them stays readable by 0.1.2.
    if entry.kind != DEFAULT_KIND:
        out["kind"] = entry.kind
    if entry.dedupe_key is not None:
        out["dedupe_key"] = entry.dedupe_key
    if entry.stage is not None:
        out["stage"] = entry.stage
    if entry.result is not None:
        out["result"] = entry.result
    if entry.traceback is not None:
        out["traceback"] = entry.traceback
    if entry.cancel_requested:
        out["cancel_requested"] = True
    if entry.timeout is not None:
        out["timeout"] = entry.timeout
    if entry.group is not None:
        out["group"] = entry.group
    if entry.history:
        out["attempt_history"] = entry.history
    if entry.leased_at is not None and entry.state.value == "leased":  # who runs it, and since when
        out["leased_at"], out["leased_by"] = entry.leased_at, entry.leased_by
    return out


def rewritten_job(entry: Entry, body: dict[str, Any], lean: bool = False) -> Record:
    """The ENQUEUE record a compaction writes for a live job: its old ``body``'s keys, as the job is now.

    The old body brings the id, the payload and any key a newer nobroker
    added. Every key job_fields writes (JOB_FIELD_KEYS) comes from the job as
    it is now, so none the job no longer has survives: a stage the next lease
    cleared, a traceback an expired last attempt dropped, a lease token once
    reclaimed. 0.1.2's fields come in its order (id, payload, then
    job_fields), those at their defaults left out; other keys follow as they
    were. ``lean``: as in job_fields.
    """
    out: dict[str, Any] = {"id": body["id"]}
    if "payload" in body:
        out["payload"] = body["payload"]
    out.update(job_fields(entry, lean))
    for key, value in body.items():
        if key not in out and key not in JOB_FIELD_KEYS:  # a key of a newer nobroker's, as it was
            out[key] = value
    return RecordType.ENQUEUE, out


# ---------------------------------------------------------------- encoders of the other types
def lease(job_id: str, at: float, deadline: float, attempts: int, token: str, by: str | None = None) -> Record:
    """LEASE; ``by``: the leasing worker ("host:pid"), a key 0.1.2 ignores (its attempt history)."""
    body = {"id": job_id, "at": at, "deadline": deadline, "attempts": attempts, "token": token}
    if by is not None:
        body["by"] = by
    return RecordType.LEASE, body


def lease_text(
    job_id: str, at: float, deadline: float, attempts: int, token: str, by: str | None = None, lean_for: float | None = None
) -> bytes:
    """The LEASE body ``lease`` describes, as the bytes encode_body gives it, without a dict to encode.

    ``token`` (hex digits) and ``by`` (worker_label: host:pid in ASCII letters,
    digits and ``._-:``) need no escaping. ``lean_for`` (format version 4):
    the lease's length, where ``at + lean_for`` is the deadline and
    ``attempts`` the job's one more: the body says ``"for"`` instead of both
    (decode_lease reads them back).
    """
    if lean_for is not None:
        assert at + lean_for == deadline, "the deadline a lean LEASE stands for"
        text = '{"id":%s,"at":%r,"for":%r,"token":"%s"' % (_quoted(job_id), at, lean_for, token)
    else:
        text = '{"id":%s,"at":%r,"deadline":%r,"attempts":%d,"token":"%s"' % (_quoted(job_id), at, deadline, attempts, token)
    return (text + "}" if by is None else text + ',"by":"' + by + '"}').encode("ascii")


def ack(job_id: str, at: float, *, with_result: bool = False, result: Any = None) -> Record:
    body: dict[str, Any] = {"id": job_id, "at": at}
    if with_result:
        body["result"] = result
    return RecordType.ACK, body


def ack_text(job_id: str, at: float, result_json: str | None) -> bytes:
    """The ACK body ``ack`` describes, as the bytes encode_body gives it, with the result's JSON spliced in.

    ``result_json`` is the compact text the facade made while checking the
    result: encoding the decoded result again would be a second pass over it.
    """
    text = '{"id":' + _quoted(job_id) + ',"at":' + repr(at)
    return (text + "}" if result_json is None else text + ',"result":' + result_json + "}").encode("ascii")


def id_prefix(job_id: str) -> bytes:
    """How the ENQUEUE body of job ``job_id`` begins, as every writer writes it: ``{"id":`` and the id, then a comma."""
    return ('{"id":' + _quoted(job_id) + ",").encode("ascii")


def _quoted(job_id: str) -> str:
    """``job_id`` as compact JSON text (a library-made id needs no escaping)."""
    return '"' + job_id + '"' if len(job_id) == 16 and _HEX_ID.issuperset(job_id) else json.dumps(job_id)


def nack(job_id: str, at: float, attempts: int, available_at: float, error: str | None, traceback: str | None) -> Record:
    body: dict[str, Any] = {"id": job_id, "at": at, "attempts": attempts, "available_at": available_at, "error": error}
    if traceback is not None:  # a key 0.1.2 ignores; left out when unused
        body["traceback"] = traceback
    return RecordType.NACK, body


def reclaim(job_id: str, at: float, available_at: float) -> Record:
    return RecordType.RECLAIM, {"id": job_id, "at": at, "available_at": available_at}


def dead(job_id: str, at: float, error: str | None, traceback: str | None = None) -> Record:
    body: dict[str, Any] = {"id": job_id, "at": at, "error": error}
    if traceback is not None:
        body["traceback"] = traceback
    return RecordType.DEAD, body


def requeue(job_id: str, at: float, available_at: float) -> Record:
    return RecordType.REQUEUE, {"id": job_id, "at": at, "available_at": available_at}


def purge(at: float) -> Record:
    return RecordType.PURGE, {"at": at}


def extend(job_id: str, at: float, deadline: float) -> Record:
    return RecordType.EXTEND, {"id": job_id, "at": at, "deadline": deadline}


def stage(job_id: str, at: float, stage: str | None) -> Record:
    return RecordType.STAGE, {"id": job_id, "at": at, "stage": stage}


def cancel(job_id: str, at: float, *, requested: bool = False) -> Record:
    """CANCEL: the job is cancelled now; with ``requested``, a leased job is only marked (its lease ends cancelled)."""
    body: dict[str, Any] = {"id": job_id, "at": at}
    if requested:
        body["requested"] = True
    return RecordType.CANCEL, body


# ---------------------------------------------------------------- decoders
# Each reads every field it returns before replay changes anything, so a
# refused record leaves the state as it was.
def decode_lease(body: dict[str, Any], attempts_before: int) -> tuple[int, float, Any, float | None, str | None]:
    """(attempts, deadline, token, at, by); at and by None for a lease without its worker.

    An attempt's history starts with a lease that names its worker: a log an
    older nobroker wrote (or the docs' playground) has none, and shows none.
    A lean LEASE (format version 4) says ``"for"``, the lease's length: its
    deadline is ``at`` plus that, and its attempt the job's next one
    (``attempts_before`` + 1).
    """
    by = body.get("by")
    if "for" in body:
        deadline = check_time(body["at"], "at") + check_time(body["for"], "for")
        attempts = attempts_before + 1
    else:
        deadline, attempts = check_time(body["deadline"], "deadline"), check_int(body["attempts"], "attempts")
    return (
        attempts, deadline, body["token"],
        None if by is None else check_time(body["at"], "at"), None if by is None else check_text(by, "by"),
    )  # fmt: skip


def decode_ack(body: dict[str, Any]) -> tuple[bool, Any]:
    """(whether it carries a result, the result)."""
    return ("result" in body), body.get("result")


def decode_nack(body: dict[str, Any], attempts: int) -> tuple[float, float, int, Any, str | None]:
    """(available_at, at, attempts (default: the job's ``attempts``), error, traceback)."""
    available_at, at = check_time(body["available_at"], "available_at"), check_time(body["at"], "at")
    attempts = check_int(body.get("attempts", attempts), "attempts")
    return available_at, at, attempts, body.get("error"), check_traceback(body)


def decode_reclaim(body: dict[str, Any]) -> tuple[float, float]:
    """(available_at, at)."""
    return check_time(body["available_at"], "available_at"), check_time(body["at"], "at")


def decode_dead(body: dict[str, Any]) -> tuple[Any, str | None] | None:
    """(error, traceback), or None for a body without an error (the job keeps its last one)."""
    if "error" not in body:
        return None
    return body["error"], check_traceback(body)


#: A REQUEUE reads as a RECLAIM does: (available_at, at).
decode_requeue = decode_reclaim


def decode_extend(body: dict[str, Any]) -> float:
    """The new deadline."""
    return check_time(body["deadline"], "deadline")


def decode_stage(body: dict[str, Any]) -> Any:
    return body.get("stage")


def decode_cancel(body: dict[str, Any]) -> bool:
    """Whether the CANCEL only marks a leased job (``requested``) rather than ending it cancelled."""
    requested = body.get("requested", False)
    if type(requested) is not bool:
        raise TypeError(f"field requested is {requested!r}, expected true or false")
    return requested
