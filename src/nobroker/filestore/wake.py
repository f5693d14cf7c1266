"""Waking idle workers in other processes, with nothing but a named pipe.

Owns: WakeChannel, one FIFO in the queue folder (the file storage keeps two:
``<name>.wake``, and ``<name>.wake-kinds`` for workers limited to some kinds),
``wait_for_change`` (an idle worker's wait: on the pipe where there is one,
by polling where not, until a change or a deadline), and ``pause``, an
interruptible sleep. Imports: waiting.

A worker with nothing to do blocks in poll() on the pipe; a writer that
added runnable work writes one byte, and one waiting worker wakes at once.
It is a hint, never a source of truth: a lost or spurious byte only costs a
lease attempt, or a delay until the waiter's timeout (the fallback look, a
few seconds for a Worker). Where FIFOs do not exist (Windows) or cannot be
made, both sides quietly do nothing and workers poll.

The reader opens the pipe read-write: then the pipe always has a writer, so
poll() never reports an end-of-file that would spin the loop.

Both sides check what they opened (fstat, after a non-blocking open) and use
it only if it really is a named pipe (the reader's also ours): a regular
file or anything else at that name is never written to nor read from; the
channel logs one warning and does nothing from then on (workers poll).

A waiter may also watch an ``interrupt`` descriptor of its own (the read end
of a private os.pipe()): whoever wants it back at once (Worker.stop(), a
signal handler) writes a byte there. The wait never reads it, so a stop stays
visible to every later wait.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable

from ..waiting import readable

logger = logging.getLogger("nobroker")

#: How long a writer that found no reader waits before it looks again; bounds
#: the cost of an enqueue when nobody is waiting to one failed open per period.
RETRY_OPEN = 0.05
#: Longest single sleep while an idle worker waits for work without a pipe (the fallback poll).
WAIT_POLL = 0.005
_FLAGS = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK


class WakeChannel:
    def __init__(self, path: str) -> None:
        self.path = path
        self._reader: int | None = None
        self._writer: int | None = None
        # Guards _writer and _retry_at: threads notify at once, and a writer closed by
        # one must never be written to (or closed again) by another: its number may
        # be reused by then, for a log or a snapshot.
        self._writer_lock = threading.Lock()
        self._retry_at = 0.0
        self._usable = hasattr(os, "mkfifo")
        #: Monotonic time from which every writer's notify reaches our reader.
        #: A writer that found no reader skips notifies for RETRY_OPEN, so the
        #: wake-ups sent just after we opened may never come.
        self.heard_from = 0.0

    # ---------------- the writer's side
    def notify(self) -> None:
        """Wake one waiting worker, if any. Never blocks, never raises."""
        if not self._usable or (self._writer is None and time.monotonic() < self._retry_at):
            return  # no reader lately (read without the lock: a hint either way; _notify looks again under it)
        with self._writer_lock:
            self._notify()

    def _notify(self) -> None:
        fd = self._writer
        if fd is None:
            now = time.monotonic()
            if now < self._retry_at:
                return
            if not self._looks_like_our_pipe(check_owner=False):
                return
            try:
                fd = os.open(self.path, os.O_WRONLY | _FLAGS)
            except OSError:  # no pipe yet, or nobody reading it
                self._retry_at = now + RETRY_OPEN
                return
            if not self._is_our_pipe(fd, check_owner=False):
                return
            self._writer = fd
        try:
            os.write(fd, b"\0")
        except BlockingIOError:
            pass  # the pipe is full of unread wake-ups: waiters will see work anyway
        except OSError:  # every reader went away
            self._close_writer()
            self._retry_at = time.monotonic() + RETRY_OPEN

    # ---------------- the waiter's side
    def open_reader(self) -> bool:
        """Make sure the pipe exists and we hold it open; False where that is impossible."""
        if self._reader is not None:
            return True
        if not self._usable:
            return False
        try:
            try:
                os.mkfifo(self.path, 0o600)
            except FileExistsError:
                pass
            if not self._looks_like_our_pipe(check_owner=True):
                return False
            fd = os.open(self.path, os.O_RDWR | _FLAGS)
        except OSError:
            self._usable = False
            return False
        if not self._is_our_pipe(fd, check_owner=True):
            return False
        self._reader = fd
        self.heard_from = time.monotonic() + RETRY_OPEN
        return True

    def _is_our_pipe(self, fd: int, *, check_owner: bool) -> bool:
        """Is ``fd`` a named pipe (ours, with ``check_owner``)? If not: close it and give the name up."""
        try:
            problem = _not_our_pipe(os.fstat(fd), check_owner)  # what was opened, whatever the name is now
        except OSError as exc:
            problem = f"unreadable ({exc})"
        if problem is None:
            return True
        _close_quietly(fd)
        self._give_up(problem)
        return False

    def _give_up(self, problem: str) -> None:
        """Something else sits at our name: never touch it again, and say so once."""
        self._usable = False
        logger.warning(
            "%s is %s: nobroker never writes to it; idle workers poll instead of being woken. "
            "Remove it and nobroker makes the pipe again.", self.path, problem,
        )  # fmt: skip

    def _looks_like_our_pipe(self, *, check_owner: bool) -> bool:
        """Before opening: a name that exists must be a named pipe, so nothing else is ever opened."""
        try:
            problem = _not_our_pipe(os.lstat(self.path), check_owner)
        except OSError:  # nothing there yet: the open fails, and is tried again later
            return True
        if problem is not None:
            self._give_up(problem)
            return False
        return True

    def drain(self) -> None:
        """Forget wake-ups sent while we were busy (the caller looks for work itself)."""
        if self._reader is None:
            return
        try:
            while os.read(self._reader, 4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                self._close_reader()

    def wait(self, timeout: float, interrupt: int | None = None) -> bool:
        """Block up to ``timeout`` seconds for a wake-up; True if one came.

        Returns False at once when ``interrupt`` is readable (and leaves it so).
        """
        if self._reader is None:
            pause(timeout, interrupt)
            return False
        fds = [self._reader] if interrupt is None else [self._reader, interrupt]
        try:
            ready = readable(fds, timeout)
        except (OSError, ValueError):  # never expected; sleep rather than spin
            pause(timeout, interrupt)
            return False
        if interrupt is not None and interrupt in ready:
            return False
        if ready:
            reader = self._reader  # None if another thread closed the channel meanwhile
            if reader is not None:
                try:
                    os.read(reader, 1)
                except OSError:
                    pass
            return True
        return False

    # ---------------- lifetime
    def forget_after_fork(self) -> None:
        """In a forked child: the inherited descriptors are the parent's business."""
        self._writer_lock = threading.Lock()  # a parent's thread may have held it at the fork
        self.close()

    def _close_reader(self) -> None:
        _close_quietly(self._reader)
        self._reader = None

    def _close_writer(self) -> None:
        _close_quietly(self._writer)
        self._writer = None

    def close(self) -> None:
        self._close_reader()
        with self._writer_lock:
            self._close_writer()


