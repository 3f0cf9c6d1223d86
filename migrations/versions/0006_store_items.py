"""Store items: memories addressed by a namespace and a key (pgmem.langgraph's PgmemStore).

A memory may now carry a ``namespace`` (a path of labels, ``text[]`` compared byte by byte:
``COLLATE "C"``) and a ``key`` unique within it, instead of user, agent and run ids; with a
time to live, ``ttl_minutes`` and the ``expires_at`` it sets. Such items are invisible to every
call by scope (those compare a scope id, which items lack), and a namespace-prefix search is
one range of the new unique index ``(tenant, namespace, key)``. Each entity link carries its
memory's namespace like its scope ids (0002), so that a search of a namespace reads its links
in one index range. Ordinary memories are untouched (the new columns stay NULL).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

from pgmem.migrate import current_settings

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = current_settings().schema  # a checked plain identifier
    for statement in (
        (
            f'ALTER TABLE "{schema}".memories ADD COLUMN namespace text[] COLLATE "C",'
            " ADD COLUMN key text, ADD COLUMN ttl_minutes double precision,"
            " ADD COLUMN expires_at timestamptz"
        ),
        # One constraint per statement: Citus takes no ADD CONSTRAINT with other subcommands.
        f'ALTER TABLE "{schema}".memories DROP CONSTRAINT memories_scope_check',
        (
            f'ALTER TABLE "{schema}".memories ADD CONSTRAINT memories_scope_check CHECK'
            " (user_id IS NOT NULL OR agent_id IS NOT NULL OR run_id IS NOT NULL"
            " OR namespace IS NOT NULL)"
        ),
        (
            f'ALTER TABLE "{schema}".memories ADD CONSTRAINT memories_item_check'
            " CHECK ((namespace IS NULL) = (key IS NULL))"
        ),
        (
            f'CREATE UNIQUE INDEX memories_item_key ON "{schema}".memories (tenant, namespace, key)'
            " WHERE namespace IS NOT NULL"
        ),
        (
            f'CREATE INDEX memories_expires_idx ON "{schema}".memories (tenant, expires_at)'
            " WHERE expires_at IS NOT NULL"
        ),
        f'ALTER TABLE "{schema}".memory_entities ADD COLUMN namespace text[] COLLATE "C"',
        (
            f'UPDATE "{schema}".memory_entities me SET namespace = m.namespace'
            f'  FROM "{schema}".memories m'
            " WHERE m.tenant = me.tenant AND m.id = me.memory_id AND m.namespace IS NOT NULL"
        ),
        (
            f'CREATE INDEX memory_entities_namespace_idx ON "{schema}".memory_entities'
            " (tenant, namespace, memory_id, entity_id) WHERE namespace IS NOT NULL"
        ),
    ):
        op.execute(statement)


def downgrade() -> None:
    schema = current_settings().schema
    for statement in (
        f'DELETE FROM "{schema}".memories WHERE namespace IS NOT NULL',  # items have no scope
        f'DROP INDEX "{schema}".memory_entities_namespace_idx',
        f'ALTER TABLE "{schema}".memory_entities DROP COLUMN namespace',
        f'DROP INDEX "{schema}".memories_expires_idx',
        f'DROP INDEX "{schema}".memories_item_key',
        f'ALTER TABLE "{schema}".memories DROP CONSTRAINT memories_item_check',
        f'ALTER TABLE "{schema}".memories DROP CONSTRAINT memories_scope_check',
        (
            f'ALTER TABLE "{schema}".memories ADD CONSTRAINT memories_scope_check'
            " CHECK (user_id IS NOT NULL OR agent_id IS NOT NULL OR run_id IS NOT NULL)"
        ),
        (
            f'ALTER TABLE "{schema}".memories DROP COLUMN namespace, DROP COLUMN key,'
            " DROP COLUMN ttl_minutes, DROP COLUMN expires_at"
        ),
    ):
        op.execute(statement)
