-- nobroker PostgreSQL schema, version 4: counts kept by the statements that
-- change the jobs, not by triggers.
--
-- Version 3 kept the counts with statement-level triggers. Every statement
-- on the jobs table paid for one, a plpgsql call over its transition
-- tables, even when it changed no row (a claim that found nothing, the
-- upkeep before every claim). Now each statement that moves jobs between
-- the counted sets writes its own row of differences, in the same statement
-- (statements.py, "_TALLY"), and a claim, which only moves jobs from ready
-- to leased, writes none: leases are counted from their own index when the
-- counts are read, and ready is what remains of the active jobs.
--
-- Takes ACCESS EXCLUSIVE on the jobs table while it runs (it recounts every
-- queue once): run it with `nobroker pg migrate` while the workers are
-- stopped.

LOCK TABLE {schema}.jobs IN ACCESS EXCLUSIVE MODE;
DROP TRIGGER jobs_count_inserted ON {schema}.jobs;
DROP TRIGGER jobs_count_updated ON {schema}.jobs;
DROP TRIGGER jobs_count_deleted ON {schema}.jobs;
DROP FUNCTION {schema}.count_inserted();
DROP FUNCTION {schema}.count_updated();
DROP FUNCTION {schema}.count_deleted();

-- Rows of differences per queue: active (ready, scheduled or leased: every
-- job not finished), of them scheduled, done and dead. The table is altered
-- rather than made anew, so its grants and row level security stay.
DELETE FROM {schema}.counts;
ALTER TABLE {schema}.counts
    DROP COLUMN state,
    DROP COLUMN n,
    ADD COLUMN active bigint NOT NULL DEFAULT 0,
    ADD COLUMN scheduled bigint NOT NULL DEFAULT 0,
    ADD COLUMN done bigint NOT NULL DEFAULT 0,
    ADD COLUMN dead bigint NOT NULL DEFAULT 0;

INSERT INTO {schema}.counts (queue, active, scheduled, done, dead)
SELECT queue, count(*) FILTER (WHERE state IN ('ready', 'leased')), count(*) FILTER (WHERE scheduled),
       count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'dead')
FROM {schema}.jobs GROUP BY queue;

-- TRUNCATE keeps its trigger (count_truncated, version 3): it is no
-- statement of the work, and it leaves every count at zero.
