"""``pgmem import``: memories from a JSONL or CSV file (or the demo data), in batches."""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import re
import sys
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgmem import exporting
from pgmem.cli import mem0
from pgmem.cli.options import (
    NO_SCOPE,
    Commands,
    ProgressBar,
    ScopeArgs,
    json_arg,
    scope,
    scope_options,
)
from pgmem.cli.session import Session
from pgmem.embedding_space import embedder_name
from pgmem.errors import InvalidInputError
from pgmem.queries import SCOPE_IDS

if TYPE_CHECKING:
    from pgmem.memory import Memory
    from pgmem.results import AddResult

DEMO_FILE = "demo/memories.jsonl"

Rows = list[tuple[int, dict[str, Any]]]


def register(commands: Commands) -> None:
    """Add ``import``."""
    p = commands.add("import", cmd_import, "import memories from a JSONL or CSV file, in batches",
                     autostart=True)
    p.add_argument("file", metavar="FILE", nargs="?",
                   help="JSONL (one object a line) or CSV with columns text, user_id, agent_id, "
                        "run_id, metadata (a JSON object); '-' reads stdin")
    p.add_argument("--demo", action="store_true", help="import pgmem's demo data instead")
    p.add_argument("--format", choices=("jsonl", "csv"),
                   help="the file's format (default: from its suffix, else its first character)")
    scope_options(p, "for rows that give none")
    p.add_argument("--batch-size", type=int, default=64, metavar="N",
                   help="memories embedded and written per batch (default: 64)")
    mem0.import_options(p)


def cmd_import(args: argparse.Namespace, session: Session) -> int:
    """Import memories from a JSONL or CSV file (or the demo data, or a Mem0 collection)."""
    if args.from_mem0:
        return mem0.cmd_import_mem0(args, session)
    if args.demo == (args.file is not None):
        raise InvalidInputError("give a FILE or --demo (not both)")
    if args.demo:
        source = "the demo data"
        rows = demo_rows(source)
    else:
        source = args.file
        rows = read_rows(_read_text(args.file), _file_format(args.file, args.format), source)
    imported, duplicates, histories = import_rows(
        session.memory(), rows, source, batch_size=args.batch_size,
        scope=scope(args, required=False),
    )
    print(f"imported {imported} memories from {source}"
          + (f" ({duplicates} already stored, skipped)" if duplicates else "")
          + (f", and the history of {histories} deleted memories" if histories else ""))
    return 0


def demo_rows(source: str) -> Rows:
    """The demo data's items (``pgmem/demo/memories.jsonl``)."""
    return read_rows(files("pgmem").joinpath(DEMO_FILE).read_text("utf-8"), "jsonl", source)


def import_rows(
    memory: Memory,
    rows: Rows,
    source: str,
    *,
    batch_size: int = 64,
    scope: ScopeArgs | None = None,
) -> tuple[int, int, int]:
    """add_many with a progress bar; (memories stored, duplicates skipped, deleted memories
    whose history was written). The rows of a ``pgmem export`` file: its first line checked
    (:func:`pgmem.exporting.checked_rows`) and left out, the lines of each text search
    configuration (``ts_config``) added with it, then the history of the memories deleted
    before the export (:meth:`pgmem.operations.Operations.restore_deleted`)."""
    rows = exporting.checked_rows(rows, source, lambda: embedder_name(memory.embedder))
    rows, deleted = exporting.deleted_rows(rows, source)
    progress = ProgressBar("importing", len(rows))
    results: list[AddResult] = []
    try:
        for config, group in exporting.by_ts_config(rows):
            results.extend(memory.add_many(
                [item for _, item in group], batch_size=batch_size, ts_config=config,
                on_progress=functools.partial(_progress, progress, len(results), len(rows)),
                **(scope or NO_SCOPE),
            ))
    except InvalidInputError as exc:
        # add_many names an item by index; say which line of the file it came from.
        match = re.match(r"items\[(\d+)\]: (.*)", str(exc), re.DOTALL)
        # an index into the group that failed: its rows follow those already added
        rows = rows[len(results):]
        if match and int(match[1]) < len(rows):
            detail = re.sub(  # another item it names ("... is also items[1]'s")
                r"items\[(\d+)\]",
                lambda m: f"line {rows[int(m[1])][0]}" if int(m[1]) < len(rows) else m[0],
                match[2],
            )
            raise type(exc)(f"{source}, line {rows[int(match[1])][0]}: {detail}") from None
        raise
    finally:
        progress.finish()
    duplicates = sum(r.duplicate for r in results)
    histories = 0
    if deleted:
        from pgmem.memory import run

        try:
            # not a call of Memory's API: only an export's file brings such lines
            histories = run(memory._connector,
                            memory._ops.restore_deleted([item for _, item in deleted]))
        except InvalidInputError as exc:
            match = re.match(r"histories\[(\d+)\]: (.*)", str(exc), re.DOTALL)
            if match is None:
                raise
            line = deleted[int(match[1])][0]
            raise type(exc)(f"{source}, line {line}: {match[2]}") from None
    return len(results) - duplicates, duplicates, histories


def _progress(progress: ProgressBar, before: int, total: int, done: int, _: int) -> None:
    """A group's progress as the import's: ``before`` items were added in earlier groups."""
    progress(before + done, total)


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8-sig") as handle:
        return handle.read()


def _file_format(path: str, given: str | None) -> str:
    if given:
        return given
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    return "auto"


def read_rows(text: str, fmt: str, source: str) -> Rows:
    """The items of a JSONL (or JSON array) or CSV text, each with its line number.

    Columns/keys: ``text``, ``user_id``, ``agent_id``, ``run_id``, ``metadata`` (an object; a
    JSON string in CSV). Empty CSV cells are absent values.

    Raises:
        InvalidInputError: naming the source and line of the first item that is not valid.
    """
    if fmt == "auto":
        fmt = "jsonl" if text.lstrip()[:1] in ("{", "[") else "csv"
    if fmt == "csv":
        return _csv_rows(text, source)
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:  # too deep for Python's parser
            raise InvalidInputError(f"{source} is not valid JSON: {exc}") from None
        return [(i + 1, _json_item(item, source, i + 1)) for i, item in enumerate(items)]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InvalidInputError(f"{source}, line {number}: not valid JSON: {exc}") from None
        rows.append((number, _json_item(item, source, number)))
    return rows


def _json_item(item: object, source: str, number: int) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InvalidInputError(
            f"{source}, line {number}: expected a JSON object, got {type(item).__name__}"
        )
    return item


def _csv_rows(text: str, source: str) -> Rows:
    reader = csv.DictReader(io.StringIO(text))
    columns = reader.fieldnames or []
    allowed = ("text", *SCOPE_IDS, "metadata")
    unknown = [c for c in columns if c not in allowed]
    if "text" not in columns or unknown:
        raise InvalidInputError(
            f"{source}: the CSV header must name a 'text' column and only these columns: "
            f"{', '.join(allowed)} (found {', '.join(columns) or 'none'})"
        )
    rows = []
    for record in reader:
        number = reader.line_num
        item: dict[str, Any] = {"text": record["text"]}
        for column in SCOPE_IDS:
            if record.get(column):
                item[column] = record[column]
        if record.get("metadata"):
            item["metadata"] = json_arg(
                record["metadata"], f"{source}, line {number}: metadata", InvalidInputError
            )
        rows.append((number, item))
    return rows
