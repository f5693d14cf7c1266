-- Row level security for a nobroker schema: only {role} (and the table's
-- owner, {owner}) see or change queue rows. Applied by
-- migrate(..., worker_role=...) every time it runs; every statement here is
-- safe to repeat. Roles with BYPASSRLS (superusers, Supabase's service_role)
-- are not limited by policies at all.

ALTER TABLE {schema}.jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.jobs FORCE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS {owner_policy} ON {schema}.jobs;
CREATE POLICY {owner_policy} ON {schema}.jobs TO {owner} USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS {role_policy} ON {schema}.jobs;
CREATE POLICY {role_policy} ON {schema}.jobs TO {role} USING (true) WITH CHECK (true);

GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.jobs TO {role};
GRANT SELECT ON {schema}.schema_migrations TO {role};
-- A batch that may conflict draws its seq values first (statements.py, "insert_sorted").
GRANT USAGE ON SEQUENCE {schema}.jobs_seq_seq TO {role};
GRANT EXECUTE ON FUNCTION {schema}.backoff_delay(integer, double precision, double precision, double precision) TO {role};

-- The counts the triggers keep name queues and how many jobs each holds:
-- the same rule (the triggers insert as the role whose statement fired them).
ALTER TABLE {schema}.counts ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.counts FORCE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS {owner_policy} ON {schema}.counts;
CREATE POLICY {owner_policy} ON {schema}.counts TO {owner} USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS {role_policy} ON {schema}.counts;
CREATE POLICY {role_policy} ON {schema}.counts TO {role} USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, DELETE ON {schema}.counts TO {role};

-- Periodic jobs (version 5): the same rule.
ALTER TABLE {schema}.schedules ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.schedules FORCE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS {owner_policy} ON {schema}.schedules;
CREATE POLICY {owner_policy} ON {schema}.schedules TO {owner} USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS {role_policy} ON {schema}.schedules;
CREATE POLICY {role_policy} ON {schema}.schedules TO {role} USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.schedules TO {role};

-- Limits per kind (version 7): the same rule.
ALTER TABLE {schema}.limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.limits FORCE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS {owner_policy} ON {schema}.limits;
CREATE POLICY {owner_policy} ON {schema}.limits TO {owner} USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS {role_policy} ON {schema}.limits;
CREATE POLICY {role_policy} ON {schema}.limits TO {role} USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.limits TO {role};

-- Pauses (version 8): the same rule.
ALTER TABLE {schema}.pauses ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.pauses FORCE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS {owner_policy} ON {schema}.pauses;
CREATE POLICY {owner_policy} ON {schema}.pauses TO {owner} USING (true) WITH CHECK (true);

DROP POLICY IF EXISTS {role_policy} ON {schema}.pauses;
CREATE POLICY {role_policy} ON {schema}.pauses TO {role} USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, DELETE ON {schema}.pauses TO {role};
