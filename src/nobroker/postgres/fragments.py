"""The pieces every statement is made of: the clock, a job's columns, how an expired lease shows, the claim.

Owns: the SQL fragments that statements.py puts together, one per idea: the
database clock with the test-only offset (``NOW``), the columns a job is read
back in (``COLUMNS``, in ``row_job``'s order), the backoff, how a read shows
an expired or cancelled lease (``SHOWN``), the history an attempt's end
writes (``appended``, ``ended``), the parts of each listing, the
upkeep and the claim, a batch of pruning (``PRUNE``), a batch's rows, the
count tallies each write adds (``*_TALLY``) and its counters
(``*_COUNTED``). Plain text, no driver. Imports: nothing from nobroker.
"""

from __future__ import annotations

#: Most expired leases one operation reclaims; the next operation takes the rest.
RECLAIM_BATCH = 1000
#: Most scheduled jobs that came due one claim moves into the claim's index; the next claim moves the rest.
PROMOTE_BATCH = 1000
#: The largest claim whose batch is joined to the update (see CLAIM); larger ones go by primary key.
JOINED_CLAIM_MAX = 16
#: A claim's batch as the update finds it, joined (small) or by primary key: what opens its
#: subquery up to the FROM (its columns: ``{c}`` the kinds' claim's alias), and what closes it.
#: The join names the queue from the subquery's rows: a constant there would let the plan
#: rescan the subquery once per job of the queue, each time locking another.
JOINED_BATCH = ("FROM (\n            SELECT {c}queue, {c}id", ") AS x\n        WHERE j.queue = x.queue AND j.id = x.id")
KEYED_BATCH = ("WHERE j.queue = %(q)s AND j.id = ANY(ARRAY(\n            SELECT {c}id", "))")


def batched(text: str, count: int, c: str) -> str:
    """``text`` with its ``{batch}`` and ``{batch_end}`` filled for a claim of ``count`` (JOINED_CLAIM_MAX).

    ``c``: the alias the batch's columns come from ("" or "c.").
    """
    batch, batch_end = JOINED_BATCH if count <= JOINED_CLAIM_MAX else KEYED_BATCH
    return text.replace("{batch}", batch.format(c=c)).replace("{batch_end}", batch_end)


#: Most done or dead jobs one DELETE of compaction or pruning removes (each batch is its own transaction).
PRUNE_BATCH = 2000
#: The widest span of seqs one batch of pruning looks in, from the first finished job after where
#: the batch before it stopped: the most rows it reads, whatever plan the server picks for it.
#: Its span starts at PRUNE_BATCH and widens where a queue's finished jobs are sparse (queues share seqs).
MAX_PRUNE_SPAN = 8 * PRUNE_BATCH


