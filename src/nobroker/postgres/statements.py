"""The SQL text of every operation on the jobs table, and the parameters each one takes.

Owns: the statements (templates with the schema left open, built once per
schema by ``Statements``; the Job a row of a job's columns makes is
rows.py's), ``ClaimTexts`` (a claim's text with its count written in, kept
per count; limit_ops.py's claims use it too). The schema's name is written
in quoted by naming.quote_schema. Plain text only: nothing here
talks to a server or needs the driver. The schema itself (tables, indexes,
the backoff function) is the numbered files in sql/; schema.py applies them.
Imports: jobs, fragments, naming.

Every value travels as a named parameter; the one number written into the
text is a claim's batch size, a checked int (see ``Statements.claim``). The
parameters, by name:

- ``q`` the queue's name (every statement); ``off`` seconds added to the
  database clock (a test-only offset: every statement that reads the clock
  reads ``now()`` plus it); ``chan`` the queue's NOTIFY channel;
- ``b_base``, ``b_factor``, ``b_max``, ``b_jitter`` the queue's BackoffPolicy
  (the reclaim, nack, and every read that shows an expired lease);
- ``id`` / ``ids`` job ids; ``token`` / ``tokens`` fencing tokens (NULL: an
  operator acting by id, no check);
- enqueue: ``kind(s)``, ``prio(s)``, ``max(s)`` (max_attempts),
  ``delay(s)`` (seconds), ``key(s)`` (dedupe keys), ``payload(s)`` (JSON text),
  ``timeout`` (seconds or NULL);
- lease: ``vt`` (visibility timeout, seconds) and ``kinds`` (or none);
- ack: ``result(s)`` (JSON text or NULL); nack: ``error``, ``traceback``,
  ``delay`` (NULL: the backoff's), ``perm`` (PermanentError: straight to
  dead); extend and extend_many: ``secs``; ack_many and extend_many: ``rows`` (JSON); set_stage: ``stage``; prune: ``state``, ``keep`` (retention
  seconds), ``after`` and ``span`` (seqs); listings: ``kind`` (or NULL), ``limit``, ``offset`` and
  ``reach`` (where the page ends: limit + offset, or NULL).

A later change to how claims, reclaims or pruning work starts here (one
template each); a change to the table or its indexes is a new numbered file
in sql/.
"""

from __future__ import annotations

from ..jobs import MAX_ATTEMPT_HISTORY, BackoffPolicy
from .naming import quote_schema
from .fragments import (
    ACK_COUNTED,
    ACK_ONE_COUNTS,
    ACK_TALLY,
    BACKOFF,
    BY_DUE_TIME,
    CANCEL_COUNTED,
    CANCEL_TALLY,
    CLAIM,
    CLAIM_KINDS,
    COLUMNS,
    DELETE_TALLY,
    DIES,
    DUE,
    INSERTED,
    INSERT_COLUMNS,
    INSERT_RETURNS,
    INSERT_COUNTED,
    INSERT_ONE_COUNTS,
    INSERT_TALLY,
    KEPT_ATTEMPTS,
    LISTED,
    NACK_COUNTED,
    NACK_TALLY,
    NOMINAL,
    NOTIFY,
    NO_NOTIFY,
    NOW,
    PRUNE,
    QUIET,
    REQUEUE_TALLY,
    RETURNS,
    SHOWN,
    UNLESS_DUE,
    UNPAUSED,
    UPKEEP,
    appended,
    batch_of,
    batch_of_rows,
    batched,
    ended,
)

assert KEPT_ATTEMPTS == MAX_ATTEMPT_HISTORY, "a history written inline keeps what a Job shows"

#: Claim statements (one per batch size) kept ready to run; others are built per call.
MAX_CLAIM_STATEMENTS = 64
#: Most queue names one listing returns (for a picker or an error message).
MAX_LISTED_QUEUES = 1000


