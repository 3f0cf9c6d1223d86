"""Where an imported memory came from, out of the caller's reach: ``memories.origin``.

The Mem0 importer (``pgmem import --from-mem0``) recorded a memory's origin in its metadata,
under the key ``_mem0_import`` (``{"collection": "schema.table", "version": "<hash>"}``), which
any caller can write, and which named no source database. ``origin`` is a column that no call
of pgmem's API writes (``add``, ``update``, the MCP server, ``pgmem.compat.mem0``): only an
importer does. For Mem0 it holds ``{"importer": "mem0", "source": "<database>", "collection":
"schema.table", "version": "<hash of the row>", "updated_at": "<Mem0's updated_at>"}``.

Upgrade: a memory (not a store item) whose metadata holds ``_mem0_import`` shaped as the
importer wrote it -- an object of exactly ``collection`` (text) and ``version`` (32 hex
digits) -- gets that origin with ``source`` null (the old record did not name the database),
and the key leaves its metadata. Any other ``_mem0_import`` value stays in the metadata as the
caller's own data. A sync adopts a memory whose origin has no source when it reads the same
collection and finds the memory's id there; it never deletes one (docs/mem0.md).

Downgrade: the origins go back into the metadata under ``_mem0_import`` (collection and
version), and the column is dropped.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

from pgmem.migrate import current_settings

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = current_settings().schema  # a checked plain identifier
    for statement in (
        f'ALTER TABLE "{schema}".memories ADD COLUMN origin jsonb',
        (
            f'UPDATE "{schema}".memories'
            # Immutable operators only: Citus refuses STABLE functions such as
            # jsonb_build_object over columns in a distributed UPDATE. The record holds exactly
            # collection and version (checked below), so the concatenation is the whole origin.
            " SET origin = '{\"importer\": \"mem0\", \"source\": null, \"updated_at\": null}'::jsonb"
            "              || (metadata -> '_mem0_import'),"
            "     metadata = metadata - '_mem0_import'"
            " WHERE namespace IS NULL"
            "   AND jsonb_typeof(metadata -> '_mem0_import') = 'object'"
            # Exactly these two keys, with operators only (no subquery: Citus runs it as is).
            "   AND (metadata -> '_mem0_import') ?& ARRAY['collection', 'version']"
            "   AND (metadata -> '_mem0_import') - 'collection' - 'version' = '{}'::jsonb"
            "   AND jsonb_typeof(metadata -> '_mem0_import' -> 'collection') = 'string'"
            "   AND (metadata -> '_mem0_import' ->> 'version') ~ '^[0-9a-f]{32}$'"
        ),
    ):
        op.execute(statement)


def downgrade() -> None:
    schema = current_settings().schema
    for statement in (
        (
            f'UPDATE "{schema}".memories'
            " SET metadata = jsonb_set(metadata, '{_mem0_import}',"
            "       origin - 'importer' - 'source' - 'updated_at')"  # collection and version
            " WHERE origin ->> 'importer' = 'mem0'"
        ),
        f'ALTER TABLE "{schema}".memories DROP COLUMN origin',
    ):
        op.execute(statement)
