-- nobroker PostgreSQL schema, version 9: time limits and attempt history (issue 15).
--
-- Cheap to apply: new nullable columns (no table rewrite, no default to
-- write into every row).

-- A job's own time limit in seconds (enqueue(..., timeout=)): a Worker fails
-- an attempt that runs longer. NULL: the Worker's timeout, if it has one.
ALTER TABLE {schema}.jobs ADD COLUMN timeout double precision;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_timeout_positive CHECK (timeout IS NULL OR timeout > 0);
