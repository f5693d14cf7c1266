"""The four beats of every operation, and the group commit that shares them between threads.

Owns: Committer, the layer of FileStorage above QueueFiles: lock → read
forward (following a peer's compaction, reloading after a failed write) →
reclaim → append, fsync, apply (design invariant 3); the reading of peers'
records before the lock (``_read_ahead``) and while a peer holds it
(``_read_unlocked_quietly``); the group commit (``_commit``,
``_run_pending``) of batch.py's Batch and Op, making an answer durable and
rolling an operation's records back when its fsync failed, the read-only
beat (``_read``), waking idle workers after a write, and whether a write
leaves enough superseded bytes to compact; a decision's payload reads (from
its batch what that enqueued). Imports: errors, storage, layout, fs, entry,
framing, log, pointer, wake, replay, retire, batch, leases, recovery.

Locking, from the outside in: a threading.Lock (``_mutex``) serialises this
process's threads around the in-memory state, and whichever thread holds it
runs every writing operation the others have queued (one batch: one lock,
one append); the QueueLock serialises processes (an exclusive lock for
writers, a shared one for readers). fsync happens after both are released,
through LogFile.sync_through, so concurrent writers share it (group commit).
A caller is told "done" only after its own bytes are durable.
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import NobrokerError, StorageError
from ..storage import StorageOptions
from . import leases
from .batch import Batch, Op
from .entry import Entry
from .framing import HEADER_SIZE, is_lean
from .fs import FileSystem
from .layout import finished_wake_path, wake_path
from .log import LogFile
from .pointer import read_pointer, renew_signature
from .recovery import QueueFiles
from .replay import QueueState
from .retire import Retiring
from .wake import WakeChannel

T = TypeVar("T")
logger = logging.getLogger("nobroker")

#: Auto-compaction never runs on a log smaller than this: not worth a rewrite.
AUTO_COMPACT_MIN_BYTES = 8 * 1024 * 1024


class Committer(QueueFiles):
    """QueueFiles that run the four beats for operations, batched across this process's threads."""

    def __init__(
        self, directory: str | os.PathLike[str], options: StorageOptions, filesystem: FileSystem, auto_compact: float | None
    ) -> None:
        super().__init__(directory, options, filesystem)
        self.auto_compact = auto_compact
        self._pending_lock = threading.Lock()  # guards _pending only; never held while waiting
        self._pending: list[Op] = []
        # Where our own lazily durable records (leases) start, while nothing foreign follows
        # them: a failed fsync may have dropped those pages too, so a rollback cuts from there.
        self._lazy_from: int | None = None
        self._lazy_log: LogFile | None = None
        self._own_end = -1
        self._peers_append = False  # did the last catch-up under the lock find records of others?
        # What a switch to a new generation left behind: the old generation's file and the
        # state replayed from it, let go of after the file lock (see _let_go).
        self._retired: list[LogFile | QueueState] = []
        self._retiring = Retiring()
        self._wake = WakeChannel(wake_path(self.directory, self.name))
        # Waiters limited to some kinds listen on a pipe of their own: a wake-up
        # one of them swallowed for a job it cannot take would leave a worker
        # that takes every kind asleep.
        self._wake_kinds = WakeChannel(wake_path(self.directory, self.name, some_kinds=True))
        self._wake_finished = WakeChannel(finished_wake_path(self.directory, self.name))
        self._deciding: Batch | None = None  # the batch whose decisions run now (_decide, _read_body)

    def _after_fork(self) -> None:
        super()._after_fork()
        self._pending_lock = threading.Lock()
        self._pending = []
        self._retiring.forget()

    def _reopen_after_fork(self) -> None:
        self._wake.forget_after_fork()
        self._wake_kinds.forget_after_fork()
        self._wake_finished.forget_after_fork()
        super()._reopen_after_fork()

    # ================================================================ beat two: read forward
    def _take_lock(self, *, exclusive: bool) -> tuple[int, int, int] | None:
        """Beat one: the file lock, and the pointer's signature read under it (for ``_catch_up``).

        A peer's flip to a new generation shows in that signature: then the
        lock is let go for a moment, while its checkpoint loads without it
        (``_prepare_follow``), so no peer waits for our catching up. One lstat
        when nothing changed.
        """
        lock = self._lock
        assert lock is not None
        self._read_ahead()
        lock.acquire(exclusive=exclusive, meanwhile=self._read_unlocked_quietly)
        sig = self._pointer_signature()
        if not self._follows_flip(sig):
            return sig
        lock.release()
        self._prepare_follow(sig)
        lock.acquire(exclusive=exclusive)
        return self._pointer_signature()

    def _read_ahead(self) -> None:
        """Before the lock: apply what peers appended since our last look, as far as whole records go.

        Peers append under the lock, so without it a record may be half written: reading stops
        there (it looks torn, and nothing is cut), and the catch-up under the lock reads on from it.
        What is read here is the same whatever the lock: records once whole are never rewritten,
        but for the two changes a peer signals through the pointer (a roll-back or a compaction's
        flip), which the catch-up under the lock then follows by replaying. So the lock is held
        only for what came in the last moments. Anything unusual is left to the locked catch-up,
        which reports it (memory is marked stale if records were applied without the offset moving).
        """
        if self._peers_append:  # a process alone saves the look: its catch-up under the lock finds nothing either
            self._peers_append = self._read_unlocked_quietly()  # quiet now: no look before the next lock

    def _read_unlocked_quietly(self) -> bool:
        """``_read_ahead``'s reading; also the lock's ``meanwhile``, again while a peer holds it: did any record follow?

        Else a waiter idles, then reads its peers' last records with the lock held, and every other waiter waits.
        """
        log = self._log
        if self._stale or log is None or self._closed:
            return False
        try:
            return self._read_unlocked(log, current=self._still_current)
        except (NobrokerError, OSError):
            return False  # memory is marked stale: the catch-up under the lock reloads it

    def _catch_up(self, *, exclusive: bool, sig: tuple[int, int, int] | None) -> None:
        """Beat two: switch generation if a peer compacted, then read what peers appended.

        ``sig``: the pointer's signature, read under this lock (``_take_lock``).
        """
        log = self._log
        assert log is not None
        if sig != self._pointer_sig or self._stale:
            # A new pointer naming the same generation is a peer's roll-back (see _roll_back):
            # records we applied may be gone, and the place they held written over since.
            generation = read_pointer(self.fs, self.directory, self.name) or 0
            self._switch_to(generation, exclusive=exclusive)
            # Only now: had the switch failed, the next operation must try again
            # rather than append to a generation that is no longer the truth.
            self._pointer_sig = sig
            return
        follows = log.what_follows(self._offset)
        if follows:
            self._peers_append = True  # then look before the lock next time (_read_ahead)
        if follows < 0:
            # The file shrank under us: a writer rolled back records after a failed
            # fsync. What we applied from them is gone from disk: rebuild from it.
            self._switch_to(log.generation, exclusive=exclusive)
        elif follows:
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
            prepared = self._prepared
            try:
                if self.durable and not (prepared is not None and prepared.log is new and prepared.folders_synced):
                    self._sync_directory()  # see _open: the flip we follow must be durable
                state, end, _torn = self._replay_all(new, truncate=exclusive, following=True)
            except BaseException:
                new.close()
                raise
        else:
            new = old  # reloading after a failed write: same file, same failure memory
            state, end, _torn = self._replay_all(new, truncate=exclusive)
        if old is not new:
            self._retired.append(old)
        self._retired.append(self._state)
        self._log, self._state, self._offset, self._stale = new, state, end, False

    def _let_go(self) -> None:
        """After the file lock: close the generation a switch left and free its state (retire.py).

        Freeing the state of a large queue takes up to a second, and closing
        the last descriptor of an unlinked generation makes the filesystem
        free its blocks: under the lock, every peer would wait, and in the
        operation's thread, its caller. A thread of its own does both.
        """
        retired, self._retired = self._retired, []
        self._retiring.let_go(retired, in_thread=self.retire_in_thread)

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

    # ================================================================ the group commit
    def _commit(self, decide: Callable[[Batch, float], T], lazy: bool) -> tuple[T, bool]:
        """Run one writing operation through the four beats, then wait until it is durable.

        Returns its result, and whether the caller should compact now.
        Operations from this process's threads are combined: the thread that
        gets the mutex runs every operation queued by the time it holds the
        file lock in one batch (one lock, one catch-up, one append, one fsync
        for all), while the others wait on the mutex and find their work done.
        Under contention that turns eight threads' enqueues (or a Worker's ack
        and its next lease) into one write.

        ``lazy`` (leases only): the operation's own records become durable with
        the next fsync of the file (the job's ack at the latest, or close), not
        before it returns. What it read is still made durable first, so a
        lease never hands out a job that a power cut could take back. A power
        cut can take back such a lease: the job is then ready again, which is
        what at-least-once delivery allows (its holder died with the machine).
        """
        self._enter()
        op = Op(decide, lazy)
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
            if op.finishes:
                self._wake_finished.notify()
            if self.durable and not (op.lazy and not op.result):  # "nothing to lease" needs no fsync
                self._make_durable(op, log)
        if op.error is not None:
            raise op.error
        return op.result, op.compact

    def _make_durable(self, op: Op, log: LogFile) -> None:
        """Return once what ``op`` answered from (and, unless lazy, what it wrote) is durable; roll back if that failed."""
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

    def _run_pending(self) -> None:
        """Under the mutex: the four beats for every queued operation, as one batch."""
        ops: list[Op] = []
        ahead_of_disk = False  # has memory taken records (Batch.add applies them) that are not written yet?
        try:
            self._enter()
            lock = self._lock
            assert lock is not None and self._log is not None
            self._check_usable()
            sig = self._take_lock(exclusive=True)
            try:
                self._catch_up(exclusive=True, sig=sig)
                ops = self._take_pending()  # late: what other threads queued while we waited for the lock joins
                log = self._log
                assert log is not None
                if self._offset != self._own_end or log is not self._lazy_log:
                    self._lazy_from = None  # a peer's records follow ours: see _make_durable
                ahead_of_disk = True
                batch = self._decide(ops)
                end = self._append(log, batch, ops)
                ahead_of_disk = False
                compact_now = self._should_auto_compact()
            finally:
                lock.release()
            self._let_go()
            self._state.tidy()  # outside the file lock: peers never wait for it
            for op in ops:
                op.log, op.start, op.end, op.wakes, op.finishes = log, batch.start, end, batch.wakes, batch.finishes
            ops[0].compact = compact_now
        except BaseException as exc:
            if ahead_of_disk:  # a KeyboardInterrupt in a decision, say: reload before the next operation
                self._stale = True
            ops = ops or self._take_pending()  # failed before they were taken: ours is among them
            for op in ops:  # nothing of this batch was written: every operation failed
                op.error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            for op in ops:
                op.done = True

    def _take_pending(self) -> list[Op]:
        """Under the mutex: every operation queued so far (the mutex holder's own among them), for one batch."""
        with self._pending_lock:
            ops, self._pending = self._pending, []
        assert ops, "the thread that runs a batch queued its own operation first"
        return ops

    def _decide(self, ops: list[Op]) -> Batch:
        """Beat three, then every operation's decision, into one batch (applied in memory as it grows)."""
        now = self.clock()
        lean = self._log is not None and self._log.lean and is_lean(self.log_format)  # a lean log, and not asked otherwise
        batch = self._deciding = Batch(self._state, self._offset, lean)  # what it enqueues is read from it (_read_body)
        try:
            leases.reclaim(batch, now, self.backoff)
            for op in ops:
                # What this operation's answer rests on: all it read; for a lease, only up to the last
                # record that could give it a job (replay.py's enables_end), not a peer's acks after it.
                op.read_end = min(batch.pos, self._state.enables_end) if op.lazy else batch.pos
                try:
                    op.result = op.decide(batch, now)
                except Exception as exc:
                    # decide() refuses before adding records of its own; the
                    # records before it are still true and are written below.
                    op.error = exc
        finally:
            self._deciding = None
        return batch

    def _read_body(self, entry: Entry) -> dict[str, Any]:
        """As QueueFiles', but a job an earlier operation of the batch being decided enqueued (a lease's pick,
        a repeat of its id, from another thread) is read from that batch: its record is not in the file yet."""
        batch = self._deciding
        if batch is not None and entry.offset >= batch.start:
            return batch.body_at(entry.offset, entry.id)
        return super()._read_body(entry)

    def _append(self, log: LogFile, batch: Batch, ops: list[Op]) -> int:
        """Beat four's write (its fsync comes after the lock): the batch's records at the end; returns the new end."""
        if not batch.parts:
            return self._offset
        assert batch.start == self._offset, "a batch starts where reading stopped"
        data = batch.parts[0] if len(batch.parts) == 1 else b"".join(batch.parts)
        try:
            end = log.append(data, self._offset)
        except BaseException:
            self._stale = True  # memory holds records the disk does not: reload next time
            raise
        assert end == batch.pos, "the batch's records are as long as it counted"
        self._offset = self._own_end = end
        mark = self._snap_crc
        if mark is not None and mark[0] == log.generation and mark[1] == batch.start:
            self._snap_crc = (mark[0], end, zlib.crc32(data, mark[2]))  # what we wrote
        else:
            self._snap_crc = None
        if self._lazy_from is None and (ops[0].lazy if len(ops) == 1 else all(op.lazy for op in ops)):
            self._lazy_from, self._lazy_log = batch.start, log
        return end

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
                    if log.what_follows(end) == 0 and not self._compaction_running():  # nobody appended after us
                        try:  # before records are cut, so a peer that read them replays instead (pointer.py)
                            renew_signature(self.fs, self.directory, self.name, log.generation)
                        except (NobrokerError, OSError) as exc:  # best effort: the disk is failing
                            logger.warning("%s: could not tell other processes of the records taken back (%s)", log.path, exc)
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

    # ================================================================ reads
    def _read(self, query: Callable[[float], T]) -> T:
        """A read-only operation: shared lock, read forward, answer. Never writes."""
        self._enter()
        with self._mutex:
            self._enter()
            lock = self._lock
            assert lock is not None
            sig = self._take_lock(exclusive=False)
            try:
                self._catch_up(exclusive=False, sig=sig)
                return query(self.clock())
            finally:
                lock.release()
                self._let_go()
                self._state.tidy()  # outside the file lock: peers never wait for it
