"""Waiting for file descriptors to become readable or writable, whatever their numbers.

Owns: ``ready`` (which of some descriptors can be read or written within a
timeout) and ``readable``. Imports: nothing from nobroker.

select() refuses a descriptor numbered FD_SETSIZE (1024) or more, and a
process that holds many files or sockets (a web server, a worker beside
one) gets such numbers for the pipes a queue opens later. poll() takes any
number; select() remains only where there is no poll() (Windows), whose
select() has no such limit. A descriptor that is not open raises
OSError(EBADF) either way.
"""

from __future__ import annotations

import errno
import select
from collections.abc import Sequence

_READ_EVENTS = getattr(select, "POLLIN", 0) | getattr(select, "POLLERR", 0) | getattr(select, "POLLHUP", 0)
_INVALID = getattr(select, "POLLNVAL", 0)
_WRITE_EVENTS = getattr(select, "POLLOUT", 0) | getattr(select, "POLLERR", 0) | getattr(select, "POLLHUP", 0)


def ready(readers: Sequence[int], writers: Sequence[int], timeout: float | None) -> tuple[set[int], set[int]]:
    """Which of ``readers`` have bytes (or an end of file) to read, and which of ``writers`` take bytes, within ``timeout`` seconds (None: no limit)?"""
    wait = None if timeout is None else max(timeout, 0.0)
    if not hasattr(select, "poll"):
        can_read, can_write, _ = select.select(readers, writers, [], wait)
        return set(can_read), set(can_write)
    poller = select.poll()
    for fd in readers:
        poller.register(fd, _READ_EVENTS)
    for fd in writers:
        poller.register(fd, _WRITE_EVENTS | (_READ_EVENTS if fd in readers else 0))
    events = poller.poll(None if wait is None else wait * 1000.0)
    if any(mask & _INVALID for _fd, mask in events):
        raise OSError(errno.EBADF, "a descriptor waited on is not open")  # as select() says it
    reading, writing = set(readers), set(writers)
    return {fd for fd, _ in events if fd in reading}, {fd for fd, _ in events if fd in writing}


def readable(fds: Sequence[int], timeout: float | None) -> set[int]:
    """Which of ``fds`` have bytes (or an end of file) to read within ``timeout`` seconds?"""
    return ready(fds, (), timeout)[0]
