-- nobroker PostgreSQL schema, version 2: as nobroker 0.1.2 and the file
-- storage show jobs.

-- A job that has not failed yet (attempts <= 0) waits 0, as
-- BackoffPolicy.delay_for says; version 1 gave it the base delay.
CREATE OR REPLACE FUNCTION {schema}.backoff_delay(
    attempts integer, base double precision, factor double precision, max_delay double precision
) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN attempts <= 0 OR base <= 0 OR max_delay <= 0 THEN 0::double precision
        WHEN attempts = 1 THEN least(base, max_delay)
        WHEN factor <= 0 THEN 0::double precision
        WHEN ln(greatest(base, 1e-300)) + (attempts - 1) * ln(greatest(factor, 1e-300))
             >= ln(greatest(max_delay, 1e-300)) THEN max_delay
        ELSE least(base * power(factor, attempts - 1), max_delay)
    END
$$;

-- A done job shows no lease token. The token of the lease that finished it
-- moves to finished_token, so a repeated ack under that lease stays harmless.
ALTER TABLE {schema}.jobs ADD COLUMN finished_token text;

UPDATE {schema}.jobs SET finished_token = lease_token, lease_token = NULL
WHERE state = 'done' AND lease_token IS NOT NULL;

-- The traceback of the failure last_error names (the Worker records it).
ALTER TABLE {schema}.jobs ADD COLUMN traceback text;
