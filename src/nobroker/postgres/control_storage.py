"""The control of jobs on PostgresStorage: snooze, pause, resume, paused, run_now, delete, wait_finished.

Owns: ControlStorage, the mixin of PostgresStorage that runs control_ops.py's
steps on its connections (the holder's snooze on the work's lanes, the
operator's calls on the second connection), and the finished channel's wait of
Queue.wait. Imports: jobs, storage, steps, connection, lanes, listener,
operations, control_ops.
"""

from __future__ import annotations

from ..jobs import Job
from ..storage import wait_until_finished
from . import control_ops
from . import operations as ops
from .connection import Link
from .lanes import Lanes
from .listener import Listener
from .steps import drive


class ControlStorage:
    """PostgresStorage's control of jobs (its connections and target are PostgresStorage's)."""

    schema: str
    _target: ops.Target
    _link: Link
    _lanes: Lanes
    _side: Link
    _finished_listener: Listener

    def get(self, job_id: str) -> Job:  # pragma: no cover - PostgresStorage's
        raise NotImplementedError

    def snooze(self, job_id: str, token: str | None, seconds: float) -> Job:
        # Not retried: a snooze that went through before the connection died would be refused the second time.
        sql, t = self.control_sql(), self._target
        return self._lanes.run("snooze", lambda c: drive(c, control_ops.snooze(t, sql, job_id, token, seconds)), retry=False)

    def pause(self, kind: str | None, resume: bool) -> None:
        sql, t = self.control_sql(), self._target
        self._side.run("resume" if resume else "pause", lambda c: drive(c, control_ops.pause(t, sql, kind, resume)), retry=True)

    def paused(self) -> list[str | None]:
        sql, t = self.control_sql(), self._target
        return self._side.run("paused", lambda c: drive(c, control_ops.paused(t, sql)), retry=True)

    def run_now(self, job_id: str) -> Job:
        sql, t = self.control_sql(), self._target
        return self._side.run("run_now", lambda c: drive(c, control_ops.run_now(t, sql, job_id)), retry=True)

    def delete(self, job_id: str) -> Job:
        # Not retried: a delete that went through before the connection died would say "not found" the second time.
        sql, t = self.control_sql(), self._target
        return self._side.run("delete", lambda c: drive(c, control_ops.delete(t, sql, job_id)), retry=False)

    def wait_finished(self, job_id: str, timeout: float) -> Job:
        """The job once it is done, dead or cancelled; TimeoutError at ``timeout`` (see storage.wait_until_finished).

        LISTENs (a connection of its own, opened on first use) on the queue's
        finished channel, then marks the job waited for: sql/008's triggers
        NOTIFY that channel when such a job finishes, whichever statement or
        host finishes it. If the listening connection cannot be had, it looks
        again every FINISH_RECHECK seconds (the polling fallback).
        """
        sql, t = self.control_sql(), self._target
        listener = self._finished_listener
        listener.listen()  # before the first look: a finish after it is heard
        marked: list[bool] = []

        def look() -> Job:
            if not marked:
                self._side.run("wait", lambda c: drive(c, control_ops.mark_waited(t, sql, job_id)), retry=True)
                marked.append(True)
            return self.get(job_id)

        return wait_until_finished(job_id, timeout, look, lambda seconds: listener.wait(seconds, None))

    def control_sql(self) -> control_ops.ControlStatements:
        sql: control_ops.ControlStatements | None = getattr(self, "_control_statements", None)
        if sql is None:
            sql = self._control_statements = control_ops.ControlStatements(self.schema)
        return sql