# The statements that act on one leased job (ack, nack, extend, set_stage)
# test "lease_deadline > now" and not "state = 'leased'": the schema makes
# the two equivalent, and leaving the state out keeps the partial index of
# leases from looking usable, so even a generic plan finds the row by its
# primary key instead of walking every lease.
_TEMPLATES: dict[str, str] = {
    "upkeep": UPKEEP,
    # A reclaimed or promoted job may be runnable at once, and a claim sees
    # the rows the upkeep changed only as a statement after it: lease sends
    # the two together (one round trip, one transaction).
    "claim": CLAIM.replace("{gate}", UNPAUSED),
    "claim_kinds": CLAIM_KINDS.replace("{gate}", UNPAUSED),
    "claim_checked": DUE.replace("{claim}", CLAIM.replace("{gate}", UNLESS_DUE)),
    "claim_kinds_checked": DUE.replace("{claim}", CLAIM_KINDS.replace("{gate}", UNLESS_DUE)),
    # ON CONFLICT DO NOTHING covers both the primary key (job_id) and the
    # dedupe index; the "_fresh" variants (no job_id, no dedupe_key, our own
    # connection) skip the speculative insertion, and a random id that
    # collides just fails and is drawn again.
    "insert_one": f"""
        WITH i AS (
        INSERT INTO {{schema}}.jobs AS j {INSERT_COLUMNS}
        VALUES (%(q)s, %(id)s, %(kind)s, %(prio)s, %(max)s, {NOW} + %(delay)s::float8 * interval '1 second',
                {NOW}, %(key)s, %(payload)s::json, %(delay)s::float8 > 0, %(timeout)s::float8, %(group)s)
        {{conflict}}
        RETURNING {INSERTED}, j.scheduled, j.kind
        ), {INSERT_ONE_COUNTS}{INSERT_RETURNS}""",
    "insert_many": f"""
        WITH i AS (
        INSERT INTO {{schema}}.jobs AS j {INSERT_COLUMNS}
        SELECT %(q)s, u.id, u.kind, u.prio, u.max, {NOW} + u.delay * interval '1 second', {NOW}, u.key,
               u.payload, u.delay > 0, u.timeout, u.grp
        FROM {batch_of("u")}
        ORDER BY u.ord
        {{conflict}}
        RETURNING {INSERTED}, j.scheduled, j.kind
        ), {INSERT_TALLY}, {INSERT_COUNTED}{INSERT_RETURNS}""",
    # A batch that may conflict (job ids, dedupe keys) inserts its rows in
    # key order, so two batches with the same keys in different orders wait
    # for each other instead of deadlocking; each row still gets its seq in
    # the caller's order (drawn first), so the batch stays FIFO.
    "insert_sorted": f"""
        WITH i AS (
        INSERT INTO {{schema}}.jobs AS j (seq, {INSERT_COLUMNS[1:]}
        OVERRIDING SYSTEM VALUE
        SELECT u.seq, %(q)s, u.id, u.kind, u.prio, u.max, {NOW} + u.delay * interval '1 second', {NOW}, u.key,
               u.payload, u.delay > 0, u.timeout, u.grp
        FROM (SELECT v.*, nextval(%(seqname)s::regclass) AS seq FROM (
                  SELECT * FROM {batch_of("w")} ORDER BY w.ord) AS v) AS u
        ORDER BY u.kind, u.key, u.id, u.ord
        ON CONFLICT DO NOTHING
        RETURNING {INSERTED}, j.scheduled, j.kind
        ), {INSERT_TALLY}, {INSERT_COUNTED}{INSERT_RETURNS}""",
    # Two index lookups (primary key; dedupe index) rather than one OR, which
    # no index can answer and would scan the whole queue.
    "existing": f"""
        SELECT {COLUMNS} FROM {{schema}}.jobs AS j
        WHERE j.queue = %(q)s AND j.id = ANY(%(ids)b::text[])
        UNION ALL
        SELECT {COLUMNS} FROM {{schema}}.jobs AS j
        JOIN unnest(%(kinds)b::text[], %(keys)b::text[]) AS u(kind, key)
          ON j.queue = %(q)s AND j.kind = u.kind AND j.dedupe_key = u.key AND j.state IN ('ready', 'leased')""",
    # A done job shows no lease: its token moves to finished_token (see _already_done).
    "ack": f"""
        WITH a AS (
        UPDATE {{schema}}.jobs AS j SET
            state = 'done', lease_deadline = NULL, lease_token = NULL, finished_token = j.lease_token,
            finished_at = {NOW}, {ended(NOW, "'done'")},
            result = coalesce(%(result)s::json, j.result)
        WHERE j.queue = %(q)s AND j.id = %(id)s AND j.lease_deadline > {NOW} AND NOT j.cancel_requested
          AND (%(token)s::text IS NULL OR j.lease_token = %(token)s::text)
        RETURNING 1 AS acked, j.kind
        ), {ACK_ONE_COUNTS}
        SELECT acked FROM a""",
    "ack_many": f"""
        WITH a AS (
        UPDATE {{schema}}.jobs AS j SET
            state = 'done', lease_deadline = NULL, lease_token = NULL, finished_token = j.lease_token,
            finished_at = {NOW}, {ended(NOW, "'done'")},
            result = coalesce(u.result::json, j.result)
        FROM {batch_of_rows("%(ids)b::text[], %(tokens)b::text[], %(results)b::text[]", "id, token, result")}
        WHERE j.queue = u.queue AND j.id = u.id
          AND j.lease_deadline > {NOW} AND NOT j.cancel_requested
          AND (u.token IS NULL OR j.lease_token = u.token)
        RETURNING j.id, u.token, j.kind
        ), {ACK_TALLY}, {ACK_COUNTED}
        SELECT id, token FROM a""",
    "nack": f"""
        WITH n AS (
        UPDATE {{schema}}.jobs AS j SET
            state = CASE WHEN %(perm)s OR j.attempts >= j.max_attempts THEN 'dead' ELSE 'ready' END,
            available_at = CASE WHEN %(perm)s OR j.attempts >= j.max_attempts THEN j.available_at
                           ELSE {NOW} + coalesce(%(delay)s::float8, {BACKOFF}) * interval '1 second' END,
            -- The jittered delay is positive exactly when its nominal one is.
            scheduled = NOT (%(perm)s OR j.attempts >= j.max_attempts)
                        AND coalesce(%(delay)s::float8, {NOMINAL}) > 0,
            finished_at = CASE WHEN %(perm)s OR j.attempts >= j.max_attempts THEN {NOW} END,
            last_error = %(error)s, traceback = %(traceback)s, lease_deadline = NULL, lease_token = NULL,
            {ended(NOW, "CASE WHEN %(perm)s OR j.attempts >= j.max_attempts THEN 'dead' ELSE 'failed' END")}
        WHERE j.queue = %(q)s AND j.id = %(id)s AND j.lease_deadline > {NOW} AND NOT j.cancel_requested
          AND (%(token)s::text IS NULL OR j.lease_token = %(token)s::text)
        RETURNING {COLUMNS}, j.state = 'ready' AND NOT j.scheduled AS runnable, j.scheduled AS sched
        ), {NACK_TALLY}, {NACK_COUNTED}
        SELECT n.*, CASE WHEN n.runnable THEN coalesce({NOTIFY}, 0) END FROM n""",
    "extend": f"""
        UPDATE {{schema}}.jobs AS j SET lease_deadline = {NOW} + %(secs)s::float8 * interval '1 second'
        WHERE j.queue = %(q)s AND j.id = %(id)s AND j.lease_deadline > {NOW}
          AND (%(token)s::text IS NULL OR j.lease_token = %(token)s::text)
        RETURNING {COLUMNS}""",
    # Heartbeats: every lease of the batch renewed by one statement, each row
    # found by its primary key; the rows returned say which leases held.
    "extend_many": f"""
        UPDATE {{schema}}.jobs AS j SET lease_deadline = {NOW} + %(secs)s::float8 * interval '1 second'
        FROM {batch_of_rows("%(ids)b::text[], %(tokens)b::text[]", "id, token")}
        WHERE j.queue = u.queue AND j.id = u.id AND j.lease_deadline > {NOW}
          AND (u.token IS NULL OR j.lease_token = u.token)
        RETURNING {COLUMNS}""",
    "stage": f"""
        UPDATE {{schema}}.jobs AS j SET stage = %(stage)s
        WHERE j.queue = %(q)s AND j.id = %(id)s AND j.lease_deadline > {NOW}
          AND (%(token)s::text IS NULL OR j.lease_token = %(token)s::text)
        RETURNING {COLUMNS}""",
    "why": "SELECT state, finished_token, cancel_requested, lease_token FROM {schema}.jobs WHERE queue = %(q)s AND id = %(id)s",
    # Control of jobs (issue 15). A ready job is cancelled at once; a leased
    # one is marked (whoever holds it), or with ``stopped`` cancelled when
    # the token holds its live lease (NULL: an operator).
    "cancel": f"""
        WITH c AS (
        UPDATE {{schema}}.jobs AS j SET
            state = CASE WHEN j.state = 'ready' OR %(stopped)s THEN 'cancelled' ELSE j.state END,
            cancel_requested = j.state = 'leased' AND NOT %(stopped)s,
            scheduled = false,
            finished_at = CASE WHEN j.state = 'ready' OR %(stopped)s THEN {NOW} END,
            lease_deadline = CASE WHEN j.state = 'ready' OR %(stopped)s THEN NULL ELSE j.lease_deadline END,
            lease_token = CASE WHEN j.state = 'ready' OR %(stopped)s THEN NULL ELSE j.lease_token END,
            attempt_history = CASE WHEN %(stopped)s THEN {appended(NOW, "'cancelled'")} ELSE j.attempt_history END,
            leased_at = CASE WHEN %(stopped)s THEN NULL ELSE j.leased_at END
        FROM (SELECT queue, id, scheduled AS was_scheduled FROM {{schema}}.jobs
              WHERE queue = %(q)s AND id = %(id)s FOR UPDATE) AS o
        WHERE j.queue = o.queue AND j.id = o.id
          AND (j.state = 'ready' OR (j.lease_deadline > {NOW}
               AND (NOT %(stopped)s OR %(token)s::text IS NULL OR j.lease_token = %(token)s::text)))
        RETURNING {COLUMNS}, j.state = 'cancelled' AS ends, o.was_scheduled
        ), {CANCEL_TALLY}, {CANCEL_COUNTED}
        SELECT c.* FROM c""",
    "requeue": f"""
        WITH r AS (
        UPDATE {{schema}}.jobs AS j SET
            state = 'ready', attempts = 0, available_at = {NOW}, scheduled = false, finished_at = NULL
        FROM (SELECT DISTINCT ON (d.kind, d.dedupe_key IS NULL, coalesce(d.dedupe_key, d.id)) d.queue, d.id
              FROM {{schema}}.jobs AS d
              WHERE d.queue = %(q)s AND d.state = 'dead' AND (%(id)s::text IS NULL OR d.id = %(id)s::text)
                AND (d.dedupe_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM {{schema}}.jobs AS a
                    WHERE a.queue = d.queue AND a.kind = d.kind AND a.dedupe_key = d.dedupe_key
                      AND a.state IN ('ready', 'leased')))
              ORDER BY d.kind, d.dedupe_key IS NULL, coalesce(d.dedupe_key, d.id), d.seq) AS x
        WHERE j.queue = x.queue AND j.id = x.id AND j.state = 'dead'
        RETURNING 1
        ), {REQUEUE_TALLY}
        SELECT {NOTIFY} FROM r""",
    "requeue_why": """
        SELECT d.state, (SELECT a.id FROM {schema}.jobs AS a
                         WHERE a.queue = d.queue AND a.kind = d.kind AND a.dedupe_key = d.dedupe_key
                           AND a.state IN ('ready', 'leased') LIMIT 1), d.dedupe_key
        FROM {schema}.jobs AS d WHERE d.queue = %(q)s AND d.id = %(id)s""",
    "purge": f"""
        WITH d AS (DELETE FROM {{schema}}.jobs WHERE queue = %(q)s RETURNING state, scheduled), {DELETE_TALLY}
        SELECT count(*) FROM d""",
    "prune": PRUNE,  # fragments.py: compaction and pruning, a bounded batch each
    "get": f"SELECT {SHOWN} FROM {{schema}}.jobs AS j WHERE j.queue = %(q)s AND j.id = %(id)s",
    # A listing (see _build): the rows of each part, by the partial index of
    # that part, each cut to the page's end first so none is sorted whole.
    "list_parts": f"""
        SELECT {SHOWN} FROM ({{parts}}) AS j
        ORDER BY j.seq LIMIT %(limit)s OFFSET %(offset)s""",
    # The counts the statements keep (sql/004, TALLY): active jobs (ready,
    # scheduled or leased), scheduled, done and dead; leases are counted from
    # their index (there are as many as the workers hold), and ready is what
    # remains of the active jobs. Then what the clock changed since:
    # scheduled jobs that came due, and leases whose deadline passed, which
    # count where a read shows them (see SHOWN). Both are index ranges that
    # the next claim empties. The last column is how many rows of differences
    # were summed (fold_counts folds them when they are many).
    "stats": f"""
        SELECT c.active - c.scheduled - l.leased + d.due + x.ready, c.scheduled - d.due + x.delayed,
               l.leased - x.expired, c.done, c.dead + x.dead, c.cancelled + x.cancelled, c.rows
        FROM (SELECT coalesce(sum(active), 0) AS active, coalesce(sum(scheduled), 0) AS scheduled,
                     coalesce(sum(done), 0) AS done, coalesce(sum(dead), 0) AS dead,
                     coalesce(sum(cancelled), 0) AS cancelled, count(*) AS rows
              FROM {{schema}}.counts WHERE queue = %(q)s) AS c,
             (SELECT count(*) AS leased FROM {{schema}}.jobs WHERE queue = %(q)s AND state = 'leased') AS l,
             (SELECT count(*) AS due FROM {{schema}}.jobs
              WHERE queue = %(q)s AND state = 'ready' AND scheduled AND available_at <= {NOW}) AS d,
             (SELECT count(*) AS expired,
                     count(*) FILTER (WHERE j.cancel_requested) AS cancelled,
                     count(*) FILTER (WHERE {DIES} AND NOT j.cancel_requested) AS dead,
                     count(*) FILTER (WHERE NOT {DIES} AND NOT j.cancel_requested AND {RETURNS} > {NOW}) AS delayed,
                     count(*) FILTER (WHERE NOT {DIES} AND NOT j.cancel_requested AND {RETURNS} <= {NOW}) AS ready
              FROM {{schema}}.jobs AS j
              WHERE j.queue = %(q)s AND j.state = 'leased' AND j.lease_deadline <= {NOW}) AS x""",
    "count": "SELECT coalesce(sum(active + done + dead + cancelled), 0), count(*) FROM {schema}.counts WHERE queue = %(q)s",
    # One row instead of the differences the statements added. Two folds at
    # once are safe: the second waits for the rows the first deletes, then
    # finds them gone and folds only what it deleted itself.
    "fold_counts": """
        WITH gone AS (DELETE FROM {schema}.counts WHERE queue = %(q)s
                      RETURNING active, scheduled, done, dead, cancelled)
        INSERT INTO {schema}.counts (queue, active, scheduled, done, dead, cancelled)
        SELECT %(q)s, sum(active), sum(scheduled), sum(done), sum(dead), sum(cancelled) FROM gone
        HAVING sum(active) <> 0 OR sum(scheduled) <> 0 OR sum(done) <> 0 OR sum(dead) <> 0 OR sum(cancelled) <> 0""",
    # The counters (sql/010): the rows of differences summed per kind, and how many rows there were.
    "counters": """
        SELECT kind, sum(enqueued), sum(succeeded), sum(failed), sum(dead), sum(cancelled), count(*)
        FROM {schema}.counters WHERE queue = %(q)s GROUP BY kind ORDER BY kind""",
    "fold_counters": """
        WITH gone AS (DELETE FROM {schema}.counters WHERE queue = %(q)s
                      RETURNING kind, enqueued, succeeded, failed, dead, cancelled)
        INSERT INTO {schema}.counters (queue, kind, enqueued, succeeded, failed, dead, cancelled)
        SELECT %(q)s, kind, sum(enqueued), sum(succeeded), sum(failed), sum(dead), sum(cancelled)
        FROM gone GROUP BY kind""",
    # Seconds until the queue's next scheduled job or lease comes due (NULL: none), for an idle wait.
    "next_due": f"""
        SELECT date_part('epoch', least(
            (SELECT min(available_at) FROM {{schema}}.jobs WHERE queue = %(q)s AND state = 'ready' AND scheduled),
            (SELECT min(lease_deadline) FROM {{schema}}.jobs WHERE queue = %(q)s AND state = 'leased')
        ) - {NOW})""",
    # The distinct queue names in key order, one index probe each (a loose
    # index scan over the primary key), rather than a scan of every row.
    "queue_names": """
    WITH RECURSIVE q(name) AS (
        (SELECT queue FROM {schema}.jobs ORDER BY queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM {schema}.jobs AS j WHERE j.queue > q.name ORDER BY j.queue LIMIT 1)
        FROM q WHERE q.name IS NOT NULL
    )
    SELECT name FROM q WHERE name IS NOT NULL LIMIT %(limit)s""",
}


