"""``pgmem migrate``: create pgmem's schema or upgrade it; ``pgmem distribute``: spread it over
a Citus cluster by tenant."""

from __future__ import annotations

import argparse

from pgmem.citus import distribute
from pgmem.cli.catalog import schema_dim, schema_state
from pgmem.cli.options import Commands
from pgmem.cli.session import Session
from pgmem.migrate import DEFAULT_DIM, STORAGES, migrate


def register(commands: Commands) -> None:
    """Add ``migrate`` and ``distribute``."""
    p = commands.add("migrate", cmd_migrate, "create pgmem's schema or upgrade it (idempotent)")
    p.add_argument("--dim", type=int, help="embedding dimension of a new schema (default: 384, "
                   "or the existing schema's)")
    p.add_argument("--storage", choices=STORAGES, help="how a new schema stores embeddings "
                   "(default: vector up to 2,000 dimensions, halfvec above)")
    commands.add("distribute", cmd_distribute,
                 "on a Citus coordinator: create or upgrade the schema, then distribute its "
                 "tables by tenant (colocated; embedding_models a reference table); idempotent")


def cmd_migrate(args: argparse.Namespace, session: Session) -> int:
    """Create or upgrade the schema."""
    dsn = session.dsn(migrate=False)
    dim = args.dim if args.dim is not None else (schema_dim(dsn, session.schema) or DEFAULT_DIM)
    migrate(dsn, dim=dim, schema=session.schema, storage=args.storage)
    revision, dim = schema_state(dsn, session.schema)
    print(f"schema {session.schema} is at revision {revision} ({dim}-dimensional embeddings)")
    return 0


def cmd_distribute(args: argparse.Namespace, session: Session) -> int:
    """Migrate, then distribute the schema's tables over the Citus cluster."""
    dsn = session.dsn(migrate=False)
    migrate(dsn, dim=schema_dim(dsn, session.schema) or DEFAULT_DIM, schema=session.schema)
    tables = distribute(dsn, schema=session.schema)
    print(f"schema {session.schema} is distributed by tenant"
          + (f" (distributed now: {', '.join(tables)})" if tables else " (already was)"))
    return 0