# Every template names the table as {schema}.jobs; Statements writes the
# quoted schema in once. NOW is the database clock plus the test-only offset.
NOW = "(now() + %(off)s::float8 * interval '1 second')"
#: What a statement that returns a whole job returns, in the order row_job reads.
COLUMNS = (
    "j.id, j.payload::text, j.priority, j.state, j.attempts, j.max_attempts, "
    "date_part('epoch', j.available_at), date_part('epoch', j.enqueued_at), "
    "date_part('epoch', j.lease_deadline), j.lease_token, j.last_error, j.seq, "
    "j.kind, j.dedupe_key, j.stage, j.result::text, j.traceback, j.cancel_requested, j.timeout, "
    "j.attempt_history::text, j.leased_by, date_part('epoch', j.leased_at), date_part('epoch', j.lease_deadline), "
    "j.job_group"
)
NOMINAL = "{schema}.backoff_delay(j.attempts, %(b_base)s, %(b_factor)s, %(b_max)s)"
BACKOFF = f"{NOMINAL} * (1 - %(b_jitter)s * random())"
EXPIRY_ERROR = "'lease expired on attempt ' || j.attempts || ' of ' || j.max_attempts"
# Reads never write, yet show the queue as of now (as the file storage does):
# a lease whose deadline passed shows as the reclaim a writer will record,
# dead at max_attempts, else ready at the deadline plus the backoff's delay
# before jitter (the reclaim counts the backoff from the deadline too).
LAPSED = f"(j.state = 'leased' AND j.lease_deadline <= {NOW})"
#: An expired lease that a reclaim gives back (ready, or dead at max_attempts) ...
EXPIRED = f"({LAPSED[1:-1]} AND NOT j.cancel_requested)"
#: ... and one that a reclaim ends cancelled (its cancel was asked for while it ran).
CANCELS = f"({LAPSED[1:-1]} AND j.cancel_requested)"
#: When an expired lease's job is ready again, as reads show it (without the jitter).
RETURNS = f"(j.lease_deadline + {NOMINAL} * interval '1 second')"
DIES = "j.attempts >= j.max_attempts"
SHOWN = (
    f"j.id, j.payload::text, j.priority, "
    f"CASE WHEN {CANCELS} THEN 'cancelled' WHEN {EXPIRED} THEN CASE WHEN {DIES} THEN 'dead' ELSE 'ready' END "
    "ELSE j.state END, "
    "j.attempts, j.max_attempts, "
    f"date_part('epoch', CASE WHEN {EXPIRED} AND NOT {DIES} "
    f"THEN {RETURNS} ELSE j.available_at END), "
    "date_part('epoch', j.enqueued_at), "
    f"date_part('epoch', CASE WHEN {LAPSED} THEN NULL ELSE j.lease_deadline END), "
    f"CASE WHEN {LAPSED} THEN NULL ELSE j.lease_token END, "
    f"CASE WHEN {EXPIRED} AND {DIES} THEN {EXPIRY_ERROR} ELSE j.last_error END, "
    "j.seq, j.kind, j.dedupe_key, j.stage, j.result::text, "
    f"CASE WHEN {EXPIRED} AND {DIES} THEN NULL ELSE j.traceback END, "
    f"j.cancel_requested AND NOT {LAPSED}, j.timeout, "
    "j.attempt_history::text, j.leased_by, date_part('epoch', j.leased_at), date_part('epoch', j.lease_deadline), "
    "j.job_group"
)


#: Attempts a job's history keeps (jobs.MAX_ATTEMPT_HISTORY; sql/009's attempt_appended keeps as many).
KEPT_ATTEMPTS = 20


def appended(finished: str, outcome: str) -> str:
    """The job's attempt history with its running attempt appended, the oldest dropped past KEPT_ATTEMPTS.

    What sql/009's attempt_appended returns, written out: that function is
    planned afresh on every execution of the statement that calls it (a SQL
    function with a subquery is never inlined), which cost an ack about as
    much server time as the rest of it. A history holds at most
    KEPT_ATTEMPTS, so dropping its first element (``- 0``) is enough; one
    longer than that (never written so) still goes through the function.
    """
    attempt = (
        "jsonb_build_array(jsonb_build_array(j.attempts, date_part('epoch', j.leased_at), "
        f"date_part('epoch', {finished}), j.leased_by, {outcome}))"
    )
    return (
        "CASE WHEN j.leased_at IS NULL THEN j.attempt_history "
        f"WHEN jsonb_array_length(coalesce(j.attempt_history, '[]'::jsonb)) <= {KEPT_ATTEMPTS} THEN "
        f"(CASE WHEN jsonb_array_length(j.attempt_history) = {KEPT_ATTEMPTS} THEN j.attempt_history - 0 "
        f"ELSE coalesce(j.attempt_history, '[]'::jsonb) END) || {attempt} "
        "ELSE {schema}.attempt_appended(j.attempt_history, j.attempts, j.leased_at, "
        f"{finished}, j.leased_by, {outcome}) END"
    )


def ended(finished: str, outcome: str) -> str:
    """What a statement that ends the running attempt sets: its history, one attempt longer (sql/009)."""
    return f"attempt_history = {appended(finished, outcome)}, leased_at = NULL, leased_by = NULL"
