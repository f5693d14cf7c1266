"""Limits per kind on PostgreSQL: the limits table (sql/007_limits.sql) and the lease under limits.

Owns: LimitStatements (the SQL text for one schema), and one function per
limit operation, written as the steps it sends (steps.py, as operations.py's
are: a Queue drives them, an AsyncQueue awaits them): ``put``, ``remove``,
``listed``, ``look``, ``seconds_to_slot`` and ``slot_freed`` (what an idle
wait watches), ``holding`` (the limit holding a kind back, in words, for
explain), ``lease``, the lease of a queue that has limits, and ``claim``,
the lease of any queue (operations.lease, then ``lease`` when it found
limits or pauses: a queue with pauses alone is leased the same way, kind by
kind past its paused kinds, without the transaction and the limits'
locks). Imports: jobs, codec, limits, storage, fragments, naming, statements,
rows, steps, operations.

Race-free across processes and hosts: a lease of a queue with limits is one
transaction that (1) reclaims expired leases (their slots free) where the
claim that found the limits found one expired or a job due, (2) locks every
limit row of the queue (``FOR UPDATE``, in kind order), (3) counts the
leased jobs of each limited kind in a statement of its own (under READ
COMMITTED it sees every lease committed before the lock was granted: each
holder of the lock commits its claim before it lets go), and finds the kinds
without a limit that have ready jobs, (4) claims at most what each limit
allows and the other kinds each from its own index's head (so no backlog of
a limited kind is walked over), and (5) spends the tokens. Two leases never
see the same free slot or token. A fair kind (a limit with
``group_concurrency`` or ``weights``) is picked group by group before the
claim, under the same locks: the best jobs of each of its groups (a skip
scan of sql/011's index, one probe per group), the leased jobs of each
group, then the turns limits.choose gives; the claim takes the picks, and
the turns taken are written back to the limit row (``turns``), so every
process and host shares one rotation. Times are epoch seconds of the
database clock (``clock_timestamp()``, the moment the lock is held, plus the
test-only ``clock_offset``).
"""

from __future__ import annotations

import json
from typing import Any

from ..codec import load_json
from ..jobs import Job
from ..limits import MAX_LIMITS, Bucket, Limit, Turns, budget, carried, choose, from_fields, holding_group, taken
from ..limits import holding as limit_holding
from ..limits import to_fields, turned, turns_from_fields, turns_to_fields
from ..limits import seconds_to_slot as slot_wait
from ..storage import worker_label
from . import operations as ops
from .fragments import CLAIM_SET, COLUMNS, NOW, UNPAUSED
from .rows import row_job
from .naming import quote_schema
from .statements import ClaimTexts
from .steps import Steps, atomic, every, one, piped, run

