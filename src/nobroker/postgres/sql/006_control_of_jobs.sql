-- nobroker PostgreSQL schema, version 6: control of jobs (issue 15).
--
-- Cheap to apply: a new state in the check, a column with a constant
-- default (no table rewrite), and the finished jobs' index rebuilt to
-- cover cancelled ones.

-- A cancelled job is final and kept as a done job is (pruned with done's
-- retention). Its dedupe key is free again, as a done job's is.
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_state_known;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_state_known
    CHECK (state IN ('ready', 'leased', 'done', 'dead', 'cancelled'));

-- A leased job whose cancel was asked for: its ack and nack are refused,
-- the Worker's heartbeat (an extend) reads it, and its lease ends cancelled.
ALTER TABLE {schema}.jobs ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_cancel_requested_is_leased
    CHECK (NOT cancel_requested OR state = 'leased');

-- The counts the statements keep (sql/004) count cancelled jobs too.
ALTER TABLE {schema}.counts ADD COLUMN cancelled bigint NOT NULL DEFAULT 0;

DROP INDEX {schema}.jobs_finished;
CREATE INDEX jobs_finished ON {schema}.jobs (queue, state, seq) WHERE state IN ('done', 'dead', 'cancelled');
