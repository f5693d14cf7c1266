"""Checkpoints: the periodic ones a writer leaves, and the one a compactor leaves for its followers.

Owns: the checkpoint a compactor leaves of the new generation before it
flips to it (``save_before_flip``) and a follower's short wait for it
(``wait_for_checkpoint``); Checkpoints, the part of recovery.QueueFiles
that loads that checkpoint without the lock when it follows a flip (the
unlocked replay itself is unlocked.py's), and writes a checkpoint every
CHECKPOINT_EVERY records. Imports: errors, layout, fs, log, lock,
pointer, replay, state_form, snapshot, unlocked.

A checkpoint is a snapshot (snapshot.py): a checked cache of the state that
replaying a log prefix gives, never the truth. Whatever is wrong with one
(damaged, cut short, another generation, longer than the log) makes
snapshot.load ignore it, and the log is replayed instead.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ..errors import NobrokerError, StorageError
from . import snapshot
from .fs import FileSystem
from .layout import compactor_path, log_path, snapshot_path
from .lock import held_elsewhere
from .log import LogFile
from .pointer import read_pointer
from .replay import QueueState
from .state_form import Captured, capture
from .unlocked import AS_WRITTEN, UnlockedReplay

logger = logging.getLogger("nobroker")

#: Records a writer appends or reads after the last snapshot or checkpoint before it writes
#: another (off the hot path: recovery.QueueFiles._maybe_checkpoint). Opening after a crash
#: then replays at most about this many records after loading it.
CHECKPOINT_EVERY = 50_000
#: Records a writer lets go by before it looks again when a checkpoint fell due but could
#: not be taken: a compaction ran (it leaves the next generation's own checkpoint), or it
#: has no crc to vouch for what it read (a queue without fsync, or read only).
CHECKPOINT_RETRY = 1_000
#: Longest a process that follows a compaction waits for the compactor's checkpoint of
#: the new generation before it replays the generation instead. The checkpoint is written
#: before the flip, so it is there already unless writing it failed (or an older nobroker
#: compacted, which writes it just after the flip, still holding the compactor lock); the
#: wait ends as soon as that lock is free (the compactor done, or dead): this only bounds
#: a compactor that hangs. Replaying instead would hold the lock for as long, or longer.
CHECKPOINT_WAIT = 60.0
#: The same wait when the flip was seen under the file lock: a later compactor may be
#: waiting for that lock before it can begin, so the wait must stay short.
CHECKPOINT_WAIT_LOCKED = 0.5
#: Sleep between two looks for that checkpoint.
CHECKPOINT_POLL = 0.002


def _let_others_run() -> None:
    """Between two chunks of a checkpoint's encoding: hand the GIL to a thread waiting for it."""
    time.sleep(0)


def save_before_flip(fs: FileSystem, directory: str, name: str, generation: int, state: QueueState, end: int, crc: int) -> bool:
    """The compactor's checkpoint of the generation it is about to flip to: ``state`` is the replay of its [0, ``end``).

    ``crc`` is the crc32 of those bytes (the compactor keeps it as it writes
    them: nothing is read back). Written before the flip, so a process that
    follows the flip finds it at once; should the flip not happen, it is the
    checkpoint of a file that never became the truth, which nobody loads (an
    opener removes it with that file; a later one of the same name fails its
    crc). Returns False when it could not be written (logged: only the cache
    is lost, and followers replay the generation instead).
    """
    try:
        snapshot.save(fs, directory, name, generation, state, end, crc)
    except (OSError, NobrokerError, ValueError, TypeError) as exc:
        logger.info("generation %d: no checkpoint written for the processes that follow the flip (%s)", generation, exc)
        return False
    return True


def wait_for_checkpoint(fs: FileSystem, directory: str, name: str, generation: int, *, timeout: float = CHECKPOINT_WAIT) -> bool:
    """Is there a checkpoint of ``generation``, or will there be shortly (its compactor is still at work)?

    Stops waiting once the compactor lock is free or the next generation's
    file exists (a later compaction began: the one that flipped to
    ``generation`` is gone, and may have died before its checkpoint).
    """
    deadline = time.monotonic() + timeout
    path = snapshot_path(directory, name, generation)
    later = log_path(directory, name, generation + 1)
    while True:
        if fs.exists(path):
            return True
        if time.monotonic() >= deadline or fs.exists(later) or not held_elsewhere(fs, compactor_path(directory, name)):
            return fs.exists(path)
        time.sleep(CHECKPOINT_POLL)


