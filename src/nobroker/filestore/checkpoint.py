"""Checkpoints, and replaying what no longer changes without the file lock.

Owns: Prepared (a generation opened and replayed without the lock, up to an
offset whose bytes no longer change) and how it is made (``prepare``) and
checked under the lock before use (``still_valid``); the checkpoint a
compactor leaves of the new generation before it flips to it
(``save_before_flip``) and a follower's short wait for it
(``wait_for_checkpoint``); Checkpoints, the part of recovery.QueueFiles
that does these at opening and before each operation's lock, and writes a
checkpoint every CHECKPOINT_EVERY records. Imports: errors, layout, fs,
bulk, framing, log, pointer, prefix_crc, lock, replay, state_form, snapshot.

A checkpoint is a snapshot (snapshot.py): a checked cache of the state that
replaying a log prefix gives, never the truth. Whatever is wrong with one
(damaged, cut short, another generation, longer than the log) makes
snapshot.load ignore it, and the log is replayed instead.

Which bytes no longer change. A log only grows, except (a) a torn tail cut
by an opener, (b) records a writer rolls back after its own fsync failed,
and (c) a compaction or repair, which writes another file and flips the
pointer. Bytes before an offset D noted under the lock are whole batches
(writers append under it), so (a) never reaches below D. Once an fsync
through D has succeeded, no writer's fsync of those bytes can fail later
(the kernel reports a writeback error to every descriptor open when it
happened, ours too), so (b) never reaches below D either. (c) is caught by
``still_valid``: the pointer unchanged since the file was opened, and the
file at least D bytes long. A version 2 file, whose size says nothing of
where its records end, is read first, as far as whole records go, and
fsynced after (AS_WRITTEN): that fsync covers every byte read, so (b) holds
from there; a record being appended meanwhile looks torn and ends the
reading (the lock reads on from it); (a) needs no lock either way: a torn
tail lies after every whole record.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import NobrokerError, StorageError
from . import snapshot
from .bulk import paused_collector
from .framing import FRAME_SIZE, HEADER_SIZE, FrameStatus
from .fs import FileSystem
from .layout import compactor_path, log_path, snapshot_path
from .lock import QueueLock, held_elsewhere
from .log import LogFile
from .pointer import read_pointer
from .prefix_crc import log_crc
from .replay import QueueState
from .state_form import Captured, capture

logger = logging.getLogger("nobroker")

#: Records a writer appends or reads after the last snapshot or checkpoint before it writes
#: another (off the hot path: recovery.QueueFiles._maybe_checkpoint). Opening after a crash
#: then replays at most about this many records after loading it.
CHECKPOINT_EVERY = 50_000
#: Records a writer lets go by before it looks again when a checkpoint fell due while a
#: compaction ran (that compaction leaves the next generation's own checkpoint).
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
#: prepare()'s end for a version 2 file: as far as its whole records go when it reads them.
AS_WRITTEN = -1
#: Sleep between two looks for that checkpoint.
CHECKPOINT_POLL = 0.002


def _let_others_run() -> None:
    """Between two chunks of a checkpoint's encoding: hand the GIL to a thread waiting for it."""
    time.sleep(0)


@dataclass
class Prepared:
    """A generation replayed without the lock: ``state`` is the replay of log[0, ``end``)."""

    log: LogFile
    state: QueueState
    end: int
    #: crc32 of log[0, end) when known (for a snapshot at close), else None.
    crc: int | None
    #: Did the replay start from a snapshot (or a checkpoint)?
    loaded: bool
    #: The records the snapshot held (what a snapshot at close counts from).
    loaded_records: int
    #: The pointer's signature (recovery.QueueFiles._pointer_signature) before the file was opened.
    pointer_sig: object = None
    #: Was the queue folder fsynced after that signature was read (the flip it shows made durable)?
    folders_synced: bool = False


def prepare(fs: FileSystem, directory: str, name: str, log: LogFile, durable_end: int | None) -> Prepared | None:
    """Replay ``log`` up to ``durable_end`` without the lock: its last checkpoint, then the records after it.

    ``durable_end`` must be an offset whose bytes no longer change (see the
    module's docstring); None means the end of the checkpoint (a compactor's
    is durable: it fsynced the new generation before its flip), and no
    checkpoint then means None. None also when anything stops the reading
    before it (damage, a short file, a record that makes no sense): the
    caller then replays under the lock, which deals with each of those.
    AS_WRITTEN (a version 2 file, whose size says nothing of where its
    records end): as far as whole records go now; the caller fsyncs after.
    """
    with paused_collector():  # a state of many objects is built
        return _prepare(fs, directory, name, log, durable_end)


