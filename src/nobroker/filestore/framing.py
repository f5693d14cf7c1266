"""Bytes of the on-disk format, versions 1, 2 and 4: the file header and record frames.

Owns: encoding and decoding of headers and records, the record type numbers,
the format versions and what each means. Imports: errors, jobs, codec. Pure:
no I/O, no clock.

    file header : <8s magic "NOBROKER"><H version><I generation><H reserved=0>   16 bytes
    record      : <I body length><B type><I crc32(type byte + body)><body>     9 + n bytes
    body        : compact JSON object (ASCII)

The length prefix finds the end of a record; the CRC catches a record of the
right length with wrong bytes inside, which would otherwise be applied silently.

Version 2 has the same records. What differs is the end: a version 2 file
may hold zero bytes after its last record, room set aside for the records
to come (the writer extends the file ahead of its appends, so the fsync of
an append never has to make a new file size durable, which costs the disk a
journal commit). Its records end at the first frame whose nine bytes are
all zero (no record has a zero length: a body is a JSON object), or at the
end of the file. Version 1 files end where their last record ends, as
nobroker 0.1.2 wrote and reads them.

Version 4 is version 2 with fewer fields where they say nothing new: a new
job's ENQUEUE leaves out ``available_at`` when it equals ``enqueued_at`` (a
job runnable at once, the usual case: about 34 of the 159 bytes of a job
with a 43-byte payload), and a LEASE says ``"for"``, its length, in place
of its deadline (``at`` + that) and its attempt (the job's next one): about
32 of its 143 bytes. Every reader takes a missing ``available_at`` as the
record's ``enqueued_at``; a reader of versions 1 and 2 only (nobroker
0.1.2, or one from before version 4) refuses the file by its header, never
misreads it. What this package says of a version 2 file's room holds for
version 4 alike.

Why 4 and not 3: the header has no checksum, so the versions are numbers
that differ from each other in at least two bits (1, 2, 4). One flipped bit
in a header never makes it read as another version: it is refused.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from ..errors import SerializationError
from ..jobs import MAX_RECORD_BYTES
from ..codec import compact_json, on_fresh_stack, scan_once

MAGIC = b"NOBROKER"
#: The format nobroker 0.1.2 writes and reads: a file ends where its last record ends.
FORMAT_VERSION = 1
#: Version 1's records, with room for appends set aside after them (zero bytes).
PREALLOCATED_VERSION = 2
#: Version 2, where a new job's ENQUEUE leaves out available_at when it equals enqueued_at
#: (numbered 4: see above).
LEAN_VERSION = 4
#: Every version this nobroker reads, and may write.
FORMAT_VERSIONS = frozenset({FORMAT_VERSION, PREALLOCATED_VERSION, LEAN_VERSION})
assert all(bin(a ^ b).count("1") >= 2 for a in FORMAT_VERSIONS for b in FORMAT_VERSIONS if a != b), "one bit apart"
#: What a new queue's log, and every compaction, writes unless told otherwise.
DEFAULT_FORMAT_VERSION = LEAN_VERSION


def has_room(version: int) -> bool:
    """Does a file of this version hold zero bytes after its records (room for appends)?"""
    return version >= PREALLOCATED_VERSION


def is_lean(version: int) -> bool:
    """May a new job's ENQUEUE in a file of this version leave out an available_at equal to its enqueued_at?"""
    return version >= LEAN_VERSION


HEADER = struct.Struct("<8sHIH")
HEADER_SIZE = HEADER.size  # 16
FRAME = struct.Struct("<IBI")
FRAME_SIZE = FRAME.size  # 9


class RecordType(enum.IntEnum):
    """Record type numbers. Frozen: a number, once shipped, never changes meaning."""

    ENQUEUE = 1
    LEASE = 2
    ACK = 3
    NACK = 4
    RECLAIM = 5
    DEAD = 6
    REQUEUE = 7
    PURGE = 8
    EXTEND = 9
    STAGE = 10  # added in 0.2.0; written only when set_stage is used
    SCHEDULE = 20  # periodic jobs (schedule_records.py): a schedule defined or redefined
    UNSCHEDULE = 21  # a schedule removed
    TICK = 22  # a schedule's due ticks enqueued: its cursor moves on
    LIMIT = 23  # limits per kind (limit_records.py): a kind's concurrency or rate limit set
    UNLIMIT = 24  # a kind's limit removed
    CANCEL = 11  # added in 0.3.0 (control of jobs); written only when cancel is used
    SNOOZE = 12  # a leased job ready again later, its attempt given back (Queue.snooze)
    PAUSE = 13  # the queue, or one kind, paused: leases hand out none of its jobs
    RESUME = 14  # a pause lifted
    RUN_NOW = 15  # a delayed or backing-off job runnable now
    DELETE = 16  # one job removed


KNOWN_TYPES = frozenset(int(t) for t in RecordType)
_pack_frame = FRAME.pack


