-- nobroker PostgreSQL schema, version 3: a done job shows no lease token
-- (as nobroker 0.1.2 and the file storage show it). The token of the lease
-- that finished it moves to finished_token, so a repeated ack under that
-- lease stays harmless.

ALTER TABLE {schema}.jobs ADD COLUMN finished_token text;

UPDATE {schema}.jobs SET finished_token = lease_token, lease_token = NULL
WHERE state = 'done' AND lease_token IS NOT NULL;
