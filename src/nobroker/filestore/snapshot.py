"""State snapshots: a checked cache of the replayed state at a log offset.

Owns: the ``<name>.NNNNNN.snap`` file of generation NNNNNN (writing it as a
private temp file then renaming it into place, reading and checking it,
removing it, one generation's, and those of older generations); the crc32 of
the log prefix it is checked against is prefix_crc.py's. Imports: errors,
codec, layout, fs, log, prefix_crc, replay, state_form. recovery.py loads
one when it opens a queue and saves one when it closes it.

A snapshot is never the truth: the log is. A snapshot says "replaying the
log's bytes [0, L) gives this state" and carries the crc32 of those bytes;
an opener loads it only if the log still starts with exactly those bytes,
then reads forward from L as usual. So a snapshot can neither hide damage in
the log (the prefix crc would differ and the whole log is replayed, refusing
to open exactly as without a snapshot) nor resurrect anything (a truncated
or rewritten log no longer matches). Anything wrong with the file itself
(missing, short, bad crc, another generation, another machine's byte order
or array sizes, a newer format) means: ignore it and replay the whole log.

Format (version 3)::

    header  : <8s magic "NBSNAPSH"><H version=3><I generation><Q log offset L>
              <I crc32 of log[0, L)><B 1 if little-endian><B itemsize of array('Q')>
              <B itemsize of array('q')><B itemsize of array('i')><H block count N>
    lengths : N x <Q block length>
    blocks  : block 0 is state_form's fields as compact JSON (UTF-8);
              blocks 1.. are its raw arrays (native byte order: hence the header)
    trailer : <I crc32 of everything before it>

No pickle or anything else that could run code: JSON and raw numbers only.
The checksums catch damage, not forgery: whoever can write the queue folder
can rewrite the log too, which is why the folder must be private.
"""

from __future__ import annotations

import errno as errno_mod
import logging
import os
import struct
import sys
import threading
import zlib
from array import array
from collections.abc import Callable
from itertools import chain
from typing import Any

from ..errors import NobrokerError
from .fs import FileSystem, unmap
from ..codec import load_json, on_fresh_stack
from .layout import snapshot_generation, snapshot_path, temp_path
from .log import LogFile
from .prefix_crc import BufferCrc, PrefixCrc
from .replay import QueueState
from .state_form import Captured, capture, from_snapshot

logger = logging.getLogger("nobroker")

#: A block of a snapshot as it is written: its bytes in pieces, one after another.
Block = list[bytes]

#: A close writes a snapshot only once this many records were replayed or applied
#: since the state was last loaded or replayed: below that, replay is fast anyway.
SNAPSHOT_MIN_RECORDS = 20_000
#: One snapshot written at a time in this process (a close, a compaction's checkpoint, a checkpoint's thread).
_WRITING = threading.Lock()


def _after_fork_in_child() -> None:
    # A checkpoint's thread of the parent may have held it: that thread is not here to let go.
    global _WRITING
    _WRITING = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

MAGIC = b"NBSNAPSH"
#: 2: the cold rows and the Entries carry their record's size (for live_bytes).
#: 3: the id table's row numbers are four bytes (index.ROW_TYPE), not eight.
VERSION = 3
_HEADER = struct.Struct("<8sHIQIBBBBH")
_LENGTH = struct.Struct("<Q")
_TRAILER = struct.Struct("<I")
#: What a snapshot's raw blocks depend on: loading one written with anything else is refused.
_MACHINE = (
    1 if sys.byteorder == "little" else 0,
    array("Q").itemsize,
    array("q").itemsize,
    array("i").itemsize,
)


class SnapshotError(ValueError):
    """A snapshot file that cannot be used (the caller ignores it and replays the log)."""