#: Marks a part read by due time (jobs_scheduled, a short range that the next
#: claim empties) and sorted after, rather than walked in seq order through
#: every scheduled job whose time has not come.
BY_DUE_TIME = " /* by due time */"
#: Per listing (jobs.LISTINGS), and None for every job: the parts a listing
#: is the union of, each served by one partial index (jobs_ready by its two
#: halves, jobs_scheduled, jobs_leases, jobs_finished), then the expired
#: leases a read shows in it. A ready job that is not scheduled is runnable:
#: its time had come when it was written.
LISTED: dict[str | None, tuple[str, ...]] = {
    None: ("j.state = 'ready' AND NOT j.scheduled", "j.state = 'ready' AND j.scheduled", "j.state = 'leased'",
           "j.state = 'done'", "j.state = 'dead'", "j.state = 'cancelled'"),
    "ready": ("j.state = 'ready' AND NOT j.scheduled", "j.state = 'ready' AND j.scheduled",
              f"{EXPIRED} AND NOT {DIES}"),
    "runnable": ("j.state = 'ready' AND NOT j.scheduled",
                 f"j.state = 'ready' AND j.scheduled AND j.available_at <= {NOW}" + BY_DUE_TIME,
                 f"{EXPIRED} AND NOT {DIES} AND {RETURNS} <= {NOW}"),
    "delayed": (f"j.state = 'ready' AND j.scheduled AND j.available_at > {NOW}",
                f"{EXPIRED} AND NOT {DIES} AND {RETURNS} > {NOW}"),
    "leased": (f"j.state = 'leased' AND j.lease_deadline > {NOW}",),
    "done": ("j.state = 'done'",),
    "dead": ("j.state = 'dead'", f"{EXPIRED} AND {DIES}"),
    "cancelled": ("j.state = 'cancelled'", CANCELS),
}

#: Every statement that ends an attempt or adds jobs adds, in the same
#: statement, its rows of differences to the counters (sql/010): one row per
#: kind it touched, from the rows it changed (``{source}``, a CTE that
#: returns each row's kind). Counters only grow: nothing else writes them.
COUNTED = """counted AS (
            INSERT INTO {{schema}}.counters (queue, kind, enqueued, succeeded, failed, dead, cancelled)
            SELECT %(q)s, {source}.kind, {enqueued}, {succeeded}, {failed}, {dead}, {cancelled}
            FROM {source} GROUP BY {source}.kind
        )"""


def counted(source: str, *, enqueued: str = "0", succeeded: str = "0", failed: str = "0", dead: str = "0",
            cancelled: str = "0") -> str:  # fmt: skip
    """The COUNTED CTE over ``source``: each argument, an aggregate of its rows (a column of zeros by default)."""
    return COUNTED.format(
        source=source, enqueued=enqueued, succeeded=succeeded, failed=failed, dead=dead, cancelled=cancelled
    )


def _filtered(source: str, condition: str) -> str:
    return f"count(*) FILTER (WHERE {source}.{condition})"


#: The upkeep's (``reclaimed``): an expired lease retried is a failure; dead or cancelled, one of those.
RECLAIM_COUNTED = counted(
    "reclaimed", failed=_filtered("reclaimed", "state = 'ready'"), dead=_filtered("reclaimed", "state = 'dead'"),
    cancelled=_filtered("reclaimed", "state = 'cancelled'"),
)
#: An insert's (``i``): each row a job enqueued.
INSERT_COUNTED = counted("i", enqueued="count(*)")
#: An ack's (``a``): each row an attempt that succeeded.
ACK_COUNTED = counted("a", succeeded="count(*)")
#: A nack's (``n``): back to ready (scheduled or not) a failure, else dead.
NACK_COUNTED = counted("n", failed=_filtered("n", "state = 'ready'"), dead=_filtered("n", "state = 'dead'"))
#: A cancel's (``c``): the rows it ended (a mark counts nothing: the end of that lease does).
CANCEL_COUNTED = counted("c", cancelled=_filtered("c", "ends"))


