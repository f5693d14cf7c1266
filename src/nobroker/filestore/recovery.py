"""Opening a queue: its folder, its current generation, and the state replayed from it.

Owns: QueueFiles, the bottom layer of FileStorage (see the package's
docstring): the settings, the open generation and lock, the state replayed
from them and where reading stopped; opening (prepare the folder, refuse a
network filesystem, open or create the generation, fsync the folder, replay
with a snapshot, cut a torn tail, remove leftovers), re-opening after a
fork, saving a snapshot at close, reading a job's payload back; the
unlocked replay and the checkpoints come from checkpoint.Checkpoints
(over unlocked.UnlockedReplay), reading forward from forward.Forward.
Imports: errors, jobs, storage, layout, fs, bulk, folder, framing, entry,
log, pointer, lock, records, replay, snapshot, unlocked, checkpoint, forward.

Recovery is exact (design invariant 4): a torn tail, with no valid record
after the damage, is an interrupted write and is cut; damage followed by
valid records is never cut, the queue refuses to open with CorruptLogError
naming the offset, and `nobroker repair` keeps the file aside.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import CorruptLogError, NobrokerError, StorageError
from ..jobs import BackoffPolicy, Damage, Job, RecoveryReport
from ..storage import StorageOptions, queue_closed
from . import checkpoint, records, snapshot
from .bulk import paused_collector
from .checkpoint import Checkpoints
from .entry import Entry
from .framing import DEFAULT_FORMAT_VERSION, HEADER_SIZE
from .fs import FileSystem, storage_error
from .layout import check_name, compactor_path, leftover, lock_path, log_path, pointer_path
from .folder import pid_alive, prepare_directory
from .forward import Forward
from .lock import READ_ONLY_ERRORS, QueueLock, held_elsewhere
from .log import LogFile, list_generations
from .pointer import read_pointer
from .replay import QueueState
from .unlocked import Prepared

logger = logging.getLogger("nobroker")

#: How many forks made this process (counted in each child): an open queue notices that it
#: is in a child by this, where a getpid() per operation would cost a system call.
_forks = [0]
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))

#: What ``_sync_folders_first`` returns when it did not fsync: no pointer signature equals it.
_NOT_SYNCED = object()


class QueueFiles(Checkpoints, Forward):
    """One queue's files as this object holds them, and the state replayed from them."""

    #: The format version of the generations this object creates (a new queue's first, and
    #: every compaction's): 2 by default, 1 to stay readable by nobroker 0.1.2 (framing.py).
    log_format = DEFAULT_FORMAT_VERSION
    #: Write periodic checkpoints in a thread of their own (False: in the writing thread,
    #: after its operation returned; the power-cut sweeps want one order of disk calls).
    checkpoint_in_thread = True
    #: Let go of a generation left behind in a thread of its own (retire.py; False: in the
    #: operation's thread, after the file lock, for one order of disk calls in the sweeps).
    retire_in_thread = True
    #: The fsync of the queue folder; FileStorage makes it (the folder is the storage's).
    _sync_directory: Callable[[], None]

    def __init__(self, directory: str | os.PathLike[str], options: StorageOptions, filesystem: FileSystem) -> None:
        self.directory = os.path.abspath(os.fspath(directory))
        self.name = check_name(options.name)
        self.durable = options.fsync
        self.backoff: BackoffPolicy = options.backoff
        self.lock_timeout = options.lock_timeout
        self.clock: Callable[[], float] = options.clock or time.time
        self.fs = filesystem
        #: Why this object may only read the queue (the errno that refused writing: a read-only
        #: filesystem or folder), or None. Reads work as usual; every write refuses with StorageError.
        self.read_only: int | None = None
        self._mutex = threading.Lock()  # this process's threads, around everything below
        self._closed = False
        self._pid = os.getpid()
        self._forks = _forks[0]
        self._log: LogFile | None = None
        self._lock: QueueLock | None = None
        self._state = QueueState()
        self._offset = HEADER_SIZE  # the end of what ``_state`` was built from
        self._stale = False  # memory may differ from disk (a failed write): reload before use
        self._pointer_path = pointer_path(self.directory, self.name)
        self._pointer_sig: tuple[int, int, int] | None = None
        self._failed: StorageError | None = None  # set when a failure leaves the disk state unknown
        self._recovery = RecoveryReport()
        self._cut_damage = Damage.NONE  # what was wrong with the last torn tail cut off
        # What a snapshot at close may build on (see _replay_all and _save_snapshot).
        self._snap_records = 0  # state.records when it was loaded or replayed
        self._checkpoint_after = 0  # no periodic checkpoint before state.records reaches it (checkpoint.py)
        # (generation, offset, crc32 of the log's bytes before offset) for exactly the bytes
        # the state was built from: read under the lock, or written by us. None: unknown.
        self._snap_crc: tuple[int, int, int] | None = None
        self._snap_loaded = False  # did the last replay start from a snapshot?
        # A generation replayed without the lock, for the next replay under it to start from (unlocked.py).
        self._prepared: Prepared | None = None
        self._checkpointing: threading.Thread | None = None  # writing a checkpoint (see _maybe_checkpoint)

    def _after_fork(self) -> None:
        """In a forked child: the parent's threads do not exist here, so neither do their locks."""
        self._mutex = threading.Lock()
        self._checkpointing = None  # the parent's thread: not here
        self._drop_prepared()

    # ================================================================ opening
    def _open(self) -> None:
        """Open the queue: the folder, the lock, the replay. Refused (CorruptLogError, LockTimeoutError, ...): nothing stays open."""
        try:
            self._open_files()
        except BaseException:
            self._abandon()
            raise

    def _abandon(self) -> None:
        """After a refused open: close every file it opened (a caller that retries must not run out of descriptors)."""
        self._closed = True
        self._drop_prepared()
        log, lock, self._log, self._lock = self._log, self._lock, None, None
        for opened in (log, lock):
            if opened is not None:
                opened.close()

    def _open_files(self) -> None:
        prepare_directory(self.fs, self.directory)
        self._lock = QueueLock(self.fs, lock_path(self.directory, self.name), self.lock_timeout, allow_read_only=True)
        self.read_only = self._lock.read_only
        if self._lock.fd is None:
            logger.warning(
                "%s: no lock file, and none can be made (%s): reading without the lock, so what this queue "
                "object shows may be stale or cut short if a writer elsewhere changes the queue",
                self.directory, os.strerror(self.read_only or 0),
            )  # fmt: skip
        started = time.perf_counter()
        self._prepare_unlocked()
        self._catch_up_unlocked()
        synced = self._sync_folders_first()
        self._lock.acquire(exclusive=self.read_only is None)
        try:
            self._locate(synced)
            assert self._log is not None
            # Read-only: a torn tail stays for a writer to cut, leftovers for a writer to remove.
            state, end, torn = self._replay_all(self._log, truncate=self.read_only is None, following=True)
            self._state, self._offset = state, end
            if self.read_only is None:
                self._remove_leftovers(self._log.generation)
        finally:
            self._lock.release()
        state.tidy()  # outside the lock: a replay's stale heap items must not be the first lease's work
        self._recovery = RecoveryReport(
            generation=self._log.generation, records=state.records, bytes_read=end, torn_bytes=torn,
            jobs=len(state), elapsed=time.perf_counter() - started,
            damage=self._cut_damage if torn else Damage.NONE, orphan_records=state.orphans,
        )  # fmt: skip
        if torn:
            logger.warning("%s: cut a torn tail of %d bytes at offset %d (an interrupted write)", self._log.path, torn, end)

    def _sync_folders_first(self) -> object:
        """Before the exclusive lock: the folder fsyncs ``_locate`` needs, so peers do not wait for them.

        Returns the pointer's signature as it was before them (``_locate``
        fsyncs again, under the lock, if it changed since), or a value no
        signature equals when they were not done.
        """
        if not self.durable or self.read_only is not None:
            return _NOT_SYNCED
        sig = self._pointer_signature()
        self._sync_folders()
        return sig

    def _sync_folders(self) -> None:
        """fsync the queue folder and the folder holding it."""
        self._sync_directory()
        try:
            self.fs.fsync_dir(os.path.dirname(self.directory))
        except OSError as exc:
            raise storage_error(exc, "fsync of the folder holding", self.directory) from None

    def _locate(self, synced: object) -> None:
        """Under the lock: the current generation, opened (or the one replayed without the lock, still current).

        ``synced``: the pointer's signature before the folder fsyncs done
        without the lock (``_sync_folders_first``).
        """
        generation = read_pointer(self.fs, self.directory, self.name)
        self._pointer_sig = self._pointer_signature()
        new = generation is None and not self.fs.exists(log_path(self.directory, self.name, 0))
        self._log = self._open_generation(generation)
        if self.durable and self.read_only is None and (new or synced != self._pointer_sig):
            # A crash between a peer's pointer rename and its folder fsync could
            # leave a flip that a power cut undoes, and a failed fsync of the
            # parent could leave the folder itself undurable: make both durable
            # before we acknowledge anything written in them. Done before the
            # lock, again here only if the pointer changed since (a flip or a
            # roll-back meanwhile), or to make a generation 0 just created
            # durable (LogFile.create leaves its name to this fsync).
            self._sync_folders()

    def _open_generation(self, generation: int | None) -> LogFile:
        ready = self._take_prepared(generation or 0)
        if ready is not None:
            return ready
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
                return LogFile.create(self.fs, self.directory, self.name, 0, sync=self.durable, version=self.log_format)
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

    def _replay_all(
        self, log: LogFile, *, truncate: bool, use_snapshot: bool = True, following: bool = False
    ) -> tuple[QueueState, int, int]:
        """Replay a whole generation (see _replay_whole), the garbage collector paused meanwhile (bulk.py)."""
        with paused_collector():
            return self._replay_whole(log, truncate=truncate, use_snapshot=use_snapshot, following=following)

    def _replay_whole(
        self, log: LogFile, *, truncate: bool, use_snapshot: bool = True, following: bool = False
    ) -> tuple[QueueState, int, int]:
        """Replay a whole generation. Returns (state, end of last whole record, torn bytes cut).

        A snapshot of the generation whose log prefix still matches stands in
        for replaying that prefix (snapshot.py); anything wrong with it: ignored.
        ``following``: the generation is one a peer may have just flipped to
        (opening, or a switch to a newer one), whose checkpoint may be coming;
        a reload of the same generation never waits for one.
        """
        prepared, self._prepared = self._prepared, None
        if prepared is not None and (prepared.log is not log or not use_snapshot):
            if prepared.log is not log:
                prepared.log.close()
            prepared = None
        loaded: tuple[QueueState, int, int] | None
        if prepared is not None:  # replayed without the lock up to prepared.end (see _prepare_unlocked)
            loaded = (prepared.state, prepared.end, prepared.crc or 0)
            self._snap_loaded, self._snap_records = prepared.loaded, prepared.loaded_records
        else:
            if following and use_snapshot and log.generation > 0 and not self._compacting_here():
                # A peer's flip seen while we waited for the lock: its checkpoint comes
                # shortly (written without the lock), and loading it beats replaying here.
                checkpoint.wait_for_checkpoint(
                    self.fs, self.directory, self.name, log.generation, timeout=checkpoint.CHECKPOINT_WAIT_LOCKED
                )
            loaded = snapshot.load(self.fs, self.directory, self.name, log) if use_snapshot else None
            self._snap_loaded, self._snap_records = loaded is not None, loaded[0].records if loaded else 0
        state, start, crc = loaded or (QueueState(), 0, 0)
        known = prepared is None or prepared.crc is not None
        self._snap_crc = (log.generation, start, crc) if self.durable and known else None  # see _read_forward
        stale = self._stale
        try:
            end, torn = self._read_forward(log, state, max(start, HEADER_SIZE), truncate=truncate, whole=True)
        except CorruptLogError as exc:
            if loaded is None:
                raise
            # Only the whole log may refuse to open: a snapshot must never be the reason.
            logger.info("%s: reading on from the snapshot failed (%s); replaying the whole log", log.path, exc)
            self._stale = stale
            return self._replay_whole(log, truncate=truncate, use_snapshot=False)
        return state, end, torn

    def _remove_leftovers(self, current: int) -> None:
        """Delete what crashed compactions left: other generations and dead writers' temp files.

        While a peer holds the compactor lock, the next generation it is
        writing already has its final name, and its checkpoint may be
        written: other generations (and later ones' snapshots) stay then.
        """
        compacting = None
        for entry in self.fs.listdir(self.directory):
            found = leftover(entry, self.name)
            if found is None:
                continue
            kind, number = found
            if kind == "tmp":
                if number is not None and number != os.getpid() and pid_alive(number):
                    continue  # a live peer is still writing it
            elif number == current:
                continue  # the current generation's log, and its snapshot (any other is stale: never used)
            # A compactor leaves the next one's snapshot before its flip (a log or snapshot always has a number).
            elif kind == "log" or (number is not None and number > current):
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

    def _compacting_here(self) -> bool:
        """Does this object compact right now (then no checkpoint of a new generation is coming from elsewhere)?"""
        return False

    def _pointer_signature(self) -> tuple[int, int, int] | None:
        """What tells a peer's flip of the pointer: its inode, mtime and size (None: no pointer yet)."""
        st = self.fs.lstat_or_none(self._pointer_path)
        return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)

    def _still_current(self) -> bool:
        """Does the pointer look as it did at our last catch-up (no peer flipped, or rolled back, since)?

        Else what follows in our generation is not worth reading without the
        lock: after a compaction of a busy queue, its last seconds of records
        (a peer's tens of thousands) would go to a state about to be dropped.
        A pointer that cannot be looked at says no: the look under the lock
        meets the same error and reports it, and memory stays as it is.
        """
        try:
            return self._pointer_signature() == self._pointer_sig
        except OSError:
            return False

    def _compaction_running(self) -> bool:
        """Does anyone (a peer, or another object here) hold the compactor lock right now?"""
        return held_elsewhere(self.fs, compactor_path(self.directory, self.name))

    # ================================================================ using an open queue
    def _enter(self) -> None:
        if self._closed:
            raise queue_closed(self.name, self.directory)
        if _forks[0] != self._forks:
            self._reopen_after_fork()

    def _reopen_after_fork(self) -> None:
        # The inherited lock descriptor shares its lock with the parent, so
        # keeping it would let parent and child "hold" the lock at once.
        self._pid, self._forks = os.getpid(), _forks[0]
        assert self._lock is not None and self._log is not None
        self._lock.reopen()
        old = self._log
        self._log = self._open_log(old.path, old.generation)
        self._log.note_end(self._offset)
        self._log.durable_end = self._offset

    def _read_body(self, entry: Entry) -> dict[str, Any]:
        """The ENQUEUE record that holds ``entry``'s payload, decoded (under the lock: it pins the generation)."""
        assert self._log is not None
        return self._log.read_job_body(entry.offset, entry.id)

    def _record_as_is(self, entry: Entry) -> bytes | None:
        """A job untouched since it was enqueued (a cold row): its ENQUEUE record's bytes, checked; else None.

        That record already says what a compaction would write for the job:
        records.job_fields leaves out what a new job's record leaves out.
        """
        if entry.id in self._state.hot:
            return None
        assert self._log is not None
        return self._log.read_job_record(entry.offset, entry.size, records.id_prefix(entry.id))

    def _job(self, entry: Entry) -> Job:
        return entry.to_job(self._read_body(entry).get("payload"))

    def _payload(self, entry: Entry) -> Any:
        return self._read_body(entry).get("payload")

    def _save_snapshot(self) -> None:
        """At close: leave the state as a snapshot for the next opener (a cache, see snapshot.py).

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
