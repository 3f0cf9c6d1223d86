"""A secret per tenant, in the keys of pgmem's advisory locks.

pgmem serialises some writes with transaction advisory locks: adds of one text to one scope
(duplicate detection) and writes naming one entity. Advisory locks are not guarded by any
privilege: any role of the database may take any key. With predictable keys (a hash of the
tenant and the name), a role of one tenant could take another tenant's keys and hold its writes.
``tenant_secrets`` keeps a random salt per tenant that goes into those keys; with row-level
security on it (``pgmem grant-tenant``, docs/security.md) a tenant role reads only its own, and
cannot compute another tenant's keys. A tenant without a row uses no salt: the keys of a single
trusted role stay as they were.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pgmem.migrate import current_settings

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = current_settings().schema  # a checked plain identifier
    op.create_table(
        "tenant_secrets",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column(
            "lock_salt", sa.Text, nullable=False,
            server_default=sa.text("gen_random_uuid()::text || gen_random_uuid()::text"),
        ),
        sa.PrimaryKeyConstraint("tenant", name="tenant_secrets_pkey"),
        schema=schema,
    )


def downgrade() -> None:
    op.drop_table("tenant_secrets", schema=current_settings().schema)