# The upkeep every claim sends first (one statement): expired leases back
# to ready (or dead at max_attempts), and scheduled jobs that came due into
# the claim's index. Each part takes a bounded batch; the next claim takes the
# rest. The retry time is drawn once per job (in "expired"), so whether the
# job is scheduled agrees with the time it got.
UPKEEP = f"""
        WITH expired AS (
            SELECT j.queue, j.id, j.cancel_requested AS cancels,
                   j.attempts >= j.max_attempts AND NOT j.cancel_requested AS dies,
                   j.lease_deadline + ({BACKOFF}) * interval '1 second' AS back_at
            FROM {{schema}}.jobs AS j
            WHERE j.queue = %(q)s AND j.state = 'leased' AND j.lease_deadline <= {NOW}
            ORDER BY j.lease_deadline LIMIT {RECLAIM_BATCH} FOR UPDATE SKIP LOCKED
        ), reclaimed AS (
            UPDATE {{schema}}.jobs AS j SET
                state = CASE WHEN x.cancels THEN 'cancelled' WHEN x.dies THEN 'dead' ELSE 'ready' END,
                available_at = CASE WHEN x.dies OR x.cancels THEN j.available_at ELSE x.back_at END,
                scheduled = NOT x.dies AND NOT x.cancels AND x.back_at > {NOW},
                finished_at = CASE WHEN x.dies OR x.cancels THEN {NOW} END,
                cancel_requested = false,
                last_error = CASE WHEN x.dies THEN {EXPIRY_ERROR} ELSE j.last_error END,
                traceback = CASE WHEN x.dies THEN NULL ELSE j.traceback END,
                {ended("j.lease_deadline", "CASE WHEN x.cancels THEN 'cancelled' ELSE 'expired' END")},
                lease_deadline = NULL, lease_token = NULL
            FROM expired AS x
            WHERE j.queue = %(q)s AND j.id = ANY(ARRAY(SELECT id FROM expired)) AND j.id = x.id
            RETURNING j.state, j.scheduled, j.kind
        ), came_due AS (
            SELECT id FROM {{schema}}.jobs
            WHERE queue = %(q)s AND state = 'ready' AND scheduled AND available_at <= {NOW}
            ORDER BY available_at LIMIT {PROMOTE_BATCH} FOR UPDATE SKIP LOCKED
        ), promoted AS (
            UPDATE {{schema}}.jobs AS j SET scheduled = false
            FROM came_due AS x
            WHERE j.queue = %(q)s AND j.id = ANY(ARRAY(SELECT id FROM came_due)) AND j.id = x.id
            RETURNING 1
        ), tally AS (
            INSERT INTO {{schema}}.counts (queue, active, scheduled, dead, cancelled)
            SELECT %(q)s, -r.dead - r.cancelled, r.scheduled - p.promoted, r.dead, r.cancelled
            FROM (SELECT count(*) FILTER (WHERE state = 'dead') AS dead,
                         count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
                         count(*) FILTER (WHERE scheduled) AS scheduled FROM reclaimed) AS r,
                 (SELECT count(*) AS promoted FROM promoted) AS p
            WHERE r.dead <> 0 OR r.cancelled <> 0 OR r.scheduled <> p.promoted
        ), {RECLAIM_COUNTED}
        SELECT (SELECT count(*) FROM reclaimed), (SELECT count(*) FROM promoted)"""
#: The claim takes no job of a paused kind, and none while the whole queue is paused
#: (sql/008: a row of ``pauses`` with kind '' is the whole queue). The pauses are read
#: once per statement (an InitPlan). The checked claim (DUE) needs no such filter: it
#: takes nothing from a queue with any pause, which limit_ops.lease leases kind by kind
#: past its paused kinds (a filter of each ready job walked over a paused kind's backlog).
UNPAUSED = (
    " AND NOT (ARRAY['', kind] && ARRAY(SELECT p.kind FROM {schema}.pauses AS p WHERE p.queue = %(q)s))"
)
# A claim commits without waiting for its WAL to reach the disk: the lease
# becomes durable with the next flush, its ack's at the latest (the ack
# commits after it, and a commit flushes the WAL up to itself), as a lease
# of the file storage becomes durable with the log's next fsync. A server
# crash before that flush gives the jobs back as they were before the claim
# (ready again, the attempt not counted): at-least-once, and the fencing
# token refuses the lost lease's ack. Set for the claim's transaction only
# (the upkeep sent with it shares it), by an InitPlan that runs once when
# the claim updates its first row (a claim that takes nothing commits
# nothing). Measured: 4 processes draining one job per claim ran 20-35%
# faster, one process 20-40%.
DEFERRED_FLUSH = "(SELECT left(set_config('synchronous_commit', 'off', true), 0))"
CLAIM_SET = f"""
        UPDATE {{schema}}.jobs AS j SET
            state = 'leased', attempts = j.attempts + 1, stage = NULL, leased_by = %(by)s || {DEFERRED_FLUSH},
            leased_at = {NOW},
            lease_token = replace(gen_random_uuid()::text, '-', ''),
            lease_deadline = {NOW} + %(vt)s::float8 * interval '1 second'"""
