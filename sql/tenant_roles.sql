-- A tenant role: a login role that reads and writes one tenant of pgmem's schema, and cannot
-- read, change, block or slow another tenant's memories (docs/security.md). `pgmem grant-tenant
-- ROLE` runs these blocks as the schema's owner, in order, in one transaction (`--sql` prints
-- them). {schema} is pgmem's schema, {role} the role; the tenant is the role's name (the
-- policies compare `tenant` with `current_user`): connect as ROLE with Memory(tenant="ROLE").

-- name: policies
-- Row-level security on every table with a tenant: a role sees and writes only the rows of the
-- tenant named as itself. The owner of the tables bypasses the policies (pgmem migrate and
-- reembed run as the owner). Idempotent.
ALTER TABLE {schema}.memories ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.entities ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.memory_entities ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.history ENABLE ROW LEVEL SECURITY;
ALTER TABLE {schema}.tenant_secrets ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS pgmem_tenant ON {schema}.memories;
DROP POLICY IF EXISTS pgmem_tenant ON {schema}.entities;
DROP POLICY IF EXISTS pgmem_tenant ON {schema}.memory_entities;
DROP POLICY IF EXISTS pgmem_tenant ON {schema}.history;
DROP POLICY IF EXISTS pgmem_tenant ON {schema}.tenant_secrets;
CREATE POLICY pgmem_tenant ON {schema}.memories
    USING (tenant = current_user) WITH CHECK (tenant = current_user);
CREATE POLICY pgmem_tenant ON {schema}.entities
    USING (tenant = current_user) WITH CHECK (tenant = current_user);
CREATE POLICY pgmem_tenant ON {schema}.memory_entities
    USING (tenant = current_user) WITH CHECK (tenant = current_user);
CREATE POLICY pgmem_tenant ON {schema}.history
    USING (tenant = current_user) WITH CHECK (tenant = current_user);
CREATE POLICY pgmem_tenant ON {schema}.tenant_secrets
    USING (tenant = current_user) WITH CHECK (false);

-- name: grants
-- What pgmem's calls need, and no more: the four tables of memories; embedding_models and the
-- tenant's own lock salt read only (the model on record is written by the owner: a tenant
-- role that could rename it would stop every tenant's calls).
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE
    ON {schema}.memories, {schema}.entities, {schema}.memory_entities, {schema}.history
    TO {role};
REVOKE ALL ON {schema}.embedding_models, {schema}.tenant_secrets FROM {role};
GRANT SELECT ON {schema}.embedding_models, {schema}.tenant_secrets TO {role};

-- name: advisory_locks
-- No advisory lock of the role's own choosing: a role that may call pg_advisory_lock may fill
-- the server's lock table (each lock a slot, held for as long as its session lives), and then
-- every other session's writes and new connections fail with "out of shared memory". These
-- functions are PUBLIC's in every database, so they are revoked from PUBLIC in this database
-- and granted back to the owner running this (pgmem takes its own locks through take_locks, a
-- function of the owner: sql/schema.sql); another role of this database that takes advisory
-- locks needs them granted again (docs/security.md). Only a superuser may change them.
REVOKE EXECUTE ON FUNCTION
    pg_catalog.pg_advisory_lock(bigint),
    pg_catalog.pg_advisory_lock(integer, integer),
    pg_catalog.pg_advisory_lock_shared(bigint),
    pg_catalog.pg_advisory_lock_shared(integer, integer),
    pg_catalog.pg_try_advisory_lock(bigint),
    pg_catalog.pg_try_advisory_lock(integer, integer),
    pg_catalog.pg_try_advisory_lock_shared(bigint),
    pg_catalog.pg_try_advisory_lock_shared(integer, integer),
    pg_catalog.pg_advisory_xact_lock(bigint),
    pg_catalog.pg_advisory_xact_lock(integer, integer),
    pg_catalog.pg_advisory_xact_lock_shared(bigint),
    pg_catalog.pg_advisory_xact_lock_shared(integer, integer),
    pg_catalog.pg_try_advisory_xact_lock(bigint),
    pg_catalog.pg_try_advisory_xact_lock(integer, integer),
    pg_catalog.pg_try_advisory_xact_lock_shared(bigint),
    pg_catalog.pg_try_advisory_xact_lock_shared(integer, integer)
    FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    pg_catalog.pg_advisory_lock(bigint),
    pg_catalog.pg_advisory_lock(integer, integer),
    pg_catalog.pg_advisory_lock_shared(bigint),
    pg_catalog.pg_advisory_lock_shared(integer, integer),
    pg_catalog.pg_try_advisory_lock(bigint),
    pg_catalog.pg_try_advisory_lock(integer, integer),
    pg_catalog.pg_try_advisory_lock_shared(bigint),
    pg_catalog.pg_try_advisory_lock_shared(integer, integer),
    pg_catalog.pg_advisory_xact_lock(bigint),
    pg_catalog.pg_advisory_xact_lock(integer, integer),
    pg_catalog.pg_advisory_xact_lock_shared(bigint),
    pg_catalog.pg_advisory_xact_lock_shared(integer, integer),
    pg_catalog.pg_try_advisory_xact_lock(bigint),
    pg_catalog.pg_try_advisory_xact_lock(integer, integer),
    pg_catalog.pg_try_advisory_xact_lock_shared(bigint),
    pg_catalog.pg_try_advisory_xact_lock_shared(integer, integer)
    FROM {role};
GRANT EXECUTE ON FUNCTION
    pg_catalog.pg_advisory_lock(bigint),
    pg_catalog.pg_advisory_lock(integer, integer),
    pg_catalog.pg_advisory_lock_shared(bigint),
    pg_catalog.pg_advisory_lock_shared(integer, integer),
    pg_catalog.pg_try_advisory_lock(bigint),
    pg_catalog.pg_try_advisory_lock(integer, integer),
    pg_catalog.pg_try_advisory_lock_shared(bigint),
    pg_catalog.pg_try_advisory_lock_shared(integer, integer),
    pg_catalog.pg_advisory_xact_lock(bigint),
    pg_catalog.pg_advisory_xact_lock(integer, integer),
    pg_catalog.pg_advisory_xact_lock_shared(bigint),
    pg_catalog.pg_advisory_xact_lock_shared(integer, integer),
    pg_catalog.pg_try_advisory_xact_lock(bigint),
    pg_catalog.pg_try_advisory_xact_lock(integer, integer),
    pg_catalog.pg_try_advisory_xact_lock_shared(bigint),
    pg_catalog.pg_try_advisory_xact_lock_shared(integer, integer)
    TO CURRENT_USER;

-- name: advisory_check
-- Whether the role may still take advisory locks of its own (a REVOKE by a role that may not
-- change the functions' privileges only warns).
SELECT has_function_privilege(%(tenant)s::text, 'pg_catalog.pg_advisory_lock(bigint)',
                              'EXECUTE') AS still_allowed

-- name: lock_salt
-- The tenant's secret lock salt (see tenant_secrets in sql/schema.sql): another tenant role
-- cannot read it, so it cannot take this tenant's advisory locks.
-- The salt derives from the schema's secret (the row of tenant '', sql/schema.sql), as
-- take_locks computes it.
INSERT INTO {schema}.tenant_secrets (tenant, lock_salt)
SELECT %(tenant)s, encode(sha256(convert_to(s.lock_salt || chr(10) || %(tenant)s, 'UTF8')), 'hex')
  FROM {schema}.tenant_secrets s WHERE s.tenant = ''
    ON CONFLICT (tenant) DO UPDATE SET lock_salt = EXCLUDED.lock_salt;

-- name: record_model
-- The embedding model on record, written by the owner if none is (a tenant role cannot).
UPDATE {schema}.embedding_models SET model = %(model)s, updated_at = now()
 WHERE role = 'current' AND model IS NULL;

-- name: model_on_record
SELECT model FROM {schema}.embedding_models WHERE role = 'current';
