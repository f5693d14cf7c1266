"""Compacting a queue while other processes keep using it.

Owns: Compactor, the layer of FileStorage above Committer: the whole online
compaction (one per queue at a time, through the compactor lock file), cut
into its steps, and automatic compaction after a write. Imports: errors,
jobs, storage, layout, fs, entry, log, lock, leases, schedule_records,
limit_records, control_records (the pauses carried over), counting,
compaction, checkpoint, snapshot, batch, commit, forward (READ_AGAIN_BYTES).
compaction.py writes the next generation's file and flips the pointer; this
module decides when each of that happens, and with which lock.

Almost all of it runs without the file lock, so other processes keep
working: under the lock only (1) a catch-up that notes where the old
generation ends, (3) slices of at most COMPACT_SLICE seconds reading what
peers appended meanwhile, (4) the last few records, one fsync of the new
file and the rename of the pointer. What peers appended is read first
without the lock, as far as whole records go (as an operation reads ahead,
commit.py), so each of those holds reads only what came in its last
moments. In between, (2) the live jobs are
streamed into the new generation from the old file's prefix (bytes before
the noted end never change), the peers' records are copied after them byte
for byte; then this object's state is pointed into the new generation and
a checkpoint of it is left for the processes that will follow the flip
(checkpoint.py: they load it rather than replay), the records peers
appended meanwhile copied too, and after the flip (5) the folder is
fsynced and (6) this object moves to the new generation. A compaction also
holds this object's mutex throughout (its state must stay put while the
jobs are streamed), so this process's other threads wait for it; other
processes do not.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from ..errors import CompactionError, NobrokerError, StorageError
from ..jobs import CompactionResult
from ..storage import StorageOptions
from . import checkpoint, control_records, counting, leases, limit_records, schedule_records, snapshot
from .compaction import NextGeneration, drop_prepared, finish_flip, prepare_flip
from .batch import Batch
from .commit import Committer
from .entry import DROPPED
from .forward import READ_AGAIN_BYTES
from .fs import FileSystem
from .layout import MAX_GENERATION, compactor_path
from .lock import QueueLock
from .log import LogFile

logger = logging.getLogger("nobroker")

#: Longest stretch a compaction reads peers' records while holding the file lock.
COMPACT_SLICE = 0.002
#: Slices after which a compaction that still has not caught up reads the rest in one go.
COMPACT_MAX_SLICES = 500
#: Bytes of the new generation between two fsyncs while it is written (outside the lock).
COMPACT_SYNC_EVERY = 4 << 20
#: Pause between two slices, longer than a lock waiter's longest backoff (lock.MAX_BACKOFF),
#: so a waiting peer gets the lock instead of the compactor taking it straight back.
COMPACT_YIELD = 0.001
#: Reads without the lock before each of those holds, at most (READ_AGAIN_BYTES says when one more).
UNLOCKED_PASSES = 4
#: Sleep between two looks at a busy compactor lock.
COMPACTOR_POLL = 0.01


class Holds:
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


class Superseded(Exception):
    """A compaction found the pointer changed under it: someone else flipped."""


class Compactor(Committer):
    """Committer that can also rewrite its queue's log without the done jobs."""

    def __init__(
        self, directory: str | os.PathLike[str], options: StorageOptions, filesystem: FileSystem, auto_compact: float | None
    ) -> None:
        super().__init__(directory, options, filesystem, auto_compact)
        self._compacting = threading.Lock()  # one compaction per object; the compactor lock file does processes
        self._compactor: QueueLock | None = None

    def _after_fork(self) -> None:
        super()._after_fork()
        self._compacting = threading.Lock()
        if self._compactor is not None:  # the parent's compaction, not ours: let go without unlocking
            self._compactor.forget()
            self._compactor = None

    def _compacting_here(self) -> bool:
        return self._compactor is not None

    def _auto_compact(self) -> None:
        """After a write that passed auto_compact's threshold; a compaction already running serves the same end."""
        try:
            self._compaction(None, wait=False)
        except CompactionError as exc:
            logger.warning("automatic compaction failed (the queue is unharmed): %s", exc)

    def _compaction(self, progress: Callable[[int], None] | None, *, wait: bool) -> CompactionResult | None:
        """Rewrite the log as one record per live job (done jobs dropped), then flip.

        One compaction at a time per queue: whoever holds the compactor lock
        file compacts. With ``wait`` (an explicit compact()) a second caller
        waits for the running one to finish and then compacts itself, so on
        return every job done before the call is gone; without it
        (automatic compaction) it returns None at once.
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

    def _compact(self, progress: Callable[[int], None] | None, started: float) -> CompactionResult:
        assert self._lock is not None and self._log is not None
        lock = Holds(self._lock)
        self._check_usable()
        old = self._note_base(lock)
        base = self._offset
        if self.durable:
            old.sync_through(base)  # every record we copy is durable where it is now
        state = self._state
        records_at_base, jobs_at_base = state.records, len(state)
        new = NextGeneration(self.fs, self.directory, self.name, old.generation + 1, self.log_format)
        kept, shift, copied = self._rewrite(new, old, lock, progress, records_at_base)
        before = self._offset
        self._adopt(new, old, shift, copied)
        return CompactionResult(
            old_generation=old.generation,
            new_generation=new.generation,
            jobs_kept=len(state),
            jobs_dropped=jobs_at_base - kept,
            bytes_before=before,
            bytes_after=self._offset,
            elapsed=time.perf_counter() - started,
            lock_held=lock.longest,
        )

    def _note_base(self, lock: Holds) -> LogFile:
        """(1) Under the lock: catch up (in slices, if peers wrote much since our last look), reclaim.

        Returns the generation being compacted; ``_offset`` is then where
        its records stop being the live jobs' and start being copied.
        """
        if self._log is not None and not self._stale:
            try:
                self._read_unlocked(self._log, passes=UNLOCKED_PASSES)  # what peers appended since our last look, before the lock
            except (NobrokerError, OSError):
                pass  # memory is marked stale: the catch-up under the lock reloads it
        lock.acquire()
        try:
            slices = 0
            while True:
                slices += 1
                old = self._log
                assert old is not None
                sig = self._pointer_signature()
                if self._stale or sig != self._pointer_sig or old.what_follows(self._offset) < 0:
                    self._catch_up(exclusive=True, sig=sig)  # a switch or a reload: the usual way, in one go
                    continue
                if self._compaction_slice(lock, old, COMPACT_SLICE if slices < COMPACT_MAX_SLICES else None, locked=True):
                    break
                lock.release()
                time.sleep(COMPACT_YIELD)
                lock.acquire()
            batch = Batch(self._state, self._offset)  # reclaims only: no new job's record
            leases.reclaim(batch, self.clock(), self.backoff)
            if batch.parts:
                try:
                    self._offset = old.append(b"".join(batch.parts), self._offset)
                except BaseException:
                    self._stale = True  # memory holds records the disk does not: reload next time
                    raise
        finally:
            lock.release()
        return old

    def _rewrite(
        self, new: NextGeneration, old: LogFile, lock: Holds, progress: Callable[[int], None] | None, records_at_base: int
    ) -> tuple[int, int, int]:
        """(2) to (5): the new generation written, made the truth, durable.

        Returns how many live jobs it kept, how far the records copied from
        ``old`` moved (``new`` offset = ``old`` offset + shift), and the end of
        what was copied from ``old``. ``records_at_base``: the state's count
        of records when the jobs were noted.
        """
        prepared: str | None = None
        flipped = False
        moved = False
        base = self._offset
        try:
            # (2) Without the lock: stream the live jobs as of the base. This process's
            # threads wait on the mutex, so the state stays exactly that.
            live = [e for e in self._state.entries() if e.state not in DROPPED]
            at = self.clock()
            carried = new.write_records([
                counting.carried_record(self._state.counters, live, at),  # first: over the jobs dropped
                *schedule_records.replayed(self._state.schedules, at),
                *limit_records.replayed(self._state.limits, at, self._state.turns),
                *control_records.replayed(self._state.paused, at),
            ])  # fmt: skip
            # A record is copied as it is unless it may be lean and the new generation may not.
            as_is = self._record_as_is if new.lean or not old.lean else None
            offsets = new.write_jobs(live, self._read_body, progress, COMPACT_SYNC_EVERY if self.durable else None, as_is)
            del live
            shift = new.pos - base
            copied = self._copy_appended(new, old, lock, copied=base)
            moved = True  # from here on the state points into ``new``
            self._move_state(offsets, base, shift, records_at_base - carried)
            # What came in while the state moved (seconds, for a million jobs), then while the
            # checkpoint was written: each follower reads what the checkpoint leaves out itself.
            copied = self._copy_appended(new, old, lock, copied=copied, shift=shift)
            self._checkpoint_before_flip(new)
            copied = self._copy_appended(new, old, lock, copied=copied, shift=shift)
            if self.durable:
                new.sync()  # the bulk, outside the lock: the fsync under it has little left to do
            new.install(sync=self.durable)
            prepared = prepare_flip(self.fs, self.directory, self.name, new.generation, sync=self.durable)
            copied = self._copy_unlocked(new, old, copied, shift)  # what came during those fsyncs
            # (4) Under the lock: the last records, fsync, flip.
            lock.acquire()
            try:
                self._compaction_slice(lock, old, None, locked=True, shift=shift)
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
            if moved:
                self._stale = True  # the state points into a file that is not (or not surely) the truth
            self._undo(exc, new, prepared, flipped)
            raise
        return len(offsets), shift, copied

    def _copy_appended(self, new: NextGeneration, old: LogFile, lock: Holds, *, copied: int, shift: int = 0) -> int:
        """(3) Copy what peers appended after ``copied``: read under the lock in short slices
        (which checks every record), copy without it. Returns the end of what was copied.

        ``shift``: the state already points into ``new`` (see _read_forward).
        """
        slices = 0
        while True:
            slices += 1
            copied = self._copy_unlocked(new, old, copied, shift)  # under the lock, only what came since
            caught_up = self._compaction_slice(
                lock, old, COMPACT_SLICE if slices < COMPACT_MAX_SLICES else None, shift=shift
            )
            new.copy_from(old, copied, self._offset)
            copied = self._offset
            if caught_up:
                return copied
            time.sleep(COMPACT_YIELD)

    def _copy_unlocked(self, new: NextGeneration, old: LogFile, copied: int, shift: int) -> int:
        """Without the lock: read what peers appended, as far as whole records go, and copy it; returns the new end.

        Again while a pass found READ_AGAIN_BYTES or more (peers appended
        while it read and copied), at most UNLOCKED_PASSES times. Safe
        without the lock: no peer rolls records back while a compaction runs
        (Committer._roll_back), and a flip by someone else shows in the
        pointer, which every hold checks first (_compaction_slice).
        """
        for _ in range(UNLOCKED_PASSES):
            start = self._offset
            if not self._read_unlocked(old, shift=shift):
                break
            new.copy_from(old, copied, self._offset)
            copied = self._offset
            if copied - start < READ_AGAIN_BYTES:
                break
        return copied

    def _undo(self, exc: BaseException, new: NextGeneration, prepared: str | None, flipped: bool) -> None:
        """A compaction failed with ``exc``: remove what it made; the caller raises (a Superseded as CompactionError)."""
        if prepared is not None:
            drop_prepared(self.fs, prepared)
        if not flipped:
            # A pointer that no longer names ``old`` means someone else flipped
            # (a repair by an older nobroker?): the file of that name may be theirs.
            new.discard(unlink=not isinstance(exc, Superseded))
            if not isinstance(exc, Superseded):
                snapshot.remove_generation(self.fs, self.directory, self.name, new.generation)
            if isinstance(exc, Superseded):
                raise CompactionError(
                    "compaction stopped: another process replaced the queue's generation meanwhile; "
                    "nothing was changed by this compaction"
                ) from None
            return
        new.discard(unlink=False)
        # The rename may have happened without becoming durable: which
        # generation is the truth after a power cut is unknown, so this
        # object must not acknowledge anything more. A reopen decides.
        self._failed = StorageError(
            f"compaction could not make its pointer flip durable ({exc}); this queue object refuses "
            "further writes: open the queue again."
        )

    def _move_state(self, offsets: dict[str, int], base: int, shift: int, records_at_base: int) -> None:
        """Point the state into the next generation before the flip: jobs live at ``base`` moved to ``offsets``,
        records after it by ``shift``. From here on, records read from the old file are applied shifted."""
        state = self._state
        if state.relocate(offsets, base, shift):  # cannot happen (done is final); if it did, reload from disk
            self._stale = True
        state.records = len(offsets) + state.records - records_at_base
        state.tidy()

    def _checkpoint_before_flip(self, new: NextGeneration) -> None:
        """Without the lock, before the flip: a checkpoint of ``new`` as written so far, for the processes that follow the flip.

        They load it instead of replaying the new generation (checkpoint.py),
        and read under the lock only the few records copied after it. Written
        before the flip so that it is there when they see the flip.
        """
        if self._stale:
            return
        if checkpoint.save_before_flip(self.fs, self.directory, self.name, new.generation, self._state, new.pos, new.crc):
            self._snap_records = self._state.records

    def _adopt(self, new: NextGeneration, old: LogFile, shift: int, copied: int) -> None:
        """(6) The flip is durable: the new generation is the truth from here on (the state points into it already)."""
        self._log, self._offset = new.log(), copied + shift
        assert self._offset == new.pos
        self._snap_crc = (new.generation, new.pos, new.crc) if self.durable else None
        self._pointer_sig = self._pointer_signature()
        old.close()
        try:
            self.fs.unlink(old.path)
        except OSError:
            pass  # the next opener removes it
        try:
            snapshot.remove_older(self.fs, self.directory, self.name, new.generation)
        except OSError:
            pass  # the next opener removes them

    def _compaction_slice(
        self, lock: Holds, old: LogFile, budget: float | None, *, locked: bool = False, shift: int = 0
    ) -> bool:
        """Read forward in ``old`` what peers appended, for about ``budget`` seconds under the lock.

        Returns True once at the end of the file. Raises Superseded if the
        pointer changed, CompactionError if the file shrank below what was read.
        """
        if not locked:
            lock.acquire()
        try:
            if self._pointer_signature() != self._pointer_sig:
                raise Superseded()
            if old.what_follows(self._offset) < 0:
                self._stale = True  # records we applied are gone: rebuild before any use
                raise CompactionError(
                    f"compaction stopped: {old.path} shrank under it (a writer rolled back); nothing was changed"
                )
            deadline = None if budget is None else time.perf_counter() + budget
            self._offset, _torn = self._read_forward(
                old, self._state, self._offset, truncate=True, deadline=deadline, shift=shift
            )
            return deadline is None or old.what_follows(self._offset) == 0
        finally:
            if not locked:
                lock.release()
                self._state.tidy()  # outside the file lock: peers never wait for it
