"""The semantic scale learned for the model on record: ``embedding_models.scale_model``,
``scale_lo`` and ``scale_hi``.

A model whose cosine similarities crowd a narrow band is stretched from ``[scale_lo,
scale_hi]`` onto ``[0, 1]`` before fusion (:func:`pgmem.scoring.stretch`,
:mod:`pgmem.semantic_scale`). ``scale_model`` names the model the scale was learned for: a
scale counts only while that model is the row's ``model``, so a re-embedding's switch to
another model leaves it without one. NULL (every row after this upgrade): the similarity as it
is.

Upgrade: the three nullable columns and a check that lo < hi. Downgrade: drops them.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgmem.migrate import current_settings

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = current_settings().schema  # a checked plain identifier
    op.execute(
        f'ALTER TABLE "{schema}".embedding_models'
        " ADD COLUMN scale_model text,"
        " ADD COLUMN scale_lo double precision,"
        " ADD COLUMN scale_hi double precision"
    )
    # Citus runs ADD CONSTRAINT on a distributed or reference table only as a command of its own
    op.execute(
        f'ALTER TABLE "{schema}".embedding_models ADD CONSTRAINT embedding_models_scale_check'
        " CHECK (scale_model IS NULL OR (scale_lo IS NOT NULL AND scale_hi IS NOT NULL"
        "          AND scale_lo < scale_hi))"
    )


def downgrade() -> None:
    schema = current_settings().schema
    op.execute(
        f'ALTER TABLE "{schema}".embedding_models DROP CONSTRAINT embedding_models_scale_check'
    )
    op.execute(
        f'ALTER TABLE "{schema}".embedding_models'
        " DROP COLUMN scale_model, DROP COLUMN scale_lo, DROP COLUMN scale_hi"
    )
