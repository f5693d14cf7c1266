"""Writing the next generation: one record per live job, then one atomic flip.

Owns: ``write_generation`` (stream live jobs into a new generation file,
fsync it, give it its final name, fsync the folder) and ``flip`` (replace the
pointer, fsync the folder). Imports: errors, fs, framing, log, replay.

Before the flip the old generation is the truth and the new file is garbage
that the next opener deletes; after it, the reverse. Nothing in between is a
state anyone can observe, because the flip is one rename and peers compare
the pointer under the lock before they append.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from .errors import CompactionError, NobrokerError
from .framing import HEADER_SIZE, MAX_GENERATION, RecordType, encode_header, encode_record
from .fs import FileSystem
from .log import LogFile, log_path, storage_error, write_fully, write_pointer
from .replay import Entry

#: Bytes buffered before each write while streaming the new generation.
WRITE_BUFFER = 1 << 20


def write_generation(
    fs: FileSystem,
    directory: str,
    name: str,
    generation: int,
    entries: Iterable[Entry],
    read_body: Callable[[Entry], dict[str, Any]],
    *,
    sync: bool,
    progress: Callable[[int], None] | None = None,
) -> tuple[LogFile, dict[str, int]]:
    """Stream every entry into generation ``generation``; returns the open file and new offsets.

    Memory stays bounded: records go out in WRITE_BUFFER-sized writes.
    """
    if generation > MAX_GENERATION:
        raise CompactionError(f"generation {generation} would exceed {MAX_GENERATION}; this queue has been compacted too often")
    final = log_path(directory, name, generation)
    tmp = f"{final}.{os.getpid()}.tmp"
    offsets: dict[str, int] = {}
    fd = None
    try:
        if fs.exists(tmp):
            fs.unlink(tmp)
        fd = fs.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        pos = 0
        buf = bytearray(encode_header(generation))
        written = 0
        for entry in entries:
            body = read_body(entry)
            # Fields written only when set must not survive from an older body
            # (a stage the next lease cleared, a result from a past ack).
            for key in ("stage", "result"):
                body.pop(key, None)
            body.update(entry.state_fields())
            offsets[entry.id] = pos + len(buf)
            buf += encode_record(RecordType.ENQUEUE, body)
            written += 1
            if len(buf) >= WRITE_BUFFER:
                write_fully(fs, fd, bytes(buf), pos)
                pos += len(buf)
                buf.clear()
                if progress is not None:
                    progress(written)
        if buf:
            write_fully(fs, fd, bytes(buf), pos)
            pos += len(buf)
        if sync:
            fs.fsync(fd)
        fs.replace(tmp, final)
        if sync:
            fs.fsync_dir(directory)
    except OSError as exc:
        _discard(fs, fd, tmp)
        raise CompactionError(f"compaction failed, the previous generation is still the truth: {storage_error(exc, 'writing', tmp)}") from None
    except NobrokerError as exc:
        _discard(fs, fd, tmp)
        raise CompactionError(f"compaction failed, the previous generation is still the truth: {exc}") from None
    except BaseException:
        _discard(fs, fd, tmp)
        raise
    log = LogFile(fs, final, fd, generation, pos)
    log.durable_end = pos if sync else HEADER_SIZE
    return log, offsets


def flip(fs: FileSystem, directory: str, name: str, generation: int, *, sync: bool) -> None:
    """Make ``generation`` the truth: the single atomic step of compaction."""
    try:
        write_pointer(fs, directory, name, generation, sync=sync)
    except NobrokerError as exc:
        raise CompactionError(f"compaction could not flip the pointer; the previous generation is still the truth: {exc}") from None


def _discard(fs: FileSystem, fd: int | None, tmp: str) -> None:
    if fd is not None:
        try:
            fs.close(fd)
        except OSError:
            pass
    try:
        fs.unlink(tmp)
    except OSError:
        pass
