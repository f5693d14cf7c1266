-- nobroker PostgreSQL schema, version 13: the trigger that wakes Queue.wait tests a job's end in its function.
--
-- Cheap to apply: a function replaced and a trigger made again; no row read.
--
-- The trigger of version 8 held its whole test in its WHEN clause, and
-- PostgreSQL reads a WHEN clause back from its text and plans it at every
-- statement that updates the state: every claim, ack and nack, whether or
-- not anybody waits. Its WHEN is now one column, NEW.waited; the function
-- tests whether the job ended, and runs only for a job somebody waits for.
CREATE OR REPLACE FUNCTION {schema}.notify_waiters() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND (NEW.state NOT IN ('done', 'dead', 'cancelled') OR OLD.state = NEW.state) THEN
        RETURN NULL;  -- a waited job that has not ended: claimed, or back to be retried
    END IF;
    PERFORM pg_notify('nobroker_done_' || substr(md5(TG_TABLE_SCHEMA || '.' || OLD.queue), 1, 20), OLD.id);
    RETURN NULL;
END
$$;

DROP TRIGGER jobs_waited_finishes ON {schema}.jobs;
CREATE TRIGGER jobs_waited_finishes AFTER UPDATE OF state ON {schema}.jobs
    FOR EACH ROW WHEN (NEW.waited)
    EXECUTE FUNCTION {schema}.notify_waiters();