#: A limit row's columns, as limits.to_fields names them (then ``turns``, which a put never writes).
_STORED = ("kind", "concurrency", "rate", "per", "burst", "tokens", "tokens_at", "group_concurrency", "weights")
_COLUMNS = (*_STORED, "turns")
_CLOCK = "extract(epoch FROM clock_timestamp())::float8 + %(off)s::float8"
_RUNNABLE = f"queue = %(q)s AND state = 'ready' AND NOT scheduled AND available_at <= {NOW}"
#: What the limited claim may take: runnable and not paused (control_ops.pause), as the plain claim.
_CLAIMABLE = _RUNNABLE + UNPAUSED
# Each kind with a free slot, up to what its limits allow, and each kind
# without a limit, up to the lease's count: the head of each kind's own index
# (jobs_claim_kind, as fragments.CLAIM_KINDS), so the backlog of a limited
# kind is never walked over; and the fair kinds' picks, each a probe of the
# primary key, its state checked once the row is locked (OFFSET 0 keeps that
# check out of the probe: beside it, the claim indexes' predicates let a
# generic plan on a table never analyzed walk every ready job of the queue for
# each pick, as ``id = ANY`` of them did even with none). The best of all of
# them, up to the lease's count (written in:
# LimitStatements.claim), updated by their primary key, found as
# fragments.CLAIM's batch is: by a join for a count up to JOINED_CLAIM_MAX, a
# probe of the key per job in any plan, by the array of ids above it (on a
# table never analyzed, the array alone read the queue's every key at each
# lease). Rows locked but not taken are free again when the transaction
# commits. With more than KIND_HEADS_MAX kinds without a limit (their heads
# would lock as many rows), those kinds are taken as a plain claim takes
# them instead: the claim's index from its head, past the limited kinds ({others}).
_CLAIM = f"""{CLAIM_SET}
        {{batch}} FROM ({{others}}
                SELECT * FROM (
                    SELECT p.queue, p.id, p.priority, p.seq FROM unnest(%(picked)s::text[]) AS f(id)
                    CROSS JOIN LATERAL (
                        SELECT queue, id, priority, seq, state, scheduled FROM {{schema}}.jobs
                        WHERE queue = %(q)s AND id = f.id OFFSET 0 FOR UPDATE SKIP LOCKED) AS p
                    WHERE p.state = 'ready' AND NOT p.scheduled) AS p
                UNION ALL
                (SELECT l.queue, l.id, l.priority, l.seq
                 FROM unnest(%(lk)s::text[], %(caps)s::int4[]) AS k(kind, cap)
                 CROSS JOIN LATERAL (
                     SELECT queue, id, priority, seq FROM {{schema}}.jobs
                     WHERE {_CLAIMABLE} AND kind = k.kind
                     ORDER BY priority DESC, seq LIMIT k.cap FOR UPDATE SKIP LOCKED) AS l)
            ) AS c ORDER BY c.priority DESC, c.seq LIMIT {{count}}{{batch_end}}
        RETURNING {COLUMNS}"""
_OTHERS = f"""
                SELECT * FROM (
                    SELECT queue, id, priority, seq FROM {{schema}}.jobs
                    WHERE {_CLAIMABLE} AND (%(all)s OR kind = ANY(%(kinds)s::text[])) AND kind <> ALL(%(held)s::text[])
                    ORDER BY priority DESC, seq LIMIT {{count}} FOR UPDATE SKIP LOCKED) AS o
                UNION ALL"""
#: Most kinds without a limit that a claim under limits takes by their heads (see _CLAIM).
KIND_HEADS_MAX = 32
# The database clock, the leased jobs of each limited kind, the pauses ('':
# the whole queue), and, for a lease of any kind (``all``) while the queue is
# not paused, up to KIND_HEADS_MAX + 1 kinds neither limited nor paused that
# have ready jobs: a skip scan of jobs_claim_kind, one probe per kind.
_LEASED = f"""
        SELECT {_CLOCK}, coalesce((
            SELECT json_object_agg(kind, n) FROM (
                SELECT kind, count(*) AS n FROM {{schema}}.jobs
                WHERE queue = %(q)s AND state = 'leased' AND kind = ANY(%(lk)s::text[]) GROUP BY kind) AS c
        ), '{{}}'::json)::text, p.kinds,
        CASE WHEN %(all)s AND NOT '' = ANY(p.kinds) THEN ARRAY(
            WITH RECURSIVE r(kind) AS (
                (SELECT kind FROM {{schema}}.jobs WHERE queue = %(q)s AND state = 'ready' AND NOT scheduled
                 ORDER BY kind LIMIT 1)
                UNION ALL
                SELECT (SELECT kind FROM {{schema}}.jobs WHERE queue = %(q)s AND state = 'ready' AND NOT scheduled
                        AND kind > r.kind ORDER BY kind LIMIT 1)
                FROM r WHERE r.kind IS NOT NULL)
            SELECT kind FROM r WHERE kind IS NOT NULL AND kind <> ALL(%(lk)s::text[]) AND kind <> ALL(p.kinds)
            LIMIT {KIND_HEADS_MAX + 1}) END
        FROM (SELECT ARRAY(SELECT kind FROM {{schema}}.pauses WHERE queue = %(q)s) AS kinds) AS p"""
