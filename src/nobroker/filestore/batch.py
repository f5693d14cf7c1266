"""One batch of a group commit: the records it appends, and the operations waiting for it.

Owns: Batch (records encoded, and applied in memory as they are added, with
what they mean for waiters: runnable work, finished jobs) and Op (one
writing operation waiting for, or done by, the thread that runs its batch:
its decision, its answer or error, where its records went). The four beats
and the group commit that run them are commit.py's. Imports: framing,
entry, records, log, replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .entry import Entry
from .framing import FrameStatus, RecordType, decode_frame, encode_record, frame
from .log import LogFile
from .records import Record
from .replay import QueueState

#: Records after which a waiting worker may find something to lease.
_WAKING = frozenset({RecordType.NACK, RecordType.RECLAIM, RecordType.REQUEUE})
#: Records that may finish a job (or take it away): Queue.wait's waiters are woken after them.
_FINISHING = frozenset({RecordType.ACK, RecordType.DEAD, RecordType.CANCEL, RecordType.DELETE, RecordType.PURGE})


class Batch:
    """Records one batch appends: encoded, and applied in memory as they are added (leases.Batch)."""

    __slots__ = ("state", "parts", "pos", "start", "wakes", "finishes", "lean")

    def __init__(self, state: QueueState, start: int, lean: bool = False) -> None:
        self.state = state
        self.lean = lean  # the log is format version 4: a new job's record may leave out its available_at
        self.parts: list[bytes] = []
        self.start = start
        self.pos = start
        self.wakes = False  # does this batch make work runnable (worth waking a worker)?
        self.finishes = False  # does it finish a job (worth waking Queue.wait)?

    def add(self, record: Record, text: bytes | None = None) -> int:
        """Append ``record`` (applied now); ``text``: its body already encoded, as encode_body would."""
        rtype, body = record
        data = encode_record(rtype, body) if text is None else frame(rtype, text)
        offset = self.pos
        self.state.apply(rtype, body, offset, len(data))
        if rtype in _WAKING:
            self.wakes = True
        elif rtype in _FINISHING:
            self.finishes = True
        self.parts.append(data)
        self.pos += len(data)
        return offset

    def add_job(self, entry: Entry, data: bytes, number: int = -2) -> None:
        """An ENQUEUE record already encoded, for a job built from values (the fast path; ``number``: see QueueState.add)."""
        entry.offset, entry.size = self.pos, len(data)
        self.wakes = True
        self.state.records += 1
        self.state.add(entry, number)
        self.parts.append(data)
        self.pos += len(data)
        self.state.enables_end = self.pos  # a lease may hand this job out: it rests on this record

    def body_at(self, offset: int, job_id: str) -> dict[str, Any]:
        """The ENQUEUE record this batch added at ``offset`` (job ``job_id``'s, not yet written), decoded."""
        data = b"".join(self.parts)
        fr = decode_frame(data, offset - self.start, self.start)
        assert fr.status is FrameStatus.OK and fr.body is not None and fr.body.get("id") == job_id, (
            f"job {job_id}'s record is not at {offset} in the batch"
        )  # fmt: skip
        return fr.body

    def add_jobs(self, data: bytes, count: int) -> None:
        """``count`` ENQUEUE records, framed and joined, their jobs already in the state (plain_jobs.py)."""
        self.wakes = True
        self.state.records += count
        self.parts.append(data)
        self.pos += len(data)
        self.state.enables_end = self.pos  # as in add_job


class Op:
    """One writing operation waiting for (or done by) the thread that runs the batch."""

    __slots__ = (
        "decide", "lazy", "done", "result", "error", "log", "start", "read_end", "end", "wakes", "finishes", "compact",
    )  # fmt: skip

    def __init__(self, decide: Callable[[Batch, float], Any], lazy: bool) -> None:
        self.decide = decide
        self.lazy = lazy
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.log: LogFile | None = None
        self.start = self.read_end = self.end = 0  # the batch's first byte, what the answer rests on, its end
        self.wakes = self.finishes = False
        self.compact = False  # should the caller compact now (auto_compact's threshold was passed)?
