"""The model check's reference model: DESIGN.md section 3 written down as a dict of jobs.

Owns: RefModel (the semantics as plain code, with no code from nobroker's
replay: no cleverness, no indexes), the job it holds (MJob), ModelError
(what the real queue must raise, by class name), the backoff and the expiry
of a lease as the model computes them, and the options the model and the
real queue are both given (BACKOFF, MAX_ATTEMPTS). tests/modelrunner.py
drives it beside a real Queue; tests/test_model_check.py runs the check.
Imports: the standard library and nobroker's BackoffPolicy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from nobroker import BackoffPolicy

#: Backoff without jitter, so the model can compute every retry time.
BACKOFF = BackoffPolicy(base=1.0, factor=2.0, max_delay=300.0, jitter=0.0)
MAX_ATTEMPTS = 3


# ====================================================================== the model
@dataclass
class MJob:
    id: str
    payload: Any
    priority: int
    max_attempts: int
    available_at: float
    enqueued_at: float
    seq: int
    kind: str
    dedupe_key: str | None
    state: str = "ready"
    attempts: int = 0
    lease_deadline: float | None = None
    lease_token: str | None = None
    last_error: str | None = None
    stage: str | None = None
    result: Any = None
    traceback: str | None = None
    #: The token of the lease that finished a done job (not shown: a done job shows no lease).
    finished_token: str | None = None
    #: A leased job whose cancel was asked for (issue 15): its lease ends cancelled.
    cancel_requested: bool = False
    #: The job's time limit (issue 15), stored with it: an ENQUEUE key written only when set.
    timeout: float | None = None

    def view(self) -> dict[str, Any]:
        out = {
            "id": self.id, "payload": self.payload, "priority": self.priority, "state": self.state,
            "attempts": self.attempts, "max_attempts": self.max_attempts, "available_at": self.available_at,
            "enqueued_at": self.enqueued_at, "lease_deadline": self.lease_deadline,
            "lease_token": self.lease_token, "last_error": self.last_error, "kind": self.kind,
            "dedupe_key": self.dedupe_key, "stage": self.stage, "result": self.result, "traceback": self.traceback,
        }  # fmt: skip
        if self.cancel_requested:  # Job.to_dict shows it only when set
            out["cancel_requested"] = True
        if self.timeout is not None:  # likewise
            out["timeout"] = self.timeout
        return out


class ModelError(Exception):
    """What the model says the real queue must raise (by class name)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def backoff_delay(attempts: int) -> float:
    """DESIGN.md section 5: min(base * factor^(attempts-1), max_delay), no jitter here."""
    return min(BACKOFF.base * BACKOFF.factor ** max(attempts - 1, 0), BACKOFF.max_delay)


def reclaim_one(job: MJob, now: float) -> None:
    """A lease that expired counts as a failed attempt at its deadline: the backoff runs from there."""
    deadline = job.lease_deadline
    assert deadline is not None
    job.lease_deadline = None
    job.lease_token = None
    if job.cancel_requested:
        job.state, job.cancel_requested = "cancelled", False
    elif job.attempts >= job.max_attempts:
        job.state = "dead"
        job.last_error = f"lease expired on attempt {job.attempts} of {job.max_attempts}"
        job.traceback = None  # it went with the error this one replaces
    else:
        job.state = "ready"
        job.available_at = deadline + backoff_delay(job.attempts)


