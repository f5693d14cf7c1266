"""The file storage: one folder on local disk, one append-only log per queue.

Owns: FileStorage, which runs every operation as the four beats of the
design (lock → read forward → reclaim → append, fsync, apply), opens and
recovers a queue, compacts it (mostly without the file lock: see compact),
survives fork, and waits for work. Imports: errors, jobs, fs, framing, log,
lock, wake, replay, snapshot, leases, compaction, storage.

Locking, from the outside in: a threading.Lock serialises this process's
threads around the in-memory state, and whichever thread holds it runs every
writing operation the others have queued (one batch: one lock, one append);
the QueueLock serialises processes (an exclusive lock for writers, a shared
one for readers). fsync happens after both are released, through
LogFile.sync_through, so concurrent writers share it (group commit). A caller
is told "done" only after its own bytes are durable. A compaction also holds
the compactor lock file for its whole length (one compactor per queue) and
this object's mutex (its state must stay put while the jobs are streamed),
but the QueueLock only for moments.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import os
import stat
import sys
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any, TypeVar

from . import leases, snapshot
from .compaction import NextGeneration, drop_prepared, finish_flip, prepare_flip
from ..errors import (
    NobrokerError,
    CompactionError,
    CorruptLogError,
    JobNotFoundError,
    NotLeasedError,
    StorageError,
    UnsafeQueueError,
)
from .framing import FRAME_SIZE, HEADER_SIZE, Frame, FrameStatus, RecordType, encode_record, frame
from .fs import OS_FILESYSTEM, FileSystem, storage_error
from ..jobs import CompactionResult, Damage, Job, JobState, QueueStats, RecoveryReport
from ..codec import load_json
from .lock import READ_ONLY_ERRORS, QueueLock, held_elsewhere
from .layout import MAX_GENERATION, check_name, compactor_path, leftover, lock_path, log_path, pointer_path, wake_path
from .log import LogFile, list_generations, read_pointer
from .entry import DEAD, DONE, READY, Entry
from .records import enqueue_body
from .replay import QueueState
from ..storage import EnqueueSpec, StorageOptions, job_not_found, new_job_id, queue_closed, refusal
from .wake import WakeChannel, pause

logger = logging.getLogger("nobroker")

T = TypeVar("T")

#: Auto-compaction never runs on a log smaller than this: not worth a rewrite.
AUTO_COMPACT_MIN_BYTES = 8 * 1024 * 1024
#: Longest single sleep while an idle worker waits for work (the fallback poll).
WAIT_POLL = 0.005
#: Longest stretch a compaction reads peers' records while holding the file lock.
COMPACT_SLICE = 0.002
#: Slices after which a compaction that still has not caught up reads the rest in one go.
COMPACT_MAX_SLICES = 500
#: Bytes of the new generation between two fsyncs while it is written (outside the lock).
COMPACT_SYNC_EVERY = 4 << 20
#: Pause between two slices, longer than a lock waiter's longest backoff (lock.MAX_BACKOFF),
#: so a waiting peer gets the lock instead of the compactor taking it straight back.
COMPACT_YIELD = 0.001
#: Sleep between two looks at a busy compactor lock.
COMPACTOR_POLL = 0.01

_live: weakref.WeakSet[FileStorage] = weakref.WeakSet()
_ROW = attrgetter("row")  # where a job sits in the state's enqueue order
#: The listings an expired lease's job joins, by where its reclaim puts it (see _listed).
_WITHIN = {"dead": ("dead",), "ready": ("runnable", "delayed"), "runnable": ("runnable",), "delayed": ("delayed",)}


def _after_fork_in_child() -> None:
    # The parent's threads do not exist here: a mutex one of them held would
    # stay held forever. Give every storage fresh ones; the pid check reopens files.
    for storage in list(_live):
        storage._mutex = threading.Lock()
        storage._pending_lock = threading.Lock()
        storage._pending = []
        storage._compacting = threading.Lock()
        if storage._compactor is not None:  # the parent's compaction, not ours: let go without unlocking
            storage._compactor.forget()
            storage._compactor = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


#: Records after which a waiting worker may find something to lease.
_WAKING = frozenset({RecordType.NACK, RecordType.RECLAIM, RecordType.REQUEUE})


class _Batch:
    """Records one operation appends: encoded, and applied in memory as they are added."""

    __slots__ = ("state", "parts", "pos", "start", "wakes")

    def __init__(self, state: QueueState, start: int) -> None:
        self.state = state
        self.parts: list[bytes] = []
        self.start = start
        self.pos = start
        self.wakes = False  # does this batch make work runnable (worth waking a worker)?

    def add(self, rtype: RecordType, body: dict[str, Any]) -> int:
        data = encode_record(rtype, body)
        offset = self.pos
        self.state.apply(rtype, body, offset, len(data))
        if rtype in _WAKING:
            self.wakes = True
        self.parts.append(data)
        self.pos += len(data)
        return offset

    def add_job(self, entry: Entry, data: bytes) -> None:
        """An ENQUEUE record already encoded, for a job built from values (the fast path)."""
        entry.offset, entry.size = self.pos, len(data)
        self.wakes = True
        self.state.records += 1
        self.state.add(entry)
        self.parts.append(data)
        self.pos += len(data)


class _Op:
    """One writing operation waiting for (or done by) the thread that runs the batch."""

    __slots__ = ("decide", "lazy", "done", "result", "error", "log", "start", "read_end", "end", "wakes", "compact")

    def __init__(self, decide: Callable[[_Batch, float], Any], lazy: bool) -> None:
        self.decide = decide
        self.lazy = lazy
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.log: LogFile | None = None
        self.start = self.read_end = self.end = 0
        self.wakes = False
        self.compact = False


class _Holds:
    """Takes and releases the file lock for a compaction, remembering the longest hold."""

    __slots__ = ("lock", "since", "longest")

    def __init__(self, lock: QueueLock) -> None:
        self.lock = lock
        self.since = 0.0
        self.longest = 0.0

    def acquire(self) -> None:
        self.lock.acquire(exclusive=True)
        self.since = time.perf_counter()

    def release(self) -> None:
        self.longest = max(self.longest, time.perf_counter() - self.since)
        self.lock.release()


class _Superseded(Exception):
    """A compaction found the pointer changed under it: someone else flipped."""


class FileStorage:
    """A queue kept in ``directory`` as ``<name>.NNNNNN.log`` files."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        options: StorageOptions,
        *,
        auto_compact: float | None = 0.5,
        filesystem: FileSystem | None = None,
    ) -> None:
        self.directory = os.path.abspath(os.fspath(directory))
        self.name = check_name(options.name)
        self.durable = options.fsync
        self.visibility_timeout = options.visibility_timeout
        self.max_attempts = options.max_attempts
        self.backoff = options.backoff
        self.lock_timeout = options.lock_timeout
        self.clock = options.clock or time.time
        self.auto_compact = auto_compact
        self.fs = filesystem or OS_FILESYSTEM
        #: Why this object may only read the queue (the errno that refused writing: a read-only
        #: filesystem or folder), or None. Reads work as usual; every write refuses with StorageError.
        self.read_only: int | None = None
        self._mutex = threading.Lock()
        self._pending_lock = threading.Lock()  # guards _pending only; never held while waiting
        self._pending: list[_Op] = []
        self._compacting = threading.Lock()  # one compaction per object; the compactor lock file does processes
        self._compactor: QueueLock | None = None
        self._closed = False
        self._pid = os.getpid()
        self._log: LogFile | None = None
        self._lock: QueueLock | None = None
        self._state = QueueState()
        self._offset = HEADER_SIZE
        self._stale = False  # memory may differ from disk (a failed write): reload before use
        # Where our own lazily durable records (leases) start, while nothing foreign follows
        # them: a failed fsync may have dropped those pages too, so a rollback cuts from there.
        self._lazy_from: int | None = None
        self._lazy_log: LogFile | None = None
        self._own_end = -1
        self._pointer_sig: tuple[int, int, int] | None = None
        self._lease_mark: int | None = None
        self._failed: StorageError | None = None  # set when a failure leaves the disk state unknown
        self._wake = WakeChannel(wake_path(self.directory, self.name))
        # Waiters limited to some kinds listen on a pipe of their own: a wake-up
        # one of them swallowed for a job it cannot take would leave a worker
        # that takes every kind asleep.
        self._wake_kinds = WakeChannel(wake_path(self.directory, self.name, some_kinds=True))
        self._recovery = RecoveryReport()
        self._cut_damage = Damage.NONE  # what was wrong with the last torn tail cut off
        # What a snapshot at close may build on (see _replay_all and _save_snapshot).
        self._snap_records = 0  # state.records when it was loaded or replayed
        # (generation, offset, crc32 of the log's bytes before offset) for exactly the bytes
        # the state was built from: read under the lock, or written by us. None: unknown.
        self._snap_crc: tuple[int, int, int] | None = None
        self._snap_loaded = False  # did the last replay start from a snapshot?
        self._open()
        _live.add(self)

    # ================================================================ opening
    def _open(self) -> None:
        self._prepare_directory()
        self._lock = QueueLock(self.fs, lock_path(self.directory, self.name), self.lock_timeout, allow_read_only=True)
        self.read_only = self._lock.read_only
        if self._lock.fd is None:
            logger.warning(
                "%s: no lock file, and none can be made (%s): reading without the lock, so what this queue "
                "object shows may be stale or cut short if a writer elsewhere changes the queue",
                self.directory, os.strerror(self.read_only or 0),
            )  # fmt: skip
        started = time.perf_counter()
        self._lock.acquire(exclusive=self.read_only is None)
        try:
            generation = read_pointer(self.fs, self.directory, self.name)
            self._pointer_sig = self._pointer_signature()
            self._log = self._open_generation(generation)
            if self.durable and self.read_only is None:
                # A crash between a peer's pointer rename and its folder fsync could
                # leave a flip that a power cut undoes, and a failed fsync of the
                # parent could leave the folder itself undurable: make both durable
                # before we acknowledge anything written in them. This is also what
                # makes a generation 0 just created durable (LogFile.create leaves
                # its name to this fsync).
                self._sync_directory()
                try:
                    self.fs.fsync_dir(os.path.dirname(self.directory))
                except OSError as exc:
                    raise storage_error(exc, "fsync of the folder holding", self.directory) from None
            # Read-only: a torn tail stays for a writer to cut, leftovers for a writer to remove.
            state, end, torn = self._replay_all(self._log, truncate=self.read_only is None)
            self._state, self._offset = state, end
            if self.read_only is None:
                self._remove_leftovers(self._log.generation)
        finally:
            self._lock.release()
        self._recovery = RecoveryReport(
            generation=self._log.generation,
            records=state.records,
            bytes_read=end,
            torn_bytes=torn,
            jobs=len(state),
            elapsed=time.perf_counter() - started,
            damage=self._cut_damage if torn else Damage.NONE,
            orphan_records=state.orphans,
        )
        if torn:
            logger.warning("%s: cut a torn tail of %d bytes at offset %d (an interrupted write)", self._log.path, torn, end)

    def _prepare_directory(self) -> None:
        path = self.directory
        try:
            st = self.fs.lstat(path)
        except FileNotFoundError:
            parent = os.path.dirname(path)
            os.makedirs(parent, exist_ok=True)
            try:
                self.fs.mkdir(path, 0o700)
                self.fs.chmod(path, 0o700)  # exactly 0700, whatever the umask
                # The new folder's name becomes durable when _open fsyncs the parent,
                # before anything is acknowledged in it.
            except FileExistsError:
                pass
            except OSError as exc:
                raise storage_error(exc, "creating the queue folder", path) from None
            st = self.fs.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            st = os.stat(path)  # a symlinked folder is the user's choice; its files may not be links
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafeQueueError(f"{path} is not a folder; a queue needs a folder of its own")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise UnsafeQueueError(
                f"{path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): "
                "another user could change your jobs. Use a folder you own."
            )
        network = _network_filesystem(path)
        if network:
            raise UnsafeQueueError(
                f"{path} is on a network filesystem ({network}). nobroker's file lock and atomic renames are "
                "not reliable there: keep the queue on a local disk, or use the PostgreSQL storage for many hosts."
            )
        if sys.platform != "win32" and st.st_mode & stat.S_IWOTH:
            raise UnsafeQueueError(
                f"{path} is writable by every user (mode {stat.S_IMODE(st.st_mode):o}): anyone could plant or "
                f"remove queue files. Run `chmod 700 {path}` or use a private folder."
            )

    def _open_generation(self, generation: int | None) -> LogFile:
        if generation is None:  # no compaction yet: generation 0, created on first use
            path = log_path(self.directory, self.name, 0)
            if not self.fs.exists(path):
                others = list_generations(self.fs, self.directory, self.name)
                if others:
                    raise CorruptLogError(
                        f"{self.directory}: {self.name}.current is missing but generation files {others} exist. "
                        "Run `nobroker verify` and `nobroker repair`.",
                        path=path,
                    )
                if self.read_only is not None:
                    raise StorageError(
                        f"{self.directory} holds no queue named {self.name!r}, and one cannot be made there "
                        f"({os.strerror(self.read_only)}). Check --dir/--queue, or use a folder you can write to.",
                        errno=self.read_only,
                        path=path,
                    )
                return LogFile.create(self.fs, self.directory, self.name, 0, sync=self.durable)
            return self._open_log(path, 0)
        path = log_path(self.directory, self.name, generation)
        try:
            return self._open_log(path, generation)
        except FileNotFoundError:
            raise CorruptLogError(
                f"{self.name}.current names generation {generation}, but {path} is missing. "
                "Restore it from a backup, or run `nobroker repair` to rebuild from what exists.",
                path=path,
            ) from None

    def _open_log(self, path: str, generation: int) -> LogFile:
        """A generation file, for writing unless this process may only read it (then ``read_only`` says why)."""
        if self.read_only is None:
            try:
                return LogFile.open(self.fs, path, expect_generation=generation)
            except StorageError as exc:
                if exc.errno not in READ_ONLY_ERRORS:
                    raise
                self.read_only = exc.errno
        return LogFile.open(self.fs, path, writable=False, expect_generation=generation)

    def _replay_all(self, log: LogFile, *, truncate: bool, use_snapshot: bool = True) -> tuple[QueueState, int, int]:
        """Replay a whole generation. Returns (state, end of last whole record, torn bytes cut).

        A snapshot of the generation whose log prefix still matches stands in
        for replaying that prefix (snapshot.py); anything wrong with it: ignored.
        """
        loaded = snapshot.load(self.fs, self.directory, self.name, log) if use_snapshot else None
        state, start, crc = loaded or (QueueState(), 0, 0)
        self._snap_crc = (log.generation, start, crc) if self.durable else None  # see _read_forward
        self._snap_loaded, self._snap_records = loaded is not None, state.records
        stale = self._stale
        try:
            end, torn = self._read_forward(log, state, max(start, HEADER_SIZE), truncate=truncate)
        except CorruptLogError as exc:
            if loaded is None:
                raise
            # Only the whole log may refuse to open: a snapshot must never be the reason.
            logger.info("%s: reading on from the snapshot failed (%s); replaying the whole log", log.path, exc)
            self._stale = stale
            return self._replay_all(log, truncate=truncate, use_snapshot=False)
        return state, end, torn

    def _read_forward(
        self, log: LogFile, state: QueueState, start: int, *, truncate: bool, deadline: float | None = None
    ) -> tuple[int, int]:
        """_apply_forward, and the crc of the bytes it applied, for a snapshot at close.

        Read again while we still hold the lock: the very bytes just applied.
        """
        end, torn = self._apply_forward(log, state, start, truncate=truncate, deadline=deadline)
        mark = self._snap_crc
        if mark is not None and mark[0] == log.generation and mark[1] in (start, 0 if start == HEADER_SIZE else -1):
            try:
                self._snap_crc = (log.generation, end, snapshot.log_crc(self.fs, log.fd, mark[1], end, mark[2]))
            except (OSError, ValueError):
                self._snap_crc = None
        else:
            self._snap_crc = None
        return end, torn

    def _apply_forward(
        self, log: LogFile, state: QueueState, start: int, *, truncate: bool, deadline: float | None = None
    ) -> tuple[int, int]:
        """Apply every whole record after ``start``; deal with what stops the reading.

        A torn tail (nothing valid after it) is cut off when ``truncate`` (we
        hold the exclusive lock) and otherwise left for a writer to cut.
        Damage followed by valid records is never cut: CorruptLogError.
        With a ``deadline`` (time.perf_counter), stop at the first record seen
        after it (having read at least one): the caller reads on later.
        """
        end = start
        apply = state.apply
        for fr in log.scan(start):
            if deadline is not None and fr.status is FrameStatus.OK and end > start and time.perf_counter() >= deadline:
                log.note_end(end)
                return end, 0
            if fr.status is FrameStatus.OK:
                try:
                    apply(fr.rtype, fr.body, fr.offset, FRAME_SIZE + fr.length)  # type: ignore[arg-type]
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    self._stale = True  # the state may be half-changed: rebuild before any use
                    raise CorruptLogError(
                        f"{log.path}: the {RecordType(fr.rtype).name} record at offset {fr.offset} has a valid "
                        f"checksum but fields that make no sense ({type(exc).__name__}: {exc}). Nothing was changed. "
                        "`nobroker repair` keeps the file aside and rebuilds the queue without that record.",
                        path=log.path,
                        offset=fr.offset,
                    ) from None
                end = fr.offset + FRAME_SIZE + fr.length
                continue
            size = log.size()
            after = log.valid_record_after(fr.offset, size)
            if after is not None or fr.status is FrameStatus.BAD_TYPE:
                what = fr.status.value
                if fr.status is FrameStatus.BAD_TYPE:
                    what = f"record type {fr.rtype}, which this nobroker does not know (a newer version wrote it?)"
                raise CorruptLogError(
                    f"{log.path} is damaged at offset {fr.offset} ({what})"
                    + (f", and valid records follow at offset {after}" if after is not None else "")
                    + ". Nothing was changed. `nobroker inspect` shows the records; `nobroker repair` keeps the "
                    "damaged file aside and rebuilds the queue from the valid records.",
                    path=log.path,
                    offset=fr.offset,
                )
            torn = size - fr.offset
            if truncate:
                self._cut_damage = _damage_of(fr, torn)
                log.truncate(fr.offset)
                log.note_end(fr.offset)
                return end, torn
            return end, 0
        log.note_end(end)
        return end, 0

    def _remove_leftovers(self, current: int) -> None:
        """Delete what crashed compactions left: other generations and dead writers' temp files.

        While a peer holds the compactor lock, the next generation it is
        writing already has its final name: other generations stay then.
        """
        compacting = None
        for entry in self.fs.listdir(self.directory):
            found = leftover(entry, self.name)
            if found is None:
                continue
            kind, number = found
            if kind == "tmp":
                if number is not None and number != os.getpid() and _pid_alive(number):
                    continue  # a live peer is still writing it
            elif number == current:
                continue  # the current generation's log, and its snapshot (any other is stale: never used)
            elif kind == "log":
                if compacting is None:
                    compacting = self._compaction_running()
                if compacting:
                    continue
            path = os.path.join(self.directory, entry)
            try:
                self.fs.unlink(path)
                logger.info("removed %s, left over from an interrupted compaction", path)
            except OSError:
                pass

    # ================================================================ the four beats
    def _pointer_signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.fs.lstat(pointer_path(self.directory, self.name))
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _enter(self) -> None:
        if self._closed:
            raise queue_closed(self.name, self.directory)
        if os.getpid() != self._pid:
            self._reopen_after_fork()

    def _reopen_after_fork(self) -> None:
        # The inherited lock descriptor shares its lock with the parent, so
        # keeping it would let parent and child "hold" the lock at once.
        self._pid = os.getpid()
        assert self._lock is not None and self._log is not None
        self._lock.reopen()
        self._wake.forget_after_fork()
        self._wake_kinds.forget_after_fork()
        old = self._log
        self._log = self._open_log(old.path, old.generation)
        self._log.note_end(self._offset)
        self._log.durable_end = self._offset

    def _catch_up(self, *, exclusive: bool) -> None:
        """Beat two: switch generation if a peer compacted, then read what peers appended."""
        log = self._log
        assert log is not None
        sig = self._pointer_signature()
        if sig != self._pointer_sig or self._stale:
            generation = read_pointer(self.fs, self.directory, self.name) or 0
            if generation != log.generation or self._stale:
                self._switch_to(generation, exclusive=exclusive)
                # Only now: had the switch failed, the next operation must try again
                # rather than append to a generation that is no longer the truth.
                self._pointer_sig = sig
                return
            self._pointer_sig = sig
        try:
            size = log.size()
        except OSError as exc:
            raise storage_error(exc, "reading", log.path) from None
        if size < self._offset:
            # The file shrank under us: a writer rolled back records after a failed
            # fsync. What we applied from them is gone from disk: rebuild from it.
            self._switch_to(log.generation, exclusive=exclusive)
        elif size != self._offset:
            self._offset, _torn = self._read_forward(log, self._state, self._offset, truncate=exclusive)

    def _switch_to(self, generation: int, *, exclusive: bool) -> None:
        old = self._log
        assert old is not None
        if old.generation != generation:
            # Records we appended there may not be fsynced yet; the peer's new
            # generation holds them, but only once its flip is durable. Be sure.
            try:
                old.sync_through(old.written_end)
            except StorageError as exc:
                # The new generation holds those records, but a failed fsync means
                # this object must acknowledge nothing more (see _check_usable).
                self._failed = exc
                raise
            new = self._open_generation(generation)
            try:
                if self.durable:
                    self._sync_directory()  # see _open: the flip we follow must be durable
                state, end, _torn = self._replay_all(new, truncate=exclusive)
            except BaseException:
                new.close()
                raise
        else:
            new = old  # reloading after a failed write: same file, same failure memory
            state, end, _torn = self._replay_all(new, truncate=exclusive)
        if old is not new:
            old.close()
        self._log, self._state, self._offset, self._stale = new, state, end, False

    def _roll_back(self, log: LogFile, start: int, end: int) -> None:
        """After a failed fsync, take this operation's records out of the file if they are last.

        The kernel may have dropped them while keeping them readable: left in
        place, a later successful fsync of records after them would make them
        damage in the middle of durable records. The caller is told the
        operation failed, so removing them is the honest outcome. Best effort:
        this object refuses writes from now on either way.
        """
        try:
            with self._mutex:
                lock = self._lock
                if lock is None or log is not self._log or self._closed:
                    return
                lock.acquire(exclusive=True)
                try:
                    # Not while a compaction runs: it may already have copied these records,
                    # and cutting bytes it read would shift everything after them.
                    if log.size() == end and not self._compaction_running():  # nobody appended after us
                        log.truncate(start)
                        self._stale = True  # memory holds the records we just removed
                        # Make the shorter size durable, or a power cut could bring the
                        # records back. This fsync is not a retry: nothing written
                        # before it is assumed durable because of it.
                        self.fs.fsync(log.fd)
                finally:
                    lock.release()
        except (NobrokerError, OSError):
            pass

    def _check_usable(self) -> None:
        if self.read_only is not None:
            raise StorageError(
                f"queue {self.name!r} in {self.directory} is open read-only ({os.strerror(self.read_only)}): "
                "it can be read, not changed. Make the folder writable, then open the queue again.",
                errno=self.read_only,
                path=self.directory,
            )
        if self._failed is not None:
            raise StorageError(
                f"{self._failed} This queue object refuses further writes; open the queue again.",
                errno=self._failed.errno,
                path=self._failed.filename,
            )
        assert self._log is not None
        self._log.check_usable()

    def _sync_directory(self) -> None:
        try:
            self.fs.fsync_dir(self.directory)
        except OSError as exc:
            raise storage_error(exc, "fsync of the queue folder", self.directory) from None

    def _reclaim(self, batch: _Batch, now: float) -> None:
        """Beat three: every lease whose deadline passed counts as a failed attempt."""
        for entry in self._state.expired(now):
            if leases.exhausted(entry):
                batch.add(RecordType.DEAD, {"id": entry.id, "at": now, "error": leases.expiry_error(entry)})
            else:
                available_at = leases.reclaim_time(entry, self.backoff)
                batch.add(RecordType.RECLAIM, {"id": entry.id, "at": now, "available_at": available_at})

    def _write(self, decide: Callable[[_Batch, float], T], *, lazy: bool = False) -> T:
        """Run one writing operation through the four beats, then wait until it is durable.

        Operations from this process's threads are combined: the thread that
        gets the mutex runs every operation queued by then in one batch (one
        lock, one catch-up, one append, one fsync for all), while the others
        wait on the mutex and find their work done. Under contention that turns
        eight threads' enqueues into one write, not eight.

        ``lazy`` (leases only): the operation's own records become durable with
        the next fsync of the file (the job's ack at the latest, or close), not
        before it returns. What it read is still made durable first, so a
        lease never hands out a job that a power cut could take back. A power
        cut can take back such a lease: the job is then ready again, which is
        what at-least-once delivery allows (its holder died with the machine).
        """
        self._enter()
        op = _Op(decide, lazy)
        with self._pending_lock:
            self._pending.append(op)
        with self._mutex:
            if not op.done:
                self._run_pending()
        log = op.log
        if log is not None:
            if op.wakes:
                self._wake.notify()
                self._wake_kinds.notify()
            if self.durable and not (op.lazy and not op.result):  # "nothing to lease" needs no fsync
                # Even an operation that wrote nothing answers from what it read, and
                # what a peer (or a writer that died before its fsync) appended may not
                # be durable yet: "already done" must not be said of bytes a power cut
                # can take back. Free when our last fsync already covers it.
                try:
                    log.sync_through(op.read_end if op.lazy else op.end)
                except StorageError as exc:
                    # Remembered here, not only in the LogFile: the refusal must outlive
                    # a switch to another generation.
                    self._failed = self._failed or exc
                    start = op.start
                    if self._lazy_from is not None and self._lazy_log is log:
                        # Our leases before this operation were never fsynced: the failed
                        # fsync may have dropped them as well. Cut them too, or a later
                        # writer's records would sit on top of a hole.
                        start = min(start, max(self._lazy_from, log.durable_end))
                    if op.end != start:
                        self._roll_back(log, start, op.end)
                    raise
        if op.error is not None:
            raise op.error
        if op.compact:
            try:
                self._compaction(None, wait=False)  # a compaction already running serves the same end
            except CompactionError as exc:
                logger.warning("automatic compaction failed (the queue is unharmed): %s", exc)
        return op.result  # type: ignore[return-value]

    def _run_pending(self) -> None:
        """Under the mutex: the four beats for every queued operation, as one batch."""
        with self._pending_lock:
            ops, self._pending = self._pending, []
        try:
            self._enter()
            lock, log = self._lock, self._log
            assert lock is not None and log is not None
            self._check_usable()
            lock.acquire(exclusive=True)
            try:
                self._catch_up(exclusive=True)
                log = self._log
                assert log is not None
                if self._offset != self._own_end or log is not self._lazy_log:
                    self._lazy_from = None  # a peer's records follow ours: see _write
                now = self.clock()
                batch = _Batch(self._state, self._offset)
                self._reclaim(batch, now)
                for op in ops:
                    op.read_end = batch.pos  # what this operation's answer rests on
                    try:
                        op.result = op.decide(batch, now)
                    except Exception as exc:
                        # decide() refuses before adding records of its own; the
                        # records before it are still true and are written below.
                        op.error = exc
                end = self._offset
                if batch.parts:
                    data = batch.parts[0] if len(batch.parts) == 1 else b"".join(batch.parts)
                    try:
                        end = log.append(data, self._offset)
                    except BaseException:
                        self._stale = True  # memory holds records the disk does not: reload next time
                        raise
                    self._offset = self._own_end = end
                    mark = self._snap_crc
                    if mark is not None and mark[0] == log.generation and mark[1] == batch.start:
                        self._snap_crc = (mark[0], end, zlib.crc32(data, mark[2]))  # what we wrote
                    else:
                        self._snap_crc = None
                    if self._lazy_from is None and all(op.lazy for op in ops):
                        self._lazy_from, self._lazy_log = batch.start, log
                compact_now = self._should_auto_compact()
            finally:
                lock.release()
            self._state.tidy()  # outside the file lock: peers never wait for it
            for op in ops:
                op.log, op.start, op.end, op.wakes = log, batch.start, end, batch.wakes
            ops[0].compact = compact_now
        except BaseException as exc:
            for op in ops:  # nothing of this batch was written: every operation failed
                op.error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            for op in ops:
                op.done = True

    def _read(self, query: Callable[[float], T]) -> T:
        """A read-only operation: shared lock, read forward, answer. Never writes."""
        self._enter()
        with self._mutex:
            self._enter()
            lock = self._lock
            assert lock is not None
            lock.acquire(exclusive=False)
            try:
                self._catch_up(exclusive=False)
                return query(self.clock())
            finally:
                lock.release()
                self._state.tidy()  # outside the file lock: peers never wait for it

    # ================================================================ payloads
    def _read_body(self, entry: Entry) -> dict[str, Any]:
        """The ENQUEUE record that holds ``entry``'s payload, decoded."""
        assert self._log is not None
        return self._log.read_job_body(entry.offset, entry.id)

    def _job(self, entry: Entry) -> Job:
        return entry.to_job(self._read_body(entry).get("payload"))

    # ================================================================ operations
    def enqueue(self, specs: list[EnqueueSpec], conn: Any = None) -> list[Job]:
        if conn is not None:
            raise ValueError("conn= joins a PostgreSQL transaction; the file storage has no transactions to join")

        def decide(batch: _Batch, now: float) -> list[Job]:
            state = self._state
            out: list[Job] = []
            created: dict[str, Any] = {}  # id -> payload, for jobs this very call adds
            # One random read for the whole batch; each new job takes 16 hex digits of it.
            fresh_ids = os.urandom(8 * len(specs)).hex()
            times: dict[int, str] = {}
            for k, spec in enumerate(specs):
                existing = None if spec.job_id is None and spec.dedupe_key is None else self._existing(spec)
                if existing is not None:
                    if existing.id in created:  # its record is not on disk yet
                        out.append(existing.to_job(created[existing.id]))
                    else:
                        out.append(self._job(existing))
                    continue
                job_id = spec.job_id
                if job_id is None:
                    job_id = fresh_ids[16 * k : 16 * k + 16]
                    while job_id in state or job_id in created:
                        job_id = new_job_id()
                available_at = now + spec.delay if spec.delay else now
                entry = Entry.fresh(
                    job_id, spec.priority, spec.max_attempts, available_at, now, state.next_seq,
                    spec.kind, spec.dedupe_key, 0,
                )  # fmt: skip
                batch.add_job(entry, frame(RecordType.ENQUEUE, enqueue_body(entry, spec.payload_json, times)))
                created[job_id] = spec.payload
                out.append(entry.to_job(spec.payload))
            return out

        return self._write(decide)

    def _existing(self, spec: EnqueueSpec) -> Entry | None:
        state = self._state
        if spec.job_id is not None:
            entry = state.get(spec.job_id)
            if entry is not None:
                return entry
        if spec.dedupe_key is not None:
            holder = state.active_keys.get((spec.kind, spec.dedupe_key))
            if holder is not None:
                return state.get(holder)
        return None

    def lease(self, count: int, visibility_timeout: float, kinds: frozenset[str] | None) -> list[Job]:
        def decide(batch: _Batch, now: float) -> list[Job]:
            state = self._state
            state.promote(now)
            taken: list[Job] = []
            while len(taken) < count:
                entry = state.pop_ready(now, kinds)
                if entry is None:
                    break
                batch.add(RecordType.LEASE, leases.lease_body(entry, now, visibility_timeout))
                # Read the payload now, while the file lock pins the generation
                # that entry.offset points into.
                taken.append(self._job(entry))
            self._lease_mark = batch.pos  # wait_for_jobs watches for anything after this
            if taken and len(taken) == count and state.counts[READY] > state.n_delayed:
                # One wake-up may stand for many jobs: a full lease that leaves
                # runnable ones behind passes it on to the next idle worker.
                batch.wakes = True
            return taken

        return self._write(decide, lazy=True)

    def _leased_entry(self, job_id: str, token: str | None, action: str) -> Entry:
        entry = self._state.get(job_id)
        if entry is None:
            raise job_not_found(job_id, self.name)
        if not leases.holds_lease(entry, token):
            held = entry.finished_token if entry.state is DONE else entry.lease_token
            raise refusal(action, job_id, entry.state.value, token, held)
        return entry

    def ack(self, job_id: str, token: str | None, result_json: str | None, result: Any) -> None:
        def decide(batch: _Batch, now: float) -> None:
            if leases.finished_under(self._state.get(job_id), token):
                return  # acking a finished job again is harmless
            self._leased_entry(job_id, token, "ack")
            body: dict[str, Any] = {"id": job_id, "at": now}
            if result_json is not None:
                body["result"] = result  # decoded from result_json by the facade: what replay holds
            batch.add(RecordType.ACK, body)

        self._write(decide)

    def ack_many(self, items: list[tuple[str, str | None, str | None]]) -> None:
        def decide(batch: _Batch, now: float) -> None:
            first_refusal: Exception | None = None
            for job_id, token, result_json in items:
                if leases.finished_under(self._state.get(job_id), token):
                    continue  # acking a finished job again is harmless
                try:
                    self._leased_entry(job_id, token, "ack")
                except (NotLeasedError, JobNotFoundError) as exc:
                    first_refusal = first_refusal or exc
                    continue
                body: dict[str, Any] = {"id": job_id, "at": now}
                if result_json is not None:
                    body["result"] = load_json(result_json)
                batch.add(RecordType.ACK, body)
            if first_refusal is not None:
                raise first_refusal  # _write still writes (and fsyncs) the acks added above

        self._write(decide)

    def nack(
        self, job_id: str, token: str | None, error: str | None, delay: float | None, permanent: bool,
        traceback: str | None = None,
    ) -> Job:  # fmt: skip
        def decide(batch: _Batch, now: float) -> Job:
            entry = self._leased_entry(job_id, token, "nack")
            if permanent or leases.exhausted(entry):
                body: dict[str, Any] = {"id": job_id, "at": now, "error": error}
                rtype = RecordType.DEAD
            else:
                available_at = leases.retry_time(entry, now, self.backoff, delay)
                body = {"id": job_id, "at": now, "attempts": entry.attempts, "available_at": available_at, "error": error}
                rtype = RecordType.NACK
            if traceback is not None:  # a key 0.1.2 ignores; left out when unused
                body["traceback"] = traceback
            batch.add(rtype, body)
            return self._job(entry)

        return self._write(decide)

    def extend(self, job_id: str, token: str | None, seconds: float) -> Job:
        def decide(batch: _Batch, now: float) -> Job:
            entry = self._leased_entry(job_id, token, "extend")
            batch.add(RecordType.EXTEND, {"id": job_id, "at": now, "deadline": now + seconds})
            return self._job(entry)

        return self._write(decide)

    def set_stage(self, job_id: str, token: str | None, stage: str | None) -> Job:
        def decide(batch: _Batch, now: float) -> Job:
            entry = self._leased_entry(job_id, token, "set the stage of")
            batch.add(RecordType.STAGE, {"id": job_id, "at": now, "stage": stage})
            return self._job(entry)

        return self._write(decide)

    def requeue_dead(self, job_id: str | None) -> int:
        def decide(batch: _Batch, now: float) -> int:
            state = self._state
            if job_id is not None:
                entry = state.get(job_id)
                if entry is None:
                    raise job_not_found(job_id, self.name)
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
                batch.add(RecordType.REQUEUE, {"id": entry.id, "at": now, "available_at": now})
                count += 1
            return count

        return self._write(decide)

    def purge(self) -> int:
        def decide(batch: _Batch, now: float) -> int:
            count = len(self._state)
            batch.add(RecordType.PURGE, {"at": now})
            return count

        return self._write(decide)

    # ================================================================ reads
    # Reads never write, yet show the queue as of now: a lease whose deadline
    # passed shows as the reclaim a writer will record (leases.as_reclaimed),
    # though no writer has come by yet. Only those leases cost anything extra:
    # state.expired walks just the top of the lease heap.
    def _shown(self, entry: Entry, now: float) -> Job:
        """The job as a read at ``now`` shows it."""
        job = self._job(entry)
        if leases.lease_expired(entry, now):
            return dataclasses.replace(job, **leases.as_reclaimed(entry, self.backoff))
        return job

    def get(self, job_id: str) -> Job:
        def query(now: float) -> Job:
            entry = self._state.get(job_id)
            if entry is None:
                raise job_not_found(job_id, self.name)
            return self._shown(entry, now)

        return self._read(query)

    def stats(self) -> QueueStats:
        def query(now: float) -> QueueStats:
            stats = self._state.stats(now)
            expired = self._state.expired(now)
            if not expired:
                return stats
            counts = stats.to_dict()
            for entry in expired:
                moved = self._reclaimed_listing(entry, now)
                counts["leased"] -= 1
                counts["ready" if moved == "runnable" else moved] += 1
            del counts["total"]
            return QueueStats(**counts)

        return self._read(query)

    def count(self) -> int:
        return self._read(lambda now: len(self._state))

    def list_jobs(self, listing: str | None, limit: int | None, offset: int, kind: str | None) -> list[Job]:
        def query(now: float) -> list[Job]:
            out: list[Job] = []
            skipped = 0
            for entry in self._listed(listing, now):
                if kind is not None and entry.kind != kind:
                    continue
                if skipped < offset:
                    skipped += 1
                    continue
                out.append(self._shown(entry, now))
                if limit is not None and len(out) >= limit:
                    break
            return out

        return self._read(query)

    def _listed(self, listing: str | None, now: float) -> Iterator[Entry]:
        """The jobs a read at ``now`` shows in ``listing`` (one of LISTINGS, or None: all), oldest first.

        Ready and delayed as stats() counts them; a lease that expired joins
        where its reclaim will put it.
        """
        state = self._state
        state.promote(now)
        if listing == "delayed":
            own: Iterator[Entry] = state.delayed_entries()
        elif listing == "runnable":
            own = (e for e in state.entries(READY) if not state.is_delayed(e))
        else:
            own = state.entries(None if listing is None else JobState(listing))
        expired = state.expired(now)
        if listing in (None, "done") or not expired:
            return own
        if listing == "leased":
            return (e for e in own if not leases.lease_expired(e, now))
        joining = [e for e in expired if self._reclaimed_listing(e, now) in _WITHIN[listing]]
        joining.sort(key=_ROW)
        return heapq.merge(own, joining, key=_ROW)

    def _reclaimed_listing(self, entry: Entry, now: float) -> str:
        """Where an expired lease's job is listed: dead, delayed or runnable (see leases.as_reclaimed)."""
        shown = leases.as_reclaimed(entry, self.backoff)
        if shown["state"] is DEAD:
            return "dead"
        return "delayed" if shown["available_at"] > now else "runnable"

    # ================================================================ compaction
    def compact(self, *, progress: Callable[[int], None] | None = None) -> CompactionResult:
        """Rewrite the log without done jobs; waits for a peer's compaction first (see _compaction)."""
        result = self._compaction(progress, wait=True)
        assert result is not None
        return result

    def _compaction(self, progress: Callable[[int], None] | None, *, wait: bool) -> CompactionResult | None:
        """Rewrite the log as one record per live job (done jobs dropped), then flip.

        Almost all of it runs without the file lock, so other processes keep
        working: under the lock only (1) a catch-up that notes where the old
        generation ends, (2) slices of at most COMPACT_SLICE seconds reading
        what peers appended meanwhile, (3) the last few records, one fsync of
        the new file and the rename of the pointer. In between, the live jobs
        are streamed into the new generation from the old file's prefix
        (bytes before the noted end never change), and the peers' records
        are copied after them byte for byte.

        One compaction at a time per queue: whoever holds the compactor lock
        file compacts. With ``wait`` (an explicit compact()) a second caller
        waits for the running one to finish and then compacts itself, so on
        return every job done before the call is gone; without it
        (automatic compaction) it returns None at once. Threads of this
        process wait for this object's compaction to finish (it keeps the
        in-memory state still); other processes do not.
        """
        started = time.perf_counter()
        self._enter()
        assert self._log is not None
        if self.read_only is not None:
            self._check_usable()  # says why, before the compactor's lock file is opened (or made)
        if self._log.generation >= MAX_GENERATION:  # refused before any file is touched
            NextGeneration.check_generation(self._log.generation + 1)
        if not self._compacting.acquire(blocking=wait):
            return None
        try:
            compactor = QueueLock(self.fs, compactor_path(self.directory, self.name), self.lock_timeout)
            while not compactor.try_acquire(exclusive=True):
                if not wait or self._closed:
                    compactor.close()
                    return None
                time.sleep(COMPACTOR_POLL)
            self._compactor = compactor
            try:
                with self._mutex:
                    self._enter()
                    return self._compact(progress, started)
            finally:
                self._compactor = None
                compactor.close()
        finally:
            self._compacting.release()

    def _compaction_running(self) -> bool:
        """Does anyone (a peer, or another object here) hold the compactor lock right now?"""
        return held_elsewhere(self.fs, compactor_path(self.directory, self.name))

    def _compact(self, progress: Callable[[int], None] | None, started: float) -> CompactionResult:
        assert self._lock is not None and self._log is not None
        lock = _Holds(self._lock)
        self._check_usable()
        # (1) Under the lock: catch up (in slices, if peers wrote much since our
        # last look), reclaim, note where the old generation ends.
        lock.acquire()
        try:
            slices = 0
            while True:
                slices += 1
                old = self._log
                assert old is not None
                if self._stale or self._pointer_signature() != self._pointer_sig or old.size() < self._offset:
                    self._catch_up(exclusive=True)  # a switch or a reload: the usual way, in one go
                    continue
                if self._compaction_slice(lock, old, COMPACT_SLICE if slices < COMPACT_MAX_SLICES else None, locked=True):
                    break
                lock.release()
                time.sleep(COMPACT_YIELD)
                lock.acquire()
            batch = _Batch(self._state, self._offset)
            self._reclaim(batch, self.clock())
            if batch.parts:
                try:
                    self._offset = old.append(b"".join(batch.parts), self._offset)
                except BaseException:
                    self._stale = True  # memory holds records the disk does not: reload next time
                    raise
        finally:
            lock.release()
        base = self._offset
        if self.durable:
            old.sync_through(base)  # every record we copy is durable where it is now
        state = self._state
        records_at_base = state.records
        live = [e for e in state.entries() if e.state is not DONE]
        dropped = len(state) - len(live)
        # (2) Without the lock: stream the live jobs as of ``base``. This process's
        # threads wait on the mutex, so the state stays exactly that.
        new = NextGeneration(self.fs, self.directory, self.name, old.generation + 1)
        prepared: str | None = None
        flipped = False
        try:
            offsets = new.write_jobs(live, self._read_body, progress, COMPACT_SYNC_EVERY if self.durable else None)
            del live
            tail = new.pos  # where the records appended after ``base`` begin in the new file
            # (3) Copy what peers appended meanwhile: read under the lock in short
            # slices (which checks every record), copy without it.
            copied = base
            slices = 0
            while True:
                slices += 1
                caught_up = self._compaction_slice(lock, old, COMPACT_SLICE if slices < COMPACT_MAX_SLICES else None)
                new.copy_from(old, copied, self._offset)
                copied = self._offset
                if caught_up:
                    break
                time.sleep(COMPACT_YIELD)
            if self.durable:
                new.sync()  # the bulk, outside the lock: the fsync under it has little left to do
            new.install(sync=self.durable)
            prepared = prepare_flip(self.fs, self.directory, self.name, new.generation, sync=self.durable)
            # (4) Under the lock: the last records, fsync, flip.
            lock.acquire()
            try:
                self._compaction_slice(lock, old, None, locked=True)
                new.copy_from(old, copied, self._offset)
                copied = self._offset
                if self.durable:
                    new.sync()
                flipped = True  # from here on a failure leaves the flip unknown
                finish_flip(self.fs, self.directory, self.name, prepared)
                prepared = None
            finally:
                lock.release()
            # (5) Without the lock: make the flip durable before anything is answered
            # from the new generation (a peer that follows it fsyncs the folder too).
            if self.durable:
                self._sync_directory()
        except BaseException as exc:
            if prepared is not None:
                drop_prepared(self.fs, prepared)
            if not flipped:
                # A pointer that no longer names ``old`` means someone else flipped
                # (a repair by an older nobroker?): the file of that name may be theirs.
                new.discard(unlink=not isinstance(exc, _Superseded))
                if isinstance(exc, _Superseded):
                    raise CompactionError(
                        "compaction stopped: another process replaced the queue's generation meanwhile; "
                        "nothing was changed by this compaction"
                    ) from None
                raise
            new.discard(unlink=False)
            # The rename may have happened without becoming durable: which
            # generation is the truth after a power cut is unknown, so this
            # object must not acknowledge anything more. A reopen decides.
            self._failed = StorageError(
                f"compaction could not make its pointer flip durable ({exc}); this queue object refuses "
                "further writes: open the queue again."
            )
            raise
        # The flip is durable: the new generation is the truth from here on.
        # Jobs live at ``base`` moved to ``offsets``; records after it moved by a constant.
        shift = tail - base
        if state.relocate(offsets, base, shift):  # cannot happen (done is final); if it did, reload from disk
            self._stale = True
        state.records = len(offsets) + state.records - records_at_base
        before = self._offset
        self._log, self._offset = new.log(), copied + shift
        self._pointer_sig = self._pointer_signature()
        old.close()
        try:
            self.fs.unlink(old.path)
        except OSError:
            pass  # the next opener removes it
        return CompactionResult(
            old_generation=old.generation,
            new_generation=self._log.generation,
            jobs_kept=len(state),
            jobs_dropped=dropped,
            bytes_before=before,
            bytes_after=self._offset,
            elapsed=time.perf_counter() - started,
            lock_held=lock.longest,
        )

    def _compaction_slice(self, lock: _Holds, old: LogFile, budget: float | None, *, locked: bool = False) -> bool:
        """Read forward in ``old`` what peers appended, for about ``budget`` seconds under the lock.

        Returns True once at the end of the file. Raises _Superseded if the
        pointer changed, CompactionError if the file shrank below what was read.
        """
        if not locked:
            lock.acquire()
        try:
            if self._pointer_signature() != self._pointer_sig:
                raise _Superseded()
            if old.size() < self._offset:
                self._stale = True  # records we applied are gone: rebuild before any use
                raise CompactionError(
                    f"compaction stopped: {old.path} shrank under it (a writer rolled back); nothing was changed"
                )
            deadline = None if budget is None else time.perf_counter() + budget
            self._offset, _torn = self._read_forward(old, self._state, self._offset, truncate=True, deadline=deadline)
            return deadline is None or old.size() == self._offset
        finally:
            if not locked:
                lock.release()
                self._state.tidy()  # outside the file lock: peers never wait for it

    def _should_auto_compact(self) -> bool:
        """Is the share of superseded bytes in the log at least ``auto_compact``? O(1).

        Decided on bytes, not records: a few big done jobs among many small
        waiting ones are most of the disk. What a compaction keeps is about
        the ENQUEUE records of the jobs that are not done (``live_bytes``, kept
        by the state as records arrive); every other byte is superseded.
        """
        threshold = self.auto_compact
        if not threshold or self._offset < AUTO_COMPACT_MIN_BYTES:
            return False
        superseded = 1.0 - (HEADER_SIZE + self._state.live_bytes) / self._offset
        return superseded >= threshold

    # ================================================================ waiting and closing
    def wakes_waiters(self) -> bool:
        """Does wait_for_jobs hear of every change that can make a job leasable?

        True while this process holds the queue's named pipe open: writers of
        runnable work (from any process) wake it, and it computes when the
        next delayed job or lease comes due. Then an idle worker may block for
        long; False (no FIFOs here, or the pipe cannot be made) means poll.
        """
        return not self._closed and self._wake.open_reader()

    def wait_for_jobs(
        self, timeout: float, interrupt: int | None = None, kinds: frozenset[str] | None = None
    ) -> bool:
        """Block until work may have arrived, a delayed job or a lease comes due, or ``timeout``.

        A hint for idle workers, not a promise: True means "worth leasing
        again". Writers of runnable work wake one waiter through the queue's
        named pipe (see wake.py); a change in the log's size also counts, so
        appends by this process's own threads are seen even without the pipe.
        ``interrupt``: a descriptor that ends the wait (returning False) as
        soon as it is readable; it is never read. ``kinds``: the waiter takes
        only these, so it waits on the second pipe (``<name>.wake-kinds``).
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._mutex:
            if self._closed or self._log is None:
                return False
            # Compare with what the last lease saw, not with now: a job another
            # thread added since then must wake us at once.
            seen = self._lease_mark if self._lease_mark is not None else self._offset
            log, sig = self._log, self._pointer_sig
            now = self.clock()
            state = self._state
            due = [state.delayed[0][0]] if state.delayed else []
            if state.leases:
                due.append(state.leases[0][0])
        if due:
            deadline = min(deadline, time.monotonic() + max(min(due) - now, 0.0))
        wake = self._wake if kinds is None else self._wake_kinds
        piped = wake.open_reader()
        wake.drain()  # after this, any new work either changed the file or sends a byte
        while True:
            try:
                if self._closed or log.closed or self._offset != seen or self.fs.size(log.fd) != seen:
                    return True
                if self._pointer_signature() != sig:
                    return True
            except OSError:
                return True
            now_mono = time.monotonic()
            remaining = deadline - now_mono
            if remaining <= 0:
                return bool(due)
            if piped:
                if now_mono < wake.heard_from:
                    # Writers that missed our pipe just now may skip their wake-up:
                    # look at the file again once they all write to it.
                    remaining = min(remaining, wake.heard_from - now_mono)
                if wake.wait(remaining, interrupt):
                    return True
                if interrupt is not None and pause(0, interrupt):
                    return False
            elif pause(min(WAIT_POLL, remaining), interrupt):
                return False

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            if self._log is not None:
                if self.durable and os.getpid() == self._pid and self._log.failed is None and self.read_only is None:
                    try:
                        self._log.sync_through(self._log.written_end)
                    except StorageError:
                        pass
                    else:
                        self._save_snapshot()
                self._log.close()
            if self._lock is not None:
                self._lock.close()
            self._wake.close()
            self._wake_kinds.close()
        _live.discard(self)

    def _save_snapshot(self) -> None:
        """Hook of close: leave the state as a snapshot for the next opener (a cache, see snapshot.py).

        Only when the state is exactly the replay of this generation's log up to
        our offset (no failed write, no compaction of our own since the replay,
        the log durable through it) and enough records went by to be worth it.
        """
        log, state, end, mark = self._log, self._state, self._offset, self._snap_crc
        if (
            log is None or self._stale or self._failed is not None
            or mark is None or mark[0] != log.generation or mark[1] != end  # (an own compaction, too)
            or state.records - self._snap_records < snapshot.SNAPSHOT_MIN_RECORDS
        ):  # fmt: skip
            return
        try:
            path = snapshot.save(self.fs, self.directory, self.name, log.generation, state, end, mark[2])
            logger.debug("%s: saved the state at offset %d", path, end)
        except (OSError, NobrokerError, ValueError, TypeError) as exc:
            logger.info("%s: no snapshot written (%s); the next open replays the log", log.path, exc)

    @property
    def location(self) -> str:
        return self.directory

    @property
    def recovery(self) -> RecoveryReport:
        return self._recovery

    @property
    def generation(self) -> int:
        assert self._log is not None
        return self._log.generation


def _damage_of(fr: Frame, torn: int) -> Damage:
    """What was wrong with a torn tail, in the words of nobroker 0.1.2's RecoveryReport."""
    if fr.status is FrameStatus.INCOMPLETE:
        return Damage.TRUNCATED_HEADER if torn < FRAME_SIZE else Damage.TRUNCATED_BODY
    if fr.status is FrameStatus.BAD_LENGTH:
        return Damage.OVERSIZE
    if fr.status is FrameStatus.BAD_TYPE:
        return Damage.UNKNOWN_TYPE
    return Damage.BAD_CHECKSUM  # a bad crc, or a good one over bad JSON (0.1.2 called both that)


#: Filesystem types whose locking or rename semantics a queue cannot trust.
NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb", "smb3", "smbfs", "9p", "fuse.sshfs", "afs", "ceph", "glusterfs", "lustre", "davfs", "fuse.davfs2"}
)


def _network_filesystem(path: str) -> str | None:
    """The filesystem type of ``path`` if it is a network one (Linux only: /proc/self/mountinfo)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    best, best_type = "", ""
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        mount_point = fields[4].replace("\\040", " ")
        if (real == mount_point or real.startswith(mount_point.rstrip("/") + "/")) and len(mount_point) >= len(best):
            best, best_type = mount_point, right.split()[0]
    return best_type if best_type in NETWORK_FILESYSTEMS else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True