# A fair kind's picks: the best ``count`` runnable jobs of each of its groups
# (the groups found by a skip scan of jobs_claim_group: one probe per group),
# and of its jobs without a group.
_GROUP_HEADS = f"""
        WITH RECURSIVE g(grp) AS (
            (SELECT job_group FROM {{schema}}.jobs
             WHERE queue = %(q)s AND kind = %(kind)s AND state = 'ready' AND NOT scheduled AND job_group IS NOT NULL
             ORDER BY job_group LIMIT 1)
            UNION ALL
            SELECT (SELECT job_group FROM {{schema}}.jobs
                    WHERE queue = %(q)s AND kind = %(kind)s AND state = 'ready' AND NOT scheduled AND job_group > g.grp
                    ORDER BY job_group LIMIT 1)
            FROM g WHERE g.grp IS NOT NULL)
        SELECT g.grp, h.id, h.priority, h.seq FROM g CROSS JOIN LATERAL (
            SELECT id, priority, seq FROM {{schema}}.jobs
            WHERE {_CLAIMABLE} AND kind = %(kind)s AND job_group = g.grp
            ORDER BY priority DESC, seq LIMIT %(count)s) AS h
        WHERE g.grp IS NOT NULL
        UNION ALL
        SELECT * FROM (
            SELECT NULL::text, id, priority, seq FROM {{schema}}.jobs
            WHERE {_CLAIMABLE} AND kind = %(kind)s AND job_group IS NULL
            ORDER BY priority DESC, seq LIMIT %(count)s) AS n"""
_GROUP_LEASED = """SELECT job_group, count(*) FROM {schema}.jobs
        WHERE queue = %(q)s AND kind = %(kind)s AND state = 'leased' AND job_group IS NOT NULL
          AND (%(group)s::text IS NULL OR job_group = %(group)s::text)
        GROUP BY job_group"""