# The claim reads only the claim's index: ready jobs whose time has come
# (the upkeep moved the scheduled ones that came due there). The time is
# checked as well, for rows a release before version 3 of the schema wrote
# (a delayed job it enqueued is ready and not marked scheduled).
#
# Every batch here is picked and locked by a subquery, then updated. A join
# to it is planned for the LIMIT's count of rows: for a count of 1,000 on a
# table of 20,000 that is a hash join over a scan of the whole table, however
# few jobs the batch finds. So a claim of more than JOINED_CLAIM_MAX is
# updated by its primary key, ``id = ANY(ARRAY(...))``; a small one keeps the
# join, a probe of the key per row in any plan, where the array's plan on a
# table not yet analyzed reads every row of the queue (a drain of one job per
# claim ran at half the rate). The upkeep's parts offer the plan both (a CTE
# joined and its ids as an array): the key probed per row, or by the array.
# ``{gate}``: what holds the claim back, written in by statements.py: the
# checked claim's UNLESS_DUE, or the claim after the upkeep's UNPAUSED.
CLAIM = f"""{CLAIM_SET}
        {{batch}} FROM {{schema}}.jobs
            WHERE queue = %(q)s AND state = 'ready' AND NOT scheduled AND available_at <= {NOW}{{gate}}
            ORDER BY priority DESC, seq LIMIT {{count}} FOR UPDATE SKIP LOCKED{{batch_end}}
        RETURNING {COLUMNS}"""
# Some kinds only: the head of each kind's own index (jobs_claim_kind), then
# the best of those heads, so jobs of other kinds are never walked over.
# Rows a kind's head locked but the batch did not take are free again at
# commit, the end of this statement.
CLAIM_KINDS = f"""{CLAIM_SET}
        {{batch}} FROM unnest(%(kinds)b::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                SELECT queue, id, priority, seq FROM {{schema}}.jobs
                WHERE queue = %(q)s AND kind = k.kind AND state = 'ready' AND NOT scheduled
                  AND available_at <= {NOW}{{gate}}
                ORDER BY priority DESC, seq LIMIT {{count}} FOR UPDATE SKIP LOCKED) AS c
            ORDER BY c.priority DESC, c.seq LIMIT {{count}}{{batch_end}}
        RETURNING {COLUMNS}"""
# A claim as it is sent first: the upkeep has work only when a scheduled job
# came due or a lease expired, which the head of each of their indexes
# tells; a queue with limits (a probe of the limits table's key) is leased
# from under its limits' locks instead, and this claim takes nothing. Then the claim takes nothing and says so (its one row has no job
# and ``upkeep`` true), and the caller sends the upkeep and the plain claim
# together; otherwise this one statement is the whole lease, and its rows
# are the jobs (a row without a job, when there is none to take). Each
# probe reads the earliest entry in index order rather than asking EXISTS:
# with many rows of other queues in the way, a generic plan for EXISTS
# guesses that a scan of the table finds one soon.
DUE = f"""
        WITH due AS (
            SELECT coalesce((SELECT available_at FROM {{schema}}.jobs
                             WHERE queue = %(q)s AND state = 'ready' AND scheduled
                             ORDER BY available_at LIMIT 1) <= {NOW}, false)
                OR coalesce((SELECT lease_deadline FROM {{schema}}.jobs
                             WHERE queue = %(q)s AND state = 'leased'
                             ORDER BY lease_deadline LIMIT 1) <= {NOW}, false) AS upkeep,
                   EXISTS (SELECT 1 FROM {{schema}}.limits WHERE queue = %(q)s) AS limited,
                   EXISTS (SELECT 1 FROM {{schema}}.pauses WHERE queue = %(q)s) AS paused
        ), claimed AS ({{claim}}
        )
        SELECT claimed.*, due.upkeep, due.limited, due.paused FROM due LEFT JOIN claimed ON true"""
#: What the checked claim adds to its WHERE: nothing is taken while the upkeep has
#: work, nor from a queue with limits (its leases lock the limits first: limit_ops.py)
#: or pauses (leased kind by kind there too, past the paused kinds).
UNLESS_DUE = " AND NOT (SELECT upkeep OR limited OR paused FROM due)"
#: The NOTIFY a statement sends when ``notify`` is true (an InitPlan: run once, and only when asked).
NOTIFY = "(SELECT 1 FROM pg_notify(%(chan)s, '') WHERE %(notify)s)"
#: The twin of each statement that may NOTIFY, for a call that does not (statements.Statements.notifying),
#: has this suffix and NO_NOTIFY in its place: no InitPlan set up at each execution. Measured per single
#: enqueue (most are told not to NOTIFY), the server's CPU was 2 to 15 µs lower, of 156 to 186.
QUIET, NO_NOTIFY = "_quiet", "NULL::int"
#: What an insert returns: the rest of the Job is known to the caller already.
INSERTED = "j.id, j.seq, date_part('epoch', j.available_at) AS available, date_part('epoch', j.enqueued_at) AS enqueued"


