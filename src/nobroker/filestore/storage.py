"""The file storage: one folder on local disk, one append-only log per queue.

Owns: FileStorage, the top layer (see the package's docstring): its
constructor, one short method per operation of the Storage protocol (the
decision from leases.py or the query from reads.py, run through the four
beats of commit.py), the folder fsync, waiting for work, closing, and giving
every storage fresh locks in a forked child. Imports: errors, jobs, storage,
framing, fs, wake, counting, leases, reads, roster, compactor, schedules,
schedule_ops, limits, limit_ops, control_records, control_ops, announcements.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from ..announcements import WorkerInfo
from ..errors import StorageError
from ..jobs import CompactionResult, Counters, Job, QueueStats, RecoveryReport
from ..limits import Limit
from ..schedules import Schedule, ScheduleSpec
from ..storage import EnqueueSpec, StorageOptions, wait_until_finished
from . import control_ops, control_records, counting, leases, limit_ops, reads, roster, schedule_ops
from .compactor import Compactor
from .framing import DEFAULT_FORMAT_VERSION, FORMAT_VERSIONS
from .fs import OS_FILESYSTEM, FileSystem, storage_error
from .wake import wait_for_change

T = TypeVar("T")

_live: weakref.WeakSet[FileStorage] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The parent's threads do not exist here: a mutex one of them held would
    # stay held forever. Give every storage fresh ones; the pid check reopens files.
    for storage in list(_live):
        storage._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class FileStorage(Compactor):
    """A queue kept in ``directory`` as ``<name>.NNNNNN.log`` files."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        options: StorageOptions,
        *,
        auto_compact: float | None = 0.5,
        filesystem: FileSystem | None = None,
        log_format: int = DEFAULT_FORMAT_VERSION,
    ) -> None:
        if log_format not in FORMAT_VERSIONS or type(log_format) is not int:
            raise ValueError(
                f"log_format is the version of the log's format to write: 4 (the default), 2 (as 4, with every "
                f"job's available_at written) or 1 (readable by nobroker 0.1.2), got {log_format!r}"
            )
        super().__init__(directory, options, filesystem or OS_FILESYSTEM, auto_compact)
        self.log_format = log_format
        self.visibility_timeout = options.visibility_timeout
        self.max_attempts = options.max_attempts
        self._lease_mark: int | None = None  # where the last lease's batch ended: wait_for_jobs watches past it
        self._open()
        _live.add(self)

    def _sync_directory(self) -> None:
        try:
            self.fs.fsync_dir(self.directory)
        except OSError as exc:
            raise storage_error(exc, "fsync of the queue folder", self.directory) from None

    def _write(self, decide: Callable[[Any, float], T], *, lazy: bool = False) -> T:
        """One writing operation through the four beats (Committer._commit), then an automatic compaction if due."""
        result, compact = self._commit(decide, lazy)
        if compact:
            self._auto_compact()
        self._maybe_checkpoint()
        return result

    # ================================================================ writing operations
    def enqueue(self, specs: Sequence[EnqueueSpec], conn: Any = None) -> list[Job]:
        if conn is not None:
            raise ValueError("conn= joins a PostgreSQL transaction; the file storage has no transactions to join")
        return self._write(lambda batch, now: leases.enqueue(batch, now, specs, self._job))

    def lease(self, count: int, visibility_timeout: float, kinds: frozenset[str] | None) -> list[Job]:
        def decide(batch: Any, now: float) -> list[Job]:
            taken = leases.lease(batch, now, count, visibility_timeout, kinds, self._payload)
            self._lease_mark = batch.pos
            return taken

        return self._write(decide, lazy=True)

    def ack(self, job_id: str, token: str | None, result_json: str | None, result: Any) -> None:
        self._write(partial(leases.ack, queue=self.name, job_id=job_id, token=token, result_json=result_json, result=result))

    def ack_many(self, items: list[tuple[str, str | None, str | None]]) -> None:
        self._write(partial(leases.ack_many, queue=self.name, items=items))

    def nack(
        self, job_id: str, token: str | None, error: str | None, delay: float | None, permanent: bool,
        traceback: str | None = None,
    ) -> Job:  # fmt: skip
        return self._write(
            partial(
                leases.nack, queue=self.name, backoff=self.backoff, job_id=job_id, token=token, error=error,
                delay=delay, permanent=permanent, traceback=traceback, payload_of=self._payload,
            )  # fmt: skip
        )

    def extend(self, job_id: str, token: str | None, seconds: float) -> Job:
        return self._write(partial(leases.extend, queue=self.name, job_id=job_id, token=token, seconds=seconds, payload_of=self._payload))

    def extend_many(self, items: list[tuple[str, str | None]], seconds: float) -> list[Job]:
        """Renew many leases in one write (one fsync); see leases.extend_many."""
        return self._write(partial(leases.extend_many, queue=self.name, items=items, seconds=seconds, payload_of=self._payload))

    def set_stage(self, job_id: str, token: str | None, stage: str | None) -> Job:
        return self._write(partial(leases.set_stage, queue=self.name, job_id=job_id, token=token, stage=stage, payload_of=self._payload))

    def requeue_dead(self, job_id: str | None) -> int:
        return self._write(partial(leases.requeue_dead, queue=self.name, job_id=job_id))

    def purge(self) -> int:
        return self._write(leases.purge)

    def now(self) -> float:
        return self.clock()

    def cancel(self, job_id: str, token: str | None, stopped: bool) -> Job:
        return self._write(partial(leases.cancel, queue=self.name, job_id=job_id, token=token, stopped=stopped, payload_of=self._payload))

    def snooze(self, job_id: str, token: str | None, seconds: float) -> Job:
        return self._write(
            partial(control_ops.snooze, queue=self.name, job_id=job_id, token=token, seconds=seconds, payload_of=self._payload)
        )

    def pause(self, kind: str | None, resume: bool) -> None:
        self._write(partial(control_ops.pause, kind=kind, resume=resume))

    def paused(self) -> list[str | None]:
        return self._read(lambda now: control_records.ordered(self._state.paused))

    def run_now(self, job_id: str) -> Job:
        return self._write(partial(control_ops.run_now, queue=self.name, job_id=job_id, payload_of=self._payload))

    def delete(self, job_id: str) -> Job:
        return self._write(partial(control_ops.delete, queue=self.name, job_id=job_id, job_of=self._job))

    def compact(self, *, progress: Callable[[int], None] | None = None) -> CompactionResult:
        """Rewrite the log without done jobs; waits for a peer's compaction first (see Compactor._compaction)."""
        result = self._compaction(progress, wait=True)
        assert result is not None
        return result

    # ================================================================ reads
    def get(self, job_id: str) -> Job:
        return self._read(lambda now: reads.get(self._state, self.name, job_id, now, self.backoff, self._job))

    def stats(self) -> QueueStats:
        return self._read(lambda now: reads.stats(self._state, now, self.backoff))

    def count(self) -> int:
        return self._read(lambda now: len(self._state))

    def counters(self) -> Counters:
        return self._read(lambda now: counting.by_kind(self._state.counters))

    # Worker announcements live beside the log, not in it (roster.py): no lock, no replay.
    def announce_worker(self, info: WorkerInfo) -> None:
        self._check_usable()
        now = time.monotonic()
        prune = now - getattr(self, "_roster_pruned", -roster.PRUNE_EVERY) >= roster.PRUNE_EVERY
        roster.announce(self.fs, self.directory, self.name, info, prune=prune)
        if prune:
            self._roster_pruned = now

    def retire_worker(self, worker_id: str) -> None:
        self._check_usable()
        roster.retire(self.fs, self.directory, self.name, worker_id)

    def workers(self) -> list[WorkerInfo]:
        self._check_usable()
        return roster.listed(self.fs, self.directory, self.name)

    def list_jobs(self, listing: str | None, limit: int | None, offset: int, kind: str | None) -> list[Job]:
        return self._read(
            lambda now: reads.list_jobs(self._state, listing, limit, offset, kind, now, self.backoff, self._job)
        )

    # ================================================================ schedules (periodic jobs)
    def put_schedule(self, spec: ScheduleSpec) -> Schedule:
        return self._write(partial(schedule_ops.put, spec=spec))

    def remove_schedule(self, name: str) -> bool:
        return self._write(partial(schedule_ops.remove, name=name))

    def list_schedules(self) -> list[Schedule]:
        return self._read(lambda now: schedule_ops.listed(self._state.schedules))

    def fire_schedules(self) -> list[Job]:
        # A shared-lock look first: most looks find nothing due and need no write (nor its fsync).
        # It is a writing operation all the same: a queue object that must refuse writes refuses it.
        with self._mutex:
            if not self._closed:
                self._check_usable()
        if not self._read(lambda now: schedule_ops.any_due(self._state.schedules, now)):
            return []
        return self._write(partial(schedule_ops.fire, max_attempts=self.max_attempts, job_of=self._job))

    # ================================================================ limits per kind
    def put_limit(self, limit: Limit) -> Limit:
        return self._write(partial(limit_ops.put, spec=limit))

    def remove_limit(self, kind: str) -> bool:
        return self._write(partial(limit_ops.remove, kind=kind))

    def list_limits(self) -> list[Limit]:
        return self._read(lambda now: limit_ops.listed(self._state))

    def seconds_to_slot(self, kinds: frozenset[str] | None) -> float | None:
        return self._read(lambda now: limit_ops.seconds_to_slot(self._state, now, kinds))

    def limit_holding(self, kind: str, group: str | None = None) -> str | None:
        return self._read(lambda now: limit_ops.holding(self._state, kind, now, group))

    # ================================================================ waiting and closing
    def wakes_waiters(self) -> bool:
        """Does wait_for_jobs hear of every change that can make a job leasable?

        True while this process holds the queue's named pipe open: writers of
        runnable work (from any process) wake it, and it computes when the
        next delayed job or lease comes due. Then an idle worker may block for
        long; False (no FIFOs here, or the pipe cannot be made) means poll.
        """
        return not self._closed and self._wake.open_reader()

    def wait_for_jobs(
        self, timeout: float, interrupt: int | None = None, kinds: frozenset[str] | None = None
    ) -> bool:
        """Block until work may have arrived, a delayed job or a lease comes due, or ``timeout``.

        A hint for idle workers, not a promise: True means "worth leasing
        again". Writers of runnable work wake one waiter through the queue's
        named pipe (see wake.py); a change in the log's size also counts, so
        appends by this process's own threads are seen even without the pipe.
        ``interrupt``: a descriptor that ends the wait (returning False) as
        soon as it is readable; it is never read. ``kinds``: the waiter takes
        only these, so it waits on the second pipe (``<name>.wake-kinds``).
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._mutex:
            if self._closed or self._log is None:
                return False
            # Compare with what the last lease saw, not with now: a job another
            # thread added since then must wake us at once.
            seen = self._lease_mark if self._lease_mark is not None else self._offset
            log, sig = self._log, self._pointer_sig
            now = self.clock()
            state = self._state
            due = [state.delayed[0][0]] if state.delayed else []
            if state.leases:
                due.append(state.leases[0][0])
            if state.limits:  # a spent rate limit has a token again (as of what this process last read)
                wait = limit_ops.seconds_to_slot(state, now, kinds)
                if wait is not None:
                    due.append(now + wait)
        if due:
            deadline = min(deadline, time.monotonic() + max(min(due) - now, 0.0))

        def changed() -> bool:
            try:
                return (
                    self._closed or log.closed or self._offset != seen or log.what_follows(seen) != 0
                    or self._pointer_signature() != sig
                )  # fmt: skip
            except (OSError, StorageError):
                return True

        return wait_for_change(self._wake if kinds is None else self._wake_kinds, changed, deadline, interrupt, due=bool(due))

    def wait_finished(self, job_id: str, timeout: float) -> Job:
        """The job once it is done, dead or cancelled; TimeoutError at ``timeout`` (see storage.wait_until_finished).

        Woken through the queue's third named pipe (``<name>.wake-finished``),
        which every write that finishes a job (ack, dead, cancel, delete,
        purge), in any process, writes to; where named pipes do not exist it
        looks again after every change of the log (a poll of its size).
        """
        self._wake_finished.open_reader()  # before the first look: a finish after it reaches us
        marks: list[tuple[Any, int, Any]] = []

        def look() -> Job:
            with self._mutex:  # what we have read so far: any write after this mark is a change
                marks[:] = [(self._log, self._offset, self._pointer_sig)]
            return self.get(job_id)

        def block(seconds: float) -> None:
            log, seen, sig = marks[0]

            def changed() -> bool:
                try:
                    return (
                        self._closed or log is None or log.closed or log.what_follows(seen) != 0
                        or self._pointer_signature() != sig
                    )  # fmt: skip
                except (OSError, StorageError):
                    return True

            wait_for_change(self._wake_finished, changed, time.monotonic() + seconds, None, due=False)

        return wait_until_finished(job_id, timeout, look, block)

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            # First: a checkpoint being written goes to the same .snap as the snapshot
            # below, and its state is older; it must not land after it.
            self._close_checkpoints()
            self._let_go()
            self._retiring.join()  # every file of ours closed before close returns
            if self._log is not None:
                if self.durable and os.getpid() == self._pid and self._log.failed is None and self.read_only is None:
                    try:
                        self._log.sync_through(self._log.written_end)
                    except StorageError:
                        pass
                    else:
                        self._save_snapshot()
                self._log.close()
            if self._lock is not None:
                self._lock.close()
            self._wake.close()
            self._wake_kinds.close()
            self._wake_finished.close()
        _live.discard(self)

    @property
    def location(self) -> str:
        return self.directory

    @property
    def recovery(self) -> RecoveryReport:
        return self._recovery

    @property
    def generation(self) -> int:
        assert self._log is not None
        return self._log.generation
