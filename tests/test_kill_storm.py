"""A kill -9 storm: producers, consumers and a compactor SIGKILLed at random, round after round.

Owns: the storm (real OS processes started with ``sys.executable``), the
child roles (run as ``python -m tests.test_kill_storm child ROLE ...``) and
the final drain. Every child writes its own history (tests/history.py);
the checker judges them. Imports: the standard library, nobroker's public
API and tests.history / tests.support.

Roles: 4 producers (enqueue tagged payloads), 2 consumers (3 threads each
sharing one Queue: lease, sometimes work past the visibility timeout, ack),
1 compactor (compact in a loop).
Each round picks 1-3 of the seven (sometimes all) at a random moment,
SIGKILLs them and starts replacements. A child is killed only once it has
shown progress (a finished operation in its history), except one child in
five, drawn when it starts, which a kill may hit while it is still
starting; so however slow the machine, every round leaves work behind. The storm runs at least ROUNDS rounds and
then until enough work is proven (work_target), within a generous time
limit; never a fixed number of kills that could all land before any work.
After the last round everything is killed, a drain leases and acks every
job left, and the checker demands:
0 lost acknowledged enqueues, 0 unexpected jobs, intact payloads, no lease
granted after that job's ack returned, no two unexpired leases of one job,
and duplicates only after an expired lease or a dead holder.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any

from nobroker import NotLeasedError, Queue
from nobroker.filestore.admin import verify
from tests.history import HistoryWriter, check, load_histories
from tests.support import LONG, slow

ROUNDS = int(os.environ.get("NOBROKER_STORM_ROUNDS", "0")) or (1000 if LONG else 200)
#: Seconds each child waits before it opens the queue: a stand-in for a machine too slow to start
#: a child within a round (set by the test that proves the storm copes with one).
START_DELAY_ENV = "NOBROKER_STORM_START_DELAY"


def work_target(rounds: int) -> dict[str, int]:
    """Work a storm of ``rounds`` must prove before it stops: acknowledged enqueues and acks, and kills."""
    return {"enqueues": rounds // 4, "acks": rounds // 8, "kills": rounds // 2}

#: Seconds the storm may run in all to reach its work_target (it takes ~15 s on an idle machine).
TIME_LIMIT = 1200.0 if LONG else 300.0
#: Rounds between two counts of the work done, once ROUNDS are over (a count reads every history).
COUNT_EVERY = 20
#: Seconds between two looks for progress while every candidate for a kill is still busy starting.
PROGRESS_POLL = 0.01
PRODUCERS, CONSUMERS, COMPACTORS = 4, 2, 1
#: Visibility timeout of the consumers' leases (seconds). Short, so expiry happens during the storm.
VISIBILITY = 0.4
#: How long a round lets the processes run before its kills (seconds).
ROUND_PAUSE = (0.01, 0.08)
#: Share of children that may be killed before they show progress (their startup is a crash point too).
#: Drawn once per child, not per round: a per-round draw kills a slow starter long before it gets going.
STARTUP_KILL_SHARE = 0.2
MAX_ATTEMPTS = 1_000_000
#: Threads per consumer process, sharing one Queue object.
CONSUMER_THREADS = 3

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ====================================================================== children
def payload_for(tag: str, rng: random.Random) -> dict[str, Any]:
    size = rng.choice((0, 10, 100, 3000))
    digest = hashlib.sha256(tag.encode()).hexdigest()
    return {"tag": tag, "blob": (digest * (size // 64 + 1))[:size], "sha": digest}


def child(role: str, name: str, directory: str, histories: str, seed: int) -> None:
    rng = random.Random(seed)
    history = HistoryWriter(os.path.join(histories, f"{name}.history"), name)
    time.sleep(float(os.environ.get(START_DELAY_ENV, "0")))
    q = Queue(directory, visibility_timeout=VISIBILITY, max_attempts=MAX_ATTEMPTS, lock_timeout=60)
    n = 0
    while True:
        if role == "producer":
            n += 1
            tag = f"{name}-{n}"
            payload = payload_for(tag, rng)
            history.record("enqueue", "invoke", tag=tag, payload=payload)
            job = q.enqueue(payload)
            history.record("enqueue", "ok", tag=tag, id=job.id)
            time.sleep(rng.random() * 0.004)
        elif role == "consumer":
            # Several threads share one Queue object: leases, acks and catch-up race inside the process too.
            threading.excepthook = die_of_thread_error
            threads = [
                threading.Thread(target=consume, args=(q, history, random.Random(rng.random())), daemon=True)
                for _ in range(CONSUMER_THREADS)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            q.compact()
            history.record("compact", "ok")  # progress for the storm; the checker ignores it
            time.sleep(0.01 + rng.random() * 0.04)


def die_of_thread_error(args: Any) -> None:
    """An exception in a consumer thread is a crash of the process: the storm reports it."""
    import traceback

    traceback.print_exception(args.exc_type, args.exc_value, args.exc_traceback)
    sys.stderr.flush()
    os._exit(3)


def consume(q: Queue, history: HistoryWriter, rng: random.Random) -> None:
    while True:
        invoked = time.monotonic()
        job = q.lease_one()
        if job is None:
            history.record("lease", "ok", id=None, invoked=invoked)
            time.sleep(0.005)
            continue
        history.record(
            "lease", "ok", id=job.id, token=job.lease_token, granted=job.lease_deadline - VISIBILITY,
            deadline=job.lease_deadline, tag=job.payload.get("tag"), payload=job.payload, invoked=invoked,
        )  # fmt: skip
        if rng.random() < 0.08:
            time.sleep(VISIBILITY * (1 + rng.random()))  # a slow handler: the lease expires
        else:
            time.sleep(rng.random() * 0.003)
        history.record("ack", "invoke", id=job.id, token=job.lease_token)
        try:
            q.ack(job)
        except NotLeasedError as exc:
            history.record("ack", "fail", id=job.id, token=job.lease_token, error=str(exc)[:200])
        else:
            history.record("ack", "ok", id=job.id, token=job.lease_token)


# ====================================================================== the storm
class Storm:
    def __init__(self, rounds: int, seed: int = 1, **env: str) -> None:
        self.rounds = rounds
        self.target = work_target(rounds)
        self.rng = random.Random(seed)
        self.base = tempfile.mkdtemp(prefix="nobroker-storm-")
        self.queue = os.path.join(self.base, "queue")
        self.histories = os.path.join(self.base, "histories")
        os.makedirs(self.histories)
        self.slots = (
            [("producer", f"p{i}") for i in range(PRODUCERS)]
            + [("consumer", f"c{i}") for i in range(CONSUMERS)]
            + [("compactor", f"k{i}") for i in range(COMPACTORS)]
        )
        self.procs: dict[int, tuple[subprocess.Popen[bytes], str]] = {}
        self.progressed: set[str] = set()
        self.startup_victims: set[str] = set()  # children a kill may hit before their first progress
        self.rounds_run = 0
        self.generation = 0
        self.kills = 0
        self.killed: set[str] = set()
        self.crashes: list[str] = []
        overrides = env
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT])
        env.update(overrides)
        self.env = env

    def start(self, slot: int) -> None:
        role, prefix = self.slots[slot]
        self.generation += 1
        name = f"{prefix}.{self.generation}"
        if self.rng.random() < STARTUP_KILL_SHARE:
            self.startup_victims.add(name)
        stderr = open(os.path.join(self.histories, f"{name}.stderr"), "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.test_kill_storm", "child", role, name, self.queue, self.histories,
             str(self.rng.getrandbits(32))],
            cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
        stderr.close()
        self.procs[slot] = (proc, name)

    def has_progressed(self, slot: int) -> bool:
        """Has this child finished an operation (an "ok" line in its history)?"""
        _proc, name = self.procs[slot]
        if name in self.progressed:
            return True
        try:
            with open(os.path.join(self.histories, f"{name}.history"), "rb") as f:
                done = b'"phase":"ok"' in f.read()
        except FileNotFoundError:
            done = False
        if done:
            self.progressed.add(name)
        return done

    def spare(self, slot: int) -> bool:
        """Leave a child that has not shown progress alone, unless it was drawn as a startup victim.

        On a loaded machine a child can take longer to import and open the
        queue than many rounds last; killed before it gets going, it would
        never do any work. So the draw is made once per child (one in five
        may die during its startup), whatever the machine's speed.
        """
        return not self.has_progressed(slot) and self.procs[slot][1] not in self.startup_victims

    def work_done(self) -> dict[str, int]:
        """Acknowledged enqueues and acks in every history so far, and the kills."""
        enqueues = acks = 0
        for name in os.listdir(self.histories):
            if name.endswith(".history"):
                with open(os.path.join(self.histories, name), "rb") as f:
                    data = f.read()
                enqueues += data.count(b'"op":"enqueue","phase":"ok"')
                acks += data.count(b'"op":"ack","phase":"ok"')
        return {"enqueues": enqueues, "acks": acks, "kills": self.kills}

    def enough(self, work: dict[str, int]) -> bool:
        return all(work[key] >= self.target[key] for key in self.target)

    def kill(self, slot: int) -> None:
        proc, name = self.procs.pop(slot)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        code = proc.wait()
        if code == -signal.SIGKILL:
            self.kills += 1
            self.killed.add(name)
        else:
            with open(os.path.join(self.histories, f"{name}.stderr"), "rb") as f:
                self.crashes.append(f"{name} exited with {code}: {f.read()[-2000:].decode(errors='replace')}")

    def run(self, time_limit: float = TIME_LIMIT) -> dict[str, int]:
        """At least ``self.rounds`` rounds, then on until ``self.target`` is met or ``time_limit`` passes; the work done."""
        # The queue folder exists before the children race to create it.
        Queue(self.queue).close()
        for slot in range(len(self.slots)):
            self.start(slot)
        deadline = time.monotonic() + time_limit
        rounds = 0
        work = {key: 0 for key in self.target}
        while time.monotonic() < deadline:
            if rounds >= self.rounds and rounds % COUNT_EVERY == 0:
                work = self.work_done()
                if self.enough(work):
                    break
            time.sleep(self.rng.uniform(*ROUND_PAUSE))
            if self.rng.random() < 0.05:
                victims = list(range(len(self.slots)))
            else:
                victims = self.rng.sample(range(len(self.slots)), self.rng.randint(1, 3))
            victims = [slot for slot in victims if not self.spare(slot)]
            if not victims:
                time.sleep(PROGRESS_POLL)  # everyone picked is still starting: let them get going
                continue
            for slot in victims:
                self.kill(slot)
            for slot in victims:
                self.start(slot)
            rounds += 1
        for slot in list(self.procs):
            self.kill(slot)
        self.rounds_run = rounds
        return self.work_done()

    def drain(self) -> list[dict[str, Any]]:
        """Lease and ack everything left, as one more recorded process; return the final jobs."""
        history = HistoryWriter(os.path.join(self.histories, "drain.history"), "drain")
        clock = [time.time() + 3600.0]  # every lease the storm left has expired
        with Queue(self.queue, clock=lambda: clock[0], max_attempts=MAX_ATTEMPTS) as q:
            for _ in range(10_000):
                invoked = time.monotonic()
                jobs = q.lease(500, visibility_timeout=3600)
                if not jobs:
                    stats = q.stats()
                    if stats.ready + stats.delayed + stats.leased == 0:
                        break
                    clock[0] += 400.0  # past any backoff of a reclaimed lease
                    continue
                for job in jobs:
                    history.record(
                        "lease", "ok", id=job.id, token=job.lease_token, granted=job.lease_deadline - 3600,
                        deadline=job.lease_deadline, tag=job.payload.get("tag"), payload=job.payload, invoked=invoked,
                    )  # fmt: skip
                    history.record("ack", "invoke", id=job.id, token=job.lease_token)
                    q.ack(job)
                    history.record("ack", "ok", id=job.id, token=job.lease_token)
            final = [j.to_dict() for j in q.list_jobs()]
        history.close()
        return final

    def cleanup(self) -> None:
        for slot in list(self.procs):
            self.kill(slot)
        shutil.rmtree(self.base, ignore_errors=True)


@slow
class KillStorm(unittest.TestCase):
    def test_kill_storm(self) -> None:
        storm = Storm(ROUNDS, seed=int(os.environ.get("NOBROKER_STORM_SEED", "1")))
        self.addCleanup(storm.cleanup)
        started = time.monotonic()
        work = storm.run()
        self.assertEqual(storm.crashes, [], "a child died of something other than SIGKILL")
        self.assertTrue(
            storm.enough(work),
            f"the storm did too little work to prove anything in {TIME_LIMIT:g} s: {work} of {storm.target} "
            f"after {storm.rounds_run} rounds",
        )
        final = storm.drain()
        events, torn = load_histories(storm.histories)
        report = check(events, final, killed=storm.killed)
        report.torn_history_lines = torn
        print(
            f"\nkill storm: {storm.rounds_run} rounds, {storm.kills} kills survived in {time.monotonic() - started:.1f}s; "
            f"enqueues {report.enqueues_acknowledged}/{report.enqueues_invoked} acknowledged, "
            f"{report.leases_granted} leases, {report.acks_acknowledged} acks ({report.acks_refused} refused as stale), "
            f"duplicates {report.duplicates} ({report.duplicates_after_holder_died} after the holder died, "
            f"{report.duplicates_after_expiry} after expiry), {torn} torn history lines"
        )
        self.assertTrue(report.ok, report.summary())
        verified = verify(storm.queue)
        self.assertTrue(verified.ok, verified.problems)
        leftovers = [n for n in os.listdir(storm.queue) if n.endswith(".tmp") or ".damaged" in n]
        self.assertEqual(leftovers, [], "files left behind by killed compactions after a clean open")
        self.assertEqual(len([n for n in os.listdir(storm.queue) if n.endswith(".log")]), 1)
        self.assertGreaterEqual(report.enqueues_acknowledged, storm.target["enqueues"], "the checker saw less than the storm counted")

    def test_children_slower_to_start_than_a_round_still_get_work_done(self) -> None:
        # Every child takes longer to start than the whole fixed-length storm used to last, and
        # longer than a child lived when the startup kills were drawn per round, not per child.
        storm = Storm(24, seed=7, **{START_DELAY_ENV: "4"})
        self.addCleanup(storm.cleanup)
        work = storm.run()
        self.assertEqual(storm.crashes, [])
        self.assertTrue(storm.enough(work), f"{work} of {storm.target} after {storm.rounds_run} rounds")
        events, _torn = load_histories(storm.histories)
        report = check(events, storm.drain(), killed=storm.killed)
        self.assertTrue(report.ok, report.summary())


class PeerCompactionRace(unittest.TestCase):
    """Found by the soak: a lease must return its own job's payload even when a peer compacts meanwhile."""

    def test_a_lease_reads_its_payload_after_a_peer_compaction(self) -> None:
        directory = tempfile.mkdtemp(prefix="nobroker-race-")
        self.addCleanup(shutil.rmtree, directory, True)
        qa, qb = Queue(directory), Queue(directory)
        self.addCleanup(qa.close)
        self.addCleanup(qb.close)
        for i in range(6):
            qa.enqueue({"i": i, "pad": "x" * (i * 7)})
        for _ in range(3):
            job = qa.lease_one()
            assert job is not None
            qa.ack(job)
        storage: Any = qa.storage
        original = storage._write

        def racing(decide: Any, **options: Any) -> Any:
            out = original(decide, **options)  # the lease is on disk and the lock released ...
            qb.compact()  # ... a peer compacts ...
            qa.stats()  # ... and another thread of this process catches up with it
            return out

        storage._write = racing
        try:
            job = qa.lease_one()
        finally:
            storage._write = original
        assert job is not None
        self.assertEqual(job.payload, qb.get(job.id).payload)