def _prepare(fs: FileSystem, directory: str, name: str, log: LogFile, durable_end: int | None) -> Prepared | None:
    loaded = snapshot.load(fs, directory, name, log)
    as_written = durable_end == AS_WRITTEN
    if durable_end is None:
        if loaded is None:
            return None
        durable_end = loaded[1]
    if loaded is not None and not as_written and loaded[1] > durable_end:
        loaded = None  # a checkpoint past what is known to stay: not now (the caller reads on under the lock)
    state, start, crc = loaded or (QueueState(), 0, 0)
    records = state.records  # what the checkpoint held, before the records after it
    end = max(start, HEADER_SIZE)
    apply = state.apply
    try:
        for fr in log.scan(end, None if as_written else durable_end):
            if as_written and fr.status is not FrameStatus.OK:
                break  # the end of the records, or one being appended now (read on under the lock)
            if fr.status is not FrameStatus.OK or fr.offset != end:
                return None
            apply(fr.rtype, fr.body, fr.offset, FRAME_SIZE + fr.length)  # type: ignore[arg-type]
            end = fr.offset + FRAME_SIZE + fr.length
        if not as_written and end != durable_end and durable_end > HEADER_SIZE:
            return None
        crc = log_crc(fs, log.fd, start, end, crc) if start < end else crc
    except (NobrokerError, OSError, KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return None
    state.tidy()
    return Prepared(log, state, end, crc, loaded is not None, records)


def still_valid(prepared: Prepared, pointer_sig: object) -> bool:
    """Under the lock: does the pointer still look as it did when ``prepared`` was read, and the file no shorter?

    A compaction or a repair writes another file and renames a new pointer
    into place (a new inode): any flip changes the pointer's signature.
    """
    try:
        return prepared.pointer_sig == pointer_sig and prepared.log.size() >= prepared.end
    except (OSError, NobrokerError):
        return False


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

class Checkpoints:
    """The part of recovery.QueueFiles that replays without the lock and writes the periodic checkpoints.

    A mixin: QueueFiles sets every attribute below in its __init__ and
    provides the three methods at the end.
    """

    fs: FileSystem
    directory: str
    name: str
    durable: bool
    read_only: int | None
    checkpoint_in_thread: bool
    _lock: QueueLock | None
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
    _prepared: Prepared | None
    _checkpointing: threading.Thread | None
    _sync_directory: Callable[[], None]

    def _prepare_unlocked(self) -> None:
        """Opening, step one: note under the lock where the log ends, replay up to there without it.

        The lock is held for a moment (the pointer, the file, its size); the
        replay from the last checkpoint up to that size runs without it, once
        an fsync through it has succeeded (checkpoint.py: those bytes no longer
        change), and the caller then catches up the rest under the lock.
        """
        assert self._lock is not None
        self._lock.acquire(exclusive=False)
        try:
            generation = read_pointer(self.fs, self.directory, self.name)
            sig = self._pointer_signature()
            path = log_path(self.directory, self.name, generation or 0)
            if not self.fs.exists(path):
                return  # a new queue, or one in trouble: the locked open deals with it
            log = self._open_log(path, generation or 0)
            noted = AS_WRITTEN if log.preallocated else log.size()
        except (OSError, NobrokerError):
            return  # the locked open says what is wrong
        finally:
            self._lock.release()
        self._prepare_from(log, noted, sig)

    def _prepare_from(self, log: LogFile, durable_end: int | None, sig: object) -> None:
        """Replay ``log`` without the lock up to ``durable_end`` (None: its checkpoint's end); keep it for the lock."""
        prepared = None
        try:
            if durable_end is not None and durable_end > HEADER_SIZE and self.durable:
                log.note_end(durable_end)
                log.sync_through(durable_end)  # see checkpoint.py: what is read must no longer change
            prepared = prepare(self.fs, self.directory, self.name, log, durable_end)
            if prepared is not None and durable_end == AS_WRITTEN and prepared.end > HEADER_SIZE and self.durable:
                # Read first, fsync after: the fsync covers every byte the replay read.
                log.note_end(prepared.end)
                log.sync_through(prepared.end)
        except (OSError, NobrokerError) as exc:
            prepared = None
            logger.debug("%s: no replay without the lock (%s)", log.path, exc)
        if prepared is None:
            log.close()
            return
        prepared.pointer_sig = sig
        self._drop_prepared()
        self._prepared = prepared

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
        if prepared is not None and prepared.log is new and self.durable:
            # The flip must be durable before anything is answered from the new generation
            # (commit.Committer._switch_to): here, not under the lock, unless the pointer
            # changes again before it (``still_valid`` then drops this replay).
            self._sync_directory()
            prepared.folders_synced = True

    def _take_prepared(self, generation: int) -> LogFile | None:
        """Under the lock: the file of ``generation`` replayed without the lock, if that replay still holds."""
        prepared = self._prepared
        if prepared is None:
            return None
        if prepared.log.generation == generation and still_valid(prepared, self._pointer_signature()):
            return prepared.log
        self._drop_prepared()
        return None

    def _drop_prepared(self) -> None:
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            prepared.log.close()

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
            if (
                self._closed or log is None or self._stale or self._failed is not None or self.read_only is not None
                or mark is None or mark[0] != log.generation or mark[1] != end or log.durable_end < end
                or os.getpid() != self._pid or state.records - self._snap_records < CHECKPOINT_EVERY
            ):  # fmt: skip
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

    def _pointer_signature(self) -> tuple[int, int, int] | None:
        raise NotImplementedError

    def _compaction_running(self) -> bool:
        raise NotImplementedError

    def _open_log(self, path: str, generation: int) -> LogFile:
        raise NotImplementedError


__all__ = ["CHECKPOINT_EVERY", "CHECKPOINT_RETRY", "Checkpoints", "CHECKPOINT_WAIT", "Prepared", "prepare", "save_before_flip", "still_valid", "wait_for_checkpoint"]
