"""Operation histories of many processes, and the checker that judges them (Jepsen-style).

Owns: HistoryWriter (one append-only file per process, one JSON line per
event, written with a single os.write so a SIGKILL can only cut the last
line), load_histories, and check(), which turns the histories plus the final
queue contents into a HistoryReport. Imports: the standard library only.

Events: {"t": monotonic seconds, "proc": name, "op": enqueue|lease|ack,
"phase": invoke|ok|fail, ...}. Fields by event:
  enqueue invoke  tag, payload          enqueue ok  tag, id
  lease ok        id, token, granted, deadline, tag, payload, invoked
                  (granted/deadline: the queue's wall clock; invoked: monotonic time before the call)
  ack invoke/ok/fail  id, token (fail: error)
``time.monotonic`` is one clock for every process of the machine, so events
of different processes can be ordered by it; an "ok" is stamped after the
call returned and an "invoke" before it started.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

#: Slack for comparing the wall-clock grant time of a lease with the deadline of the one before.
CLOCK_SLACK = 1e-6


class HistoryWriter:
    """Appends events for one process. Every line reaches the kernel before the call returns."""

    def __init__(self, path: str, proc: str) -> None:
        self.proc = proc
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)

    def record(self, op: str, phase: str, **fields: Any) -> None:
        event = {"t": time.monotonic(), "proc": self.proc, "op": op, "phase": phase, **fields}
        os.write(self.fd, (json.dumps(event, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        os.close(self.fd)


def load_histories(directory: str) -> tuple[list[dict[str, Any]], int]:
    """Every event of every ``*.history`` file, sorted by time; and how many torn last lines were skipped."""
    events: list[dict[str, Any]] = []
    torn = 0
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".history"):
            continue
        with open(os.path.join(directory, name), "rb") as f:
            lines = f.read().split(b"\n")
        for i, line in enumerate(lines):
            if not line:
                continue
            try:
                events.append(json.loads(line))
            except ValueError:
                if i == len(lines) - 1:  # a kill in the middle of the very last write
                    torn += 1
                    continue
                raise
    events.sort(key=lambda e: e["t"])
    return events, torn


@dataclass
class HistoryReport:
    enqueues_invoked: int = 0
    enqueues_acknowledged: int = 0
    leases_granted: int = 0
    acks_acknowledged: int = 0
    acks_refused: int = 0
    duplicates: int = 0
    duplicates_after_holder_died: int = 0
    duplicates_after_expiry: int = 0
    torn_history_lines: int = 0
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    corrupt_payloads: list[str] = field(default_factory=list)
    acked_back: list[str] = field(default_factory=list)
    lease_after_ack: list[str] = field(default_factory=list)
    overlapping_leases: list[str] = field(default_factory=list)
    unexplained_duplicates: list[str] = field(default_factory=list)

    VIOLATIONS = (
        "lost", "unexpected", "corrupt_payloads", "acked_back", "lease_after_ack", "overlapping_leases",
        "unexplained_duplicates",
    )  # fmt: skip

    @property
    def ok(self) -> bool:
        return not any(getattr(self, name) for name in self.VIOLATIONS)

    def summary(self) -> str:
        counts = ", ".join(f"{name}={len(getattr(self, name))}" for name in self.VIOLATIONS)
        first = [f"{name}: {getattr(self, name)[:3]}" for name in self.VIOLATIONS if getattr(self, name)]
        return counts + ("\n" + "\n".join(first) if first else "")


def check(events: list[dict[str, Any]], final_jobs: list[dict[str, Any]], *, killed: set[str]) -> HistoryReport:
    """Judge a history. ``final_jobs``: every job the queue holds after the drain (Job.to_dict()).

    ``killed``: names of the processes that were SIGKILLed (a lease they held
    may be granted again once it expires; that is a duplicate, not a bug).
    """
    r = HistoryReport()
    invoked: dict[str, Any] = {}  # tag -> payload
    enqueued: dict[str, str] = {}  # id -> tag
    ack_ok_at: dict[str, float] = {}
    ack_invoked: set[str] = set()
    leases: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ends: dict[tuple[str, str], str] = {}  # (id, token) -> "ok" | "refused"
    for e in events:
        op, phase = e["op"], e["phase"]
        if op == "enqueue" and phase == "invoke":
            r.enqueues_invoked += 1
            invoked[e["tag"]] = e["payload"]
        elif op == "enqueue" and phase == "ok":
            r.enqueues_acknowledged += 1
            enqueued[e["id"]] = e["tag"]
        elif op == "lease" and phase == "ok" and e.get("id"):
            r.leases_granted += 1
            leases[e["id"]].append(e)
            tag = e.get("tag")
            if tag not in invoked:
                r.unexpected.append(f"lease of {e['id']} with payload {e.get('payload')!r} that no producer enqueued")
            elif e.get("payload") != invoked[tag]:
                r.corrupt_payloads.append(f"lease of {e['id']}: payload {e.get('payload')!r} != {invoked[tag]!r}")
            started = e.get("invoked", e["t"])
            if e["id"] in ack_ok_at and started > ack_ok_at[e["id"]]:
                r.lease_after_ack.append(
                    f"{e['proc']} asked for a lease {started - ack_ok_at[e['id']]:.4f}s after {e['id']}'s ack "
                    "returned, and got that job"
                )
        elif op == "ack" and phase == "invoke":
            ack_invoked.add(e["id"])
        elif op == "ack" and phase == "ok":
            r.acks_acknowledged += 1
            ack_ok_at.setdefault(e["id"], e["t"])
            ends[(e["id"], e["token"])] = "ok"
        elif op == "ack" and phase == "fail":
            r.acks_refused += 1
            ends[(e["id"], e["token"])] = "refused"

    final = {j["id"]: j for j in final_jobs}
    for job_id, job in final.items():
        payload = job["payload"]
        tag = payload.get("tag") if isinstance(payload, dict) else None
        if tag not in invoked:
            r.unexpected.append(f"job {job_id} with payload {payload!r} that no producer enqueued")
        elif payload != invoked[tag]:
            r.corrupt_payloads.append(f"job {job_id}: payload {payload!r} != {invoked[tag]!r}")
        if job_id in ack_ok_at and job["state"] != "done":
            r.acked_back.append(f"job {job_id} was acked but is {job['state']}")
    for job_id, tag in enqueued.items():
        if job_id not in final and job_id not in ack_invoked:
            r.lost.append(f"job {job_id} ({tag}) was acknowledged, never acked, and is gone")
        if job_id in final and final[job_id]["state"] != "done":
            r.lost.append(f"job {job_id} ({tag}) is {final[job_id]['state']} after the drain")

    for job_id, granted in leases.items():
        granted.sort(key=lambda e: e["granted"])
        for prev, nxt in zip(granted, granted[1:]):
            r.duplicates += 1
            if nxt["granted"] + CLOCK_SLACK < prev["deadline"]:
                r.overlapping_leases.append(
                    f"job {job_id}: {nxt['proc']} got a lease at {nxt['granted']:.6f} while {prev['proc']}'s ran "
                    f"until {prev['deadline']:.6f}"
                )
            end = ends.get((job_id, prev["token"]))
            if end == "ok":
                r.unexplained_duplicates.append(f"job {job_id} leased again by {nxt['proc']} after {prev['proc']}'s ack succeeded")
            elif end == "refused":
                r.duplicates_after_expiry += 1
            elif prev["proc"] in killed:
                r.duplicates_after_holder_died += 1
            else:
                r.duplicates_after_expiry += 1  # the holder is alive and still working past its deadline
    return r
