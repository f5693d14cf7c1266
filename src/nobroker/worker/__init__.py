"""The Worker: runs a handler over leased jobs, concurrently and safely.

Owns nothing itself: it names the package's face (Worker, WorkerStats,
WorkQueue). The Worker speaks only the public Queue API, through the typed
protocol in protocol.py, so it runs unchanged on the file storage, on the
PostgreSQL storage and on any object that offers lease, ack, nack and
extend. Imports: protocol, outcome, joblines, worker.

The package, in its order (a module imports only modules above it):

    protocol.py   WorkQueue and the optional parts of a queue; QueueAccess calls them typed
    signals.py    StopSignals: the two-stage Ctrl-C / SIGTERM, shared with `nobroker work`
    interrupt.py  InterruptPipe: stop() ends an idle wait at once
    idling.py     how long an idle worker waits before it looks for work again
    outcome.py    WorkerStats; a handler's Outcome (result, or error and traceback)
    joblines.py   JobReport: what an on_job listener is told of each finished job
    options.py    the checks of a Worker's options and their limits
    madewith.py   MadeWith: the Worker's options, read back as read-only properties
    asyncloop.py  EventLoopThread: the one event loop of async handlers
    heartbeat.py  Running jobs and the thread that renews their leases
    acks.py       ack_batch: the acks of many finished jobs in one ack_many
    settle.py     Settler: ack or nack each job, count it in exactly one bucket
    timeouts.py   TimeLimits and the Watchdog: a handler past its time limit fails its attempt
    runners.py    HandlerThreads, or LoopTasks (async handlers as tasks); the SettlingThread
    slots.py      Slots: the jobs running and those not yet settled, under the Worker's lock
    budget.py     max_jobs shared by the processes of a pool: a pipe of tokens
    leasing.py    Leasing: what a lease may take, and a handler thread's lease of its own next job
    child.py      one forked worker process, from fork to exit; its reports
    pool.py       ProcessPool: forks, supervises and stops the worker processes
    ticks.py      the thread that enqueues due schedule ticks
    announce.py   Announcer: the worker's announcement, heartbeated, taken back at a clean stop
    worker.py     Worker: options, the leasing loop, stopping; processes= hands run() to the pool

Threads inside one running Worker:

* the thread that called ``run()`` leases jobs, as many at once as there are
  free slots, and idles in ``queue.wait_for_jobs`` when there is no work. With
  more than one slot it is the only thread that leases, so a busy worker
  makes few lease calls; with one slot, the handler thread leases its own
  next job once the last one succeeded (no wake-up of this thread and then
  of the handler thread per job), and this thread leases only after a
  failure, an empty queue or a stop;
* with a plain handler, ``concurrency`` handler threads each run one job at
  a time (a plain handler that returns an awaitable has it run on the event
  loop below while its thread waits); with an ``async def`` handler, no
  handler threads: each job is a task on one event-loop thread, at most
  ``concurrency`` at once;
* one settling thread acks every job that finished since its last write in
  one ack_many (one write, one fsync) and nacks the ones that failed, so a
  handler thread goes on to its next job at once and no storage call runs
  on the loop (with ``concurrency=1`` the handler thread settles its job
  itself: there is nobody to share a write with);
* one heartbeat thread renews the lease of every running job once a third of
  its visibility timeout has passed since the last renewal;
* with ``handle_signals`` in the main thread, one thread that turns the
  first stop signal into ``stop()`` (a signal handler itself must not take
  the Worker's locks).

With ``processes=N`` the thread that called ``run()`` forks N children and
supervises them (pool.py); each child runs a Worker of its own, with the
threads above. With time limits (timeouts.py), one watchdog thread more ends
the attempts of handler threads that run past theirs.
"""

from __future__ import annotations

from .joblines import JobReport
from .outcome import WorkerStats
from .protocol import WorkQueue
from .worker import Worker

__all__ = ["JobReport", "Worker", "WorkerStats", "WorkQueue"]
