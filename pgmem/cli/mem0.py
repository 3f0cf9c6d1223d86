"""``pgmem import --from-mem0 [--sync]``: bring a Mem0 pgvector collection over, or what changed
in it since (:func:`pgmem.importers.mem0.import_collection`), into the tenant named after the
collection unless ``--tenant`` names another. Its options join ``pgmem import``'s."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pgmem.cli.options import ProgressBar, print_json
from pgmem.cli.session import Session
from pgmem.errors import InvalidInputError

if TYPE_CHECKING:
    from pgmem.importers.mem0 import ImportReport

REUSE = {"auto": None, "reuse": True, "reembed": False}


def import_options(parser: argparse.ArgumentParser) -> None:
    """Add the ``--from-mem0`` options to ``pgmem import``."""
    group = parser.add_argument_group(
        "from Mem0", "import a collection that Mem0's pgvector store wrote, keeping its ids, "
        "scopes, timestamps and metadata; running it again skips what is already there",
    )
    group.add_argument("--from-mem0", action="store_true",
                       help="import a Mem0 pgvector collection instead of a file")
    group.add_argument("--collection", metavar="NAME",
                       help="the collection (Mem0's collection_name: a table)")
    group.add_argument("--mem0-dsn", metavar="DSN",
                       help="the database holding the collection (default: pgmem's own)")
    group.add_argument("--mem0-schema", metavar="SCHEMA", default="public",
                       help="the collection table's schema (default: public)")
    group.add_argument("--vectors", choices=tuple(REUSE), default="auto",
                       help="keep Mem0's vectors (reuse), embed every text again (reembed), or "
                            "keep them when they are the embedder's (auto, the default)")
    group.add_argument("--sync", action="store_true",
                       help="also bring Mem0's updates and deletes since the last import: "
                            "update the memories whose row changed, delete those imported from "
                            "this database and collection that it no longer has (never others)")
    group.add_argument("--mem0-source-id", metavar="NAME",
                       help="a name for the Mem0 database, recorded with each imported memory "
                            "(default: its system identifier and database name); give the same "
                            "one to every import of it, e.g. after moving it to another server")
    group.add_argument("--dry-run", action="store_true",
                       help="print what the import would add, update and delete (by id), and "
                            "change nothing")
    group.add_argument("--json", action="store_true", help="print the report as JSON")


def cmd_import_mem0(args: argparse.Namespace, session: Session) -> int:
    """Import a Mem0 collection; prints the counts."""
    from pgmem.importers.mem0 import import_collection

    if args.file is not None or args.demo:
        raise InvalidInputError("--from-mem0 reads a collection: give no FILE and no --demo")
    if not args.collection:
        raise InvalidInputError("--from-mem0 needs --collection NAME (Mem0's collection_name)")
    if any(getattr(args, key, None) for key in ("user_id", "agent_id", "run_id")):
        raise InvalidInputError("--from-mem0 keeps each memory's own scope: drop --user, "
                                "--agent and --run")
    if args.tenant is None:
        session.settings = session.settings.replace(tenant=args.collection)
    memory = session.memory()
    progress = ProgressBar("importing")
    try:
        report = import_collection(
            memory, args.collection, source=args.mem0_dsn or session.dsn(),
            source_schema=args.mem0_schema, reuse_vectors=REUSE[args.vectors],
            batch_size=args.batch_size, on_progress=progress, sync=args.sync,
            source_id=args.mem0_source_id, dry_run=args.dry_run,
        )
    finally:
        progress.finish()
    if args.json:
        print_json(report)
    elif report.dry_run:
        _print_plan(report, memory.tenant)
    elif report.sync:
        print(f"synced Mem0 collection {args.collection} ({report.read} rows) into tenant "
              f"{memory.tenant!r}: {report.imported} added, {report.updated} updated, "
              f"{report.deleted} deleted, {report.skipped} unchanged; {report.vectors}")
    else:
        print(f"imported {report.imported} of {report.read} rows from Mem0 collection "
              f"{args.collection} into tenant {memory.tenant!r}"
              + (f" ({report.skipped} already there, skipped)" if report.skipped else "")
              + f"; {report.vectors}")
    return 0


def _print_plan(report: ImportReport, tenant: str) -> None:
    """What a ``--dry-run`` would do: the counts, then one line per memory added, updated or
    deleted."""
    print(f"dry run, nothing written: {'syncing' if report.sync else 'importing'} Mem0 "
          f"collection {report.collection} ({report.read} rows, source {report.source}) into "
          f"tenant {tenant!r} would add {report.imported}, update {report.updated}, delete "
          f"{report.deleted}, leave {report.skipped} unchanged")
    for action, ids in (("add", report.added_ids), ("update", report.updated_ids),
                        ("delete", report.deleted_ids)):
        for memory_id in ids:
            print(f"{action:<6} {memory_id}")
