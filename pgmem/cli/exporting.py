"""``pgmem export``: a scope's or a tenant's memories as JSON lines, which ``pgmem import`` reads
back (see :mod:`pgmem.exporting`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TextIO

from pgmem.cli.options import Commands, ProgressBar, scope, scope_options
from pgmem.cli.session import Session
from pgmem.errors import InvalidInputError, ScopeError
from pgmem.exporting import MAX_ITERSIZE


def register(commands: Commands) -> None:
    """Add ``export``."""
    p = commands.add("export", cmd_export,
                     "export a scope's or the tenant's memories as JSONL, which import reads back")
    p.add_argument("file", metavar="FILE", nargs="?", default="-",
                   help="the file to write (created readable by you only; default or '-': "
                        "stdout)")
    scope_options(p, "of the memories to export")
    p.add_argument("--all", dest="whole_tenant", action="store_true",
                   help="export every memory of the tenant (instead of a scope)")
    p.add_argument("--vectors", action="store_true",
                   help="include each memory's embedding (the model is named in the first "
                        "line): an import stores it instead of embedding the text again")
    p.add_argument("--history", action="store_true",
                   help="include each memory's ADD, UPDATE and DELETE events")
    p.add_argument("--itersize", type=int, default=1000, metavar="N",
                   help=f"memories read from the server at a time, 1 to {MAX_ITERSIZE} "
                        "(default: 1000)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")


def cmd_export(args: argparse.Namespace, session: Session) -> int:
    """Export memories to FILE (or stdout)."""
    given = scope(args, required=False)
    if not args.whole_tenant and all(value is None for value in given.values()):
        raise ScopeError("give --user, --agent and/or --run, or --all for the whole tenant")
    memory = session.memory()
    with _output(args.file, force=args.force) as out:
        progress = ProgressBar("exporting")
        try:
            exported = memory.export(
                out, **given, whole_tenant=args.whole_tenant, vectors=args.vectors,
                history=args.history, itersize=args.itersize, on_progress=progress,
            )
        finally:
            progress.finish()
    where = "stdout" if args.file == "-" else args.file
    print(f"exported {exported.memories} memories to {where}",
          file=sys.stderr if args.file == "-" else sys.stdout)
    return 0


@contextlib.contextmanager
def _output(path: str, *, force: bool) -> Iterator[TextIO]:
    """stdout for ``-``; else a new file beside ``path`` (mode 0600), renamed to ``path`` once
    the export is complete: a failed export leaves no partial file under the name."""
    if path == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    if os.path.exists(path) and not force:
        raise InvalidInputError(f"{path} exists: give another FILE, or --force to replace it")
    partial = f"{path}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with open(fd, "w", encoding="utf-8") as handle:
            yield handle
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
