-- nobroker PostgreSQL schema, version 11: groups and fair share (issue 16's partitioned limits).
--
-- Cheap to apply: nullable columns (no table rewrite), one partial index that
-- holds only ready jobs that have a group, and a constraint replaced.

-- A job's group (enqueue(..., group=): a tenant, a customer); NULL: none.
ALTER TABLE {schema}.jobs ADD COLUMN job_group text COLLATE "C";

-- The ready jobs of each group of a kind, best first: a lease of a fair kind
-- walks the kind's groups along it (one probe per group, a skip scan) and
-- takes each group's best jobs from it. Jobs without a group are not in it.
CREATE INDEX jobs_claim_group ON {schema}.jobs (queue, kind, job_group, priority DESC, seq)
    WHERE state = 'ready' AND NOT scheduled AND job_group IS NOT NULL;
-- The leased jobs of each group, which group_concurrency counts.
CREATE INDEX jobs_leased_group ON {schema}.jobs (queue, kind, job_group)
    WHERE state = 'leased' AND job_group IS NOT NULL;

-- A limit per group: at most `group_concurrency` leased jobs of each group of
-- the kind; `weights` (a JSON object of group to weight) sets the shares of
-- the fair share between the kind's groups, which either of the two turns
-- on. `turns` is the rotation (limits.turns_to_fields: the clock and each
-- group's pass), updated by the lease that takes the turn, under the limit
-- row's lock like the bucket's tokens.
ALTER TABLE {schema}.limits
    ADD COLUMN group_concurrency integer CONSTRAINT limits_group_concurrency_positive CHECK (group_concurrency >= 1),
    ADD COLUMN weights jsonb,
    ADD COLUMN turns jsonb,
    DROP CONSTRAINT limits_some_limit,
    ADD CONSTRAINT limits_some_limit
        CHECK (concurrency IS NOT NULL OR rate IS NOT NULL OR group_concurrency IS NOT NULL OR weights IS NOT NULL);
