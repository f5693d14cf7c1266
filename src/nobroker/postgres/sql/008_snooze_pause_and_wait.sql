-- nobroker PostgreSQL schema, version 8: pause and Queue.wait (issue 15, control of jobs).
--
-- Cheap to apply: a new small table, a column with a constant default (no
-- table rewrite), and two triggers that do nothing for a job nobody waits for.

-- The paused kinds of each queue: kind '' is the whole queue (a kind is
-- never empty). The claim takes no job of a paused kind, and none while the
-- whole queue is paused; the row is there from the commit of pause on, so
-- every claim that starts after pause returned sees it.
CREATE TABLE {schema}.pauses (
    queue     text COLLATE "C" NOT NULL,
    kind      text COLLATE "C" NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pauses_pkey PRIMARY KEY (queue, kind)
);

-- A job someone waits for (Queue.wait): when it finishes (done, dead,
-- cancelled) or its row goes (delete, purge, pruning), the triggers NOTIFY
-- the queue's "finished" channel, whatever statement did it. The channel is
-- 'nobroker_done_' and the first 20 hex digits of md5('<schema>.<queue>')
-- (postgres/control_ops.py computes the same name); the payload is the id.
ALTER TABLE {schema}.jobs ADD COLUMN waited boolean NOT NULL DEFAULT false;

CREATE FUNCTION {schema}.notify_waiters() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('nobroker_done_' || substr(md5(TG_TABLE_SCHEMA || '.' || OLD.queue), 1, 20), OLD.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_waited_finishes AFTER UPDATE OF state ON {schema}.jobs
    FOR EACH ROW WHEN (NEW.waited AND NEW.state IN ('done', 'dead', 'cancelled') AND OLD.state <> NEW.state)
    EXECUTE FUNCTION {schema}.notify_waiters();

CREATE TRIGGER jobs_waited_goes AFTER DELETE ON {schema}.jobs
    FOR EACH ROW WHEN (OLD.waited)
    EXECUTE FUNCTION {schema}.notify_waiters();
