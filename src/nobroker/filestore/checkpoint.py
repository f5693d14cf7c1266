"""Checkpoints, and replaying what no longer changes without the file lock.

Owns: Prepared (a generation opened and replayed without the lock, up to an
offset whose bytes no longer change) and how it is made (``prepare``) and
checked under the lock before use (``still_valid``); the checkpoint a compactor leaves of
the new generation it flipped to (``save_after_compaction``) and a
follower's short wait for it (``wait_for_checkpoint``). Imports: errors,
layout, fs, framing, log, lock, replay, snapshot.

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
file at least D bytes long.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..errors import NobrokerError
from . import snapshot
from .framing import FRAME_SIZE, HEADER_SIZE, FrameStatus
from .fs import FileSystem
from .layout import compactor_path, snapshot_path
from .lock import held_elsewhere
from .log import LogFile
from .replay import QueueState

logger = logging.getLogger("nobroker")

#: Records a writer appends or reads after the last snapshot or checkpoint before it writes
#: another (off the hot path: recovery.QueueFiles._maybe_checkpoint). Opening after a crash
#: then replays at most about this many records after loading it.
CHECKPOINT_EVERY = 50_000
#: Longest a process that follows a compaction waits for the compactor's checkpoint
#: of the new generation (it is written just after the flip) before replaying instead.
CHECKPOINT_WAIT = 2.0
#: Sleep between two looks for that checkpoint.
CHECKPOINT_POLL = 0.002


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


def prepare(fs: FileSystem, directory: str, name: str, log: LogFile, durable_end: int | None) -> Prepared | None:
    """Replay ``log`` up to ``durable_end`` without the lock: its last checkpoint, then the records after it.

    ``durable_end`` must be an offset whose bytes no longer change (see the
    module's docstring); None means the end of the checkpoint (a compactor's
    is durable: it fsynced the new generation before its flip), and no
    checkpoint then means None. None also when anything stops the reading
    before it (damage, a short file, a record that makes no sense): the
    caller then replays under the lock, which deals with each of those.
    """
    loaded = snapshot.load(fs, directory, name, log)
    if durable_end is None:
        if loaded is None:
            return None
        durable_end = loaded[1]
    if loaded is not None and loaded[1] > durable_end:
        loaded = None  # a checkpoint past what is known to stay: not now (the caller reads on under the lock)
    state, start, crc = loaded or (QueueState(), 0, 0)
    records = state.records  # what the checkpoint held, before the records after it
    end = max(start, HEADER_SIZE)
    apply = state.apply
    try:
        for fr in log.scan(end, durable_end):
            if fr.status is not FrameStatus.OK or fr.offset != end:
                return None
            apply(fr.rtype, fr.body, fr.offset, FRAME_SIZE + fr.length)  # type: ignore[arg-type]
            end = fr.offset + FRAME_SIZE + fr.length
        if end != durable_end and durable_end > HEADER_SIZE:
            return None
        crc = snapshot.log_crc(fs, log.fd, start, end, crc) if start < end else crc
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


def save_after_compaction(fs: FileSystem, directory: str, name: str, log: LogFile, state: QueueState, end: int) -> int | None:
    """The compactor's checkpoint of the generation it just flipped to: ``state`` is the replay of log[0, ``end``).

    Returns the crc32 of log[0, end) (what a snapshot at close builds on), or
    None when it could not be written (logged: only the cache is lost).
    """
    try:
        crc = snapshot.log_crc(fs, log.fd, 0, end)
        snapshot.save(fs, directory, name, log.generation, state, end, crc)
        snapshot.remove_older(fs, directory, name, log.generation)
    except (OSError, NobrokerError, ValueError, TypeError) as exc:
        logger.info("%s: no checkpoint of the new generation written (%s); followers replay it", log.path, exc)
        return None
    return crc


def wait_for_checkpoint(fs: FileSystem, directory: str, name: str, generation: int, *, timeout: float = CHECKPOINT_WAIT) -> bool:
    """Is there a checkpoint of ``generation``, or will there be shortly (its compactor is still at work)?"""
    deadline = time.monotonic() + timeout
    path = snapshot_path(directory, name, generation)
    while True:
        if fs.exists(path):
            return True
        if time.monotonic() >= deadline or not held_elsewhere(fs, compactor_path(directory, name)):
            return fs.exists(path)
        time.sleep(CHECKPOINT_POLL)


__all__ = ["CHECKPOINT_EVERY", "CHECKPOINT_WAIT", "Prepared", "prepare", "save_after_compaction", "still_valid", "wait_for_checkpoint"]
