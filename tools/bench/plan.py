"""What every suite of the file storage's benchmark shares: the sizes of a run, a figure, scratch folders.

Owns: Plan (how many jobs each figure runs on, chosen by ``--quick``,
``--full`` and ``--runs``), Figure (one row of the table), ``fresh`` (a new
scratch folder) and ``progress`` (the status line on a terminal).
Imports: the standard library only.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass

#: Jobs per throughput figure (enqueue and lease + ack; the threads and processes figures run twice as many).
THROUGHPUT_JOBS = 2000
#: Jobs the Worker drains: by default, and with --full.
DRAIN_JOBS, DRAIN_JOBS_FULL = 8000, 20_000
#: Pending jobs of the size, opening and compaction figures: --quick, default, --full.
PENDING_QUICK, PENDING, PENDING_FULL = 50_000, 200_000, 1_000_000
#: Idle pickups timed: --quick, default.
PICKUPS_QUICK, PICKUPS = 30, 80
#: The share of THROUGHPUT_JOBS and DRAIN_JOBS a --quick run takes.
QUICK_SCALE = 0.4


@dataclass(frozen=True)
class Plan:
    """How big each figure's run is."""

    runs: int  # repetitions per figure (the median is reported)
    jobs: int  # THROUGHPUT_JOBS, scaled
    drain_jobs: int
    pending: int
    pickups: int

    @classmethod
    def of(cls, *, quick: bool, full: bool, runs: int) -> Plan:
        """The plan ``--quick`` / ``--full`` / ``--runs`` ask for."""
        scale = QUICK_SCALE if quick else 1.0
        return cls(
            runs=runs,
            jobs=int(THROUGHPUT_JOBS * scale),
            drain_jobs=DRAIN_JOBS_FULL if full else int(DRAIN_JOBS * scale),
            pending=PENDING_FULL if full else (PENDING_QUICK if quick else PENDING),
            pickups=PICKUPS_QUICK if quick else PICKUPS,
        )


@dataclass
class Figure:
    """One row: a figure, its target, whether it was met, and the disk's limit beside it where it has one."""

    name: str
    value: float
    unit: str
    target: str
    ok: bool | None
    limit: float | None = None
    ratio: float | None = None


def progress(text: str) -> None:
    """Say what runs now, on one line of a terminal's stderr (nothing when stderr is a file)."""
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\033[Kbench: {text}")
        sys.stderr.flush()


def fresh(root: str) -> str:
    """A new empty folder under ``root``, for one queue."""
    return tempfile.mkdtemp(dir=root)


__all__ = ["Plan", "Figure", "progress", "fresh"]
