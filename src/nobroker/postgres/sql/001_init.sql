-- nobroker PostgreSQL schema, version 1: one table that many queues share.
--
-- {schema} is replaced by the quoted schema name before this file runs
-- (nobroker.postgres.migrate does it); nothing else is templated.
-- Times are timestamptz from the database clock, so hosts with skewed
-- clocks agree on every deadline.

-- Keys compare byte for byte (COLLATE "C"): the same order whatever the
-- database's locale, and much cheaper comparisons in every index.
CREATE TABLE {schema}.jobs (
    seq            bigint GENERATED ALWAYS AS IDENTITY,
    queue          text COLLATE "C" NOT NULL,
    id             text COLLATE "C" NOT NULL,
    kind           text COLLATE "C" NOT NULL DEFAULT 'default',
    state          text COLLATE "C" NOT NULL DEFAULT 'ready'
                   CONSTRAINT jobs_state_known CHECK (state IN ('ready', 'leased', 'done', 'dead')),
    priority       integer NOT NULL DEFAULT 0,
    attempts       integer NOT NULL DEFAULT 0,
    max_attempts   integer NOT NULL,
    available_at   timestamptz NOT NULL,
    enqueued_at    timestamptz NOT NULL,
    lease_deadline timestamptz,
    lease_token    text,
    last_error     text,
    dedupe_key     text COLLATE "C",
    stage          text,
    -- json, not jsonb: the text is kept byte for byte, so every payload
    -- comes back exactly as it went in (key order, number spelling).
    payload        json NOT NULL,
    result         json,
    finished_at    timestamptz,
    CONSTRAINT jobs_pkey PRIMARY KEY (queue, id),
    -- A job has a lease deadline exactly while it is leased, so "deadline not
    -- passed" alone proves a live lease (the statements that check a token
    -- rely on it, which keeps their plans on the primary key).
    CONSTRAINT jobs_deadline_iff_leased CHECK ((state = 'leased') = (lease_deadline IS NOT NULL)),
    CONSTRAINT jobs_leased_has_token CHECK (state <> 'leased' OR lease_token IS NOT NULL)
);

-- The claim: ready rows of one queue, highest priority first, then oldest.
-- available_at rides along so stats can count ready vs delayed from the index.
CREATE INDEX jobs_claim ON {schema}.jobs (queue, priority DESC, seq) INCLUDE (available_at) WHERE state = 'ready';

-- Reclaiming expired leases: only leased rows, earliest deadline first.
CREATE INDEX jobs_leases ON {schema}.jobs (queue, lease_deadline) WHERE state = 'leased';

-- At most one ready-or-leased job per (kind, dedupe_key) in a queue.
CREATE UNIQUE INDEX jobs_dedupe ON {schema}.jobs (queue, kind, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND state IN ('ready', 'leased');

-- Finished jobs: the DLQ listing, done/dead counts, compaction.
CREATE INDEX jobs_finished ON {schema}.jobs (queue, state, seq) WHERE state IN ('done', 'dead');

-- Listing in seq order. Each row sits in three indexes at any time (this,
-- the primary key, and the one of its state), which keeps every write cheap.
CREATE INDEX jobs_seq ON {schema}.jobs (queue, seq);

-- The nominal retry delay of BackoffPolicy.delay_for, before jitter:
-- min(base * factor^(attempts-1), max_delay), computed in log space first
-- so a huge attempt count cannot overflow.
CREATE FUNCTION {schema}.backoff_delay(
    attempts integer, base double precision, factor double precision, max_delay double precision
) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN base <= 0 OR max_delay <= 0 THEN 0::double precision
        WHEN attempts <= 1 THEN least(base, max_delay)
        WHEN factor <= 0 THEN 0::double precision
        WHEN ln(greatest(base, 1e-300)) + (attempts - 1) * ln(greatest(factor, 1e-300))
             >= ln(greatest(max_delay, 1e-300)) THEN max_delay
        ELSE least(base * power(factor, attempts - 1), max_delay)
    END
$$;