class Checkpoints(UnlockedReplay):
    """The part of recovery.QueueFiles that follows a flip to a checkpoint and writes the periodic checkpoints.

    A mixin: QueueFiles sets every attribute below (and UnlockedReplay's) in
    its __init__ and provides the methods at the end of both.
    """

    read_only: int | None
    checkpoint_in_thread: bool
    _log: LogFile | None
    _mutex: threading.Lock
    _state: QueueState
    _offset: int
    _stale: bool
    _failed: StorageError | None
    _closed: bool
    _pid: int
    _pointer_sig: tuple[int, int, int] | None
    _snap_crc: tuple[int, int, int] | None
    _snap_records: int
    _checkpoint_after: int
    _checkpointing: threading.Thread | None

    def _follows_flip(self, sig: object) -> bool:
        """Does the pointer's signature ``sig`` (just read) say a peer flipped, with nothing prepared for it yet?"""
        if sig == self._pointer_sig or self._log is None or self._stale or self._closed:
            return False
        return self._prepared is None or self._prepared.pointer_sig != sig

    def _prepare_follow(self, sig: object) -> None:
        """Without the lock: a peer flipped to a new generation (``_follows_flip``); load its checkpoint.

        The compactor leaves a checkpoint of the generation it flips to
        (checkpoint.save_before_flip); loading it here, with the records
        after it, and catching up under the lock only what came in the last
        moments, means no process waits for a follower's replay. The caller noticed the flip under the lock, let go
        of it to call this, and takes it again after.
        """
        log = self._log
        if log is None or not self._follows_flip(sig):
            return
        try:
            generation = read_pointer(self.fs, self.directory, self.name)
            if generation is None or generation == log.generation:
                return
            if not wait_for_checkpoint(self.fs, self.directory, self.name, generation):
                return
            new = self._open_log(log_path(self.directory, self.name, generation), generation)
        except (OSError, NobrokerError):
            return  # the locked catch-up says what is wrong
        # Past the checkpoint too, as far as whole records go (what the compactor copied after
        # it, what peers appended since the flip): read first, fsynced after, as at opening.
        self._prepare_from(new, AS_WRITTEN, sig)
        prepared = self._prepared
        if prepared is None or prepared.log is not new:
            return
        if self.durable:
            # The flip must be durable before anything is answered from the new generation
            # (commit.Committer._switch_to): here, not under the lock, unless the pointer
            # changes again before it (``still_valid`` then drops this replay).
            self._sync_directory()
            prepared.folders_synced = True
        # What peers appended while the checkpoint loaded, read without the lock too, as an opener
        # does: otherwise the switch reads it under the lock, and every peer waits for that.
        self._catch_up_unlocked()

    def _maybe_checkpoint(self) -> None:
        """After a write: a checkpoint once CHECKPOINT_EVERY records went by since the last one.

        So that opening after a crash replays only the tail after it. The
        state is captured under the mutex (copies made in C: this process's
        threads wait for those, other processes do not), and a thread of its
        own encodes it, in chunks that let the other threads run, and writes
        the file. O(1) when none is due.
        """
        records = self._state.records
        if records - self._snap_records < CHECKPOINT_EVERY or records < self._checkpoint_after:
            return
        if self._state.growing:  # its capture would move all its rows now, under the mutex: after it, then
            return
        running = self._checkpointing
        if running is not None and running.is_alive():
            return
        if self._compaction_busy():
            # A compaction is writing the next generation, and a checkpoint of it: one of
            # this generation would be let go of at the flip, and its capture would stall
            # this process's operations meanwhile. Look again a little later.
            self._checkpoint_after = records + CHECKPOINT_RETRY
            return
        with self._mutex:
            log, state, end, mark = self._log, self._state, self._offset, self._snap_crc
            # No crc to vouch for what this process read (no fsync at all, a read-only queue, a
            # reading that did not go on from the last mark), or not this process's to write:
            # not for a while. Look again a little later, not at every write.
            refused = (
                self._closed or log is None or self._stale or self._failed is not None or self.read_only is not None
                or mark is None or mark[0] != log.generation or os.getpid() != self._pid
            )  # fmt: skip
            if refused:
                self._checkpoint_after = state.records + CHECKPOINT_RETRY
                return
            assert log is not None and mark is not None
            # A lazily durable lease not fsynced yet: the next write's fsync covers it.
            if mark[1] != end or log.durable_end < end or state.records - self._snap_records < CHECKPOINT_EVERY:
                return
            try:
                captured = capture(state)
            except (ValueError, TypeError) as exc:
                logger.info("%s: no checkpoint (%s)", log.path, exc)
                return
            self._snap_records = state.records
            job = (log.path, log.generation, end, mark[2], captured)
        if not self.checkpoint_in_thread:
            self._write_checkpoint(*job)
            return
        thread = threading.Thread(target=self._write_checkpoint, args=job, name="nobroker-checkpoint", daemon=True)
        self._checkpointing = thread
        thread.start()

    def _compaction_busy(self) -> bool:
        """Does a compaction run now (here or in a peer)? Unsure (the lock file unreadable): yes, try later."""
        try:
            return self._compaction_running()
        except NobrokerError:
            return True

    def _write_checkpoint(self, path: str, generation: int, end: int, crc: int, captured: Captured) -> None:
        pause = _let_others_run if self.checkpoint_in_thread else None
        try:
            blocks = snapshot.encode_captured(captured, pause)
            snapshot.write(self.fs, self.directory, self.name, generation, end, crc, blocks)
        except (OSError, NobrokerError, ValueError, TypeError) as exc:
            logger.info("%s: no checkpoint written (%s); opening after a crash replays more", path, exc)

    def _close_checkpoints(self) -> None:
        """At close: wait for a checkpoint being written; let go of a generation replayed without the lock."""
        running, self._checkpointing = self._checkpointing, None
        if running is not None and os.getpid() == self._pid:
            running.join()
        self._drop_prepared()

    def _compaction_running(self) -> bool:
        raise NotImplementedError


__all__ = ["CHECKPOINT_EVERY", "CHECKPOINT_RETRY", "CHECKPOINT_WAIT", "Checkpoints", "save_before_flip", "wait_for_checkpoint"]
