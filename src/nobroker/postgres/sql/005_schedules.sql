-- nobroker PostgreSQL schema, version 5: periodic jobs (Queue.schedule).
--
-- One row per schedule of a queue. Its times are epoch seconds of the
-- database clock (double precision), as nobroker.schedules computes them:
-- next_run is when the oldest tick not yet enqueued is due, anchor when an
-- every= schedule was defined (its ticks fall at anchor + k * every). A
-- worker enqueues the due ticks and moves next_run past them in one
-- transaction that holds the row (FOR UPDATE SKIP LOCKED), so each tick is
-- enqueued once however many workers look.

CREATE TABLE {schema}.schedules (
    queue     text COLLATE "C" NOT NULL,
    name      text COLLATE "C" NOT NULL,
    -- json, not jsonb: the payload text is kept byte for byte, as the jobs' is.
    payload   json NOT NULL,
    every     double precision,
    cron      text,
    kind      text COLLATE "C" NOT NULL,
    priority  integer NOT NULL,
    tz        text,
    catch_up  text NOT NULL CONSTRAINT schedules_catch_up_known CHECK (catch_up IN ('none', 'last', 'all')),
    anchor    double precision NOT NULL,
    next_run  double precision NOT NULL,
    CONSTRAINT schedules_pkey PRIMARY KEY (queue, name),
    CONSTRAINT schedules_every_or_cron CHECK ((every IS NULL) <> (cron IS NULL))
);