def _not_our_pipe(st: os.stat_result, check_owner: bool) -> str | None:
    """What is wrong with the file ``st`` describes as our wake pipe; None if nothing."""
    if not stat.S_ISFIFO(st.st_mode):
        return f"not a named pipe (mode {st.st_mode:o})"
    if check_owner and hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return f"a named pipe owned by uid {st.st_uid}, not by you"
    return None


def _close_quietly(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def pause(timeout: float, interrupt: int | None = None) -> bool:
    """Sleep up to ``timeout`` seconds, less if ``interrupt`` becomes readable; True if it did."""
    timeout = max(timeout, 0.0)
    if interrupt is not None:
        try:
            return bool(readable([interrupt], timeout))
        except (OSError, ValueError):  # not selectable here (a pipe on Windows): sleep instead
            pass
    time.sleep(timeout)
    return False


def wait_for_change(
    channel: WakeChannel, changed: Callable[[], bool], deadline: float, interrupt: int | None, *, due: bool
) -> bool:
    """Wait until ``changed()`` says so or a wake-up comes (True), or the monotonic ``deadline`` passes.

    At the deadline: ``due`` (it is when a delayed job or a lease comes due,
    worth leasing again). False at once when ``interrupt`` is readable.
    ``changed`` is asked first and after every wake-up or poll: a change in
    the log shows work that this process's own threads added too, even
    without the pipe.
    """
    piped = channel.open_reader()
    channel.drain()  # after this, any new work either changes what ``changed`` sees or sends a byte
    while True:
        if changed():
            return True
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            return due
        if piped:
            if now < channel.heard_from:
                # Writers that missed our pipe just now may skip their wake-up:
                # look again once they all write to it.
                remaining = min(remaining, channel.heard_from - now)
            if channel.wait(remaining, interrupt):
                return True
            if interrupt is not None and pause(0, interrupt):
                return False
        elif pause(min(WAIT_POLL, remaining), interrupt):
            return False