def batch_of(alias: str) -> str:
    """A batch of jobs as one parameter, ``rows``: a JSON array of objects with the keys below.

    enqueueing.batch_rows writes it, each payload its JSON text as is (a
    json value keeps its text byte for byte). One text to send instead of an
    array per column, which the driver would build element by element.
    """
    # A payload that is JSON null comes out of json_to_recordset as SQL NULL:
    # coalesce gives it back its JSON text, as the column (NOT NULL) stores it.
    return f"""(SELECT r.id, r.kind, r.prio, r.max, r.delay, r.key, coalesce(r.payload, 'null'::json) AS payload,
                    r.timeout, r.grp, r.ord
             FROM ROWS FROM (json_to_recordset(%(rows)s::json) AS (
                 id text, kind text, prio int4, max int4, delay float8, key text, payload json, timeout float8,
                 grp text))
             WITH ORDINALITY AS r(id, kind, prio, max, delay, key, payload, timeout, grp, ord)) AS {alias}"""


# A batch of jobs an ack or a heartbeat names, ``u``: one array per column, ``n`` rows, each
# with the queue as a column of its own. Joined to the jobs on ``j.queue = u.queue AND
# j.id = u.id``, a plan can find a job only by a probe of the primary key per row or by a
# scan of the whole table, which the planner costs by the table's true size. A parameter
# compared with ``j.queue`` (or an array of ids) would let it read the queue's part of the
# key instead, and on a table never analyzed it guesses that part holds 0.5% of the table:
# with 4,000 jobs, a Worker's acks read 14 million index entries. The LIMIT keeps the
# subquery whole (not merged into the join), and a generic plan's guess of its rows (a
# tenth of an array's guessed ten) makes the probes cheaper than a scan of any table of
# more than a few pages.
def batch_of_rows(arrays: str, columns: str) -> str:
    """The batch as ``u`` (see above): ``columns`` named for the parameters ``arrays`` unnests."""
    return f"(SELECT %(q)s::text AS queue, r.* FROM unnest({arrays}) AS r({columns}) LIMIT %(n)s) AS u"


#: Every statement that moves jobs between the counted sets (active: ready,
#: scheduled or leased; scheduled; done; dead) adds its row of differences
#: to the counts in the same statement, computed from the rows it changed
#: (``{source}``, a CTE): a claim (ready to leased) moves none and writes none.
TALLY = """tally AS (
            INSERT INTO {{schema}}.counts (queue, active, scheduled, done, dead, cancelled)
            SELECT %(q)s, {active}, {scheduled}, {done}, {dead}, {cancelled} FROM {source} HAVING {having}
        )"""
#: An insert's CTE (``i``), its tally and the rows it returns.
INSERT_TALLY = TALLY.format(cancelled="0", 
    source="i", active="count(*)", scheduled="count(*) FILTER (WHERE i.scheduled)", done="0", dead="0",
    having="count(*) > 0",
)
INSERT_RETURNS = f"""
        SELECT i.id, i.seq, i.available, i.enqueued, {NOTIFY} FROM i"""
INSERT_COLUMNS = (
    "(queue, id, kind, priority, max_attempts, available_at, enqueued_at, dedupe_key, payload, scheduled, timeout,"
    " job_group)"
)

#: An ack's (``a``): leased to done.
ACK_TALLY = TALLY.format(cancelled="0", source="a", active="-count(*)", scheduled="0", done="count(*)", dead="0",
                           having="count(*) > 0")  # fmt: skip
#: A nack's (``n``): leased to dead, to scheduled, or to ready (which moves no count).
NACK_TALLY = TALLY.format(cancelled="0", 
    source="n", active="-count(*) FILTER (WHERE n.state = 'dead')", scheduled="count(*) FILTER (WHERE n.sched)",
    done="0", dead="count(*) FILTER (WHERE n.state = 'dead')", having="bool_or(n.state = 'dead' OR n.sched)",
)
#: requeue_dead's (``r``): dead to ready.
REQUEUE_TALLY = TALLY.format(cancelled="0", source="r", active="count(*)", scheduled="0", done="0", dead="-count(*)",
                               having="count(*) > 0")  # fmt: skip
