"""The real seam keeps its promise: every fsync nobroker asks of RealFileSystem reaches the operating system.

Owns: the checks that the power-loss sweeps cannot make, since they run on
the simulated disk: each fsync and folder fsync a real queue asks of
RealFileSystem ends in an fsync / fdatasync of that very file or folder,
seen in this process (tests.fsync_sites.OsSyncCalls) and by the kernel,
under ``strace`` in a child (tests/seamchild.py); and the benchmark's disk
limit fdatasyncs after every append (else its "limit" column would be the
page cache's speed). Each check is a function the teeth test
(tests/test_fsync_teeth.py) also calls with sites switched off.
Imports: the standard library, nobroker, tests.fsync_sites,
tests.seamchild and tests.support.

strace exists on the CI machine and the development machine; elsewhere the
strace check skips with the reason, and in CI (``CI=1``) a missing or
unusable strace fails instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from nobroker.cli import bench as quickbench
from tests.fsync_sites import ROOT, OsSyncCalls, Site, inode_of
from tests.seamchild import AskingFileSystem, kernel_path, workload
from tests.support import IN_CI

ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + ROOT)
STRACE = shutil.which("strace")
#: A child under strace is slow on a loaded machine; this only bounds a hang.
CHILD_TIMEOUT = 180.0
_TRACE_LINE = re.compile(r"^\d+\s+(fsync|fdatasync)\(\d+<(.*)>\)\s*=\s*0\s*$")


@dataclass
class SeamResult:
    """What one run of a check found: requests made, those no OS call covered, sites whose OS call ran."""

    requests: int = 0
    unsynced: list[str] = field(default_factory=list)
    sites: set[Site] = field(default_factory=set)

    def violation(self) -> str | None:
        if self.requests == 0:
            return "the workload asked the seam for no fsync at all"
        return f"of {self.requests} requests, these reached no OS call: {self.unsynced[:3]}" if self.unsynced else None


class CheckedFileSystem(AskingFileSystem):
    """The real seam; after each request, checks that an OS call made that very inode durable."""

    def __init__(self, calls: OsSyncCalls) -> None:
        super().__init__()
        self.calls = calls
        self.unsynced: list[str] = []

    def fsync(self, fd: int) -> None:
        inode, before = inode_of(fd), len(self.calls.calls)
        super().fsync(fd)
        if not self.calls.synced(inode, before):
            self.unsynced.append(f"fsync of {kernel_path(fd)}")

    def fsync_dir(self, path: str) -> None:
        inode, before = inode_of(path), len(self.calls.calls)
        super().fsync_dir(path)
        if not any(c.inode == inode and c.is_dir for c in self.calls.calls[before:]):
            self.unsynced.append(f"fsync_dir of {path}")


@contextmanager
def scratch() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="nobroker-seam-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def in_process(off: frozenset[Site] = frozenset()) -> SeamResult:
    """The workload on RealFileSystem in this process, every os.fsync / os.fdatasync recorded."""
    with scratch() as root, OsSyncCalls(off=off) as calls:
        fs = CheckedFileSystem(calls)
        workload(os.path.join(root, "q"), fs)
    return SeamResult(len(fs.requests), fs.unsynced, calls.sites())


def strace_unusable() -> str | None:
    """Why the strace check cannot run here, or None."""
    if STRACE is None:
        return "strace is not installed"
    command = [STRACE, "-qq", "-e", "trace=fsync", sys.executable, "-c", "pass"]
    probe = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    if probe.returncode != 0:
        return f"strace cannot trace here: {probe.stderr.strip()[:200]}"
    return None


def under_strace(off: frozenset[Site] = frozenset()) -> SeamResult:
    """The workload in a child under ``strace -f -y``: the kernel's own list of fsync and fdatasync calls."""
    assert STRACE is not None
    with scratch() as root:
        report, trace = os.path.join(root, "requests"), os.path.join(root, "trace")
        command = [
            STRACE, "-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", "-e", "signal=none", "-o", trace,
            sys.executable, "-m", "tests.seamchild", os.path.join(root, "q"), report,
            *(f"{file}:{line}" for file, line in sorted(off)),
        ]  # fmt: skip
        child = subprocess.run(command, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
        if child.returncode != 0:
            raise AssertionError(f"the traced child failed ({child.returncode}): {child.stderr[-2000:]}")
        with open(report, encoding="utf-8") as f:
            lines = f.read().splitlines()
        with open(trace, encoding="utf-8", errors="replace") as f:
            synced = Counter(m.group(2) for m in map(_TRACE_LINE.match, f) if m)
    asked = [line.split(" ", 1) for line in lines if not line.startswith("site ")]
    sites = set()
    for line in lines:
        if line.startswith("site "):
            file, _, number = line[5:].rpartition(":")
            sites.add((file, int(number)))
    wanted = Counter(path for _op, path in asked)
    unsynced = [f"{n - synced[path]} of {n} syncs of {path}" for path, n in sorted(wanted.items()) if synced[path] < n]
    return SeamResult(len(asked), unsynced, sites)


def bench_limit(off: frozenset[Site] = frozenset()) -> SeamResult:
    """quickbench.disk_limit's appends (the limit beside every benchmark figure): each is synced before the next."""
    writes: list[tuple[tuple[int, int], int]] = []  # (inode, OS syncs so far)
    real_write = os.write
    with scratch() as root, OsSyncCalls(off=off) as calls:

        def counted(fd: int, data: Any) -> int:
            writes.append((inode_of(fd), len(calls.calls)))
            return real_write(fd, data)

        with mock.patch.object(quickbench.os, "write", counted):
            quickbench.disk_limit(root, seconds=0.0)
    ends = [w[1] for w in writes[1:]] + [len(calls.calls)]
    unsynced = [f"append #{i + 1}" for i, ((inode, start), end) in enumerate(zip(writes, ends))
                if not any(c.inode == inode for c in calls.calls[start:end])]  # fmt: skip
    return SeamResult(len(writes), unsynced, calls.sites())


#: Every check of this module as the teeth test calls it: name -> check(off).
CHECKS: dict[str, Callable[[frozenset[Site]], SeamResult]] = {
    "real seam, in process": in_process,
    "real seam, under strace": under_strace,
    "bench disk limit": bench_limit,
}


class RealSeam(unittest.TestCase):
    def assert_synced(self, result: SeamResult) -> None:
        self.assertIsNone(result.violation(), "RealFileSystem did not make durable what it was asked to")

    def test_every_request_reaches_an_os_call_on_that_inode(self) -> None:
        result = in_process()
        self.assert_synced(result)
        self.assertEqual({file for file, _line in result.sites}, {"filestore/fs.py"}, "only the seam may call the OS")

    def test_the_kernel_sees_every_fsync(self) -> None:
        why = strace_unusable()
        if why is not None:
            if IN_CI:
                self.fail(f"{why}: CI must run this check (install strace)")
            self.skipTest(why)
        result = under_strace()
        self.assert_synced(result)
        self.assertGreaterEqual(result.requests, 8, "the workload should create, append, compact and flip")

    def test_the_bench_limit_syncs_every_append(self) -> None:
        result = bench_limit()
        self.assert_synced(result)
        self.assertGreaterEqual(result.requests, quickbench.MIN_OPERATIONS)


if __name__ == "__main__":
    unittest.main()
