-- nobroker PostgreSQL schema, version 2: backoff_delay gives 0 for a job
-- that has not failed yet (attempts <= 0), as BackoffPolicy.delay_for does
-- (and as nobroker 0.1.2 did); version 1 gave it the base delay.

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