class RefModel:
    """The semantics of DESIGN.md section 3 as a dict of jobs. No cleverness, no indexes."""

    def __init__(self) -> None:
        self.jobs: dict[str, MJob] = {}
        self.next_seq = 1
        #: Periodic jobs (catch_up="all" only): name -> [every, payload, next due time].
        self.schedules: dict[str, list[Any]] = {}
        #: The paused kinds (None: the whole queue); a purge keeps them.
        self.paused: set[str | None] = set()
        #: Concurrency limits per kind (issue 16): kind -> most leased at once.
        self.limits: dict[str, int] = {}

    # -------- helpers
    def active_holder(self, kind: str, key: str | None) -> MJob | None:
        if key is None:
            return None
        for job in self.jobs.values():
            if job.kind == kind and job.dedupe_key == key and job.state in ("ready", "leased"):
                return job
        return None

    def reclaim(self, now: float) -> None:
        """Every write begins by turning expired leases into failed attempts (earliest first)."""
        expired = [j for j in self.jobs.values() if j.state == "leased" and j.lease_deadline <= now]  # type: ignore[operator]
        for job in sorted(expired, key=lambda j: (j.lease_deadline, j.seq)):
            reclaim_one(job, now)

    def as_of(self, now: float) -> RefModel:
        """What reads show at ``now``: the reclaims a write would make, made on a copy."""
        seen = RefModel()
        seen.jobs = {job_id: replace(job) for job_id, job in self.jobs.items()}
        seen.next_seq = self.next_seq
        seen.schedules = {name: list(s) for name, s in self.schedules.items()}
        seen.paused = set(self.paused)
        seen.limits = dict(self.limits)
        seen.reclaim(now)
        return seen

    def leased(self, job_id: str, token: str | None) -> MJob:
        job = self.jobs.get(job_id)
        if job is None:
            raise ModelError("JobNotFoundError")
        if job.state == "cancelled":
            raise ModelError("JobCancelledError")
        if job.state != "leased" or (token is not None and token != job.lease_token):
            raise ModelError("NotLeasedError")
        return job

    def not_cancelled(self, job: MJob) -> MJob:
        """Ack and nack of a leased job whose cancel was asked for are refused."""
        if job.cancel_requested:
            raise ModelError("JobCancelledError")
        return job

    # -------- operations (each write op starts with reclaim)
    def enqueue(self, now: float, spec: dict[str, Any], new_id: str) -> MJob:
        existing = self.jobs.get(spec["job_id"]) if spec["job_id"] is not None else None
        if existing is None:
            existing = self.active_holder(spec["kind"], spec["dedupe_key"])
        if existing is not None:
            return existing
        job = MJob(
            id=spec["job_id"] or new_id, payload=spec["payload"], priority=spec["priority"],
            max_attempts=spec["max_attempts"], available_at=now + spec["delay"], enqueued_at=now,
            seq=self.next_seq, kind=spec["kind"], dedupe_key=spec["dedupe_key"], timeout=spec.get("timeout"),
        )  # fmt: skip
        self.next_seq += 1
        self.jobs[job.id] = job
        return job

    def runnable(self, now: float, kinds: tuple[str, ...] | None) -> list[MJob]:
        if None in self.paused:
            return []
        ready = [
            j for j in self.jobs.values()
            if j.state == "ready" and j.available_at <= now and (kinds is None or j.kind in kinds)
            and j.kind not in self.paused
        ]  # fmt: skip
        return sorted(ready, key=lambda j: (-j.priority, j.seq))

    def leasable(self, now: float, kinds: tuple[str, ...] | None, count: int) -> list[MJob]:
        """The best ``count`` runnable jobs, none of a kind beyond its concurrency limit (counting those taken)."""
        leased: dict[str, int] = {}
        for job in self.jobs.values():
            if job.state == "leased":
                leased[job.kind] = leased.get(job.kind, 0) + 1
        out = []
        for job in self.runnable(now, kinds):
            if len(out) == count:
                break
            limit = self.limits.get(job.kind)
            if limit is not None and leased.get(job.kind, 0) >= limit:
                continue
            leased[job.kind] = leased.get(job.kind, 0) + 1
            out.append(job)
        return out

    def lease(self, now: float, job: MJob, vt: float, token: str) -> None:
        job.state = "leased"
        job.attempts += 1
        job.lease_token = token
        job.lease_deadline = now + vt
        job.stage = None

    def ack(self, job_id: str, token: str | None, result: Any) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.state == "done" and (token is None or token == job.finished_token):
            return
        job = self.not_cancelled(self.leased(job_id, token))
        job.state = "done"
        job.lease_deadline = None
        job.finished_token, job.lease_token = job.lease_token, None
        if result is not None:
            job.result = result

    def nack(
        self, now: float, job_id: str, token: str | None, error: str | None, delay: float | None, permanent: bool,
        traceback: str | None,
    ) -> MJob:  # fmt: skip
        job = self.not_cancelled(self.leased(job_id, token))
        job.lease_deadline = None
        job.lease_token = None
        job.last_error, job.traceback = error, traceback
        if permanent or job.attempts >= job.max_attempts:
            job.state = "dead"
        else:
            job.state = "ready"
            job.available_at = now + (backoff_delay(job.attempts) if delay is None else delay)
        return job

    def extend(self, now: float, job_id: str, token: str | None, seconds: float) -> MJob:
        job = self.leased(job_id, token)
        job.lease_deadline = now + seconds
        return job

    def extend_many(self, now: float, items: list[tuple[str, str | None]], seconds: float) -> list[MJob]:
        """Every lease that holds renewed; then the first refusal, as the real queue does."""
        renewed, first = [], None
        for job_id, token in items:
            try:
                renewed.append(self.extend(now, job_id, token, seconds))
            except ModelError as exc:
                first = first or exc
        if first is not None:
            raise first
        return renewed

    def set_stage(self, job_id: str, token: str | None, stage: str | None) -> MJob:
        job = self.leased(job_id, token)
        job.stage = stage
        return job

    def cancel(self, job_id: str, token: str | None, stopped: bool) -> MJob:
        job = self.jobs.get(job_id)
        if job is None:
            raise ModelError("JobNotFoundError")
        if job.state in ("done", "dead", "cancelled"):
            raise ModelError("JobFinishedError")
        if job.state == "leased" and not stopped:
            job.cancel_requested = True
            return job
        if job.state == "leased" and token is not None and token != job.lease_token:
            raise ModelError("NotLeasedError")
        job.state, job.cancel_requested = "cancelled", False
        job.lease_deadline = job.lease_token = None
        return job

    def snooze(self, now: float, job_id: str, token: str | None, seconds: float) -> MJob:
        job = self.not_cancelled(self.leased(job_id, token))
        job.state, job.attempts, job.available_at = "ready", job.attempts - 1, now + seconds
        job.lease_deadline = job.lease_token = None
        return job

    def run_now(self, now: float, job_id: str) -> MJob:
        job = self.jobs.get(job_id)
        if job is None:
            raise ModelError("JobNotFoundError")
        if job.state in ("done", "dead", "cancelled"):
            raise ModelError("JobFinishedError")
        if job.state == "leased":
            raise ModelError("JobStateError")
        job.available_at = min(job.available_at, now)
        return job

    def delete(self, job_id: str) -> MJob:
        job = self.jobs.get(job_id)
        if job is None:
            raise ModelError("JobNotFoundError")
        if job.state == "leased":
            raise ModelError("JobStateError")
        return self.jobs.pop(job_id)

    def requeue_dead(self, now: float, job_id: str | None) -> int:
        if job_id is not None:
            job = self.jobs.get(job_id)
            if job is None:
                raise ModelError("JobNotFoundError")
            if job.state != "dead":
                return 0
            candidates = [job]
        else:
            candidates = sorted((j for j in self.jobs.values() if j.state == "dead"), key=lambda j: j.seq)
        count = 0
        for job in candidates:
            holder = self.active_holder(job.kind, job.dedupe_key)
            if holder is not None and holder.id != job.id:
                if job_id is not None:
                    raise ModelError("ValueError")
                continue
            job.state = "ready"
            job.attempts = 0
            job.available_at = now
            count += 1
        return count

    def purge(self) -> int:
        n = len(self.jobs)
        self.jobs.clear()
        return n

    def schedule(self, now: float, name: str, every: float, payload: Any) -> float:
        """Define a schedule; the same definition again keeps its next due time. Returns it."""
        old = self.schedules.get(name)
        if old is None or old[:2] != [every, payload]:
            self.schedules[name] = [every, payload, now + every]
        return self.schedules[name][2]

    def enqueue_due(self, now: float) -> list[str]:
        """Every due tick, oldest first, at most 100 per schedule; the ids of the jobs it added."""
        added = []
        for name in sorted(self.schedules):
            every, payload, due = self.schedules[name]
            n = 0
            while due <= now and n < 100:
                job_id = f"tick:{name}@{round(due * 1000)}"
                if job_id not in self.jobs:
                    spec = {"job_id": job_id, "payload": payload, "priority": 0, "max_attempts": MAX_ATTEMPTS,
                            "delay": 0.0, "kind": "default", "dedupe_key": None}  # fmt: skip
                    self.enqueue(now, spec, job_id)
                    added.append(job_id)
                due, n = due + every, n + 1
            self.schedules[name][2] = due
        return added

    def compact(self) -> None:
        for job_id in [j.id for j in self.jobs.values() if j.state in ("done", "cancelled")]:
            del self.jobs[job_id]

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {j.id: j.view() for j in self.jobs.values()}

    def order(self) -> list[str]:
        return [j.id for j in sorted(self.jobs.values(), key=lambda j: j.seq)]