class LimitStatements:
    """The statements on one schema's limits table, by name."""

    def __init__(self, schema: str) -> None:
        quoted = quote_schema(schema)
        table = f"{quoted}.limits"
        cols = ", ".join(_COLUMNS)
        stored = ", ".join(_STORED)
        values = ", ".join(f"%({c})s::jsonb" if c == "weights" else f"%({c})s" for c in _STORED)
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _STORED[1:])
        self.text = {
            "one": f"SELECT {cols} FROM {table} WHERE queue = %(q)s AND kind = %(kind)s FOR UPDATE",
            "count": f"SELECT count(*) FROM {table} WHERE queue = %(q)s",
            "upsert": f"INSERT INTO {table} (queue, {stored}) VALUES (%(q)s, {values}) "
                      f"ON CONFLICT (queue, kind) DO UPDATE SET {updates}",
            "delete": f"DELETE FROM {table} WHERE queue = %(q)s AND kind = %(kind)s RETURNING 1",
            "all": f"SELECT {cols}, {_CLOCK} FROM {table} WHERE queue = %(q)s ORDER BY kind",
            "lock": f"SELECT {cols} FROM {table} WHERE queue = %(q)s ORDER BY kind FOR UPDATE",
            # Sent with the claim, in one round trip and one transaction (a pipeline's, where
            # no lock asked for one): its arrays make a generic plan look dearer than a custom
            # one, which the server then made again at every lease.
            "generic": "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)",
            # An idle wait's look: each limit with its kind's leased jobs and whether one is runnable
            # (the head of the kind's claim index: EXISTS let a plan guess that a scan of the table
            # finds one soon, and read every job where the kind's were last or none were runnable).
            "look": f"""SELECT {", ".join("l." + c for c in _COLUMNS)}, {_CLOCK},
                (SELECT count(*) FROM {quoted}.jobs WHERE queue = l.queue AND state = 'leased' AND kind = l.kind),
                coalesce((SELECT true FROM {quoted}.jobs WHERE {_RUNNABLE.replace("%(q)s", "l.queue")} AND kind = l.kind
                          ORDER BY priority DESC, seq LIMIT 1), false)
                FROM {table} AS l WHERE l.queue = %(q)s ORDER BY l.kind""",
            "spend": f"UPDATE {table} SET tokens = %(tokens)s, tokens_at = %(at)s WHERE queue = %(q)s AND kind = %(kind)s",
            "turn": f"UPDATE {table} SET turns = %(turns)s::jsonb WHERE queue = %(q)s AND kind = %(kind)s",
            "group_heads": _GROUP_HEADS.replace("{schema}", quoted),
            "group_leased": _GROUP_LEASED.replace("{schema}", quoted),
            "clock": f"SELECT {_CLOCK}",
            "leased": _LEASED.replace("{schema}", quoted),
        }  # fmt: skip
        #: The claim's template, by ``walk`` (see ``claim``): its count and batch open.
        self._claim = {walk: _CLAIM.replace("{others}", _OTHERS if walk else "").replace("{schema}", quoted)
                       for walk in (False, True)}  # fmt: skip
        self._claims = ClaimTexts()

    def claim(self, count: int, *, walk: bool = False) -> str:
        """The claim under limits of ``count`` jobs, its batch found as fragments.JOINED_CLAIM_MAX says.

        ``walk``: the kinds without a limit are taken from the claim index's head, not by their heads (_CLAIM).
        The count is written in, as Statements.claim writes it: a parameter left a generic plan
        guessing a tenth of the rows, and on a table of a few thousand rows that guess joined the
        batch to a scan of every job.
        """
        return self._claims.text(self._claim[walk], count, "c.")


def _held(row: tuple[Any, ...]) -> tuple[Limit, Bucket | None]:
    return from_fields({name: value for name, value in zip(_STORED, row) if value is not None})


def _turns(row: tuple[Any, ...]) -> Turns:
    """A limit row's rotation (a fresh one when it has none yet)."""
    stored = row[len(_STORED)]
    return Turns() if stored is None else turns_from_fields(stored)


def put(t: ops.Target, sql: LimitStatements, spec: Limit) -> Steps[Limit]:
    """Limit ``spec.kind``; the same limit again writes nothing (its bucket keeps its tokens)."""
    limit: Limit = yield atomic(_put(t, sql, spec))
    return limit


def _put(t: ops.Target, sql: LimitStatements, spec: Limit) -> Steps[Limit]:
    found = yield one(sql.text["one"], t.params(kind=spec.kind))
    old = None if found is None else _held(found)
    if old is not None and old[0] == spec:
        return spec
    if old is None and (yield one(sql.text["count"], t.params()))[0] >= MAX_LIMITS:
        raise ValueError(f"a queue limits at most {MAX_LIMITS:,} kinds; clear one first")
    now = float((yield one(sql.text["clock"], t.params()))[0])
    fields: dict[str, Any] = dict.fromkeys(_STORED)
    fields.update(to_fields(spec, carried(spec, old, now)))
    if fields["weights"] is not None:
        fields["weights"] = json.dumps(fields["weights"])
    yield run(sql.text["upsert"], t.params(**fields))
    return spec


def remove(t: ops.Target, sql: LimitStatements, kind: str) -> Steps[bool]:
    return (yield one(sql.text["delete"], t.params(kind=kind))) is not None


def listed(t: ops.Target, sql: LimitStatements) -> Steps[list[Limit]]:
    return [_held(row[:-1])[0] for row in (yield every(sql.text["all"], t.params()))]


