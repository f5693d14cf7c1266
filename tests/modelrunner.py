"""The model check's runner: a real Queue on a simulated disk and the reference model, driven step by step.

Owns: Runner (each step made on the real queue and on the RefModel; after
it, every job, the stats, the DLQ, a page of the ready list, the pauses,
the schedules, the limits and the order compared through every handle;
after a power cut, the leases no fsync covered taken back from the model),
Mismatch (what it raises when they differ), and the options only the real
queue's side needs (VISIBILITY, KINDS). Imports: the standard library,
nobroker (its public API and MAX_ATTEMPT_HISTORY), tests.refmodel,
tests.simdisk and tests.support.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from nobroker import JobNotFoundError, JobStateError, NotLeasedError, Queue
from nobroker.jobs import MAX_ATTEMPT_HISTORY
from tests.refmodel import BACKOFF, MAX_ATTEMPTS, MJob, ModelError, RefModel
from tests.simdisk import POWER_CUT_MODES, SimDisk, fresh_queue_path
from tests.support import FakeClock

VISIBILITY = 30.0
KINDS = ("default", "mail", "report")


class Mismatch(AssertionError):
    pass


class Runner:
    """Drives one real Queue (on a SimDisk) and the RefModel with the same steps."""

    def __init__(self, seed: int, handles: int = 1) -> None:
        self.seed = seed
        self.handles = handles
        self.disk = SimDisk()
        self.path = fresh_queue_path(self.disk, random.Random(seed))
        self.clock = FakeClock()
        self.model = RefModel()
        self.tokens: dict[str, list[str]] = {}
        self.leases: dict[str, Any] = {}  # id -> the Job the last lease returned
        self.queues = [self.open() for _ in range(handles)]
        self.q = self.queues[0]
        self.steps_run = 0
        #: The model's jobs before each lease since the last fsynced write: what a power cut may bring back.
        self.unsynced: list[dict[str, MJob]] = []

    def open(self) -> Queue:
        return Queue(
            self.path, filesystem=self.disk, clock=self.clock, backoff=BACKOFF,
            visibility_timeout=VISIBILITY, max_attempts=MAX_ATTEMPTS, auto_compact=None,
        )  # fmt: skip

    def close(self) -> None:
        for q in self.queues:
            q.close()

    # -------- checking
    def compare(self, where: str) -> None:
        for i, q in enumerate(self.queues):
            self.compare_one(q, where if len(self.queues) == 1 else f"{where}, seen by handle {i}")

    def compare_one(self, q: Queue, where: str) -> None:
        real = {j.id: j for j in q.list_jobs()}
        now = self.clock()
        seen = self.model.as_of(now)  # reads show expired leases as their reclaim, before any write
        want = seen.snapshot()
        if set(real) != set(want):
            raise Mismatch(f"{where}: job ids differ: only real {sorted(set(real) - set(want))}, only model {sorted(set(want) - set(real))}")
        for job_id, expected in want.items():
            got = real[job_id].to_dict()
            got.pop("seq")
            # The attempt history (issue 15) is not modelled field by field: its invariants are.
            history = got.pop("attempt_history", [])
            running = [a for a in history if a["outcome"] == "running"]
            if len(history) > MAX_ATTEMPT_HISTORY or (running and history[-1]["outcome"] != "running") or (
                bool(running) != (got["state"] == "leased")  # every lease is recorded with its worker
            ) or len(running) > 1:
                raise Mismatch(f"{where}: job {job_id} has an attempt history that cannot be: {history}")
            if got != expected:
                diff = {k: (got.get(k), expected.get(k)) for k in expected if got.get(k) != expected.get(k)}
                raise Mismatch(f"{where}: job {job_id} differs (real, model): {diff}")
        counts = {"ready": 0, "delayed": 0, "leased": 0, "done": 0, "dead": 0, "cancelled": 0}
        for job in seen.jobs.values():
            if job.state == "ready" and job.available_at > now:
                counts["delayed"] += 1
            else:
                counts[job.state] += 1
        if not counts["cancelled"]:
            del counts["cancelled"]  # to_dict shows it only once some job is
        stats = q.stats().to_dict()
        stats.pop("total")
        if stats != counts:
            raise Mismatch(f"{where}: stats() says {stats}, the model counts {counts}")
        dead = [j for j in seen.order() if seen.jobs[j].state == "dead"]
        if [j.id for j in q.dlq()] != dead:
            raise Mismatch(f"{where}: dlq() lists {[j.id for j in q.dlq()]}, the model {dead}")
        ready = [j for j in seen.order() if seen.jobs[j].state == "ready"]
        page = [j.id for j in q.list_jobs("ready", limit=2, offset=1)]
        if page != ready[1:3]:
            raise Mismatch(f"{where}: list_jobs('ready', limit=2, offset=1) is {page}, the model {ready[1:3]}")
        paused = sorted(self.model.paused, key=lambda k: (k is not None, k or ""))
        if q.paused() != paused:
            raise Mismatch(f"{where}: paused() is {q.paused()}, the model {paused}")
        schedules = {s.name: s.next_run for s in q.schedules()}
        if schedules != {name: s[2] for name, s in self.model.schedules.items()}:
            raise Mismatch(f"{where}: schedules {schedules}, the model {self.model.schedules}")
        limits = {lim.kind: lim.concurrency for lim in q.limits()}
        if limits != self.model.limits:
            raise Mismatch(f"{where}: limits {limits}, the model {self.model.limits}")
        if len(q) != len(self.model.jobs):
            raise Mismatch(f"{where}: len() is {len(q)}, the model holds {len(self.model.jobs)} jobs")
        real_order = [j.id for j in sorted(real.values(), key=lambda j: j.seq)]
        if real_order != self.model.order():
            raise Mismatch(f"{where}: seq order differs: real {real_order}, model {self.model.order()}")

    @staticmethod
    def assertRaisesLike(kind: type[BaseException], where: str) -> Any:
        """A context that requires ``kind`` to be raised (a Mismatch if it is not)."""
        import contextlib

        @contextlib.contextmanager
        def check() -> Any:
            try:
                yield
            except kind:
                return
            raise Mismatch(f"{where}: expected {kind.__name__}, the call went through")

        return check()

    def expect(self, where: str, model_call: Any, real_call: Any) -> tuple[Any, Any]:
        """Run the model and the real call; both must succeed, or raise the same error class."""
        try:
            want = model_call()
            want_err = None
        except ModelError as exc:
            want, want_err = None, exc.kind
        try:
            got = real_call()
            got_err = None
        except (NotLeasedError, JobNotFoundError, JobStateError, ValueError) as exc:
            got, got_err = None, type(exc).__name__
        if want_err != got_err:
            raise Mismatch(f"{where}: model says {want_err or 'success'}, real queue says {got_err or 'success'}")
        return want, got

    # -------- one step
    def pick(self, r: random.Random, states: tuple[str, ...] | None = None) -> str | None:
        ids = [j for j in self.model.order() if states is None or self.model.jobs[j].state in states]
        return r.choice(ids) if ids else None

    def step(self, i: int, op: str, arg: int) -> None:
        r = random.Random(arg)
        self.q = self.queues[arg % len(self.queues)]  # with several handles, any of them may act
        m, q, where = self.model, self.q, f"step {i} ({op})"
        now = self.clock()
        before_lease = {k: replace(v) for k, v in m.jobs.items()} if op == "lease" else None
        if op in ("enqueue", "enqueue_many"):
            n = 1 if op == "enqueue" else r.randint(1, 4)
            specs = []
            for _ in range(n):
                reuse = self.pick(r) if r.random() < 0.15 else None
                specs.append({
                    "payload": {"n": r.randrange(1000), "s": "x" * r.randrange(4)},
                    "priority": r.choice((0, 0, 1, 5, -1)),
                    "delay": r.choice((0.0, 0.0, 0.0, 5.0, 60.0)),
                    "max_attempts": r.choice((MAX_ATTEMPTS, 1, 2)),
                    "job_id": reuse or (f"id-{r.randrange(50)}" if r.random() < 0.2 else None),
                    "kind": r.choice(KINDS),
                    "dedupe_key": r.choice((None, None, None, "k1", "k2")),
                    "timeout": r.choice((None, None, 2.5)),
                })  # fmt: skip
            # Everything in one batch shares the kind/priority/delay/max_attempts of enqueue_many's signature.
            if op == "enqueue_many":
                for s in specs[1:]:
                    for key in ("priority", "delay", "max_attempts", "kind", "timeout"):
                        s[key] = specs[0][key]
                first = specs[0]
                real_jobs = q.enqueue_many(
                    [s["payload"] for s in specs], priority=first["priority"], delay=first["delay"],
                    max_attempts=first["max_attempts"], job_ids=[s["job_id"] for s in specs], kind=first["kind"],
                    dedupe_keys=[s["dedupe_key"] for s in specs], timeout=first["timeout"],
                )  # fmt: skip
            else:
                s = specs[0]
                real_jobs = [q.enqueue(
                    s["payload"], priority=s["priority"], delay=s["delay"], max_attempts=s["max_attempts"],
                    job_id=s["job_id"], kind=s["kind"], dedupe_key=s["dedupe_key"], timeout=s["timeout"],
                )]  # fmt: skip
            m.reclaim(now)
            for s, real in zip(specs, real_jobs):
                want = m.enqueue(now, s, real.id)
                if real.id != want.id:
                    raise Mismatch(f"{where}: enqueue returned job {real.id}, model expects {want.id}")
        elif op == "lease":
            count = r.randint(1, 3)
            vt = r.choice((VISIBILITY, 5.0, 100.0))
            kinds = r.choice((None, None, ("mail",), ("default", "report")))
            got = q.lease(count, visibility_timeout=vt, kinds=kinds)
            m.reclaim(now)
            want = m.leasable(now, kinds, count)
            if [j.id for j in got] != [j.id for j in want]:
                raise Mismatch(f"{where}: leased {[j.id for j in got]}, model expects {[j.id for j in want]}")
            for real, mj in zip(got, want):
                m.lease(now, mj, vt, real.lease_token)
                self.tokens.setdefault(real.id, []).append(real.lease_token)
                self.leases[real.id] = real
        elif op in ("ack", "ack_by_id", "nack", "extend", "set_stage"):
            job_id = self.pick(r, ("leased", "done")) if r.random() < 0.9 else self.pick(r)
            if job_id is None:
                job_id = "no-such-job"
            held = self.leases.get(job_id)
            token = None if (op == "ack_by_id" or held is None or r.random() < 0.1) else held.lease_token
            ref = held if token is not None else job_id

            def model_op() -> Any:
                m.reclaim(now)
                if op in ("ack", "ack_by_id"):
                    return m.ack(job_id, token, result)
                if op == "nack":
                    return m.nack(now, job_id, token, error, delay, permanent, traceback)
                if op == "extend":
                    return m.extend(now, job_id, token, seconds)
                return m.set_stage(job_id, token, stage)

            result = r.choice((None, {"ok": r.randrange(9)}))
            error = r.choice((None, "boom", "timeout"))
            delay = r.choice((None, None, 0.0, 10.0))
            permanent = r.random() < 0.15
            traceback = None if error is None else f"Traceback (most recent call last):\n{error}\n"
            seconds = r.choice((1.0, 30.0, 90.0))
            stage = r.choice(("fetch", "send", None))
            if op in ("ack", "ack_by_id"):
                self.expect(where, model_op, lambda: q.ack(ref, result=result))
            elif op == "nack":
                self.expect(
                    where, model_op, lambda: q.nack(ref, error=error, delay=delay, permanent=permanent, traceback=traceback)
                )
            elif op == "extend":
                self.expect(where, model_op, lambda: q.extend(ref, seconds))
            else:
                self.expect(where, model_op, lambda: q.set_stage(ref, stage))
        elif op == "extend_many":
            refs: list[Any] = []
            items: list[tuple[str, str | None]] = []
            for _ in range(r.randint(1, 3)):
                job_id = self.pick(r, ("leased", "done")) or "no-such-job"
                held = self.leases.get(job_id)
                token = None if held is None or r.random() < 0.1 else held.lease_token
                refs.append(held if token is not None else job_id)
                items.append((job_id, token))
            seconds = r.choice((1.0, 30.0, 90.0))

            def model_many() -> Any:
                m.reclaim(now)
                return m.extend_many(now, items, seconds)

            self.expect(where, model_many, lambda: q.extend_many(refs, seconds))
        elif op == "ack_stale":
            candidates = [(jid, toks[0]) for jid, toks in self.tokens.items() if len(toks) > 1 or jid not in m.jobs]
            if not candidates:
                return
            job_id, token = r.choice(sorted(candidates))
            stale = self.leases[job_id].__class__(**{**self.leases[job_id].__dict__, "lease_token": token})

            def model_stale() -> None:
                m.reclaim(now)
                m.ack(job_id, token, None)

            self.expect(where, model_stale, lambda: q.ack(stale))
        elif op == "ack_unknown":
            def model_unknown() -> None:
                m.reclaim(now)
                raise ModelError("JobNotFoundError")

            self.expect(where, model_unknown, lambda: q.ack("never-enqueued"))
        elif op == "cancel":
            job_id = self.pick(r, ("ready", "leased")) if r.random() < 0.85 else self.pick(r)
            if job_id is None:
                job_id = "no-such-job"
            held = self.leases.get(job_id)
            stopped = r.random() < 0.4
            token = held.lease_token if held is not None and r.random() < 0.8 else None
            ref = held if token is not None else job_id

            def model_cancel() -> MJob:
                m.reclaim(now)
                return m.cancel(job_id, token, stopped)

            self.expect(where, model_cancel, lambda: q.cancel(ref, stopped=stopped))
        elif op == "snooze":
            job_id = self.pick(r, ("leased",)) if r.random() < 0.9 else self.pick(r)
            job_id = job_id or "no-such-job"
            held = self.leases.get(job_id)
            token = held.lease_token if held is not None and r.random() < 0.85 else None
            ref = held if token is not None else job_id
            seconds = r.choice((0.0, 5.0, 60.0, -1.0))
            if seconds < 0:  # refused by the Queue before anything is written: no write, no fsync
                with self.assertRaisesLike(ValueError, where):
                    q.snooze(ref, seconds)
                op = "tick"
            else:

                def model_snooze() -> MJob:
                    m.reclaim(now)
                    return m.snooze(now, job_id, token, seconds)

                self.expect(where, model_snooze, lambda: q.snooze(ref, seconds))
        elif op == "pause":
            kind = r.choice((None, "mail", "report", "default", "mail"))
            resume = r.random() < 0.6
            (q.resume if resume else q.pause)(kind)
            m.reclaim(now)
            (m.paused.discard if resume else m.paused.add)(kind)
        elif op in ("run_now", "delete"):
            job_id = self.pick(r, ("ready",)) if r.random() < 0.7 else self.pick(r)
            job_id = job_id or "no-such-job"

            def model_control() -> MJob:
                m.reclaim(now)
                return m.run_now(now, job_id) if op == "run_now" else m.delete(job_id)

            self.expect(where, model_control, lambda: q.run_now(job_id) if op == "run_now" else q.delete(job_id))
        elif op == "requeue_dead":
            job_id = self.pick(r, ("dead",)) if r.random() < 0.6 else None

            def model_requeue() -> int:
                m.reclaim(now)
                return m.requeue_dead(now, job_id)

            want, got = self.expect(where, model_requeue, lambda: q.requeue_dead(job_id))
            if want != got:
                raise Mismatch(f"{where}: requeue_dead returned {got}, model expects {want}")
        elif op == "purge":
            got = q.purge()
            m.reclaim(now)
            want = m.purge()
            if got != want:
                raise Mismatch(f"{where}: purge returned {got}, model expects {want}")
        elif op == "compact":
            q.compact()
            m.reclaim(now)
            m.compact()
        elif op == "tick":
            self.clock.advance(r.choice((0.5, 3.0, 10.0, 31.0, 120.0)))
        elif op == "schedule":
            name, every, payload = r.choice(("a", "b")), r.choice((2.0, 10.0, 45.0)), r.choice(("p", {"n": 1}))
            if r.random() < 0.2:
                q.unschedule(name)
                self.model.schedules.pop(name, None)
            else:
                got = q.schedule(name, payload, every=every, catch_up="all").next_run
                want = m.schedule(now, name, every, payload)
                if got != want:
                    raise Mismatch(f"{where}: schedule {name} runs next at {got}, the model says {want}")
        elif op == "limit":
            kind = r.choice(KINDS)
            if r.random() < 0.3:
                q.clear_limit(kind)
                m.limits.pop(kind, None)
            else:
                concurrency = r.randint(1, 3)
                q.set_limit(kind, concurrency=concurrency)
                m.limits[kind] = concurrency
            m.reclaim(now)
        elif op == "enqueue_due":
            added = [j.id for j in q.enqueue_due()]
            due = any(sched[2] <= now for sched in m.schedules.values())
            if due:
                m.reclaim(now)  # a write, which reclaims first
            else:
                op = "tick"  # nothing was due: a read, which writes and fsyncs nothing
            want_added = m.enqueue_due(now)
            if added != want_added:
                raise Mismatch(f"{where}: enqueue_due added {added}, the model {want_added}")
        elif op == "reopen":
            self.close()
            self.queues = [self.open() for _ in range(self.handles)]
        elif op == "power_cut":
            self.disk = self.disk.power_cut(r.choice(POWER_CUT_MODES), r)
            # The queue objects on the old disk are gone with the power; do not close them there.
            self.queues = [self.open() for _ in range(self.handles)]
            self.take_back_unsynced_leases()
        else:  # pragma: no cover
            raise AssertionError(op)
        if before_lease is not None:
            self.unsynced.append(before_lease)
        elif op != "tick":
            self.unsynced = []  # this step fsynced the log, and with it every lease before it
        self.compare(where)

    def take_back_unsynced_leases(self) -> None:
        """After a cut: a job may be as it was before any lease not yet fsynced; the model follows it."""
        if not self.unsynced:
            return
        real = {j.id: j.to_dict() for j in self.queues[0].list_jobs()}
        for view in real.values():
            view.pop("attempt_history", None)
        for job_id, job in self.model.jobs.items():
            got = real.get(job_id)
            if got is None:
                continue
            got.pop("seq")
            if got == job.view():
                continue
            for earlier in reversed(self.unsynced):
                old = earlier.get(job_id)
                if old is not None and old.view() == got:
                    self.model.jobs[job_id] = replace(old)
                    break

    def run(self, steps: list[tuple[Any, ...]]) -> None:
        try:
            for i, (op, arg) in enumerate(steps):
                self.step(i, op, arg)
                self.steps_run += 1
        finally:
            try:
                self.close()
            except Exception:
                pass