def load(fs: FileSystem, directory: str, name: str, log: LogFile) -> tuple[QueueState, int, int] | None:
    """The state a usable snapshot of ``log``'s generation holds: (state, L, crc of log[0, L)).

    None when there is none or it cannot be trusted (logged, never raised):
    the caller then replays the whole log, as if no snapshot existed. The
    crcs of the log's prefix and of the snapshot itself are computed in
    threads while the state is built from the snapshot's bytes, unchecked
    (prefix_crc.PrefixCrc, BufferCrc); the state is used only once both match.
    """
    path = snapshot_path(directory, name, log.generation)
    prefix: PrefixCrc | None = None
    body: BufferCrc | None = None
    data: Any = None
    blocks: list[memoryview] = []
    try:
        try:
            fd = fs.open(path, os.O_RDONLY)  # never through a symlink (the seam adds O_NOFOLLOW)
            try:
                guess = _peek_offset(fs.pread(fd, _HEADER.size, 0), log.generation)
                prefix = PrefixCrc(fs, log.fd, guess, log.size())
                data = fs.map_all(fd)  # a short read fails the checksum below
            finally:
                fs.close(fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            why = "it is a symlink" if exc.errno == errno_mod.ELOOP else str(exc)
            logger.info("%s: ignoring the snapshot (%s); replaying the whole log", path, why)
            return None
        try:
            if len(data) < _HEADER.size + _TRAILER.size:
                raise SnapshotError("the file is too short")
            body = BufferCrc(memoryview(data)[: -_TRAILER.size])
            try:
                fields, blocks, offset, crc = _decode(data, log.generation)
                size = log.size()
                if size < offset:
                    raise SnapshotError(f"it covers {offset} bytes but the log holds {size}")
                state = from_snapshot(fields, blocks)  # from unchecked bytes, while both crcs are computed
            except Exception:
                _check_body(body, data)  # damage is what a damaged file is refused for, whatever it broke
                raise
            _check_body(body, data)
            if prefix.result(offset) != crc:
                raise SnapshotError(f"the log's first {offset} bytes are not those it was taken from")
        except (
            SnapshotError, NobrokerError, OSError, ValueError, TypeError, KeyError, IndexError, OverflowError,
            AttributeError, RecursionError, MemoryError, struct.error,
        ) as exc:  # fmt: skip
            logger.info("%s: ignoring the snapshot (%s); replaying the whole log", path, exc)
            return None
    finally:
        if prefix is not None:
            prefix.join()  # never leave a thread reading a descriptor the caller may close
        if body is not None:
            body.join()  # nor one reading the mapping, which goes next
        blocks = []  # views of the mapping: the state holds copies
        unmap(data)
    logger.debug("%s: loaded the state at offset %d (%d records)", path, offset, state.records)
    state.enables_end = offset  # a lease may rest on any of the records it stands for
    return state, offset, crc


def _peek_offset(head: bytes, generation: int) -> int | None:
    """The log offset a snapshot's header names, if it looks like one of ``generation`` (checked again in full later)."""
    if len(head) < _HEADER.size:
        return None
    magic, version, gen, offset, *_rest = _HEADER.unpack_from(head, 0)
    return offset if magic == MAGIC and version == VERSION and gen == generation else None


def _check_body(body: BufferCrc, data: Any) -> None:
    """SnapshotError unless the snapshot's bytes are those its trailer's crc was taken of."""
    if body.result() != _TRAILER.unpack_from(data, len(data) - _TRAILER.size)[0]:
        raise SnapshotError("its checksum does not match (damaged or cut short)")


def _decode(data: Any, generation: int) -> tuple[dict[str, Any], list[memoryview], int, int]:
    """The fields, blocks, log offset and prefix crc a snapshot's bytes say (not yet checked: any of it may be damage)."""
    assert len(data) >= _HEADER.size + _TRAILER.size, "the caller checked the size"
    magic, version, gen, offset, crc, *machine, count = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise SnapshotError("it is not a nobroker snapshot")
    if version != VERSION:
        raise SnapshotError(f"format version {version}, this nobroker reads {VERSION}")
    if gen != generation:
        raise SnapshotError(f"it belongs to generation {gen}")
    if tuple(machine) != _MACHINE:
        raise SnapshotError("it was written with another byte order or array sizes")
    pos = _HEADER.size
    if count < 1 or pos + count * _LENGTH.size > len(data) - _TRAILER.size:
        raise SnapshotError("its block lengths do not add up")
    lengths = [_LENGTH.unpack_from(data, pos + i * _LENGTH.size)[0] for i in range(count)]
    pos += count * _LENGTH.size
    if pos + sum(lengths) != len(data) - _TRAILER.size:
        raise SnapshotError("its block lengths do not add up")
    view = memoryview(data)
    blocks = []
    for length in lengths:
        blocks.append(view[pos : pos + length])
        pos += length
    fields = load_json(bytes(blocks[0]).decode("utf-8"))
    if type(fields) is not dict:
        raise SnapshotError("its fields are not an object")
    return fields, blocks[1:], offset, crc


def save(
    fs: FileSystem, directory: str, name: str, generation: int, state: QueueState, offset: int, crc: int
) -> str:
    """Write the snapshot of ``state`` = replay of log[0, ``offset``) whose crc32 is ``crc``.

    Temp file (O_EXCL, 0600), rename into place; no fsync (see write). Returns the path.
    Raises OSError (or ValueError for a state JSON cannot hold): only the cache is lost.
    """
    return write(fs, directory, name, generation, offset, crc, encode(state))


def encode(state: QueueState) -> list[Block]:
    """The blocks of ``state``'s snapshot, copied: ``write`` may run later, in another thread, as the state changes."""
    return encode_captured(capture(state))


def encode_captured(captured: Captured, pause: Callable[[], None] | None = None) -> list[Block]:
    """The blocks of a snapshot ``capture`` took; ``pause()`` now and then (see Captured.fields_json)."""
    # On a stack of its own: hot jobs' results nest, and close() may be called from deep inside anything.
    pieces = on_fresh_stack(lambda: captured.fields_json(pause))
    return [[piece.encode("utf-8") for piece in pieces], *([block] for block in captured.blocks)]


def write(fs: FileSystem, directory: str, name: str, generation: int, offset: int, crc: int, blocks: list[Block]) -> str:
    """Write a snapshot of ``encode``'s ``blocks`` (one writer at a time in this process: the temp file's name is per pid)."""
    with _WRITING:
        return _write(fs, directory, name, generation, offset, crc, blocks)


def _write(fs: FileSystem, directory: str, name: str, generation: int, offset: int, crc: int, blocks: list[Block]) -> str:
    head = _HEADER.pack(MAGIC, VERSION, generation, offset, crc, *_MACHINE, len(blocks))
    head += b"".join(_LENGTH.pack(sum(map(len, pieces))) for pieces in blocks)
    total = zlib.crc32(head)
    for pieces in blocks:
        for piece in pieces:
            total = zlib.crc32(piece, total)
    final = snapshot_path(directory, name, generation)
    tmp = temp_path(final)  # a dead writer's temp file is a leftover the next opener removes
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = fs.open(tmp, flags, 0o600)
    except FileExistsError:  # left by an earlier process with our pid: ours to replace
        fs.unlink(tmp)
        fd = fs.open(tmp, flags, 0o600)
    try:
        pos = 0
        for part in [head, *chain.from_iterable(blocks), _TRAILER.pack(total)]:
            view = memoryview(part)
            while view:
                n = fs.pwrite(fd, view[: 1 << 26], pos)
                if n <= 0:
                    raise OSError(errno_mod.EIO, "write made no progress")
                view = view[n:]
                pos += n
        # No fsync, of the file or the folder: a power cut may then leave the snapshot
        # missing, empty or torn under its final name, and load() ignores any of those
        # (its own crc and the log prefix's crc are checked) and the log is replayed. A
        # lost snapshot costs one replay; an fsync would cost every clean close its time.
        # The rename still matters: a peer opening meanwhile never reads a half-written file.
        done, fd = fd, -1
        fs.close(done)
        fs.replace(tmp, final)
    except BaseException:
        if fd >= 0:
            fs.close(fd)
        try:
            fs.unlink(tmp)
        except OSError:
            pass
        raise
    return final


def remove_older(fs: FileSystem, directory: str, name: str, generation: int) -> None:
    """Delete the snapshots of queue ``name``'s generations before ``generation`` (they can never be used again)."""
    for entry in fs.listdir(directory):
        found = snapshot_generation(entry, name)
        if found is not None and found < generation:
            try:
                fs.unlink(os.path.join(directory, entry))
            except FileNotFoundError:
                pass


def remove_generation(fs: FileSystem, directory: str, name: str, generation: int) -> None:
    """Delete the snapshot of generation ``generation``, if any (a compaction that did not flip to it)."""
    try:
        fs.unlink(snapshot_path(directory, name, generation))
    except OSError:
        pass


def remove(fs: FileSystem, directory: str, name: str) -> None:
    """Delete every snapshot of queue ``name`` (repair does, as it rewrites the log)."""
    for entry in fs.listdir(directory):
        if snapshot_generation(entry, name) is not None:
            try:
                fs.unlink(os.path.join(directory, entry))
            except FileNotFoundError:
                pass