#: One part of a listing (see "list_parts").
_PART = """(SELECT * FROM {schema}.jobs AS j
             WHERE j.queue = %(q)s AND {own} AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
             ORDER BY j.seq LIMIT %(reach)s)"""
#: The markers a template leaves open for its variants, and what each variant writes there.
_VARIANTS: dict[str, list[tuple[str, str, str]]] = {
    "insert_one": [("", "{conflict}", "ON CONFLICT DO NOTHING"), ("_fresh", "{conflict}", "")],
    "insert_many": [("", "{conflict}", "ON CONFLICT DO NOTHING"), ("_fresh", "{conflict}", "")],
}


def _part(own: str) -> str:
    """One part of a listing; one read by due time sorts by ``seq + 0``, which no index offers."""
    if own.endswith(BY_DUE_TIME):
        return _PART.replace("{own}", own[: -len(BY_DUE_TIME)]).replace("ORDER BY j.seq", "ORDER BY j.seq + 0")
    return _PART.replace("{own}", own)


def build(schema: str) -> dict[str, str]:
    """Every statement as text, by name, the schema quoted once as an identifier.

    Plain strings rather than psycopg's composed objects: psycopg caches the
    conversion of a string query, so the hot path pays for it only once.
    The claims keep their ``{count}`` open (see Statements.claim).
    """
    quoted = quote_schema(schema)
    out: dict[str, str] = {}
    for name, template in _TEMPLATES.items():
        if name == "list_parts":
            for listing, parts in LISTED.items():
                union = "\n            UNION ALL\n            ".join(_part(own) for own in parts)
                out["list" if listing is None else f"list_{listing}"] = template.replace("{parts}", union)
            continue
        for suffix, marker, text in _VARIANTS.get(name, [("", "", "")]):
            out[name + suffix] = template.replace(marker, text) if marker else template
    for name in [name for name, text in out.items() if NOTIFY in text]:
        out[name + QUIET] = out[name].replace(NOTIFY, NO_NOTIFY)
    return {name: text.replace("{schema}", quoted) for name, text in out.items()}


