-- nobroker PostgreSQL schema, version 3: claims that stay cheap however many
-- jobs wait for a later time, counts kept as the table changes, and a table
-- that stays small.
--
-- Takes ACCESS EXCLUSIVE on the jobs table while it runs (every statement
-- below is in one transaction): run it with `nobroker pg migrate` while the
-- workers are stopped, or accept a pause of the queue for as long as it
-- takes (about a second per 100,000 jobs on a small machine).

-- A ready job whose time has not come yet is "scheduled": it sits in an
-- index of its own, ordered by when it comes due, so a claim never walks
-- over it. Every claim first moves the scheduled jobs that came due into the
-- claim's index (statements.py, "upkeep"). A scheduled job shows as ready
-- (and delayed while its time has not come) everywhere outside the table.
ALTER TABLE {schema}.jobs ADD COLUMN scheduled boolean NOT NULL DEFAULT false;

UPDATE {schema}.jobs SET scheduled = true WHERE state = 'ready' AND available_at > now();

-- When a job reached done or dead: what pruning a dead job counts from.
UPDATE {schema}.jobs SET finished_at = now() WHERE state = 'dead' AND finished_at IS NULL;

ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_scheduled_is_ready CHECK (NOT scheduled OR state = 'ready');

-- The claim: ready jobs whose time has come, highest priority first, then
-- oldest; and the same per kind, so a worker that takes some kinds only
-- never walks over the others.
DROP INDEX {schema}.jobs_claim;
CREATE INDEX jobs_claim ON {schema}.jobs (queue, priority DESC, seq) WHERE state = 'ready' AND NOT scheduled;
CREATE INDEX jobs_claim_kind ON {schema}.jobs (queue, kind, priority DESC, seq) WHERE state = 'ready' AND NOT scheduled;

-- Scheduled jobs by when they come due: the upkeep before each claim, and
-- how long an idle worker may sleep.
CREATE INDEX jobs_scheduled ON {schema}.jobs (queue, available_at) WHERE state = 'ready' AND scheduled;

-- Listing in seq order, one index per listed state: ready here, leased by
-- jobs_leases, done and dead by jobs_finished. The index of every row
-- (jobs_seq) goes: each change of state wrote an entry into it, and no
-- listing needs it any more.
DROP INDEX {schema}.jobs_seq;
CREATE INDEX jobs_ready ON {schema}.jobs (queue, scheduled, seq) WHERE state = 'ready';

-- Counts per queue and state (a scheduled job counts as "scheduled"), kept
-- by statement-level triggers as rows of differences: a write only ever
-- inserts here, so writers never wait for each other on a counter row.
-- Reading sums a queue's rows; the upkeep folds them into one row per state
-- now and then (operations.fold_counts). The triggers run as the table's
-- owner (SECURITY DEFINER, every name qualified), so a role allowed to
-- change jobs needs no grant on the counts to do so.
CREATE TABLE {schema}.counts (
    queue text COLLATE "C" NOT NULL,
    state text COLLATE "C" NOT NULL,
    n     bigint NOT NULL
);
CREATE INDEX counts_queue ON {schema}.counts (queue);

INSERT INTO {schema}.counts (queue, state, n)
SELECT queue, CASE WHEN scheduled THEN 'scheduled' ELSE state END, count(*) FROM {schema}.jobs GROUP BY 1, 2;

CREATE FUNCTION {schema}.count_inserted() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO {schema}.counts (queue, state, n)
    SELECT queue, CASE WHEN scheduled THEN 'scheduled' ELSE state END, count(*) FROM new_rows GROUP BY 1, 2;
    RETURN NULL;
END
$$;

CREATE FUNCTION {schema}.count_updated() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO {schema}.counts (queue, state, n)
    SELECT queue, state, sum(n) FROM (
        SELECT queue, CASE WHEN scheduled THEN 'scheduled' ELSE state END AS state, 1 AS n FROM new_rows
        UNION ALL
        SELECT queue, CASE WHEN scheduled THEN 'scheduled' ELSE state END, -1 FROM old_rows
    ) AS d
    GROUP BY 1, 2 HAVING sum(n) <> 0;
    RETURN NULL;
END
$$;

CREATE FUNCTION {schema}.count_deleted() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO {schema}.counts (queue, state, n)
    SELECT queue, CASE WHEN scheduled THEN 'scheduled' ELSE state END, -count(*) FROM old_rows GROUP BY 1, 2;
    RETURN NULL;
END
$$;

CREATE FUNCTION {schema}.count_truncated() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {schema}.counts;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_count_inserted AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_inserted();
CREATE TRIGGER jobs_count_updated AFTER UPDATE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_updated();
CREATE TRIGGER jobs_count_deleted AFTER DELETE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_deleted();
CREATE TRIGGER jobs_count_truncated AFTER TRUNCATE ON {schema}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_truncated();

-- A queue table is all churn: vacuum it after 2% of its rows changed (the
-- default waits for 20%), without the default's pauses, and analyze it as
-- often, so dead rows never pile up in front of a claim. A little free room
-- on each page lets the updates that change no indexed column (set_stage)
-- stay on their page.
ALTER TABLE {schema}.jobs SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE {schema}.counts SET (
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);
