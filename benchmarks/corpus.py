"""The corpus of the latency, scale and concurrency benchmarks: LoCoMo's texts spread over many
scopes, with embeddings and analyses computed once and cached, loaded into scratch databases.

    python -m benchmarks.corpus prepare [--rows 100000] [--part vectors|analyses|all]
    python -m benchmarks.corpus check [--rows 3000]

**Rows.** Each user holds :data:`ROWS_PER_USER` memories: user ``u`` takes a window of one
conversation's texts (its turns, as :func:`benchmarks.dialogues.turn_text` writes them, then its
observations), conversation ``u % 5``, window start ``(u // 5) * 100`` modulo the pool. Five
conversations give 3,970 distinct texts, so a text recurs in many users; the user's tag is
appended (``"... (u00421)"``) so that every stored text, and every embedding, is distinct --
HNSW graphs degrade on exact duplicate vectors, which real memories are not. The 10,000-row
corpus is the first 10,000 rows of the 100,000-row one.

**Cache.** Embeddings (the default embedder, torch on one thread) and spaCy analyses (lemmas and
entities) of every stored text, and embeddings of the entities' surface forms, are kept under
``benchmarks/.cache/corpus/<key>/`` (git-ignored) in chunks of 10,000 rows; the key hashes the
data file, the models and the row scheme. ``prepare`` fills it (30-40 texts/s per process on
this machine while busy, so about an hour; ``--part`` lets two processes share the work).

**Loading** (:func:`load`) writes what ``Memory.add_many(..., dedupe=False)`` writes -- memories,
entities (one per normalised name, with the label and surface-form embedding of its first
occurrence), links and ADD events -- with COPY, the memories' secondary indexes dropped first and
rebuilt afterwards from their own definitions (read from ``pg_indexes``, so they follow the
migrations). ``check`` loads the same rows both ways and compares them row by row (with
:func:`benchmarks.ingest.stored_rows`); 100,000 rows load in about 20 s this way, against
2.5 minutes or more through ``add_many`` with cached models (the HNSW index maintained per row).

Synthetic rows (``synthetic_rows``, for the 1M point of the scale curve) repeat the real corpus
under new users, with Gaussian noise on the cached vectors.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.types.json import Jsonb

import pgmem
from benchmarks import dialogues
from benchmarks.database import scratch_database, server_dsn
from pgmem.builders import content_hash
from pgmem.embedding import embeds_beside_analysis
from pgmem.nlp import Analysis, Entity
from pgmem.nlp_process import make_analyzer

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_ROOT = REPO_ROOT / "benchmarks" / ".cache" / "corpus"
ROWS_PER_USER = 100
CHUNK = 10_000
SCHEME = "v1: turns+observations per conversation, window 100, suffix ' (uNNNNN)'"
TENANT = "default"
SCHEMA = "pgmem"

Vectors = npt.NDArray[np.float32]


def progress(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


def limit_torch_threads(n: int) -> None:
    """Run torch on ``n`` threads (0: torch's default). One text per call gains little from
    threads, and when other processes compete for the cores torch's spinning threads make
    embedding 10-20x slower (the machine is shared)."""
    if n > 0:
        import torch

        torch.set_num_threads(n)


def run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every benchmark that writes docs/benchmarks.md takes."""
    dialogues.data_arguments(parser)
    parser.add_argument("--dsn", help="a server where databases may be created")
    parser.add_argument("--torch-threads", type=int, default=1, metavar="N")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")


def start(args: argparse.Namespace) -> tuple[str, pgmem.SentenceTransformerEmbedder,
                                              pgmem.TextAnalyzer]:
    """What such a run starts from: torch on ``--torch-threads``, the server of ``--dsn``, the
    models."""
    limit_torch_threads(args.torch_threads)
    embedder = pgmem.SentenceTransformerEmbedder()
    return server_dsn(args.dsn), embedder, make_analyzer(apart=embeds_beside_analysis(embedder))


# -- rows ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One memory of the corpus."""

    user_id: str
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Query:
    """A LoCoMo question, asked in the scope of a user whose memories come from its conversation."""

    text: str
    user_id: str


def user_id(u: int) -> str:
    """The scope of user number ``u``."""
    return f"user-{u:05d}"


def pools(raw: Sequence[dialogues.RawConversation]) -> list[list[dialogues.Item]]:
    """Each conversation's texts: its turns, then its observations."""
    return [
        [*dialogues.task_memories(c, "turns"), *dialogues.task_memories(c, "observations")]
        for c in raw
    ]


def corpus_rows(raw: Sequence[dialogues.RawConversation], n: int) -> list[Row]:
    """The first ``n`` rows of the corpus (see the module docstring)."""
    texts = pools(raw)
    rows = []
    for i in range(n):
        u, k = divmod(i, ROWS_PER_USER)
        pool = texts[u % len(texts)]
        item = pool[((u // len(texts)) * ROWS_PER_USER + k) % len(pool)]
        rows.append(Row(
            user_id=user_id(u),
            text=f"{item.text} (u{u:05d})",
            metadata={"conversation": raw[u % len(texts)]["id"], "dia_ids": list(item.dia_ids)},
        ))
    return rows


def queries(
    raw: Sequence[dialogues.RawConversation], n_users: int, count: int, seed: int = 5
) -> list[Query]:
    """``count`` questions (categories 1-4 with evidence), spread over the conversations, each
    asked to a random user (of the first ``n_users``) who holds texts of its conversation."""
    rng = np.random.default_rng(seed)
    shuffled = [
        [questions[i] for i in rng.permutation(len(questions))]
        for questions in ([q.text for q in dialogues.task_questions(c, ())] for c in raw)
    ]
    out: list[Query] = []
    while len(out) < count:
        c = len(out) % len(raw)
        question = shuffled[c][(len(out) // len(raw)) % len(shuffled[c])]
        users = range(c, n_users, len(raw))
        out.append(Query(question, user_id(users[int(rng.integers(len(users)))])))
    return out


def synthetic_rows(
    rows: Sequence[Row], vectors: Vectors, analyses: Sequence[Analysis], n: int,
    *, noise: float = 0.02, seed: int = 11,
) -> Iterable[tuple[Row, Vectors, Analysis]]:
    """``n`` rows in :func:`arrival_order`: the real corpus, then copies of it under new users
    whose vectors carry Gaussian noise (renormalised) and whose texts and lemmas carry the new
    user's tag."""
    pool = np.random.default_rng(seed).normal(0, noise, (4096, vectors.shape[1]))
    real = len(rows)
    for i in arrival_order(n).tolist():
        j = i % real
        row, vector, analysis = rows[j], vectors[j], analyses[j]
        if i >= real:
            u = i // ROWS_PER_USER
            old_tag, new_tag = row.user_id.removeprefix("user-"), f"{u:05d}"
            row = Row(user_id(u), row.text.replace(f"(u{old_tag})", f"(u{new_tag})"), row.metadata)
            noisy = vector + pool[(i * 2654435761) % len(pool)].astype(np.float32)
            vector = noisy / np.linalg.norm(noisy)
            analysis = dataclasses.replace(
                analysis,
                lexemes=tuple(f"u{new_tag}" if x == f"u{old_tag}" else x for x in analysis.lexemes),
            )
        yield row, vector, analysis


# -- cache --------------------------------------------------------------------------------------


class Cache:
    """Embeddings and analyses of the corpus rows, computed once (see the module docstring)."""

    def __init__(
        self, data: Path, embedder: pgmem.SentenceTransformerEmbedder,
        analyzer: pgmem.TextAnalyzer, raw: Sequence[dialogues.RawConversation] = (),
    ) -> None:
        self.embedder, self.analyzer = embedder, analyzer
        digest = hashlib.sha256()
        digest.update(data.read_bytes())
        if raw:  # and the conversations chosen from it
            digest.update(",".join(c["id"] for c in raw).encode())
        for part in (Path(embedder.model_name).name, analyzer.model_name, SCHEME):
            digest.update(part.encode())
        self.dir = CACHE_ROOT / digest.hexdigest()[:16]
        self.dir.mkdir(parents=True, exist_ok=True)

    def vectors(self, rows: Sequence[Row]) -> Vectors:
        """The embedding of every row's text, computing the missing chunks."""
        parts = []
        for start in range(0, len(rows), CHUNK):
            path = self.dir / f"vectors-{start:07d}.npy"
            chunk = [r.text for r in rows[start : start + CHUNK]]
            if not path.exists() or len(np.load(path, mmap_mode="r")) < len(chunk):
                progress(f"embedding rows {start}..{start + len(chunk)}")
                began = time.perf_counter()
                _save(path, np.save, self.embedder.embed(chunk))
                progress(f"  {len(chunk) / (time.perf_counter() - began):.0f} texts/s")
            parts.append(np.load(path)[: len(chunk)])
        return np.concatenate(parts)[: len(rows)]

    def analyses(self, rows: Sequence[Row]) -> list[Analysis]:
        """The analysis of every row's text, computing the missing chunks."""
        out: list[Analysis] = []
        for start in range(0, len(rows), CHUNK):
            path = self.dir / f"analyses-{start:07d}.json"
            chunk = [r.text for r in rows[start : start + CHUNK]]
            if not path.exists() or len(json.loads(path.read_text())) < len(chunk):
                progress(f"analysing rows {start}..{start + len(chunk)}")
                began = time.perf_counter()
                encoded = [
                    [list(a.lexemes), [[e.name, e.surface, e.label] for e in a.entities]]
                    for a in self.analyzer.analyze_many(chunk)
                ]
                _save(path, lambda p, v: p.write_text(json.dumps(v)), encoded)
                progress(f"  {len(chunk) / (time.perf_counter() - began):.0f} texts/s")
            for lexemes, entities in json.loads(path.read_text())[: len(chunk)]:
                out.append(Analysis(tuple(lexemes), tuple(Entity(*e) for e in entities)))
        return out[: len(rows)]

    def surface_vectors(self, analyses: Sequence[Analysis]) -> dict[str, Vectors]:
        """The embedding of every entity surface form of ``analyses``."""
        path = self.dir / "surfaces.npz"
        known: dict[str, Vectors] = {}
        if path.exists():
            with np.load(path) as f:
                known = dict(zip(f["surfaces"].tolist(), f["vectors"]))
        missing = list(dict.fromkeys(
            e.surface for a in analyses for e in a.entities if e.surface not in known
        ))
        if missing:
            progress(f"embedding {len(missing)} entity surface forms")
            known.update(zip(missing, self.embedder.embed(missing)))
            surfaces = list(known)
            _save(path, lambda p, v: np.savez(p, surfaces=np.array(surfaces), vectors=v),
                  np.stack([known[s] for s in surfaces]))
        return known


def _save(path: Path, write: Any, value: Any) -> None:
    """Write through a temporary file, so that an interrupted run leaves no half chunk."""
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    write(tmp, value)
    tmp.replace(path)


@dataclass(frozen=True)
class Corpus:
    """Rows with their cached embeddings, analyses and entity surface embeddings."""

    rows: list[Row]
    vectors: Vectors
    analyses: list[Analysis]
    surfaces: dict[str, Vectors]

    def __len__(self) -> int:
        return len(self.rows)

    def head(self, n: int) -> Corpus:
        """The first ``n`` rows."""
        return Corpus(self.rows[:n], self.vectors[:n], self.analyses[:n], self.surfaces)


def corpus(raw: Sequence[dialogues.RawConversation], n: int, cache: Cache) -> Corpus:
    """The first ``n`` rows with everything loading needs, from the cache (filled if needed)."""
    rows = corpus_rows(raw, n)
    analyses = cache.analyses(rows)
    return Corpus(rows, cache.vectors(rows), analyses, cache.surface_vectors(analyses))


# -- loading ------------------------------------------------------------------------------------

SECONDARY_INDEXES = """
SELECT i.indexname, i.indexdef
  FROM pg_indexes i
 WHERE i.schemaname = %(schema)s AND i.tablename = 'memories'
   AND NOT EXISTS (SELECT FROM pg_constraint c
                    WHERE c.conname = i.indexname AND c.connamespace = %(schema)s::regnamespace)
 ORDER BY i.indexname
"""


@dataclass(frozen=True)
class LoadReport:
    """How long each phase of :func:`load` took, in seconds."""

    rows: int
    copy_seconds: float
    index_seconds: float
    vacuum_seconds: float

    @property
    def total(self) -> float:
        return self.copy_seconds + self.index_seconds + self.vacuum_seconds


def load(
    dsn: str,
    items: Iterable[tuple[Row, Vectors, Analysis]],
    surfaces: dict[str, Vectors],
    *,
    maintenance_work_mem: str = "1GB",
) -> LoadReport:
    """Write ``items`` (row, vector, analysis) into the migrated, empty pgmem schema at ``dsn``
    as ``add_many(dedupe=False)`` would (see the module docstring)."""
    began = time.perf_counter()
    entities: dict[str, tuple[uuid.UUID, Entity]] = {}
    n = 0
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        set_autovacuum(conn, False)
        indexes = conn.execute(SECONDARY_INDEXES, {"schema": SCHEMA}).fetchall()
        for name, _ in indexes:
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(
                sql.Identifier(SCHEMA), sql.Identifier(name)))
        links = []
        # Binary COPY (vectors travel as floats, not text) into a staging table, since psycopg
        # has no binary tsvector; then one INSERT ... SELECT casts the lemmas.
        conn.execute(
            "CREATE TEMP TABLE corpus_stage (tenant text, id uuid, user_id text, text text,"
            " content_hash text, metadata jsonb, embedding vector, lexemes text,"
            " lexeme_count int4) ON COMMIT DROP")
        with conn.cursor() as cur, cur.copy(
            "COPY corpus_stage FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "uuid", "text", "text", "text", "jsonb", "vector", "text",
                            "int4"])
            for row, vector, analysis in items:
                memory_id = uuid.uuid4()
                copy.write_row((
                    TENANT, memory_id, row.user_id, row.text, content_hash(row.text),
                    Jsonb(row.metadata), vector, analysis.tsvector(), len(analysis.lexemes),
                ))
                linked = set()
                for entity in analysis.entities:
                    entity_id, _ = entities.setdefault(entity.name, (uuid.uuid4(), entity))
                    if entity_id not in linked:
                        linked.add(entity_id)
                        links.append((TENANT, memory_id, entity_id, row.user_id))
                n += 1
        conn.execute(
            "INSERT INTO pgmem.memories (tenant, id, user_id, text, content_hash, metadata,"
            " embedding, lexemes, lexeme_count)"
            " SELECT tenant, id, user_id, text, content_hash, metadata, embedding,"
            " lexemes::tsvector, lexeme_count FROM corpus_stage")
        with conn.cursor() as cur, cur.copy(
            "COPY pgmem.entities (tenant, id, name, label, embedding) FROM STDIN"
        ) as copy:
            for entity_id, entity in sorted(entities.values(), key=lambda x: x[1].name):
                copy.write_row(
                    (TENANT, entity_id, entity.name, entity.label, surfaces[entity.surface]))
        with conn.cursor() as cur, cur.copy(
            "COPY pgmem.memory_entities (tenant, memory_id, entity_id, user_id) FROM STDIN"
        ) as copy:
            for link in links:
                copy.write_row(link)
        conn.execute(
            "INSERT INTO pgmem.history (tenant, memory_id, event, new_text)"
            " SELECT tenant, id, 'ADD', text FROM pgmem.memories"
        )
        conn.commit()
        copied = time.perf_counter()
        conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(
            sql.Literal(maintenance_work_mem)))
        for name, definition in indexes:
            progress(f"  building {name}")
            conn.execute(definition)
            conn.commit()
        indexed = time.perf_counter()
    vacuum(dsn)
    done = time.perf_counter()
    return LoadReport(n, copied - began, indexed - copied, done - indexed)


TABLES = ("memories", "entities", "memory_entities", "history")


def set_autovacuum(conn: psycopg.Connection[Any], enabled: bool) -> None:
    """Turn autovacuum off for pgmem's tables during a load (on again after it): an autovacuum
    ANALYZE running beside the load's VACUUM holds a snapshot that keeps the VACUUM from
    marking the pages visible, and index-only scans then visit the heap."""
    for table in TABLES:
        name = sql.Identifier(SCHEMA, table)
        conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(name)
                     if not enabled else
                     sql.SQL("ALTER TABLE {} RESET (autovacuum_enabled)").format(name))


def vacuum(dsn: str, attempts: int = 5) -> None:
    """VACUUM the loaded tables, as a table at rest is: analyzed and in the visibility map
    (index-only scans then skip the heap); then turn their autovacuum back on. FREEZE, and
    again while pages are left out: a VACUUM right after the load may leave out the pages of
    tables nothing has read yet (their tuples' hint bits unset)."""
    tables = sql.SQL(", ").join(sql.Identifier(SCHEMA, t) for t in TABLES)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(tables))
        for _ in range(attempts):
            conn.execute(sql.SQL("VACUUM (FREEZE) {}").format(tables))
            row = conn.execute(
                "SELECT string_agg(relname, ', ') FROM pg_class WHERE relnamespace ="
                " %s::regnamespace AND relname = ANY (%s) AND relallvisible < relpages",
                (SCHEMA, list(TABLES))).fetchone()
            left = row[0] if row is not None else None
            if not left:
                break
            time.sleep(1)
        else:
            progress(f"  VACUUM left pages of {left} outside the visibility map")
        set_autovacuum(conn, True)


def load_corpus(dsn: str, data: Corpus, **kwargs: Any) -> LoadReport:
    """:func:`load` the rows of ``data``, users interleaved (:func:`arrival_order`)."""
    order = arrival_order(len(data))
    return load(
        dsn, ((data.rows[i], data.vectors[i], data.analyses[i]) for i in order), data.surfaces,
        **kwargs,
    )


def arrival_order(n: int, seed: int = 3) -> Vectors:
    """A fixed shuffle of ``range(n)``: memories arrive interleaved across users, as they would
    from many users over time, so that a scope's rows are spread over the heap."""
    return np.random.default_rng(seed).permutation(n)


# -- the same rows through add_many (for `check`) -------------------------------------------------


class CachedEmbedder:
    """An embedder answering from a table of known texts (a KeyError for any other)."""

    def __init__(self, vectors: dict[str, Vectors]) -> None:
        self._vectors = vectors

    def embed(self, texts: Sequence[str]) -> Vectors:
        return np.stack([self._vectors[t] for t in texts])


class CachedAnalyzer(pgmem.TextAnalyzer):
    """A :class:`~pgmem.TextAnalyzer` answering from a table of known texts."""

    def __init__(self, analyses: dict[str, Analysis]) -> None:
        super().__init__()
        self._analyses = analyses

    @property
    def entities_available(self) -> bool:
        return True

    def analyze_many(self, texts: Iterable[str], batch_size: int = 64) -> list[Analysis]:
        return [self._analyses[t] for t in texts]


def add_many_corpus(dsn: str, data: Corpus, batch_size: int = 64) -> float:
    """Store ``data`` with ``Memory.add_many(dedupe=False)`` and the cached models, in the
    order :func:`load_corpus` writes them; seconds."""
    vectors = {r.text: v for r, v in zip(data.rows, data.vectors)} | data.surfaces
    analyses = {r.text: a for r, a in zip(data.rows, data.analyses)}
    items = [
        {"text": r.text, "user_id": r.user_id, "metadata": r.metadata}
        for r in (data.rows[i] for i in arrival_order(len(data)))
    ]
    with pgmem.Memory(dsn, embedder=CachedEmbedder(vectors), nlp=CachedAnalyzer(analyses)) as m:
        began = time.perf_counter()
        m.add_many(items, dedupe=False, batch_size=batch_size)
        return time.perf_counter() - began


# -- command line -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.ingest import stored_rows

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.corpus", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("prepare", "check"))
    parser.add_argument("--rows", type=int, help="rows (prepare: 100000, check: 3000)")
    parser.add_argument("--part", choices=("vectors", "analyses", "all"), default="all",
                        help="prepare only this part of the cache")
    dialogues.data_arguments(parser)
    parser.add_argument("--dsn", help="check: the server for two scratch databases")
    parser.add_argument("--torch-threads", type=int, default=1, metavar="N")
    args = parser.parse_args(argv)
    limit_torch_threads(args.torch_threads)
    raw = dialogues.load_conversations(args.data, args.conversations)
    cache = Cache(args.data, pgmem.SentenceTransformerEmbedder(), pgmem.TextAnalyzer(), raw)
    if args.command == "prepare":
        rows = corpus_rows(raw, args.rows or 100_000)
        if args.part in ("analyses", "all"):
            analyses = cache.analyses(rows)
            if args.part == "all":
                cache.surface_vectors(analyses)
        if args.part in ("vectors", "all"):
            cache.vectors(rows)
        progress(f"cache ready in {cache.dir}")
        return 0
    data = corpus(raw, args.rows or 3000, cache)
    dsn = server_dsn(args.dsn)
    stored = {}
    with scratch_database(dsn, "pgmem_corpus_check_copy") as copy_db, \
            scratch_database(dsn, "pgmem_corpus_check_add_many") as add_db:
        for db in (copy_db, add_db):
            pgmem.migrate(db)
        report = load_corpus(copy_db, data)
        add_seconds = add_many_corpus(add_db, data)
        for name, db in (("copy", copy_db), ("add_many", add_db)):
            stored[name] = stored_rows(db)
    same = stored["copy"] == stored["add_many"]
    print(f"{len(data)} rows: COPY load {report.total:.1f} s, add_many (cached models) "
          f"{add_seconds:.1f} s; {len(stored['copy'][0])} memories, {len(stored['copy'][1])} "
          f"entities; {'the same rows' if same else 'DIFFERENT rows'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