def look(
    t: ops.Target, sql: LimitStatements, kinds: frozenset[str] | None
) -> Steps[tuple[float | None, list[tuple[str, int]]]]:
    """What an idle wait watches: (seconds until a runnable job of a rate-limited kind may be leased, or
    None; (kind, leased jobs) of the kinds with runnable jobs whose concurrency limit is spent or that have a
    group concurrency limit, whose next freed slot ends the wait)."""
    waits: list[float] = []
    spent: list[tuple[str, int]] = []
    for row in (yield every(sql.text["look"], t.params())):
        held, bucket = _held(row[: len(_COLUMNS)])
        now, leased, runnable = float(row[-3]), int(row[-2]), bool(row[-1])
        if kinds is not None and held.kind not in kinds:
            continue
        if runnable and (
            (held.concurrency is not None and leased >= held.concurrency) or held.group_concurrency is not None
        ):  # fmt: skip
            spent.append((held.kind, leased))
        wait = slot_wait(held, bucket, leased, runnable, now)
        if wait is not None:
            waits.append(wait)
    return (min(waits) if waits else None), spent


def seconds_to_slot(t: ops.Target, sql: LimitStatements, kinds: frozenset[str] | None) -> Steps[float | None]:
    """Seconds until a runnable job of a rate-limited kind (of ``kinds``) may be leased (0: now); None: no such wait."""
    return (yield from look(t, sql, kinds))[0]


def slot_freed(t: ops.Target, sql: LimitStatements, spent: list[tuple[str, int]]) -> Steps[bool]:
    """Has a slot of one of these watched kinds freed (their leased jobs changed, or their limit went) since?"""
    return bool(spent) and (yield from look(t, sql, frozenset(kind for kind, _ in spent)))[1] != spent


def holding(t: ops.Target, sql: LimitStatements, kind: str, group: str | None = None) -> Steps[str | None]:
    """The limit holding a ready job of ``kind`` (and ``group``) back now, in words (for explain); None if none does."""
    for row in (yield every(sql.text["look"], t.params())):
        held, bucket = _held(row[: len(_COLUMNS)])
        if held.kind == kind:
            words = limit_holding(held, bucket, int(row[-2]), float(row[-3]))
            if words is None and group is not None and held.group_concurrency is not None:
                counted = yield every(sql.text["group_leased"], t.params(kind=kind, group=group))
                words = holding_group(held, group, int(counted[0][1]) if counted else 0)
            return words
    return None


def claim(
    t: ops.Target, sql: LimitStatements, count: int, visibility_timeout: float, kinds: frozenset[str] | None
) -> Steps[list[Job]]:
    """The lease of any queue: operations.lease's one statement, or, when it found limits, ``lease``."""
    jobs = yield from ops.lease(t, count, visibility_timeout, kinds)
    if isinstance(jobs, ops.ByKinds):  # the queue has limits or pauses: lease it kind by kind
        return (yield from lease(t, sql, count, visibility_timeout, kinds, upkeep=jobs.upkeep_due, limited=jobs.limited))
    return jobs


def lease(
    t: ops.Target, sql: LimitStatements, count: int, visibility_timeout: float, kinds: frozenset[str] | None,
    *, upkeep: bool = True, limited: bool = True,
) -> Steps[list[Job]]:
    """Up to ``count`` jobs as ops.lease takes them, none of a kind beyond what its limits allow now.

    ``upkeep``: reclaim and promote first (false where the claim that found
    the limits also found nothing due: the upkeep would read and change nothing).
    ``limited``: the queue has limits; else it has only pauses, and the lease
    is its statements alone, no transaction around them (no limit to lock).
    """
    steps = _lease(t, sql, count, visibility_timeout, kinds, upkeep, limited)
    jobs: list[Job] = (yield atomic(steps)) if limited else (yield from steps)
    jobs.sort(key=lambda job: (-job.priority, job.seq))
    return jobs