class ClaimTexts:
    """Claim statements with their count written in (see Statements.claim), by template and count.

    At most MAX_CLAIM_STATEMENTS are kept; others are built per call.
    """

    def __init__(self) -> None:
        self._kept: dict[tuple[str, int], str] = {}

    def text(self, template: str, count: int, c: str) -> str:
        """``template`` (its ``{count}``, ``{batch}`` and ``{batch_end}`` open) for ``count`` jobs; ``c`` as batched's."""
        # Checked before the cache too: True would find the text of 1 there.
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be a positive int, got {count!r}")
        key = (template, count)
        text = self._kept.get(key)
        if text is None:
            text = batched(template.replace("{count}", str(int(count))), count, c)
            if len(self._kept) < MAX_CLAIM_STATEMENTS:
                self._kept[key] = text
        return text


class Statements:
    """Every statement of one schema, ready to run: ``statements["ack"]``, ``statements.claim(10, kinds=False)``."""

    def __init__(self, schema: str) -> None:
        self._text = build(schema)
        self._claims = ClaimTexts()
        #: The identity sequence of the jobs table's seq (a regclass literal).
        self.sequence = f"{quote_schema(schema)}.jobs_seq_seq"

    def __getitem__(self, name: str) -> str:
        return self._text[name]

    def notifying(self, name: str, notify: bool) -> str:
        """Statement ``name`` if it is to NOTIFY, else its twin whose NOTIFY column is a NULL (QUIET)."""
        return self._text[name if notify else name + QUIET]

    def claim(self, count: int, *, kinds: bool, checked: bool = False) -> str:
        """The claim of ``count`` jobs (of some kinds only, with ``kinds``), its LIMIT written in as a number.

        ``checked``: the claim as a lease sends it first, which takes nothing
        while the upkeep has work and says so (see DUE); otherwise the plain
        claim, which a lease sends right after the upkeep.

        A parameter there would leave the server's generic plan guessing how
        many rows are wanted (a tenth of the table), and with a backlog that
        guess picks a scan of every ready job; a literal keeps the index plan.
        ``count`` is an int the facade checked, so writing it in is safe; each
        batch size is prepared once (a Worker uses a handful). The count also
        picks how the update finds the batch (fragments.JOINED_CLAIM_MAX).
        """
        name = ("claim_kinds" if kinds else "claim") + ("_checked" if checked else "")
        return self._claims.text(self._text[name], count, "c." if kinds else "")


def backoff_parameters(policy: BackoffPolicy) -> dict[str, float]:
    """A BackoffPolicy as the parameters b_base, b_factor, b_max and b_jitter."""
    return {
        "b_base": float(policy.base), "b_factor": float(policy.factor), "b_max": float(policy.max_delay),
        "b_jitter": float(policy.jitter),
    }  # fmt: skip
