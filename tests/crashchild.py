"""A child process for the crash tests: runs a workload, says what was acknowledged, dies.

Run as ``python -m tests.crashchild DIR MODE SEED``. Every line it prints
is flushed at once: ``enq ID`` after enqueue returned and ``ack ID`` after
ack returned are promises the queue made; ``acking ID`` comes before an ack
is attempted (after it, a compaction may rightly drop the job). Modes:
  loop              enqueue/lease/ack/nack/snooze/pause/resume/compact until the parent SIGKILLs it
  die-in-write:N    the N-th pwrite writes half its bytes, then the process dies
  die-in-compact:N  during a compaction, the N-th file operation kills the process
"""

from __future__ import annotations

import os
import random
import sys

from nobroker import Queue
from nobroker.filestore.fs import RealFileSystem


class DyingFileSystem(RealFileSystem):
    """The real disk, except that one chosen operation kills the process."""

    def __init__(self, die_on_write: int = 0, die_on_op: int = 0) -> None:
        self.writes = 0
        self.ops = 0
        self.die_on_write = die_on_write
        self.die_on_op = die_on_op
        self.counting_ops = False

    def _tick(self) -> None:
        if self.counting_ops:
            self.ops += 1
            if self.ops == self.die_on_op:
                os._exit(9)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self.writes += 1
        self._tick()
        if self.writes == self.die_on_write and len(data) > 1:
            super().pwrite(fd, bytes(data[: len(data) // 2]), offset)
            os._exit(9)
        return super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        self._tick()
        super().fsync(fd)

    def replace(self, src: str, dst: str) -> None:
        self._tick()
        super().replace(src, dst)

    def fsync_dir(self, path: str) -> None:
        self._tick()
        super().fsync_dir(path)

    def unlink(self, path: str) -> None:
        self._tick()
        super().unlink(path)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    directory, mode, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    fs = DyingFileSystem()
    if mode.startswith("die-in-write:"):
        fs.die_on_write = int(mode.split(":")[1])
    elif mode.startswith("die-in-compact:"):
        fs.die_on_op = int(mode.split(":")[1])
    q = Queue(directory, filesystem=fs, visibility_timeout=0.5, auto_compact=None)
    say("ready")
    n = 0
    while True:
        n += 1
        roll = rng.random()
        if roll < 0.45:
            job = q.enqueue({"n": n, "pad": "p" * rng.randrange(0, 300)})
            say(f"enq {job.id}")
        elif roll < 0.55:
            jobs = q.enqueue_many([{"n": n, "i": i} for i in range(rng.randrange(1, 20))])
            for job in jobs:
                say(f"enq {job.id}")
        elif roll < 0.9:
            job = q.lease_one()
            if job is not None:
                if rng.random() < 0.8:
                    say(f"acking {job.id}")  # from here on, compaction may drop it
                    q.ack(job)
                    say(f"ack {job.id}")
                elif rng.random() < 0.5:
                    q.nack(job, error="retry", delay=0.0)
                else:
                    q.snooze(job, 0.0)  # SNOOZE: ready again, its attempt given back
        elif not mode.startswith("die-in-compact:") and roll < 0.92:
            (q.pause if rng.random() < 0.5 else q.resume)("other")  # PAUSE, RESUME (of a kind no job has)
        elif mode.startswith("die-in-compact:") or roll < 0.95:
            fs.counting_ops = mode.startswith("die-in-compact:")
            q.compact()
            fs.counting_ops = False
            say("compacted")
            if mode.startswith("die-in-compact:"):
                say("survived")  # the chosen op was past the end of compaction
                return


if __name__ == "__main__":
    main()
