-- Row level security for a nobroker schema: only {role} (and the table's
-- owner, {owner}) see or change queue rows. Applied by
-- migrate(..., worker_role=...) every time it runs; every statement here is
-- safe to repeat. Roles with BYPASSRLS (superusers, Supabase's service_role)
-- are not limited by policies at all.
--
-- Every table that holds queue rows gets the same rule, applied by schema.py
-- before these statements (RLS_TABLES: the table and what the role may do
-- to its rows; RLS_TABLE: row level security forced, a policy for the owner
-- and one for the role, the grant). A new table is a new line there.
-- What follows is what the role needs beside those tables.

GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.schema_migrations TO {role};
-- A batch that may conflict draws its seq values first (statements.py, "insert_sorted").
GRANT USAGE ON SEQUENCE {schema}.jobs_seq_seq TO {role};
GRANT EXECUTE ON FUNCTION {schema}.backoff_delay(integer, double precision, double precision, double precision) TO {role};
-- The check of every row a statement writes (sql/012) calls it as the role.
GRANT EXECUTE ON FUNCTION {schema}.job_row_valid(text, boolean, timestamptz, text, boolean, double precision) TO {role};
