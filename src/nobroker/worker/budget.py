"""``max_jobs`` shared by the processes of a pool: a pipe of tokens, one byte per lease.

Owns: BudgetFeed (the parent's end: the tokens not yet handed out, written
into the pipe as it has room) and LeaseBudget (a child's end: tokens taken
before each lease call, what a lease did not use kept for the next).
Imports: nothing from nobroker.

Why a pipe: reads from a pipe are atomic, so two children never take the
same byte, and no lock is shared between processes. The parent closes its
end once every token is in the pipe, so a child reads end-of-file exactly
when the budget is spent, and never earlier: a pipe that is only empty for
now (the parent has not refilled it yet) reads as "try again". A child keeps
the tokens a lease did not use (at most its concurrency), so every lease of
the pool is paid for by exactly one token: ``max_jobs`` counts leases across
every process, as it counts one Worker's.
"""

from __future__ import annotations

import os
import select

#: Most tokens one write puts in the pipe (a pipe holds 16-64 KiB).
FEED_CHUNK = 4096
#: Longest a child waits for the parent to refill an empty pipe before its leasing loop looks around.
REFILL_WAIT = 0.05


class BudgetFeed:
    """The parent's end: ``total`` tokens, fed into the pipe as it has room."""

    def __init__(self, total: int) -> None:
        assert total >= 1, "a budget of at least one lease"
        self.read_fd, write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(write_fd, False)
        self._write_fd: int | None = write_fd
        self._pending = total

    @property
    def write_fd(self) -> int | None:
        """The end to wait on for room, while tokens are still to be written; None once all are in."""
        return self._write_fd

    def feed(self) -> None:
        """Write as many tokens as the pipe takes now; close the end once none are left to write."""
        while self._write_fd is not None and self._pending > 0:
            try:
                written = os.write(self._write_fd, b"\0" * min(self._pending, FEED_CHUNK))
            except BlockingIOError:
                return
            self._pending -= written
            assert self._pending >= 0, "never more tokens than the budget"
        if self._write_fd is not None and self._pending == 0:
            os.close(self._write_fd)
            self._write_fd = None

    def close(self) -> None:
        for fd in (self.read_fd, self._write_fd):
            if fd is not None:
                os.close(fd)
        self._write_fd = None

    def parent_only(self) -> list[int]:
        """What a child must close at once: the write end, while the parent still has it (else no end of file)."""
        return [] if self._write_fd is None else [self._write_fd]


class LeaseBudget:
    """A child's end. ``take(n)``: how many it may lease now; ``keep(n)``: tokens a lease did not use.

    ``take`` returns None once the budget is spent (the worker then stops),
    0 when the pipe is empty for now (the worker looks again in a moment).
    Used under the Worker's leasing lock only (its leasing loop, or a handler thread leasing its next job).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._reserve = 0
        self._spent = False

    def take(self, wanted: int) -> int | None:
        assert wanted >= 1, "asks for at least one lease"
        if self._reserve >= wanted:
            self._reserve -= wanted
            return wanted
        data = b""
        if not self._spent:
            try:
                data = os.read(self._fd, wanted - self._reserve)
                self._spent = not data  # end of file: the parent wrote every token and they are taken
            except BlockingIOError:  # empty for now: the parent refills it
                if self._reserve == 0:
                    select.select([self._fd], [], [], REFILL_WAIT)
                    return 0
        granted, self._reserve = self._reserve + len(data), 0
        if granted == 0:
            return None
        return granted

    def keep(self, unused: int) -> None:
        assert unused >= 0, "a lease never returns more jobs than asked for"
        self._reserve += unused

    def close(self) -> None:
        os.close(self._fd)
