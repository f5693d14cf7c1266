"""Reading forward: applying the records after an offset to a state, and what stops the reading.

Owns: Forward, the part of recovery.QueueFiles that applies every whole
record after an offset (``_apply_forward``), keeps the crc of what it applied
for a snapshot at close (``_read_forward``), reads without the lock as far as
whole records go (``_read_unlocked``: an operation's look ahead, a
compaction's copying), and deals with where reading
stopped (``_stopped_at``): a torn tail is cut, damage followed by valid
records refuses with CorruptLogError; and ``damage_of``, the words of
0.1.2's RecoveryReport for a torn tail. Imports: errors, jobs, framing, fs,
log, prefix_crc, replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import CorruptLogError
from ..jobs import Damage
from .framing import FRAME_SIZE, HEADER_SIZE, Frame, FrameStatus, RecordType
from .fs import FileSystem
from .log import LogFile
from .prefix_crc import log_crc
from .replay import QueueState


#: A read without the lock that found at least this much reads again (peers appended while it read):
#: what it leaves for the read under the lock is then a moment's worth (about twenty records).
READ_AGAIN_BYTES = 4096


class Forward:
    """A mixin: QueueFiles sets the attributes below in its __init__."""

    fs: FileSystem
    _stale: bool
    _offset: int
    _state: QueueState
    _snap_crc: tuple[int, int, int] | None
    _cut_damage: Damage

    def _read_forward(
        self, log: LogFile, state: QueueState, start: int, *, truncate: bool, deadline: float | None = None,
        whole: bool = False, shift: int = 0, locked: bool = True,
    ) -> tuple[int, int]:  # fmt: skip
        """_apply_forward, and the crc of the bytes it applied, for a snapshot at close.

        Read again while we still hold the lock: the very bytes just applied.
        """
        end, torn = self._apply_forward(
            log, state, start, truncate=truncate, deadline=deadline, whole=whole, shift=shift, locked=locked
        )  # fmt: skip
        mark = self._snap_crc
        if mark is not None and mark[0] == log.generation and mark[1] in (start, 0 if start == HEADER_SIZE else -1):
            try:
                self._snap_crc = (log.generation, end, log_crc(self.fs, log.fd, mark[1], end, mark[2]))
            except (OSError, ValueError):
                self._snap_crc = None
        else:
            self._snap_crc = None
        return end, torn

    def _read_unlocked(
        self, log: LogFile, *, shift: int = 0, passes: int = 1, current: Callable[[], bool] | None = None
    ) -> bool:
        """Without the lock: apply the whole records after ``_offset`` (see commit.Committer._read_ahead); did any follow it?

        Up to ``passes`` times, while a pass read at least READ_AGAIN_BYTES
        (what peers appended while it read). Raises what stopped the reading
        (damage, an I/O error), memory then marked stale: records may have
        been applied without the offset moving past them. ``shift``: as in
        _read_forward (a compaction's). ``current``: asked before each pass
        that has records to read; False (a peer flipped to another generation
        since our last look) stops the reading: those records are not ours to
        apply, and the catch-up under the lock follows the flip instead.
        """
        assert passes >= 1, "at least one look"
        try:
            follows = False
            for _ in range(passes):
                start = self._offset
                if log.what_follows(start) <= 0 or (current is not None and not current()):
                    break
                follows = True
                self._offset, _torn = self._read_forward(log, self._state, start, truncate=False, shift=shift, locked=False)
                if self._offset - start < READ_AGAIN_BYTES:
                    break
            return follows
        except BaseException:
            self._stale = True
            raise

    def _apply_forward(
        self, log: LogFile, state: QueueState, start: int, *, truncate: bool, deadline: float | None = None,
        whole: bool = False, shift: int = 0, locked: bool = True,
    ) -> tuple[int, int]:  # fmt: skip
        """Apply every whole record after ``start``; deal with what stops the reading.

        A torn tail (nothing valid after it) is cut off when ``truncate`` (we
        hold the exclusive lock) and otherwise left for a writer to cut.
        Damage followed by valid records is never cut: CorruptLogError.
        With a ``deadline`` (time.perf_counter), stop at the first record seen
        after it (having read at least one): the caller reads on later.
        ``whole``: the whole generation is being replayed (opening, or
        reloading), so the room after a version 2 file's records is checked
        too: nothing but zeros may follow them (else a torn tail, or damage).
        ``shift``: added to every record's offset as ``state`` notes it (a
        compactor's state already points into the next generation, where
        these records land that much further on). Not ``locked`` (a read
        without the lock): a record that does not check out stops the reading
        and is not judged. A peer may be appending it right now (in a file
        with room after its records, a read can see part of a write), and the
        read under the lock goes on from there and judges it.
        """
        end = start
        apply = state.apply
        for fr in log.scan(start):
            if deadline is not None and fr.status is FrameStatus.OK and end > start and time.perf_counter() >= deadline:
                break
            if fr.status is FrameStatus.END and not (whole and not log.only_zeros_after(fr.offset)):
                break  # version 2: where the records end (the room after them checked when opening)
            if fr.status is not FrameStatus.OK:
                if not locked:
                    break  # being appended now, or damage: the read under the lock judges it
                return end, self._stopped_at(log, fr, truncate)
            assert fr.offset == end, "records follow each other without gaps"
            try:
                apply(fr.rtype, fr.body, fr.offset + shift, FRAME_SIZE + fr.length)  # type: ignore[arg-type]
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
        log.note_end(end)
        return end, 0

    def _stopped_at(self, log: LogFile, fr: Frame, truncate: bool) -> int:
        """Reading stopped at ``fr``: a torn tail (cut with ``truncate``; returns the bytes cut) or damage (raises)."""
        size = log.size()
        after = log.valid_record_after(fr.offset, size)
        if after is not None or fr.status is FrameStatus.BAD_TYPE:
            what = fr.status.value
            if fr.status is FrameStatus.END:
                what = "zero bytes where a record should be, and not only zeros after them"
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
        if not truncate:
            return 0
        torn = log.torn_bytes(fr.offset)
        self._cut_damage = damage_of(fr, torn)
        log.truncate(fr.offset)
        log.note_end(fr.offset)
        return torn


def damage_of(fr: Frame, torn: int) -> Damage:
    """What was wrong with a torn tail, in the words of nobroker 0.1.2's RecoveryReport."""
    if fr.status is FrameStatus.INCOMPLETE:
        return Damage.TRUNCATED_HEADER if torn < FRAME_SIZE else Damage.TRUNCATED_BODY
    if fr.status is FrameStatus.BAD_LENGTH:
        return Damage.OVERSIZE
    if fr.status is FrameStatus.BAD_TYPE:
        return Damage.UNKNOWN_TYPE
    return Damage.BAD_CHECKSUM  # a bad crc, or a good one over bad JSON (0.1.2 called both that)


__all__ = ["Forward", "damage_of"]
