"""Mending a damaged file queue: repair keeps the damaged file aside and rebuilds the queue from its valid records.

Owns: repair, RepairReport (what was kept, what was lost, and the jobs that
lost records: ids where they can be read, counts otherwise) and
DamagedStretch. admin.py offers it to the CLI beside inspect and verify.
Imports: errors, layout, fs, framing, log, pointer, lock, replay,
snapshot, compaction, schedule_records, limit_records, control_records,
counting (a repair carries the schedules, limits, pauses and counters
over).

repair deletes the queue's snapshots, since it rewrites the log they were
taken from.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from . import control_records, counting, limit_records, schedule_records
from ..errors import CorruptLogError
from .compaction import flip, write_generation
from .framing import FRAME, FRAME_SIZE, HEADER_SIZE, KNOWN_TYPES, FrameStatus
from .fs import OS_FILESYSTEM, FileSystem
from .layout import compactor_path, damaged_path, lock_path, log_path
from .lock import QueueLock
from .log import LogFile, list_generations
from .pointer import current_generation
from .replay import QueueState
from .snapshot import remove as remove_snapshots
#: Most job ids a RepairReport lists in each of its lists; the counts are always complete.
MAX_REPORTED_IDS = 1000
#: Most bytes of one damaged stretch read back to look for job ids (the rest counts as unreadable).
MAX_DAMAGE_SCAN_BYTES = 64 * 1024 * 1024
#: A record body as every writer (and 0.1.2) starts it: the job id first.
_ID_AT_BODY_START = re.compile(rb'\{"id":("(?:[^"\\]|\\.){1,2000}")')


@dataclass
class DamagedStretch:
    """One run of bytes repair could not use: where, how long, and what could still be read in it."""

    offset: int
    bytes: int
    records: int = 0  # record headers found in it (each a record lost)
    ids: list[str] = field(default_factory=list)  # job ids read from those records, where readable
    unreadable_bytes: int = 0  # bytes in which no record could be made out at all


@dataclass
class RepairReport:
    """What repair did: where the damaged file went, what was kept, and which jobs lost what.

    ``lost_jobs``: ids of jobs that are gone (their enqueue was in the
    damage, while later records of theirs were readable). ``changed_jobs``:
    ids of jobs kept whose later records were in the damage, so their state
    may be older than it was (a done job may run again). ``unidentified_records``
    counts damaged records whose job id could not be read, and
    ``unreadable_bytes`` the bytes where no record could be made out: lost too,
    but nobody can say whose (or how many). ``records_dropped`` counts the
    dropped records that could be made out. The lists hold at most MAX_REPORTED_IDS ids;
    ``lost_job_count`` and ``changed_job_count`` are complete.
    """

    directory: str
    name: str
    repaired: bool = False
    kept_aside: str | None = None
    old_generation: int | None = None
    new_generation: int | None = None
    records_kept: int = 0
    bytes_dropped: int = 0
    jobs: int = 0
    message: str = ""
    records_dropped: int = 0
    lost_jobs: list[str] = field(default_factory=list)
    lost_job_count: int = 0
    changed_jobs: list[str] = field(default_factory=list)
    changed_job_count: int = 0
    unidentified_records: int = 0
    unreadable_bytes: int = 0
    damage: list[DamagedStretch] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def name_the_losses(self, named: dict[str, None], state: QueueState) -> None:
        """Sort the ids named by dropped records into lost and changed, and total the rest."""
        lost = [job_id for job_id in named if job_id not in state]
        changed = [job_id for job_id in named if job_id in state]
        self.lost_jobs, self.lost_job_count = lost[:MAX_REPORTED_IDS], len(lost)
        self.changed_jobs, self.changed_job_count = changed[:MAX_REPORTED_IDS], len(changed)
        self.unidentified_records = sum(s.records - len(s.ids) for s in self.damage)
        self.unreadable_bytes = sum(s.unreadable_bytes for s in self.damage)


def _read_damage(log: LogFile, fs: FileSystem, start: int, end: int) -> DamagedStretch:
    """What can still be read in the damaged bytes [start, end): record headers and the job ids they name.

    Best effort, for the report only (nothing read here is kept): a header
    counts when its type is known and its length fits the stretch; an id
    counts when a body starts with ``{"id":"..."`` right after a header
    whose type byte is known (JSON text never holds such a byte, so an id
    inside a payload is not taken for a record's).
    """
    stretch = DamagedStretch(start, end - start)
    data = fs.pread(log.fd, min(end - start, MAX_DAMAGE_SCAN_BYTES), start)
    stretch.unreadable_bytes = (end - start) - len(data)
    pos = 0
    while pos < len(data):
        found = _record_at(data, pos)
        if found is None:
            following = _next_record(data, pos + 1)
            stretch.unreadable_bytes += following - pos
            pos = following
            continue
        size, job_id = found
        stretch.records += 1
        if job_id is not None:
            stretch.ids.append(job_id)
        pos += size
    return stretch


def _record_at(data: bytes, pos: int) -> tuple[int, str | None] | None:
    """(size, job id or None) of a record whose header is plausible at ``pos``, else None."""
    if len(data) - pos < FRAME_SIZE:
        return None
    length, rtype, _crc = FRAME.unpack_from(data, pos)
    if rtype not in KNOWN_TYPES or FRAME_SIZE + length > len(data) - pos:
        return None
    match = _ID_AT_BODY_START.match(data, pos + FRAME_SIZE, pos + FRAME_SIZE + length)
    job_id = None
    if match is not None:
        try:
            job_id = json.loads(match.group(1))
        except ValueError:
            job_id = None
    return FRAME_SIZE + length, job_id if isinstance(job_id, str) else None


def _next_record(data: bytes, pos: int) -> int:
    """Where the next plausible record header after ``pos`` starts (or the end of ``data``)."""
    for match in _ID_AT_BODY_START.finditer(data, pos + FRAME_SIZE):
        header = match.start() - FRAME_SIZE
        if header >= pos and data[header + 4] in KNOWN_TYPES:
            return header
    return len(data)


def repair(
    directory: str, name: str = "default", *, lock_timeout: float = 10.0, fs: FileSystem = OS_FILESYSTEM
) -> RepairReport:
    """Rebuild a damaged queue from every valid record, keeping the damaged file aside.

    Records inside a damaged stretch are lost (they cannot be read); every
    valid record before and after it is kept. The damaged file is renamed to
    ``<file>.damaged-<unix time>`` and never deleted by nobroker. A compaction
    running meanwhile is waited for (it holds the compactor lock).
    """
    directory = os.path.abspath(directory)
    report = RepairReport(directory, name)
    # A compaction running elsewhere writes the next generation without the
    # queue's lock: let it finish first (it holds the compactor lock throughout).
    compactor = QueueLock(fs, compactor_path(directory, name), lock_timeout)
    lock = QueueLock(fs, lock_path(directory, name), lock_timeout)
    try:
        compactor.acquire(exclusive=True)
        lock.acquire(exclusive=True)
        # A snapshot is only a cache of replaying the log, and repair rewrites the log.
        remove_snapshots(fs, directory, name)
        return _repair_locked(directory, name, fs, report)
    finally:
        lock.close()
        compactor.close()


def _repair_locked(directory: str, name: str, fs: FileSystem, report: RepairReport) -> RepairReport:
    try:
        generation: int | None = current_generation(directory, name, fs)
    except CorruptLogError:
        generation = None
    existing = list_generations(fs, directory, name)
    if generation is None or generation not in existing:
        if not existing:
            report.message = "nothing to repair: no generation file exists"
            return report
        generation = existing[-1]  # the newest file is the best guess for the truth
    report.old_generation = generation
    path = log_path(directory, name, generation)
    log = LogFile.open(fs, path, writable=False)
    try:
        state, dropped = _salvage(log, fs, report)
        if dropped == 0 and read_pointer_ok(fs, directory, name, generation):
            report.message = "the queue is sound; nothing was changed"
            report.jobs = len(state)
            return report
        live = list(state.entries())

        def read_body(entry: Any) -> dict[str, Any]:
            return dict(log.read_job_body(entry.offset, entry.id))

        new_gen = max(existing + [generation]) + 1
        at = time.time()
        carried = [
            counting.carried_record(state.counters, live, at),  # first: over the jobs dropped
            *schedule_records.replayed(state.schedules, at),
            *limit_records.replayed(state.limits, at, state.turns),
            *control_records.replayed(state.paused, at),
        ]  # fmt: skip
        new, _offsets = write_generation(
            fs, directory, name, new_gen, live, read_body, sync=True, extra=carried, version=log.version
        )  # the format it had
        new.close()
    finally:
        log.close()
    aside = damaged_path(path, int(time.time()))
    fs.replace(path, aside)
    flip(fs, directory, name, new_gen, sync=True)
    report.repaired = True
    report.kept_aside = aside
    report.new_generation = new_gen
    report.records_kept = state.records
    report.bytes_dropped = dropped
    report.jobs = len(live)
    report.message = (
        f"rebuilt generation {new_gen} from {state.records} valid records ({dropped} damaged bytes dropped); "
        f"the damaged file is kept as {aside}"
    )
    return report


def _salvage(log: LogFile, fs: FileSystem, report: RepairReport) -> tuple[QueueState, int]:
    """Replay every valid record of ``log``, skipping damaged stretches; returns the state and the bytes dropped.

    Each stretch, and the jobs the dropped records name, go into ``report``.
    """
    state = QueueState()
    size = log.size()
    pos = HEADER_SIZE
    dropped = 0
    # Every job a dropped record names, in the order met (a dict keeps it, once each).
    named: dict[str, None] = {}
    while pos < size:
        stopped = None
        for fr in log.scan(pos):
            if fr.status is FrameStatus.OK:
                body = fr.body or {}
                anomalies = state.anomalies
                try:
                    state.apply(fr.rtype, body, fr.offset, FRAME_SIZE + fr.length)
                except (KeyError, TypeError, ValueError):
                    dropped += FRAME_SIZE + fr.length
                    report.records_dropped += 1
                    _name_job(named, body)
                else:
                    if state.anomalies != anomalies:  # a record of a job whose enqueue is gone
                        _name_job(named, body)
                pos = fr.end
                continue
            stopped = fr
            break
        if stopped is None or (stopped.status is FrameStatus.END and log.only_zeros_after(stopped.offset)):
            break
        after = log.valid_record_after(stopped.offset, size)
        end = size if after is None else after
        stretch = _read_damage(log, fs, stopped.offset, end)
        report.damage.append(stretch)
        report.records_dropped += stretch.records
        for job_id in stretch.ids:
            named.setdefault(job_id, None)
        dropped += end - stopped.offset
        pos = end
    report.name_the_losses(named, state)
    return state, dropped


def _name_job(named: dict[str, None], body: dict[str, Any]) -> None:
    job_id = body.get("id")
    if isinstance(job_id, str):
        named.setdefault(job_id, None)


def read_pointer_ok(fs: FileSystem, directory: str, name: str, generation: int) -> bool:
    try:
        return current_generation(directory, name, fs) == generation
    except CorruptLogError:
        return False


__all__ = ["DamagedStretch", "RepairReport", "repair"]
