"""Looking at and mending a file queue from outside: inspect, verify, repair.

Owns: inspect_log (every record with its offset, damage shown), verify (a
read-only check that reports exactly what it found) and list_queues; and
offers repair (repair.py) beside them, as the one engine module the apps
import. Imports: errors, jobs, layout, fs, framing, log, pointer, replay,
repair.

inspect and verify read the log only; a state snapshot (snapshot.py) is a
cache they neither need nor trust. repair deletes the queue's snapshots,
since it rewrites the log they were taken from.

None of these run on a queue's hot path; they exist for the operator and the
CLI (`nobroker inspect | verify | repair`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import CorruptLogError, NobrokerError, UnsafeQueueError
from ..jobs import JobState
from .framing import FRAME_SIZE, HEADER_SIZE, FrameStatus, RecordType, decode_header
from .fs import OS_FILESYSTEM, FileSystem
from .layout import log_path, pointer_path, queue_names
from .log import LogFile, list_generations
from .pointer import current_generation
from .replay import QueueState
from .repair import DamagedStretch, RepairReport, repair


@dataclass(frozen=True)
class RecordView:
    """One record as it sits in the file (or the header, or the damage that ends the file)."""

    offset: int
    length: int
    type: int
    type_name: str
    body: dict[str, Any] | None
    damage: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_queues(directory: str, *, fs: FileSystem = OS_FILESYSTEM) -> list[str]:
    """Names of the queues that have files in ``directory``."""
    return queue_names(fs.listdir(directory))


def _type_name(rtype: int) -> str:
    try:
        return RecordType(rtype).name
    except ValueError:
        return f"UNKNOWN({rtype})"


def inspect_log(
    directory: str, name: str = "default", *, generation: int | None = None, fs: FileSystem = OS_FILESYSTEM
) -> Iterator[RecordView]:
    """Every record of one generation (default: the current one), read-only.

    The header comes first as type_name "HEADER". If the file is damaged, the
    last view carries ``damage`` and says whether valid records follow.
    """
    if generation is None:
        generation = current_generation(directory, name, fs)
    path = log_path(directory, name, generation)
    log = LogFile.open(fs, path, writable=False)
    try:
        head = fs.pread(log.fd, HEADER_SIZE, 0)
        header = decode_header(head)
        yield RecordView(0, HEADER_SIZE, 0, "HEADER", {"version": header.version, "generation": header.generation})
        for fr in log.scan(HEADER_SIZE):
            if fr.status is FrameStatus.OK:
                yield RecordView(fr.offset, fr.length, fr.rtype, _type_name(fr.rtype), fr.body)
                continue
            if fr.status is FrameStatus.END and log.only_zeros_after(fr.offset):
                return  # format version 2: the records end here, and the room after them holds only zeros
            after = log.valid_record_after(fr.offset)
            status = "not only zeros after the records" if fr.status is FrameStatus.END else fr.status.value
            if after is None:
                damage = f"{status}: torn tail of {log.torn_bytes(fr.offset)} bytes (an interrupted write; opening the queue cuts it)"
            else:
                damage = f"{status}: damage in the middle, valid records follow at offset {after} (`nobroker repair`)"
            yield RecordView(fr.offset, fr.length, fr.rtype, _type_name(fr.rtype), None, damage)
            return
    finally:
        log.close()


@dataclass
class VerifyReport:
    """What a read-only check of one queue found. ``ok`` is False when there are problems."""

    directory: str
    name: str
    generation: int | None = None
    records: int = 0
    jobs: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    torn_bytes: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


def verify(directory: str, name: str = "default", *, fs: FileSystem = OS_FILESYSTEM) -> VerifyReport:
    """Check a queue without changing a byte: folder, pointer, header, every record, replay."""
    directory = os.path.abspath(directory)
    report = VerifyReport(directory, name)
    try:
        st = fs.lstat(directory)
    except FileNotFoundError:
        report.problems.append(f"{directory} does not exist")
        return report
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        report.problems.append(f"{directory} belongs to uid {st.st_uid}, not to you")
    if st.st_mode & stat.S_IWOTH:
        report.problems.append(f"{directory} is writable by every user (mode {stat.S_IMODE(st.st_mode):o})")
    try:
        generation = current_generation(directory, name, fs)
    except NobrokerError as exc:
        report.problems.append(str(exc))
        return report
    report.generation = generation
    path = log_path(directory, name, generation)
    if not fs.exists(path):
        existing = list_generations(fs, directory, name)
        if generation == 0 and not existing and not fs.exists(pointer_path(directory, name)):
            report.problems.append(f"no queue named {name!r} in {directory}")
        else:
            report.problems.append(f"{path} is missing (generations present: {existing or 'none'})")
        return report
    for other in list_generations(fs, directory, name):
        if other != generation:
            report.notes.append(f"{log_path(directory, name, other)} is left over from a compaction; the next open removes it")
    state = QueueState()
    try:
        for view in inspect_log(directory, name, generation=generation, fs=fs):
            if view.type_name == "HEADER":
                continue
            if view.damage is not None:
                if "torn tail" in view.damage:
                    log = LogFile.open(fs, path, writable=False)
                    try:
                        report.torn_bytes = log.torn_bytes(view.offset)
                    finally:
                        log.close()
                    report.notes.append(f"offset {view.offset}: {view.damage}")
                else:
                    report.problems.append(f"offset {view.offset}: {view.damage}")
                break
            state.apply(view.type, view.body or {}, view.offset, FRAME_SIZE + view.length)
    except (CorruptLogError, UnsafeQueueError) as exc:
        report.problems.append(str(exc))
        return report
    except (KeyError, TypeError, ValueError) as exc:
        report.problems.append(f"a record does not replay: {exc!r}")
        return report
    report.records = state.records
    report.jobs = len(state)
    report.counts = {s.value: state.counts[s] for s in JobState if s is not JobState.CANCELLED or state.counts[s]}
    if state.anomalies:
        report.problems.append(f"{state.anomalies} record(s) name jobs the log does not hold")
    return report


__all__ = [
    "DamagedStretch", "RecordView", "RepairReport", "VerifyReport", "current_generation", "inspect_log", "list_queues",
    "repair", "verify",
]  # fmt: skip