def _lease(
    t: ops.Target, sql: LimitStatements, count: int, visibility_timeout: float, kinds: frozenset[str] | None,
    upkeep: bool, limited: bool,
) -> Steps[list[Job]]:
    if upkeep:
        yield from ops.upkeep(t)
    rows = (yield every(sql.text["lock"], t.params())) if limited else []
    limits = {held.kind: (held, bucket) for held, bucket in map(_held, rows)}
    turns = {row[0]: _turns(row) for row in rows}
    mine = sorted(kind for kind in limits if kinds is None or kind in kinds)
    clock, leased_json, paused, ready = yield one(sql.text["leased"], t.params(lk=mine, all=kinds is None))
    if "" in paused:  # the whole queue is paused
        return []
    now, leased = float(clock), load_json(leased_json)
    others = sorted(ready if kinds is None else kinds.difference(limits, paused))
    caps = {kind: min(budget(*limits[kind], leased.get(kind, 0), now), count) for kind in mine}
    free = [kind for kind in mine if caps[kind] > 0 and kind not in paused]
    fair = [kind for kind in free if limits[kind][0].fair]
    plain = [kind for kind in free if kind not in fair]
    picks: dict[str, list[tuple[str | None, str]]] = {}
    for kind in fair:
        picks[kind] = yield from _fair_picks(t, sql, limits[kind][0], turns[kind], caps[kind])
    walk = len(others) > KIND_HEADS_MAX
    heads = plain if walk else plain + others
    params = t.params(
        vt=visibility_timeout, by=worker_label(), all=kinds is None, kinds=sorted(kinds or ()), held=sorted(limits),
        lk=heads, caps=[caps.get(kind, count) for kind in heads], count=count,
        picked=[job_id for kind in fair for _group, job_id in picks[kind]],
    )  # fmt: skip
    jobs = [row_job(row) for row in (yield piped(sql.text["generic"], sql.claim(count, walk=walk), params))]
    for kind in free:
        held, bucket = limits[kind]
        n = sum(1 for job in jobs if job.kind == kind)
        assert n <= caps[kind], "a limited kind never takes beyond its budget"
        if n and kind in picks:  # the turns taken, in the order the picks took them
            took = {job.id for job in jobs if job.kind == kind}
            for group, job_id in picks[kind]:
                if job_id in took:
                    turned(held, turns[kind], group)
            yield run(sql.text["turn"], t.params(turns=json.dumps(turns_to_fields(turns[kind])), kind=kind))
        if bucket is None or n == 0:
            continue
        for _ in range(n):
            bucket = taken(held, bucket, now)
        yield run(sql.text["spend"], t.params(tokens=bucket.tokens, at=bucket.at, kind=kind))
    return jobs


def _fair_picks(t: ops.Target, sql: LimitStatements, held: Limit, turns: Turns, cap: int) -> Steps[list[tuple[str | None, str]]]:
    """Up to ``cap`` jobs of a fair kind as (group, id), in the order its turns take them (``turns`` is not changed)."""
    heads: dict[str | None, list[tuple[tuple[int, int], str]]] = {}
    for group, job_id, priority, seq in (yield every(sql.text["group_heads"], t.params(kind=held.kind, count=cap))):
        heads.setdefault(group, []).append(((-priority, seq), job_id))
    counts = dict((yield every(sql.text["group_leased"], t.params(kind=held.kind, group=None))))
    rotation = Turns(turns.clock, dict(turns.passes or {}))
    picked: list[tuple[str | None, str]] = []
    while len(picked) < cap:
        groups = [group for group, jobs in heads.items() if jobs]
        chosen = choose(held, rotation, [(group, heads[group][0][0], counts.get(group, 0)) for group in groups])
        if chosen is None:
            break
        group = groups[chosen]
        picked.append((group, heads[group].pop(0)[1]))
        counts[group] = counts.get(group, 0) + 1
        turned(held, rotation, group)
    return picked
