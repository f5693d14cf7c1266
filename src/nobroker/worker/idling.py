"""How long a Worker's leasing thread idles when it found nothing to lease.

Owns: IDLE_RECHECK and ``idle_wait`` (one wait's length, from the worker's
state; None once idle_timeout has run out). Imports: nothing from nobroker.

Idling: with nothing to lease, the run() thread blocks in the queue's
``wait_for_jobs``. When the queue says writers wake its waiters
(``wakes_waiters()``: the file storage with its named pipe) one wait lasts up
to IDLE_RECHECK, a safety net for a lost wake-up; otherwise (PostgreSQL, no
named pipes, a worker limited to some kinds, jobs still running) it lasts
``poll_interval``. Such a queue also takes ``wait_for_jobs(timeout,
interrupt=fd, kinds=...)``: the worker passes the read end of a private pipe
that stop() writes to (interrupt.py), so a long wait ends at once when
asked, and its kinds, so a worker limited to some kinds does not swallow the
wake-up meant for one that takes them all.
"""

from __future__ import annotations

#: Longest idle wait when the queue wakes its waiters itself (``wakes_waiters``):
#: writers of runnable work wake the worker at once and the queue shortens the
#: wait for delayed jobs and leases coming due, so this only bounds how long a
#: lost wake-up, or a lease another process took during the wait and let
#: expire, could leave work unnoticed.
IDLE_RECHECK = 2.0


def idle_wait(
    poll_interval: float, *, busy: bool, woken: bool, idle_for: float, idle_timeout: float | None
) -> float | None:
    """Seconds to idle now; None once ``idle_timeout`` has run out (the worker then stops).

    ``busy``: jobs still run (a job that finishes does not end the wait, so
    the wait stays short, and idle_timeout counts from when the last one
    ended). ``woken``: the queue wakes this worker when work arrives.
    ``idle_for``: seconds since nothing ran.
    """
    if busy:
        return poll_interval
    wait = max(poll_interval, IDLE_RECHECK) if woken else poll_interval
    if idle_timeout is None:
        return wait
    if idle_for >= idle_timeout:
        return None
    return min(wait, idle_timeout - idle_for)


__all__ = ["IDLE_RECHECK", "idle_wait"]
