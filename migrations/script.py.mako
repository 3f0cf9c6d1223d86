"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa
${imports if imports else ""}
from pgmem.migrate import current_settings

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}


def upgrade() -> None:
    schema = current_settings().schema
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    schema = current_settings().schema
    ${downgrades if downgrades else "pass"}
