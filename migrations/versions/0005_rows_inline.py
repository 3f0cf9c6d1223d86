"""A memory's text, lexemes and metadata stay in its row.

PostgreSQL moves a row's long values out of line (TOAST) once the row passes 2 kB, and an
embedding kept in the row (0004) takes 1.5 kB at 384 dimensions, 3 kB at 768: most memories'
rows passed it, and their lexemes, text or metadata went to the TOAST table. A search reads the
lexemes and text of every memory of a small scope, and each out-of-line value costs an index
probe and a page more (about a tenth of a search statement's time at 100,000 memories).
``toast_tuple_target`` at its largest (8160 bytes, about a page) keeps rows whole up to that size;
longer rows are toasted as before.

It applies to the rows written from now on: rows stored before keep their out-of-line values
until they are rewritten (``VACUUM FULL`` or ``pg_repack``, in a quiet moment: it locks the
table). Nothing else changes; a schema that stays at 0004 works as before.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from pgmem.migrate import current_settings

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

ROW_TARGET = 8160  # bytes: PostgreSQL's largest toast_tuple_target with 8 kB pages


def upgrade() -> None:
    schema = current_settings().schema  # a checked plain identifier
    op.execute(f'ALTER TABLE "{schema}".memories SET (toast_tuple_target = {ROW_TARGET})')


def downgrade() -> None:
    schema = current_settings().schema
    op.execute(f'ALTER TABLE "{schema}".memories RESET (toast_tuple_target)')
