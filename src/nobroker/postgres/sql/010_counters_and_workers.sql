-- nobroker PostgreSQL schema, version 10: counters and worker announcements (issue 17).
--
-- Cheap to apply: two new tables, nothing rewritten.

-- The counters per queue and kind: jobs enqueued, attempts that succeeded,
-- that failed and went back to be retried, jobs dead, jobs cancelled. As the
-- counts (sql/004), they are rows of differences that the statements which
-- move jobs add in the same statement (fragments.py, COUNTED), so no row is
-- a hot spot every worker updates; a read sums them, and fold_counters folds
-- them into one row per kind when they are many. Nothing deletes from them
-- otherwise: prune, purge and compaction leave them be, so they only grow.
CREATE TABLE {schema}.counters (
    queue      text COLLATE "C" NOT NULL,
    kind       text COLLATE "C" NOT NULL,
    enqueued   bigint NOT NULL DEFAULT 0,
    succeeded  bigint NOT NULL DEFAULT 0,
    failed     bigint NOT NULL DEFAULT 0,
    dead       bigint NOT NULL DEFAULT 0,
    cancelled  bigint NOT NULL DEFAULT 0
);
CREATE INDEX counters_queue ON {schema}.counters (queue, kind);

-- The jobs already finished count from what the table holds now (their
-- attempts before this version are not known: each finished job counts one
-- outcome, each job held one enqueue).
INSERT INTO {schema}.counters (queue, kind, enqueued, succeeded, dead, cancelled)
SELECT queue, kind, count(*), count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'dead'),
       count(*) FILTER (WHERE state = 'cancelled')
FROM {schema}.jobs GROUP BY queue, kind;

-- One row per running Worker, upserted at its start and at each heartbeat
-- tick, deleted at a clean stop; one whose heartbeat is old is shown as
-- gone, and deleted once it is older still (nobroker.workers).
CREATE TABLE {schema}.workers (
    queue        text COLLATE "C" NOT NULL,
    id           text COLLATE "C" NOT NULL,
    host         text NOT NULL,
    pid          integer NOT NULL,
    name         text NOT NULL,
    kinds        json,
    concurrency  integer NOT NULL,
    started_at   double precision NOT NULL,
    running      integer NOT NULL,
    heartbeat_at double precision NOT NULL,
    CONSTRAINT workers_pkey PRIMARY KEY (queue, id)
);