def decode_body(data: bytes) -> Any:
    """The JSON value in a record body; ValueError if the body is not exactly one JSON value.

    Whatever the caller's stack depth: a body nested deeper than the stack
    left here holds is decoded again on a fresh one (codec.on_fresh_stack),
    so a record nobroker wrote always reads back. Only nesting deeper than
    a fresh stack holds (never written by nobroker) is ValueError.
    """
    text = data.decode("utf-8")
    try:
        value, end = scan_once(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    except RecursionError:
        try:
            value, end = on_fresh_stack(lambda: scan_once(text, 0))
        except (StopIteration, RecursionError):
            raise ValueError("not JSON, or nested deeper than any record nobroker writes") from None
    if end != len(text):
        raise ValueError("trailing bytes after the JSON value")
    return value


def encode_header(generation: int, version: int = FORMAT_VERSION) -> bytes:
    return HEADER.pack(MAGIC, version, generation, 0)


@dataclass(frozen=True)
class Header:
    version: int
    generation: int


class HeaderError(ValueError):
    """The first bytes are not a nobroker header; the message says how."""


def decode_header(data: bytes) -> Header:
    if len(data) < HEADER_SIZE:
        raise HeaderError(f"file is {len(data)} bytes, shorter than the {HEADER_SIZE}-byte header")
    magic, version, generation, _reserved = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise HeaderError(f"magic bytes are {magic!r}, not {MAGIC!r}: this is not a nobroker log")
    if version not in FORMAT_VERSIONS:
        raise HeaderError(
            f"format version {version} is not supported (this nobroker reads versions "
            f"{', '.join(map(str, sorted(FORMAT_VERSIONS)))}); it was written by a newer nobroker: upgrade to open it"
        )
    if _reserved != 0:
        raise HeaderError(f"reserved header bytes are {_reserved:#06x}, not zero: the header is damaged")
    return Header(version, generation)


#: crc32 of each type byte alone: the running start value for a body's CRC.
TYPE_CRC = {rtype: zlib.crc32(bytes((rtype,))) for rtype in range(256)}


def crc_of(rtype: int, body: bytes) -> int:
    return zlib.crc32(body, TYPE_CRC[rtype])


def encode_body(body: dict[str, Any]) -> bytes:
    try:
        return compact_json(body).encode("ascii")
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"record cannot be written as JSON: {exc}") from None


def encode_record(rtype: int, body: dict[str, Any]) -> bytes:
    """One framed record. SerializationError if it is over MAX_RECORD_BYTES."""
    data = encode_body(body)
    return frame(rtype, data)


def frame(rtype: int, data: bytes) -> bytes:
    if len(data) > MAX_RECORD_BYTES:
        raise SerializationError(
            f"record is {len(data):,} bytes; the limit is {MAX_RECORD_BYTES:,}. Store large data elsewhere."
        )
    return _pack_frame(len(data), rtype, zlib.crc32(data, TYPE_CRC[rtype])) + data


#: A frame of nine zero bytes: where the records of a version 2 file end (the room set aside).
END_OF_RECORDS = bytes(FRAME.size)


class FrameStatus(enum.Enum):
    OK = "ok"
    END = "end"  # version 2: nine zero bytes, the end of the records (zeros may follow, nothing else)
    INCOMPLETE = "incomplete"  # fewer bytes than the frame says: a torn tail, or a write in progress
    BAD_LENGTH = "bad length"  # length over the limit
    BAD_CRC = "bad crc"
    BAD_TYPE = "unknown type"
    BAD_JSON = "bad json"


class Frame:
    """One record as read from a file: its status, place, type and decoded body."""

    __slots__ = ("status", "offset", "length", "rtype", "body")

    def __init__(
        self, status: FrameStatus, offset: int, length: int = 0, rtype: int = 0, body: dict[str, Any] | None = None
    ) -> None:
        self.status, self.offset, self.length, self.rtype, self.body = status, offset, length, rtype, body

    def __repr__(self) -> str:
        return f"Frame({self.status.value}, offset={self.offset}, length={self.length}, type={self.rtype})"

    @property
    def end(self) -> int:
        return self.offset + FRAME_SIZE + self.length


def decode_frame(buf: bytes | memoryview, pos: int, base: int) -> Frame:
    """Decode the frame at ``buf[pos:]``; ``base`` is the file offset of ``buf[0]``."""
    offset = base + pos
    if len(buf) - pos < FRAME_SIZE:
        return Frame(FrameStatus.INCOMPLETE, offset)
    length, rtype, crc = FRAME.unpack_from(buf, pos)
    if length > MAX_RECORD_BYTES:
        return Frame(FrameStatus.BAD_LENGTH, offset, length, rtype)
    start = pos + FRAME_SIZE
    if len(buf) - start < length:
        return Frame(FrameStatus.INCOMPLETE, offset, length, rtype)
    data = bytes(buf[start : start + length])
    if crc_of(rtype, data) != crc:
        return Frame(FrameStatus.BAD_CRC, offset, length, rtype)
    if rtype not in KNOWN_TYPES:
        return Frame(FrameStatus.BAD_TYPE, offset, length, rtype)
    try:
        body = decode_body(data)
    except ValueError:
        return Frame(FrameStatus.BAD_JSON, offset, length, rtype)
    if not isinstance(body, dict):
        return Frame(FrameStatus.BAD_JSON, offset, length, rtype)
    return Frame(FrameStatus.OK, offset, length, rtype, body)


def plausible_frame_at(buf: bytes | memoryview, pos: int) -> bool:
    """Is there a whole, CRC-valid record starting exactly at ``buf[pos]``?

    Used to tell a torn tail (nothing valid after the damage) from damage in
    the middle (valid records after it, which must never be dropped silently).
    Cheap checks first, so scanning garbage byte by byte stays fast.
    """
    if len(buf) - pos < FRAME_SIZE + 2:
        return False
    length: int
    rtype: int
    crc: int
    length, rtype, crc = FRAME.unpack_from(buf, pos)
    if rtype not in KNOWN_TYPES or length < 2 or length > MAX_RECORD_BYTES:
        return False
    start = pos + FRAME_SIZE
    if len(buf) - start < length or buf[start] != 0x7B:  # "{"
        return False
    return crc_of(rtype, bytes(buf[start : start + length])) == crc
