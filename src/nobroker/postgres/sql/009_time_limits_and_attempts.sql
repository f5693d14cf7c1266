-- nobroker PostgreSQL schema, version 9: time limits and attempt history (issue 15).
--
-- Cheap to apply: new nullable columns (no table rewrite, no default to
-- write into every row).

-- A job's own time limit in seconds (enqueue(..., timeout=)): a Worker fails
-- an attempt that runs longer. NULL: the Worker's timeout, if it has one.
ALTER TABLE {schema}.jobs ADD COLUMN timeout double precision;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_timeout_positive CHECK (timeout IS NULL OR timeout > 0);

-- Attempt history: who runs the attempt now and since when (the claim sets
-- them), and the attempts that ended, each [attempt, started, finished,
-- worker, outcome] (epoch seconds), the last 20 (jobs.MAX_ATTEMPT_HISTORY),
-- appended by the statement that ends the attempt: ack, nack, the reclaim of
-- an expired lease (finished at its deadline), cancel. NULL until the first.
ALTER TABLE {schema}.jobs ADD COLUMN leased_by text;
ALTER TABLE {schema}.jobs ADD COLUMN leased_at timestamptz;
ALTER TABLE {schema}.jobs ADD COLUMN attempt_history jsonb;

CREATE OR REPLACE FUNCTION {schema}.attempt_appended(
    history jsonb, attempt integer, started timestamptz, finished timestamptz, worker text, outcome text
) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN started IS NULL THEN history ELSE (
        SELECT jsonb_agg(kept.e ORDER BY kept.o)
        FROM (SELECT x.e, x.o
              FROM jsonb_array_elements(coalesce(history, '[]'::jsonb) || jsonb_build_array(jsonb_build_array(
                       attempt, date_part('epoch', started), date_part('epoch', finished), worker, outcome)))
                   WITH ORDINALITY AS x(e, o)
              ORDER BY x.o DESC LIMIT 20) AS kept) END
$$;
