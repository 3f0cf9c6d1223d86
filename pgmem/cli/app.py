"""The ``pgmem`` parser, built from the command groups, and :func:`main`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from pgmem.cli import (
    demo,
    doctor,
    exporting,
    importing,
    mcp,
    memories,
    reembed,
    schema,
    server,
    stats,
    tenants,
    ui,
)
from pgmem.cli.options import Commands
from pgmem.cli.session import Session
from pgmem.errors import PgmemError
from pgmem.migrate import DEFAULT_SCHEMA

# Each group of commands adds its subcommands through its ``register(commands)``; a new group
# is one module and one line here. The order is the order of ``pgmem --help``.
GROUPS: tuple[Callable[[Commands], None], ...] = (
    schema.register,
    reembed.register,
    memories.register,
    importing.register,
    exporting.register,
    stats.register,
    doctor.register,
    demo.register,
    server.register,
    mcp.register,
    tenants.register,
    ui.register,
)


def global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """``--dsn``, ``--read-dsn``, ``--schema``, ``--tenant``; with ``suppress``, for a subcommand
    (no default,
    so that an option given before the command is not reset)."""
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--dsn", default=default,
        help="PostgreSQL connection string or URL (default: $PGMEM_DSN, then libpq PG* "
             "variables if PGHOST, PGDATABASE or PGSERVICE is set, else the embedded server)",
    )
    parser.add_argument(
        "--read-dsn", default=default,
        help="a streaming replica of the database: searches and reads go there, writes to "
             "--dsn (default: $PGMEM_READ_DSN; docs/production.md)",
    )
    parser.add_argument(
        "--schema", default=argparse.SUPPRESS if suppress else DEFAULT_SCHEMA,
        help=f"pgmem's PostgreSQL schema (default: {DEFAULT_SCHEMA})",
    )
    parser.add_argument(
        "--tenant", default=argparse.SUPPRESS if suppress else None,
        help="tenant, the distribution key (default: default; for import --from-mem0, the "
             "collection's name, as pgmem.compat.mem0 maps a collection to a tenant)",
    )
    parser.add_argument(
        "--no-server", action="store_true", default=argparse.SUPPRESS if suppress else False,
        help="with the embedded default, do not start the background pgmem server when none "
             "runs (also $PGMEM_AUTOSTART=0): the command starts PostgreSQL and loads the "
             "models for itself",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``pgmem`` argument parser, with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="pgmem",
        description="Memory and hybrid retrieval for AI agents, in PostgreSQL.",
        epilog="Run `pgmem COMMAND --help` for a command's options.",
    )
    global_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    global_options(common, suppress=True)
    commands = Commands(parser.add_subparsers(dest="command", metavar="COMMAND"), common)
    for register in GROUPS:
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pgmem`` command line; returns the exit status."""
    # Model loading draws progress bars on stderr; the command has its own output.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        session = Session(args)  # the settings: a bad PGMEM_* variable is an error here
        try:
            status: int = args.handler(args, session)
        finally:
            session.close()
    except PgmemError as exc:
        print(f"pgmem: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `pgmem list ... | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # the import file
        print(f"pgmem: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pgmem: interrupted", file=sys.stderr)
        return 130
    return status
