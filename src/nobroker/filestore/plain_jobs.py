"""Many plain new jobs at once: their ENQUEUE records in one pass, their cold rows in bulk.

Owns: ``enqueue_plain``, the fast path of an enqueue_many whose jobs differ
only in their payload (storage.SharedSpecs) and carry no delay, time limit or
group: ids from one random read, every record body from one join, the framed
records joined once, the jobs stored as cold rows without an Entry each
(index.py's columns, written here in bulk), and the Jobs the caller gets. It
answers None when the batch does not fit, having changed nothing: the caller
then takes the general path, one job at a time (leases.enqueue).
Imports: jobs, storage, counting, framing, index, records, replay.

The bytes are exactly those of the general path (records.enqueue_body, the
same as ``json.dumps`` of the body): a log written either way reads the
same, here and in nobroker 0.1.2. No new record type: each job keeps a
record of its own, which is what lets a lease read one job's payload back
without decoding its neighbours.
"""

from __future__ import annotations

import heapq
import json
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from typing import Any
from itertools import accumulate, repeat

from ..jobs import DEFAULT_KIND, MAX_RECORD_BYTES, Job
from ..storage import EnqueueSpec, SharedSpecs
from . import counting
from .framing import FRAME, TYPE_CRC, RecordType
from .index import (
    _COLUMNS, _EMPTY, _HASH_MULTIPLIER, _U64, INT32_MAX, INT32_MIN, INT64_MAX, MAX_ROWS, ROW_TYPE,
)
from .records import available_text, max_attempts_text
from .replay import QueueState

#: The fewest jobs a batch must have to take this path (measured: one job alone costs more here).
MIN_JOBS = 2
_ENQUEUE = int(RecordType.ENQUEUE)
_ENQUEUE_CRC = TYPE_CRC[_ENQUEUE]
_pack_frame = FRAME.pack
_pack_row = _COLUMNS.pack


def enqueue_plain(
    state: QueueState, pos: int, now: float, specs: Sequence[EnqueueSpec], lean: bool = False
) -> tuple[bytes, list[Job]] | None:
    """The framed ENQUEUE records of ``specs`` (to append at ``pos``) and their Jobs, applied to ``state``.

    ``lean``: the log is format version 4 (records.available_text).
    None, with nothing changed, unless ``specs`` is SharedSpecs of at least
    MIN_JOBS jobs that are plain but for their payload.
    """
    if not isinstance(specs, SharedSpecs) or len(specs) < MIN_JOBS:  # none (a schedule with no tick due), or one
        return None
    shared = specs.shared
    kind, priority, max_attempts = shared.kind, shared.priority, shared.max_attempts
    if not (
        type(now) is float and type(priority) is int and INT32_MIN <= priority <= INT32_MAX
        and type(max_attempts) is int and INT32_MIN <= max_attempts <= INT32_MAX
    ):  # fmt: skip
        return None
    # Every field but the payload as a plain job has it: whatever field EnqueueSpec gains
    # later is at its default here, so a job that sets it takes the general path.
    if shared[2:] != EnqueueSpec(None, "", priority, 0.0, max_attempts, None, kind, None)[2:]:
        return None
    fifo = state._fifos.get((kind, priority)) or state._fifo_for(kind, priority)
    n = len(specs)
    seq = state.next_seq
    if fifo is None or seq + n > INT64_MAX or len(state._rows) + n > MAX_ROWS:
        return None
    fresh = os.urandom(8 * n)
    numbers = array("Q", fresh)
    if sys.byteorder == "little":
        numbers.byteswap()  # the numbers the 8 bytes spell big-endian, as their hex (below) does
    ids = fresh.hex(" ", 8).split(" ")  # each the 16 hex digits of its number: ID_TEXT % number
    if not state.hot.keys().isdisjoint(ids):
        return None  # an id a job holds: the general path draws again
    data, sizes = _records(ids, specs.texts, seq, now, priority, max_attempts, kind, lean)
    if max(sizes) > FRAME.size + MAX_RECORD_BYTES or not _insert_rows(state, numbers):
        return None
    row = len(state._rows) - n  # _insert_rows added the rows
    state._columns += b"".join(
        map(_pack_row, range(seq, seq + n), accumulate(sizes[:-1], initial=pos), repeat(now), repeat(now),
            repeat(priority), repeat(0), repeat(max_attempts), sizes, repeat(fifo.kind_number, n))
    )  # fmt: skip
    fifo.rows.frombytes(struct.pack(f"{n}{ROW_TYPE}", *range(row, row + n)))  # the array's own machine format
    fifo.last_seq = seq + n - 1
    if not fifo.queued:
        fifo.queued = True
        heapq.heappush(state._heads.setdefault(kind, []), (-priority, seq, fifo.serial, fifo))
    state.n_cold += n
    state.live_bytes += sum(sizes)
    state.next_seq = seq + n
    counts = state.counters.get(kind)
    if counts is None:
        counts = state.counters[kind] = [0] * counting.WIDTH
    counts[counting.ENQUEUED] += n
    return data, _jobs(ids, specs.payloads, seq, now, priority, max_attempts, kind)


