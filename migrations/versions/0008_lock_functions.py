"""pgmem's advisory locks through one function it owns, keyed by a salt every tenant has.

Tenant roles (``pgmem grant-tenant``) lose the ``pg_advisory_*`` functions: a role that may take
advisory locks of its own choosing may fill the server's lock table and stop every other
session. pgmem's writes take theirs through ``take_locks``, a SECURITY DEFINER function of the
schema's owner with a fixed search_path. It takes transaction-scoped locks only, keyed by the
tenant's secret salt (which the caller must show: a tenant role reads only its own), and at most
256 per call and kind: a key falls in one of 256 buckets per tenant and kind, so that a delete
of a scope of any size takes a bounded number of locks. Every tenant's salt derives from one
secret of the schema (the row of tenant ''): the owner's tenants, which have no row, too.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

from pgmem.migrate import current_settings

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TAKE_LOCKS = """
CREATE FUNCTION "{schema}".take_locks(for_tenant text, salt text, kind text, lock_keys text[])
    RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, "{schema}", pg_temp
AS $body$
DECLARE
    expected text;
    bucket integer;
    taken integer := 0;
BEGIN
    IF kind IS NULL OR kind NOT IN ('content', 'item', 'entity') THEN
        RAISE EXCEPTION 'pgmem lock kind % is not content, item or entity', kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT encode(sha256(convert_to(s.lock_salt || chr(10) || for_tenant, 'UTF8')), 'hex')
      INTO expected FROM tenant_secrets s WHERE s.tenant = '';
    IF expected IS NULL THEN
        RAISE EXCEPTION 'pgmem''s schema has no lock secret: run pgmem migrate'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF salt IS NULL THEN
        -- Not shown by a tenant role (made by grant-tenant: a salt row of its name, which it
        -- may read and not write): the owner's, and other trusted roles', own tenants.
        IF EXISTS (SELECT FROM tenant_secrets s WHERE s.tenant = session_user::text)
           AND NOT has_table_privilege(session_user, 'tenant_secrets', 'INSERT') THEN
            RAISE EXCEPTION 'role % may not take the locks of tenant %', session_user, for_tenant
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSIF salt <> expected THEN
        RAISE EXCEPTION 'role % may not take the locks of tenant %', session_user, for_tenant
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    FOR bucket IN
        SELECT DISTINCT hashtext(expected || chr(10) || k) & 255 FROM unnest(lock_keys) k
         ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext(kind || chr(10) || expected), bucket);
        taken := taken + 1;
    END LOOP;
    RETURN taken;
END
$body$
"""


def upgrade() -> None:
    schema = current_settings().schema  # a checked plain identifier
    # The schema's lock secret (the row of tenant '', which no role can be named; its salt is
    # the column's random default). Each tenant's salt derives from it, those of tenant roles
    # too, so that the owner's tenants have one without a row.
    op.execute(f'INSERT INTO "{schema}".tenant_secrets (tenant) VALUES (\'\')')
    op.execute(
        f'UPDATE "{schema}".tenant_secrets t'
        " SET lock_salt = encode(sha256(convert_to(s.lock_salt || chr(10) || t.tenant,"
        " 'UTF8')), 'hex')"
        f' FROM "{schema}".tenant_secrets s WHERE s.tenant = \'\' AND t.tenant <> \'\''
    )
    op.execute(TAKE_LOCKS.replace("{schema}", schema))


def downgrade() -> None:
    schema = current_settings().schema
    op.execute(f'DROP FUNCTION "{schema}".take_locks(text, text, text, text[])')
    op.execute(f'DELETE FROM "{schema}".tenant_secrets WHERE tenant = \'\'')