class HistoryChecker(unittest.TestCase):
    """The checker itself must catch each kind of violation."""

    def history(self) -> list[dict[str, Any]]:
        p = {"tag": "t1"}
        return [
            {"t": 1.0, "proc": "p", "op": "enqueue", "phase": "invoke", "tag": "t1", "payload": p},
            {"t": 2.0, "proc": "p", "op": "enqueue", "phase": "ok", "tag": "t1", "id": "j1"},
            {"t": 3.0, "proc": "c", "op": "lease", "phase": "ok", "id": "j1", "token": "a", "granted": 10.0,
             "deadline": 11.0, "tag": "t1", "payload": p, "invoked": 2.9},
            {"t": 4.0, "proc": "c", "op": "ack", "phase": "invoke", "id": "j1", "token": "a"},
            {"t": 5.0, "proc": "c", "op": "ack", "phase": "ok", "id": "j1", "token": "a"},
        ]  # fmt: skip

    def test_a_clean_history_passes(self) -> None:
        report = check(self.history(), [{"id": "j1", "payload": {"tag": "t1"}, "state": "done"}], killed=set())
        self.assertTrue(report.ok, report.summary())

    def test_each_violation_is_caught(self) -> None:
        h = self.history()
        self.assertTrue(check(h, [], killed=set()).ok, "an acked job may be compacted away")
        self.assertTrue(check(h[:2], [], killed=set()).lost)
        self.assertTrue(check(h[:2], [{"id": "j1", "payload": {"tag": "t1"}, "state": "ready"}], killed=set()).lost)
        self.assertTrue(check(h, [{"id": "j9", "payload": {"tag": "zz"}, "state": "done"}], killed=set()).unexpected)
        self.assertTrue(check(h, [{"id": "j1", "payload": {"tag": "t1", "x": 1}, "state": "done"}], killed=set()).corrupt_payloads)
        self.assertTrue(check(h, [{"id": "j1", "payload": {"tag": "t1"}, "state": "ready"}], killed=set()).acked_back)
        again = dict(h[2], t=7.0, invoked=6.0, token="b", granted=12.0, deadline=13.0, proc="d")
        report = check(h + [again], [], killed=set())
        self.assertTrue(report.lease_after_ack and report.unexplained_duplicates)
        overlap = dict(h[2], t=3.5, invoked=3.4, token="b", granted=10.5, deadline=11.5, proc="d")
        self.assertTrue(check(h[:3] + [overlap], [], killed=set()).overlapping_leases)
        after_death = dict(h[2], t=3.5, invoked=3.4, token="b", granted=11.0, deadline=12.0, proc="d")
        done = [{"id": "j1", "payload": {"tag": "t1"}, "state": "done"}]
        report = check(h[:3] + [after_death], done, killed={"c"})
        self.assertTrue(report.ok, report.summary())
        self.assertEqual((report.duplicates, report.duplicates_after_holder_died), (1, 1))


if __name__ == "__main__":
    if len(sys.argv) >= 7 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
    else:
        unittest.main()
