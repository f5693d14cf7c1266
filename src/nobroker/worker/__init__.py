"""The Worker: runs a handler over leased jobs, concurrently and safely.

Owns nothing itself: it names the package's face (Worker, WorkerStats,
WorkQueue). The Worker speaks only the public Queue API, through the typed
protocol in protocol.py, so it runs unchanged on the file storage, on the
PostgreSQL storage and on any object that offers lease, ack, nack and
extend. Imports: protocol, outcome, worker.

The package, in its order (a module imports only modules above it):

    protocol.py   WorkQueue and the optional parts of a queue; QueueAccess calls them typed
    signals.py    StopSignals: the two-stage Ctrl-C / SIGTERM, shared with `nobroker work`
    interrupt.py  InterruptPipe: stop() ends an idle wait at once
    outcome.py    WorkerStats; a handler's Outcome (result, or error and traceback)
    asyncloop.py  EventLoopThread: the one event loop of async handlers
    heartbeat.py  Running jobs and the thread that renews their leases
    acks.py       AckGatherer: acks from many threads share one ack_many
    settle.py     Settler: ack or nack each job, count it in exactly one bucket
    worker.py     Worker: options, the leasing loop, handler threads, stopping

Threads inside one running Worker:

* the thread that called ``run()`` leases jobs, as many at once as there are
  free handler slots, and idles in ``queue.wait_for_jobs`` when there is no
  work. It is the only thread that leases, so a busy worker makes few lease
  calls;
* ``concurrency`` handler threads each run one job at a time and ack or nack
  it themselves, so acks from many threads reach the queue together and the
  file storage can share one fsync between them (group commit);
* one heartbeat thread renews the lease of every running job once a third of
  its visibility timeout has passed since the last renewal;
* one event-loop thread, only when the handler is ``async``: the handler
  threads hand coroutines to it and wait, so at most ``concurrency``
  coroutines run at a time and acks still come from many threads;
* with ``handle_signals`` in the main thread, one thread that turns the
  first stop signal into ``stop()`` (a signal handler itself must not take
  the Worker's locks).

Later homes: pre-forked worker processes (``nobroker work --processes N``)
drive several of these Workers from the CLI and reuse signals.py; per-job
time limits and cancellation of running jobs belong with the handler threads
and the heartbeat.
"""

from __future__ import annotations

from .outcome import WorkerStats
from .protocol import WorkQueue
from .worker import Worker

__all__ = ["Worker", "WorkerStats", "WorkQueue"]