def _records(
    ids: list[str], texts: list[str], seq: int, now: float, priority: int, max_attempts: int, kind: str, lean: bool
) -> tuple[bytes, list[int]]:
    """The framed ENQUEUE records, joined, and each one's framed size (records.enqueue_body's bytes; ``lean`` as there)."""
    n = len(ids)
    when = repr(now)
    fixed = (',"priority":%d' % priority if priority else "") + max_attempts_text(max_attempts) + (
        available_text(when, when, lean) + ',"enqueued_at":%s,"seq":' % when
    )  # fmt: skip
    # Each body ends in a NUL, where they are split: a body never holds one (compact ASCII JSON
    # escapes every control character).
    end = ("}" if kind == DEFAULT_KIND else ',"kind":' + json.dumps(kind) + "}") + "\x00"
    # Every body in one text, then one encoding and one split: no string built per job.
    parts = ['{"id":"', "", '","payload":', "", fixed, "", end] * n
    parts[1::7] = ids
    parts[3::7] = texts
    parts[5::7] = map(str, range(seq, seq + n))
    bodies = "".join(parts).encode("ascii").split(b"\x00")
    del bodies[-1]  # what follows the last body's end: nothing
    sizes = list(map(len, bodies))
    framed: list[bytes] = [b""] * (2 * n)
    framed[0::2] = map(_pack_frame, sizes, repeat(_ENQUEUE, n), map(zlib.crc32, bodies, repeat(_ENQUEUE_CRC, n)))
    framed[1::2] = bodies
    header = FRAME.size
    return b"".join(framed), [header + size for size in sizes]


def _jobs(
    ids: list[str], payloads: list[Any], seq: int, now: float, priority: int, max_attempts: int, kind: str
) -> list[Job]:
    """The new jobs as Jobs, each holding only the fields a new job need not share with Job's defaults.

    A Job's other fields are read from the class (a dataclass's defaults are
    its class attributes): READY, no attempts, lease, error, result, stage,
    dedupe key, time limit, group or history, which is what a new plain job
    has. Equal, field for field, to what Job(...) makes (its repr, ==,
    to_dict and dataclasses.asdict read attributes), at a third of the cost:
    a Job made by __init__ holds all 20 fields, and the collector visits each.
    """
    new = Job.__new__
    jobs: list[Job] = []
    for job_id, payload, job_seq in zip(ids, payloads, range(seq, seq + len(ids))):
        job = new(Job)
        job.id, job.payload, job.priority, job.max_attempts = job_id, payload, priority, max_attempts
        job.available_at, job.enqueued_at, job.seq, job.kind = now, now, job_seq, kind
        jobs.append(job)
    return jobs


def _insert_rows(state: QueueState, numbers: array[int]) -> bool:
    """Rows for new cold jobs with these id numbers, in the id table; False (undone) if a job holds one, or two share one."""
    n = len(numbers)
    if state._table_used + n > (state._mask + 1) * 3 // 4:  # room for them all: no growth halfway
        if state._growing is None:
            state._start_growing(extra=n)  # under the file lock: the old rows move later, in tidy()
        else:
            state._rehash(extra=n)
    table, ids, rows = state._table, state._ids, state._rows
    mask, shift = state._mask, state._shift
    base = len(rows)
    ids += numbers  # first: a probe compares the batch's own rows too
    used = 0
    growing = state._growing
    for row, number in enumerate(numbers.tolist(), base):
        slot = ((number * _HASH_MULTIPLIER) & _U64) >> shift
        held = table[slot]
        while held != _EMPTY:
            if ids[held] == number:
                # An id drawn twice in this batch, or one a waiting job holds: the general path.
                if held >= base or rows[held] is None:
                    return _undo(state, base)
                break  # a hot or gone row's slot: this job takes it over
            slot = (slot + 1) & mask
            held = table[slot]
        else:
            if growing is not None and state._old_row(growing, number) >= 0:
                return _undo(state, base)  # a waiting job's row not moved to the new table yet
            used += 1
        table[slot] = row
    rows += repeat(None, n)
    state._table_used += used
    return True


def _undo(state: QueueState, base: int) -> bool:
    """No trace of the batch whose rows start at ``base``: the table as it was, but for the slots of gone rows. False."""
    del state._ids[base:]
    state._rehash()
    return False


__all__ = ["enqueue_plain"]
