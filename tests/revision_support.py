"""The newest migration's revision, read from the migration scripts, for tests that check a
schema reached the head (so adding a migration does not mean editing every such test)."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from pgmem.migrate import MigrationSettings, alembic_config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config(MigrationSettings())).get_current_head()
    assert head is not None
    return head


HEAD = head_revision()