#: A DELETE's (``d``, returning each row's state and scheduled): out of whatever set each row was in.
DELETE_TALLY = TALLY.format(
    source="d", active="-count(*) FILTER (WHERE d.state IN ('ready', 'leased'))",
    scheduled="-count(*) FILTER (WHERE d.scheduled)", done="-count(*) FILTER (WHERE d.state = 'done')",
    dead="-count(*) FILTER (WHERE d.state = 'dead')", having="count(*) > 0",
    cancelled="-count(*) FILTER (WHERE d.state = 'cancelled')",
)

#: A pruning batch's jobs: one queue's, in one finished state (the constant list: jobs_finished's predicate).
_FINISHED = "queue = %(q)s AND state = %(state)s AND state IN ('done', 'dead', 'cancelled')"
# Compaction and pruning: a batch of jobs in one ``state`` finished ``keep`` s ago or more,
# each batch (its own transaction) from the first such job after ``after``, within ``span``
# seqs of it: a bounded range of the finished jobs' index, never a sort of them all, whatever
# the (generic) plan. It returns how many it deleted, how many it took (``c``: whether the
# batch was full), the last seq it took, and, for a batch not full, the first job past its
# span. Rows go by their place (ctid), no join; one changed meanwhile has moved, and stays,
# and the batch is still as full as what it took: the next one starts after that, not past
# the span.
PRUNE = f"""
        WITH b AS MATERIALIZED (
            SELECT min(seq) AS first FROM {{schema}}.jobs WHERE {_FINISHED} AND seq > %(after)s::bigint
        ), c AS MATERIALIZED (
            SELECT ctid, seq FROM {{schema}}.jobs
            WHERE {_FINISHED} AND seq >= (SELECT first FROM b) AND seq < (SELECT first FROM b) + %(span)s::bigint
              AND finished_at <= {NOW} - %(keep)s::float8 * interval '1 second'
            ORDER BY seq LIMIT {PRUNE_BATCH}
        ), d AS (
        DELETE FROM {{schema}}.jobs AS j
        WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM c)) AND j.state = %(state)s
        RETURNING j.state, j.scheduled
        ), {DELETE_TALLY}
        SELECT (SELECT count(*) FROM d), count(*), max(c.seq), CASE WHEN count(*) < {PRUNE_BATCH} THEN (
            SELECT min(seq) FROM {{schema}}.jobs
            WHERE {_FINISHED} AND seq >= (SELECT first FROM b) + %(span)s::bigint) END
        FROM c"""

#: The same rows for a statement that changes one job at most (its ``{source}`` holds 0
#: or 1 rows: a single insert, an ack by primary key): each column an expression of that
#: row, no aggregate, no row when it changed none. Measured per single enqueue: the
#: aggregate's nodes (set up at every execution) cost the server about 8 µs of its 170.
ONE_ROW = """tally AS (
            INSERT INTO {{schema}}.counts (queue, active, scheduled, done, dead, cancelled)
            SELECT %(q)s, {active}, {scheduled}, {done}, 0, 0 FROM {source}
        ), counted AS (
            INSERT INTO {{schema}}.counters (queue, kind, enqueued, succeeded, failed, dead, cancelled)
            SELECT %(q)s, {source}.kind, {enqueued}, {succeeded}, 0, 0, 0 FROM {source}
        )"""
#: A single insert's (``i``): INSERT_TALLY and INSERT_COUNTED of its one row.
INSERT_ONE_COUNTS = ONE_ROW.format(source="i", active="1", scheduled="i.scheduled::int", done="0", enqueued="1",
                                   succeeded="0")  # fmt: skip
#: A single ack's (``a``): ACK_TALLY and ACK_COUNTED of its one row.
ACK_ONE_COUNTS = ONE_ROW.format(source="a", active="-1", scheduled="0", done="1", enqueued="0", succeeded="1")

#: A cancel's (``c``): ready, scheduled or leased to cancelled; a mark moves no count.
CANCEL_TALLY = TALLY.format(
    source="c", active="-count(*) FILTER (WHERE c.ends)", scheduled="-count(*) FILTER (WHERE c.ends AND c.was_scheduled)",
    done="0", dead="0", cancelled="count(*) FILTER (WHERE c.ends)", having="bool_or(c.ends)",
)
