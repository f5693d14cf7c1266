"""Replaying what no longer changes without the file lock: at opening, and before a follower's lock.

Owns: Prepared (a generation opened and replayed without the lock, up to an
offset whose bytes no longer change), how it is made (``prepare``) and
carried further (``advance``), and checked under the lock before use
(``still_valid``); UnlockedReplay, the part of recovery.QueueFiles that does
these when a queue opens (note the end under a shared lock for a moment,
replay up to it without the lock, then replay on while peers appended much
meanwhile) and hands the result to the locked replay. Imports: errors, fs,
bulk, framing, log, lock, pointer, prefix_crc, layout, replay, snapshot.

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
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import NobrokerError
from . import snapshot
from .bulk import paused_collector
from .framing import FRAME_SIZE, HEADER_SIZE, FrameStatus
from .fs import FileSystem
from .layout import log_path
from .lock import QueueLock
from .log import LogFile
from .pointer import read_pointer
from .prefix_crc import log_crc
from .replay import QueueState

logger = logging.getLogger("nobroker")

#: Most passes an opener makes without the lock over what peers appended while it replayed.
CATCH_UP_PASSES = 3
#: A pass that finds fewer new bytes than this is the last one (about 300 small jobs' records:
#: a few milliseconds of reading under the lock).
CATCH_UP_MIN_BYTES = 64 << 10
#: prepare()'s end for a version 2 file: as far as its whole records go when it reads them.
AS_WRITTEN = -1


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
    try:
        end = _replay_range(log, state, max(start, HEADER_SIZE), durable_end)
        if end is None:
            return None
        crc = log_crc(fs, log.fd, start, end, crc) if start < end else crc
    except _STOPS:
        return None
    state.tidy()
    return Prepared(log, state, end, crc, loaded is not None, records)


#: What stops a replay without the lock (the caller then reads under the lock, which says what is wrong).
_STOPS = (NobrokerError, OSError, KeyError, TypeError, ValueError, AttributeError, RecursionError)


def _replay_range(log: LogFile, state: QueueState, start: int, durable_end: int) -> int | None:
    """Apply the records of log[start, ``durable_end``) to ``state``; where they end (None: something stops them first).

    AS_WRITTEN: as far as whole records go. May raise any of _STOPS.
    """
    as_written = durable_end == AS_WRITTEN
    end = start
    apply = state.apply
    for fr in log.scan(end, None if as_written else durable_end):
        if as_written and fr.status is not FrameStatus.OK:
            break  # the end of the records, or one being appended now (read on under the lock)
        if fr.status is not FrameStatus.OK or fr.offset != end:
            return None
        apply(fr.rtype, fr.body, fr.offset, FRAME_SIZE + fr.length)  # type: ignore[arg-type]
        end = fr.offset + FRAME_SIZE + fr.length
    if not as_written and end != durable_end and durable_end > HEADER_SIZE:
        return None
    return end


def advance(fs: FileSystem, prepared: Prepared, durable_end: int) -> bool:
    """Replay on, without the lock, the records after ``prepared.end`` up to ``durable_end`` (as ``prepare`` does).

    False if anything stops them: ``prepared`` is then half advanced, and the caller drops it.
    """
    start = prepared.end
    try:
        with paused_collector():
            end = _replay_range(prepared.log, prepared.state, start, durable_end)
            if end is None:
                return False
            if prepared.crc is not None and start < end:
                prepared.crc = log_crc(fs, prepared.log.fd, start, end, prepared.crc)
    except _STOPS:
        return False
    prepared.end = end
    prepared.state.tidy()
    return True


def still_valid(prepared: Prepared, pointer_sig: object) -> bool:
    """Under the lock: does the pointer still look as it did when ``prepared`` was read, and the file no shorter?

    A compaction or a repair writes another file and renames a new pointer
    into place (a new inode): any flip changes the pointer's signature.
    """
    try:
        return prepared.pointer_sig == pointer_sig and prepared.log.size() >= prepared.end
    except (OSError, NobrokerError):
        return False


class UnlockedReplay:
    """The part of recovery.QueueFiles that replays a generation without the lock before the locked replay.

    A mixin: QueueFiles sets every attribute below in its __init__ and
    provides the two methods at the end.
    """

    fs: FileSystem
    directory: str
    name: str
    durable: bool
    _lock: QueueLock | None
    _prepared: Prepared | None
    _sync_directory: Callable[[], None]

    def _prepare_unlocked(self) -> None:
        """Opening, step one: note under the lock where the log ends, replay up to there without it.

        The lock is held for a moment (the pointer, the file, its size); the
        replay from the last checkpoint up to that size runs without it, once
        an fsync through it has succeeded (see above: those bytes no longer
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

    def _catch_up_unlocked(self) -> None:
        """Opening, step two: replay on without the lock what peers appended during step one, while that was much.

        Step one can take seconds (a big checkpoint, a long tail after it),
        and every record peers append meanwhile would otherwise be read under
        the exclusive lock, which all of them wait for: 25 ms for a busy
        peer's four seconds of records. Each pass notes the end again, as
        step one did, and stops once a pass found little; the lock then
        covers only the last moments.
        """
        for _ in range(CATCH_UP_PASSES):
            prepared = self._prepared
            if prepared is None:
                return
            before = prepared.end
            noted = AS_WRITTEN if prepared.log.preallocated else self._noted_end(prepared)
            if noted is None or (noted != AS_WRITTEN and noted - before < CATCH_UP_MIN_BYTES):
                return
            if not self._advance(prepared, noted):
                self._drop_prepared()
                return
            if prepared.end - before < CATCH_UP_MIN_BYTES:
                return

    def _noted_end(self, prepared: Prepared) -> int | None:
        """Under the shared lock, for a moment: where the prepared file's whole batches end (None: it is no longer current)."""
        assert self._lock is not None
        self._lock.acquire(exclusive=False)
        try:
            return prepared.log.size() if self._pointer_signature() == prepared.pointer_sig else None
        except (OSError, NobrokerError):
            return None
        finally:
            self._lock.release()

    def _sync_before_reading(self, log: LogFile, durable_end: int | None) -> None:
        """Through a noted end, before reading up to it (see above: what is read must no longer change)."""
        if durable_end is not None and durable_end > HEADER_SIZE and self.durable:  # (AS_WRITTEN is below it)
            log.note_end(durable_end)
            log.sync_through(durable_end)

    def _sync_after_reading(self, log: LogFile, durable_end: int | None, end: int) -> None:
        """AS_WRITTEN: read first, fsync after, through ``end``: the fsync covers every byte the replay read."""
        if durable_end == AS_WRITTEN and end > HEADER_SIZE and self.durable:
            log.note_end(end)
            log.sync_through(end)

    def _advance(self, prepared: Prepared, noted: int) -> bool:
        """``advance`` with step one's fsyncs, before or after the reading as ``noted`` says."""
        try:
            self._sync_before_reading(prepared.log, noted)
            if not advance(self.fs, prepared, noted):
                return False
            self._sync_after_reading(prepared.log, noted, prepared.end)
        except (OSError, NobrokerError):
            return False
        return True

    def _prepare_from(self, log: LogFile, durable_end: int | None, sig: object) -> None:
        """Replay ``log`` without the lock up to ``durable_end`` (None: its checkpoint's end); keep it for the lock."""
        prepared = None
        try:
            self._sync_before_reading(log, durable_end)
            prepared = prepare(self.fs, self.directory, self.name, log, durable_end)
            if prepared is not None:
                self._sync_after_reading(log, durable_end, prepared.end)
        except (OSError, NobrokerError) as exc:
            prepared = None
            logger.debug("%s: no replay without the lock (%s)", log.path, exc)
        if prepared is None:
            log.close()
            return
        prepared.pointer_sig = sig
        self._drop_prepared()
        self._prepared = prepared

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

    def _pointer_signature(self) -> tuple[int, int, int] | None:
        raise NotImplementedError

    def _open_log(self, path: str, generation: int) -> LogFile:
        raise NotImplementedError


__all__ = ["AS_WRITTEN", "CATCH_UP_MIN_BYTES", "CATCH_UP_PASSES", "Prepared", "UnlockedReplay", "advance", "prepare", "still_valid"]
