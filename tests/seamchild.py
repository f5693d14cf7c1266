"""A child process for the real-seam checks: a real queue's workload, noting what it asked the seam.

Owns: the workload every real-seam check runs (a new queue, appends, a lease
and an ack, a compaction, a close) and ``AskingFileSystem``, RealFileSystem
noting each fsync / fsync_dir it is asked for. Imports: the standard library,
nobroker and tests.fsync_sites.

Run as ``python -m tests.seamchild DIR REPORT [FILE:LINE ...]``: the
workload runs in DIR with the given sites' OS calls switched off (for the
teeth test), and REPORT gets one line per request (``fsync PATH`` or
``fsync_dir PATH``, with the path the kernel knows the file by) and one per
site whose os.fsync / os.fdatasync ran (``site FILE:LINE``). tests/test_real_seam.py
runs it under strace and compares.
"""

from __future__ import annotations

import os
import sys

from nobroker import Queue
from nobroker.filestore.fs import RealFileSystem
from tests.fsync_sites import OsSyncCalls, Site


def kernel_path(fd: int) -> str:
    """The path the kernel shows for ``fd`` (what strace -y prints), or a placeholder off Linux."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"<fd {fd}>"


class AskingFileSystem(RealFileSystem):
    """The real seam, noting each request to make a file or a folder durable."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int]] = []  # (op, kernel path, descriptor or -1)

    def fsync(self, fd: int) -> None:
        self.requests.append(("fsync", kernel_path(fd), fd))
        super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        self.requests.append(("fsync_dir", os.path.realpath(path), -1))
        super().fsync_dir(path)


def workload(directory: str, fs: RealFileSystem) -> None:
    """Every kind of durable step the file storage takes: creation, appends, compaction's flip, close."""
    q = Queue(directory, "seam", filesystem=fs, auto_compact=None)
    q.enqueue({"n": 1})
    q.enqueue_many([{"n": i} for i in range(2, 6)])
    job = q.lease_one()
    assert job is not None
    q.ack(job, result={"ok": True})
    q.compact()
    q.enqueue({"n": "after the compaction"})
    q.close()


def main(argv: list[str]) -> int:
    directory, report, *switched = argv
    off: set[Site] = set()
    for item in switched:
        file, _, number = item.rpartition(":")
        off.add((file, int(number)))
    fs = AskingFileSystem()
    with OsSyncCalls(off=frozenset(off)) as calls:
        workload(directory, fs)
    with open(report, "w", encoding="utf-8") as f:
        for op, path, _fd in fs.requests:
            f.write(f"{op} {path}\n")
        for site_file, site_line in sorted(calls.sites()):
            f.write(f"site {site_file}:{site_line}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
