"""``pgmem grant-tenant ROLE``: make ROLE a tenant role of pgmem's schema -- row-level security,
least-privilege grants, a secret lock salt (``sql/tenant_roles.sql``, docs/security.md)."""

from __future__ import annotations

import argparse

import psycopg
from psycopg import sql

from pgmem.cli.options import Commands
from pgmem.cli.session import Session
from pgmem.errors import ConfigurationError, wrap_db_errors
from pgmem.queries import sql_blocks

STEPS = ("policies", "grants", "advisory_locks", "advisory_check", "lock_salt", "record_model",
         "model_on_record")


def register(commands: Commands) -> None:
    """Add ``grant-tenant``."""
    p = commands.add(
        "grant-tenant", cmd_grant_tenant,
        "make a login role a tenant role: it reads and writes only the tenant named as itself "
        "(row-level security, least-privilege grants, a secret lock salt); run as the owner",
    )
    p.add_argument("role", metavar="ROLE", help="the role (it must exist); its tenant is its name")
    p.add_argument("--model", metavar="NAME",
                   help="the embedding model to record if none is on record yet (a tenant role "
                        "cannot record it)")
    p.add_argument("--sql", action="store_true", help="print the statements instead of running "
                   "them")


def statements(schema: str, role: str) -> list[tuple[str, sql.Composed]]:
    """The blocks of ``sql/tenant_roles.sql`` for ``role``, by name, in order."""
    blocks = sql_blocks("tenant_roles.sql")
    return [
        (name, sql.SQL(blocks[name]).format(schema=sql.Identifier(schema),
                                            role=sql.Identifier(role)))
        for name in STEPS
    ]


def cmd_grant_tenant(args: argparse.Namespace, session: Session) -> int:
    """Set up ``args.role`` as a tenant role (or print the SQL)."""
    params = {"tenant": args.role, "model": args.model}
    dsn = session.dsn()
    with wrap_db_errors(), psycopg.connect(dsn) as conn:
        cursor = psycopg.ClientCursor(conn)
        if args.sql:
            for _, statement in statements(session.schema, args.role):
                print(cursor.mogrify(statement, params).rstrip() + "\n")
            return 0
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (args.role,))
        if exists.fetchone() is None:
            raise ConfigurationError(f"role {args.role!r} does not exist: CREATE ROLE it first")
        model = None
        for name, statement in statements(session.schema, args.role):
            cursor.execute(statement, params)
            if name == "advisory_check" and cursor.fetchone() != (False,):
                conn.rollback()
                raise ConfigurationError(
                    f"role {args.role!r} would keep pg_advisory_lock and the other advisory "
                    "lock functions, which only a superuser may revoke (they are PUBLIC's): "
                    "run grant-tenant as a superuser; nothing was changed"
                )
            if name == "model_on_record":
                model = cursor.fetchone()
        if model is None or model[0] is None:
            conn.rollback()
            raise ConfigurationError(
                "no embedding model is on record, and a tenant role cannot record it: give "
                "--model NAME (the name pgmem records for your embedder), or add one memory as "
                "the owner first; nothing was changed"
            )
    print(f"role {args.role} is a tenant role of schema {session.schema} (tenant "
          f"{args.role!r}, model {model[0]!r}): connect as it with tenant={args.role!r}")
    return 0
