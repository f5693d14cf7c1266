"""``nobroker bench``: a quick figure for your own disk, wherever the CLI runs (the single-file app too).

Owns: disk_limit (the disk's own rate of 120-byte append + fdatasync, the
yardstick every figure stands beside) and run_quick (enqueue, and lease_one
+ ack, on a scratch queue for a second or two each). Imports: queue.

A durable queue costs about one fsync per write, so its speed is mostly the
disk's. Each figure is therefore reported beside the disk's own
append+fsync rate, measured just before it on the same filesystem: the ratio
is the number to compare between machines. The full suites (throughput,
memory, opening, compaction, PostgreSQL) are ``python make.py bench`` in a
clone; this module stays small enough to ship in ``nobroker.pyz``.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

#: What one probe append writes: about one small job record.
RECORD = b"x" * 120
#: Seconds each figure runs by default, and the bounds ``--seconds`` accepts.
DEFAULT_SECONDS = 1.5
MIN_SECONDS, MAX_SECONDS = 0.05, 60.0
#: Fewest operations a figure counts, however fast the disk (a rate of two writes says nothing).
MIN_OPERATIONS = 20
#: Most jobs made ready for the lease+ack figure (it stops early if it runs out).
MAX_PREFILL = 100_000


@dataclass
class QuickFigure:
    """One quick figure: operations per second, and the disk's append+fsync rate measured right before it."""

    name: str
    per_second: float
    disk_per_second: float

    @property
    def ratio(self) -> float:
        return self.per_second / self.disk_per_second if self.disk_per_second else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": round(self.ratio, 3)}


def _fsync(fd: int) -> None:
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


def disk_limit(directory: str, seconds: float = 0.4) -> float:
    """Appends of 120 bytes with fdatasync after each, per second, on ``directory``'s filesystem."""
    path = os.path.join(directory, "limit.probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    try:
        n = 0
        start = time.perf_counter()
        while True:
            os.write(fd, RECORD)
            _fsync(fd)
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and n >= MIN_OPERATIONS:
                return n / elapsed
    finally:
        os.close(fd)
        os.unlink(path)


def _rate(operation: Any, seconds: float) -> float:
    """Calls of ``operation()`` per second, for ``seconds`` (or until it returns False)."""
    n = 0
    start = time.perf_counter()
    while True:
        if operation() is False:
            break
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and n >= MIN_OPERATIONS:
            break
    elapsed = time.perf_counter() - start
    return n / elapsed if elapsed > 0 else 0.0


def run_quick(where: str, seconds: float = DEFAULT_SECONDS) -> list[QuickFigure]:
    """Measure the quick figures in a scratch folder made inside ``where`` (removed afterwards)."""
    from ..queue import Queue

    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise ValueError(f"seconds must be from {MIN_SECONDS} to {MAX_SECONDS:g}, got {seconds!r}")
    scratch = tempfile.mkdtemp(prefix=".nobroker-bench-", dir=where)
    try:
        figures = []
        with Queue(os.path.join(scratch, "q"), auto_compact=None) as queue:
            disk = disk_limit(scratch)
            figures.append(QuickFigure("enqueue, 1 thread", _rate(lambda: queue.enqueue({"n": 1}), seconds), disk))
            # Enough ready jobs for the lease+ack figure at any rate this disk allows, in one fsync per batch.
            wanted = min(MAX_PREFILL, int(disk * seconds * 2) + MIN_OPERATIONS)
            for start in range(0, wanted, 10_000):
                queue.enqueue_many([{"n": 2}] * min(10_000, wanted - start))
            disk = disk_limit(scratch)

            def lease_and_ack() -> bool:
                job = queue.lease_one()
                if job is None:
                    return False
                queue.ack(job)
                return True

            figures.append(QuickFigure("lease_one + ack, 1 thread", _rate(lease_and_ack, seconds), disk))
        return figures
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def describe(where: str) -> str:
    """One line about the machine and the folder measured."""
    return (
        f"{os.cpu_count() or '?'} cores, Python {platform.python_version()}, {platform.system()}; "
        f"disk of {os.path.abspath(where)}"
    )


def report_lines(figures: list[QuickFigure], where: str) -> list[str]:
    """The human report: each figure, the disk's rate, and the ratio to read."""
    lines = [f"nobroker bench (quick): {describe(where)}"]
    for figure in figures:
        lines.append(
            f"  {figure.name:<28}{figure.per_second:>10,.0f} jobs/s   "
            f"{figure.ratio:5.2f} x this disk's append+fsync rate ({figure.disk_per_second:,.0f}/s)"
        )
    lines.append("Compare the ratios between machines; `python make.py bench` in a clone runs the full suites.")
    return lines
