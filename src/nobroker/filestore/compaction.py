"""Writing the next generation: one record per schedule and per live job, then one atomic flip.

Owns: NextGeneration (a new generation file while it is written: the live
jobs streamed in, records copied from the old generation after them, fsync,
its final name, folder fsync), ``write_generation`` (all of that in one go,
for repair) and ``flip`` (replace the pointer, fsync the folder). Imports:
errors, layout, fs, framing, entry, records, reading, log, pointer.

Before the flip the old generation is the truth and the new file is garbage
that the next opener deletes (unless a compactor still holds the queue's
compactor lock); after it, the reverse. Nothing in between is a state anyone
can observe, because the flip is one rename and peers compare the pointer
under the lock before they append.

Records carry no file offsets (a job's payload is found through the offset
its reader notes while reading), so a record's bytes mean the same anywhere:
the compactor copies what peers appended to the old generation, byte for
byte, after the jobs it wrote.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import CompactionError, NobrokerError
from .framing import DEFAULT_FORMAT_VERSION, HEADER_SIZE, encode_header, encode_record, is_lean
from .fs import FileSystem, storage_error, write_fully
from .layout import MAX_GENERATION, log_path, temp_path
from .log import LogFile
from .reading import READ_CHUNK
from .pointer import install_pointer, prepare_pointer, write_pointer
from .entry import Entry
from . import records

#: Bytes buffered before each write while streaming the new generation.
WRITE_BUFFER = 1 << 20


class NextGeneration:
    """Generation ``generation`` being written: a temp file, then (``install``) its final name.

    Memory stays bounded: jobs go out in WRITE_BUFFER-sized writes, copies in
    READ_CHUNK-sized ones. Every failure raises CompactionError (the previous
    generation is still the truth) after removing the file.
    """

    def __init__(
        self, fs: FileSystem, directory: str, name: str, generation: int, version: int = DEFAULT_FORMAT_VERSION
    ) -> None:
        self.check_generation(generation)
        self.version = version
        self.lean = is_lean(version)  # format version 4: a job's record leaves out an available_at equal to its enqueued_at
        self.fs = fs
        self.directory = directory
        self.generation = generation
        self.final = log_path(directory, name, generation)
        self.tmp = temp_path(self.final)
        self.path = self.tmp
        self.fd: int | None = None
        self.pos = 0
        self.synced = 0  # bytes known durable
        self.crc = 0  # crc32 of every byte written so far: a checkpoint of the file needs no read back
        with self._failing("creating"):
            if fs.exists(self.tmp):
                fs.unlink(self.tmp)
            self.fd = fs.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            self._write(encode_header(generation, version))

    @staticmethod
    def check_generation(generation: int) -> None:
        if generation > MAX_GENERATION:
            raise CompactionError(
                f"generation {generation} would exceed {MAX_GENERATION}; this queue has been compacted too often"
            )

    @contextmanager
    def _failing(self, doing: str) -> Iterator[None]:
        """Turn any failure into CompactionError, removing the file first."""
        try:
            yield
        except OSError as exc:
            self.discard()
            raise CompactionError(
                f"compaction failed, the previous generation is still the truth: {storage_error(exc, doing, self.path)}"
            ) from None
        except CompactionError:
            self.discard()
            raise
        except NobrokerError as exc:
            self.discard()
            raise CompactionError(f"compaction failed, the previous generation is still the truth: {exc}") from None
        except BaseException:
            self.discard()
            raise

    def _write(self, data: bytes) -> None:
        assert self.fd is not None
        write_fully(self.fs, self.fd, data, self.pos)
        self.pos += len(data)
        self.crc = zlib.crc32(data, self.crc)

    def write_records(self, extra: Iterable[records.Record]) -> int:
        """Records that are not jobs (one SCHEDULE per schedule), written as they are; returns how many."""
        data = [encode_record(*record) for record in extra]
        with self._failing("writing"):
            if data:
                self._write(b"".join(data))
        return len(data)

    def write_jobs(
        self,
        entries: Iterable[Entry],
        read_body: Callable[[Entry], dict[str, Any]],
        progress: Callable[[int], None] | None = None,
        sync_every: int | None = None,
        read_as_is: Callable[[Entry], bytes | None] | None = None,
    ) -> dict[str, int]:
        """One ENQUEUE record per entry, with its current state; returns each job's new offset.

        ``read_as_is``: the entry's record as it stands, where it already
        says what this would write (a job untouched since it was enqueued,
        its record checked); None: decoded and written anew.

        With ``sync_every``, fsync after about that many bytes: the file reaches
        the disk in steps instead of in one burst that every other writer on the
        filesystem would queue behind (ext4 commits other files' new blocks
        with a peer's fsync).
        """
        offsets: dict[str, int] = {}
        with self._failing("writing"):
            buf = bytearray()
            written = 0
            for entry in entries:
                offsets[entry.id] = self.pos + len(buf)
                same = None if read_as_is is None else read_as_is(entry)
                buf += encode_record(*records.rewritten_job(entry, read_body(entry), self.lean)) if same is None else same
                written += 1
                if len(buf) >= WRITE_BUFFER:
                    self._write(bytes(buf))
                    buf.clear()
                    if sync_every is not None and self.pos - self.synced >= sync_every:
                        self.sync()
                    if progress is not None:
                        progress(written)
            if buf:
                self._write(bytes(buf))
        return offsets

    def copy_from(self, log: LogFile, start: int, end: int) -> None:
        """Append the bytes ``[start, end)`` of ``log`` (whole records a reader has checked), unchanged."""
        with self._failing("copying records into"):
            while start < end:
                chunk = log.fs.pread(log.fd, min(READ_CHUNK, end - start), start)
                if not chunk:
                    raise CompactionError(f"{log.path} ended at offset {start}, before {end}")
                self._write(chunk)
                start += len(chunk)

    def sync(self) -> None:
        """fsync the file (a no-op when nothing was written since the last one)."""
        if self.synced == self.pos:
            return
        assert self.fd is not None
        with self._failing("fsync of"):
            self.fs.fsync(self.fd)
        self.synced = self.pos

    def install(self, *, sync: bool) -> None:
        """Give the file its final name and, with ``sync``, make the name durable.

        Still not the truth: that takes the flip. Call sync() first.
        """
        with self._failing("renaming"):
            self.fs.replace(self.tmp, self.final)
            self.path = self.final
            if sync:
                self.fs.fsync_dir(self.directory)

    def log(self) -> LogFile:
        """The file as an open LogFile, once it is the truth (the descriptor moves to it)."""
        assert self.fd is not None
        log = LogFile(self.fs, self.final, self.fd, self.generation, self.pos, self.version)
        log.durable_end = self.synced if self.synced > HEADER_SIZE else HEADER_SIZE
        self.fd = None
        return log

    def discard(self, *, unlink: bool = True) -> None:
        """Close and (with ``unlink``) remove the file. Only before the flip, and only while it is ours."""
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                self.fs.close(fd)
            except OSError:
                pass
        if unlink:
            try:
                self.fs.unlink(self.path)
            except OSError:
                pass


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
    extra: Iterable[records.Record] = (),
    version: int = DEFAULT_FORMAT_VERSION,
) -> tuple[LogFile, dict[str, int]]:
    """Stream every entry into generation ``generation``, fsync, final name, folder fsync.

    ``extra`` (the schedules' records) goes first, before the jobs.
    Returns the open file and the jobs' new offsets. Used where the caller
    holds the queue's lock throughout (repair); the file storage's compaction
    uses NextGeneration step by step, mostly without that lock.
    """
    new = NextGeneration(fs, directory, name, generation, version)
    new.write_records(extra)
    offsets = new.write_jobs(entries, read_body, progress)
    if sync:
        new.sync()
    new.install(sync=sync)
    return new.log(), offsets


def flip(fs: FileSystem, directory: str, name: str, generation: int, *, sync: bool) -> None:
    """Make ``generation`` the truth: the single atomic step of compaction."""
    try:
        write_pointer(fs, directory, name, generation, sync=sync)
    except NobrokerError as exc:
        raise CompactionError(f"compaction could not flip the pointer; the previous generation is still the truth: {exc}") from None


def prepare_flip(fs: FileSystem, directory: str, name: str, generation: int, *, sync: bool) -> str:
    """The slow half of a flip, done ahead: a durable temp pointer naming ``generation``; returns its path."""
    try:
        return prepare_pointer(fs, directory, name, generation, sync=sync)
    except NobrokerError as exc:
        raise CompactionError(f"compaction could not flip the pointer; the previous generation is still the truth: {exc}") from None


def finish_flip(fs: FileSystem, directory: str, name: str, prepared: str) -> None:
    """The flip itself: one rename of the prepared pointer. Durable after the caller's folder fsync.

    A failure raises StorageError: whether the rename happened is not known.
    """
    install_pointer(fs, directory, name, prepared)


def drop_prepared(fs: FileSystem, prepared: str) -> None:
    """Remove a prepared pointer that will not be used."""
    try:
        fs.unlink(prepared)
    except OSError:
        pass
