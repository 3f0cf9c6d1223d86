"""``pgmem stats``: counts per tenant and scope, table and index sizes."""

from __future__ import annotations

import argparse

from pgmem.cli.catalog import catalog, relation_sizes, schema_dim
from pgmem.cli.options import Commands, print_json, printable, size
from pgmem.cli.session import Session
from pgmem.errors import ConfigurationError, InvalidInputError


def register(commands: Commands) -> None:
    """Add ``stats``."""
    p = commands.add("stats", cmd_stats, "counts per tenant and scope, table and index sizes",
                     autostart=True)
    p.add_argument("--scopes", type=int, default=20, metavar="N",
                   help="how many of the largest scopes to list (default: 20)")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")


def cmd_stats(args: argparse.Namespace, session: Session) -> int:
    """Counts per tenant and scope, and table and index sizes."""
    if args.scopes < 0:
        raise InvalidInputError(f"--scopes must be 0 or more, got {args.scopes}")
    dsn, schema = session.dsn(), session.schema
    if schema_dim(dsn, schema) is None:
        raise ConfigurationError(f"schema {schema!r} is not in this database: run `pgmem migrate`")
    counts = catalog(dsn, "stats_counts", schema)
    scopes = catalog(dsn, "stats_scopes", schema, {"tenant": session.tenant, "limit": args.scopes})
    relations = relation_sizes(dsn, schema)
    if args.json:
        print_json({"tenants": counts, "scopes": scopes, "relations": relations})
        return 0
    print(f"{'tenant':<20} {'memories':>9} {'entities':>9} {'links':>9}")
    for row in counts or [{"tenant": session.tenant, "memories": 0, "entities": 0, "links": 0}]:
        print(f"{printable(row['tenant']):<20} {row['memories']:>9} {row['entities']:>9} "
              f"{row['links']:>9}")
    print(f"\nlargest scopes of tenant {printable(repr(session.tenant))}:")
    print(f"{'user_id':<20} {'agent_id':<20} {'run_id':<20} {'memories':>9}")
    for row in scopes:  # scope ids come from agents: escaped for the terminal
        print(f"{printable(row['user_id'] or '-'):<20} {printable(row['agent_id'] or '-'):<20} "
              f"{printable(row['run_id'] or '-'):<20} {row['memories']:>9}")
    print(f"\n{'table / index':<32} {'method':<7} {'size':>10} {'with indexes':>13}")
    for row in relations:
        name = row["name"] if row["kind"] == "r" else "  " + row["name"]
        total = "" if row["total_size"] is None else size(row["total_size"])
        print(f"{name:<32} {row['method'] or '':<7} {size(row['size']):>10} {total:>13}")
    return 0
