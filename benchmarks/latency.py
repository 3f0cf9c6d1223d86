"""Search latency at 10,000 and 100,000 memories, beside a bare pgvector top-k query.

    python -m benchmarks.latency [--sizes 10000,100000] [--queries 200] [--dsn DSN]
                                 [--torch-threads 1] [--explain] [--no-doc]

For each size the run loads the corpus of :mod:`benchmarks.corpus` (100 memories per user,
cached embeddings) into a scratch database on the server given by ``--dsn`` (else
``PGMEM_BENCH_DSN``, else ``PGMEM_TEST_DSN``), then asks every query (LoCoMo questions, each in
the scope of one user, ``limit=20``, ``threshold=0.1``) once to warm up and once measured, in
rotating order:

- **pgmem, in pieces**: the calls ``Memory.search`` makes, timed one by one -- in a transaction,
  ``analyzer.analyze`` (NLP), the embedder on the query and its entities (``checked_embeddings``),
  ``Store.set_search_options`` (``SET LOCAL hnsw.iterative_scan = relaxed_order``,
  ``hnsw.ef_search`` = the over-fetch, 80), ``pipeline.search_plan`` and ``Store.search`` (the
  one statement: "SQL"); after the commit, ``pipeline.fuse_rows``;
- **bare pgvector**: in a transaction with the same two ``SET LOCAL``, ``SELECT id FROM
  pgmem.memories WHERE tenant = ... AND user_id = ... ORDER BY embedding <=> q LIMIT k`` for
  k = 20 (the caller's limit) and k = 80 (what pgmem's semantic leg fetches), with the same query
  vector;
- **Memory.search** end to end, on a connection whose cursors count the statements sent (SET
  statements aside, as ``tests/test_search.py`` does), and whose hits must equal the pieces'.

Every statement is sent unprepared, as ``Store.search`` sends it. The headline is pgmem's SQL
p50 over the bare k=20 p50 (target: at most 3x at 100,000 memories).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

import pgmem
from benchmarks import corpus, locomo, report
from benchmarks.database import scratch_database, server_dsn
from pgmem import pipeline, scoring, validate
from pgmem.embedding import checked_embeddings
from pgmem.filters import compile_filters
from pgmem.queries import raw_queries
from pgmem.store import Store

LIMIT = 20
THRESHOLD = 0.1
BARE_KS = (LIMIT, scoring.internal_limit(LIMIT))
BARE = sql.SQL(
    "SELECT m.id FROM {schema}.memories m"
    " WHERE m.tenant = %(tenant)s AND m.user_id = %(user_id)s"
    " ORDER BY m.embedding <=> %(embedding)s::vector LIMIT %(k)s"
).format(schema=sql.Identifier(corpus.SCHEMA))


class CountingCursor(psycopg.Cursor):  # type: ignore[type-arg]
    """Records every statement sent through it (as tests/test_search.py does)."""

    statements: ClassVar[list[str]] = []

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else query.as_string(self)
        CountingCursor.statements.append(text)
        return super().execute(query, params, **kwargs)


def data_statements(statements: Sequence[str]) -> list[str]:
    """The statements that are not ``SET``."""
    return [s for s in statements if not s.lstrip().upper().startswith("SET ")]


# -- the search, in pieces ----------------------------------------------------------------------


class Searcher:
    """Runs a search the way ``Memory.search`` does, timing each piece; and bare pgvector
    queries and per-leg statements with the same settings. One connection, autocommit."""

    def __init__(self, dsn: str, embedder: Any, analyzer: pgmem.TextAnalyzer) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        register_vector(self.conn)
        self.embedder, self.analyzer = embedder, analyzer
        self.store = Store(corpus.SCHEMA)
        self.condition, self.filter_params = compile_filters(None)
        self.dim = self.store.schema_dimension(self.conn, corpus.SCHEMA) or 0
        self.ef_search = scoring.internal_limit(LIMIT)

    def close(self) -> None:
        self.conn.close()

    def request(self, query: corpus.Query) -> pipeline.SearchRequest:
        """The checked request ``Memory.search`` builds for the query."""
        return pipeline.SearchRequest(
            scope=validate.scope(corpus.TENANT, query.user_id, None, None),
            query=validate.text(query.text, what="query"),
            limit=LIMIT, threshold=THRESHOLD,
            condition=self.condition, filter_params=self.filter_params,
        )

    def plan(self, query: corpus.Query) -> pipeline.SearchPlan:
        """The search plan of a query (untimed)."""
        analysis = self.analyzer.analyze(query.text)
        vectors = checked_embeddings(
            self.embedder,
            pipeline.embedding_inputs(query.text, pipeline.query_entities(analysis)), self.dim)
        return self._plan(self.request(query), analysis, vectors)

    def _plan(self, request: pipeline.SearchRequest, analysis: Any, vectors: Any
              ) -> pipeline.SearchPlan:
        return pipeline.search_plan(
            request, analysis, vectors, keyword_score="bm25", exact_scan=False,
            entities_available=self.analyzer.entities_available,
        )

    def search(self, query: corpus.Query) -> tuple[dict[str, float], list[pgmem.SearchHit]]:
        """The search, timed piece by piece (seconds by piece), and its hits."""
        clock = time.perf_counter
        request = self.request(query)
        t0 = clock()
        with self.conn.transaction():
            t1 = clock()
            analysis = self.analyzer.analyze(request.query)
            t2 = clock()
            vectors = checked_embeddings(
                self.embedder,
                pipeline.embedding_inputs(request.query, pipeline.query_entities(analysis)),
                self.dim,
            )
            t3 = clock()
            self.store.set_search_options(self.conn, ef_search=self.ef_search)
            t4 = clock()
            plan = self._plan(request, analysis, vectors)
            t5 = clock()
            rows = self.store.search(self.conn, plan.params, request.condition)
            t6 = clock()
        t7 = clock()
        hits = pipeline.fuse_rows(plan, rows, threshold=request.threshold, limit=request.limit)
        t8 = clock()
        return {
            "embedding": t3 - t2,
            "nlp": t2 - t1,
            "sql": t6 - t5,
            "transaction": (t1 - t0) + (t4 - t3) + (t7 - t6),
            "fusion": (t5 - t4) + (t8 - t7),
            "total": t8 - t0,
        }, hits

    def timed(self, statement: sql.Composable, params: dict[str, Any]) -> tuple[float, list[Any]]:
        """Run ``statement`` (unprepared) after the search's SET LOCAL; its seconds and rows."""
        with self.conn.transaction():
            self.store.set_search_options(self.conn, ef_search=self.ef_search)
            began = time.perf_counter()
            rows = self.conn.execute(statement, params, prepare=False).fetchall()
            return time.perf_counter() - began, rows

    def bare(self, query: corpus.Query, embedding: Any, k: int) -> tuple[float, int]:
        """The bare pgvector top-k in the query's scope: seconds and rows returned."""
        seconds, rows = self.timed(BARE, {"tenant": corpus.TENANT, "user_id": query.user_id,
                                          "embedding": embedding, "k": k})
        return seconds, len(rows)

    def explain(self, statement: sql.Composable, params: dict[str, Any]) -> str:
        """EXPLAIN (ANALYZE, BUFFERS) of ``statement`` under the search's settings."""
        with self.conn.transaction():
            self.store.set_search_options(self.conn, ef_search=self.ef_search)
            rows = self.conn.execute(
                sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + statement, params, prepare=False
            ).fetchall()
        return "\n".join(r[0] for r in rows)


def search_statement(condition: sql.Composable, select: str | None = None) -> sql.Composed:
    """The ``search`` statement, or (with ``select``) its CTEs followed by ``select`` instead of
    its final SELECT: how one leg is timed alone (unreferenced CTEs are not run)."""
    raw = raw_queries()
    text = raw["search"]
    if select is not None:
        final = text.rindex("\nSELECT ")  # the top-level SELECT; CTE bodies are indented
        text = text[: final + 1] + select
    scope = sql.SQL(raw["scope"]).format(filters=condition)
    return sql.SQL(text).format(  # type: ignore[arg-type]
        schema=sql.Identifier(corpus.SCHEMA), scope=scope, filters=condition)


# -- one size -----------------------------------------------------------------------------------


@dataclass
class SizeResult:
    """What one table size measured: seconds per query, by piece or statement."""

    rows: int
    load: corpus.LoadReport
    pieces: dict[str, list[float]] = field(default_factory=dict)
    bare: dict[int, list[float]] = field(default_factory=dict)
    bare_rows: dict[int, list[int]] = field(default_factory=dict)
    end_to_end: list[float] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)
    mismatches: int = 0
    candidates: list[int] = field(default_factory=list)
    explain: str = ""


def measure(
    dsn: str, queries: Sequence[corpus.Query], embedder: Any, analyzer: pgmem.TextAnalyzer,
    result: SizeResult, *, explain: bool,
) -> None:
    """Warm up, then measure every query once with each method, in rotating order."""
    searcher = Searcher(dsn, embedder, analyzer)
    counting = psycopg.connect(dsn, autocommit=True, cursor_factory=CountingCursor)
    memory = pgmem.Memory(counting, embedder=embedder, nlp=analyzer)
    try:
        embeddings = [searcher.plan(q).params["embedding"] for q in queries]
        if explain:
            plan = searcher.plan(queries[0])
            result.explain = searcher.explain(search_statement(searcher.condition), plan.params)

        def run_pieces(i: int, q: corpus.Query) -> None:
            times, hits = searcher.search(q)
            for name, seconds in times.items():
                result.pieces.setdefault(name, []).append(seconds)
            reference[i] = [h.id for h in hits]

        def run_bare(k: int) -> Any:
            def run(i: int, q: corpus.Query) -> None:
                seconds, n = searcher.bare(q, embeddings[i], k)
                result.bare.setdefault(k, []).append(seconds)
                result.bare_rows.setdefault(k, []).append(n)
            return run

        def run_memory(i: int, q: corpus.Query) -> None:
            CountingCursor.statements = []
            began = time.perf_counter()
            hits = memory.search(q.text, user_id=q.user_id, limit=LIMIT, threshold=THRESHOLD)
            result.end_to_end.append(time.perf_counter() - began)
            result.statements.append(len(data_statements(CountingCursor.statements)))
            ends[i] = [h.id for h in hits]

        methods = [run_pieces, *(run_bare(k) for k in BARE_KS), run_memory]
        for measured in (False, True):
            saved = (result.pieces, result.bare, result.bare_rows, result.end_to_end,
                     result.statements)
            reference: dict[int, list[Any]] = {}
            ends: dict[int, list[Any]] = {}
            for i, q in enumerate(queries):
                for j in range(len(methods)):
                    methods[(i + j) % len(methods)](i, q)
            if not measured:  # forget the warm-up pass
                for collection in saved:
                    collection.clear()  # type: ignore[attr-defined]
            else:
                result.mismatches = sum(reference[i] != ends[i] for i in range(len(queries)))
        for q in queries[:20]:
            plan = searcher.plan(q)
            rows = searcher.store.search(searcher.conn, plan.params, searcher.condition)
            result.candidates.append(len(rows))
    finally:
        memory.close()
        counting.close()
        searcher.close()


def run_size(
    server: str, data: corpus.Corpus, queries: Sequence[corpus.Query], embedder: Any,
    analyzer: pgmem.TextAnalyzer, *, explain: bool, name: str,
) -> SizeResult:
    """Load ``data`` into a scratch database and measure it."""
    with scratch_database(server, name) as dsn:
        pgmem.migrate(dsn)
        corpus.progress(f"{len(data)} rows: loading")
        load = corpus.load_corpus(dsn, data)
        corpus.progress(f"  loaded in {load.total:.0f} s; searching")
        result = SizeResult(rows=len(data), load=load)
        measure(dsn, queries, embedder, analyzer, result, explain=explain)
    return result


# -- output -------------------------------------------------------------------------------------

PIECES = (
    ("embedding", "query embedding (query + its entities)"),
    ("nlp", "NLP (lemmas + entities, spaCy)"),
    ("sql", "SQL: the search statement"),
    ("transaction", "BEGIN, SET LOCAL, COMMIT"),
    ("fusion", "search_plan + fuse_rows"),
    ("total", "total of the pieces"),
)


def breakdown_table(r: SizeResult) -> str:
    """p50 and p95 of each piece, and of Memory.search end to end."""
    rows = [(label, report.ms(report.p50(r.pieces[key])), report.ms(report.p95(r.pieces[key])))
            for key, label in PIECES]
    rows.append(("Memory.search, end to end", report.ms(report.p50(r.end_to_end)),
                 report.ms(report.p95(r.end_to_end))))
    return report.table((f"{r.rows:,} memories: piece", "p50 ms", "p95 ms"), rows)


def headline_table(results: Sequence[SizeResult]) -> str:
    """pgmem's SQL against the bare pgvector query, per size."""
    head = ("memories", "pgmem SQL p50 ms", *(f"bare k={k} p50 ms" for k in BARE_KS),
            *(f"SQL / bare k={k} (p50)" for k in BARE_KS), f"SQL / bare k={LIMIT} (p95)",
            "statements per search")
    rows = []
    for r in results:
        sql_p50 = report.p50(r.pieces["sql"])
        statements = sorted(set(r.statements))
        rows.append((
            f"{r.rows:,}", report.ms(sql_p50),
            *(report.ms(report.p50(r.bare[k])) for k in BARE_KS),
            *(report.ratio(sql_p50, report.p50(r.bare[k])) for k in BARE_KS),
            report.ratio(report.p95(r.pieces["sql"]), report.p95(r.bare[LIMIT])),
            ", ".join(map(str, statements)),
        ))
    return report.table(head, rows)


def notes(results: Sequence[SizeResult], n_queries: int) -> str:
    """What else the run checked."""
    lines = []
    for r in results:
        lines.append(
            f"- {r.rows:,} memories ({r.rows // corpus.ROWS_PER_USER:,} users; loaded in "
            f"{r.load.total:.0f} s: COPY {r.load.copy_seconds:.0f} s, indexes "
            f"{r.load.index_seconds:.0f} s, VACUUM ANALYZE {r.load.vacuum_seconds:.0f} s): "
            f"{n_queries} queries; Memory.search returned the same hits as the pieces for "
            f"{n_queries - r.mismatches} of them; bare k={LIMIT} returned "
            f"{np.mean(r.bare_rows[LIMIT]):.1f} rows on average, k={BARE_KS[1]} "
            f"{np.mean(r.bare_rows[BARE_KS[1]]):.1f}; the search statement returned "
            f"{np.mean(r.candidates):.0f} candidate rows on average."
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000",
                        help="comma-separated corpus sizes (default: %(default)s)")
    parser.add_argument("--queries", type=int, default=200, help="queries per size")
    parser.add_argument("--data", type=corpus.Path, default=corpus.DEFAULT_DATA)
    parser.add_argument("--dsn", help="a server where databases may be created")
    parser.add_argument("--torch-threads", type=int, default=1, metavar="N")
    parser.add_argument("--explain", action="store_true",
                        help="print EXPLAIN (ANALYZE, BUFFERS) of one search per size")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    corpus.limit_torch_threads(args.torch_threads)
    server = server_dsn(args.dsn)
    raw = locomo.load_conversations(args.data)
    embedder, analyzer = pgmem.SentenceTransformerEmbedder(), pgmem.TextAnalyzer()
    cache = corpus.Cache(args.data, embedder, analyzer)
    data = corpus.corpus(raw, max(sizes), cache)
    embedder.embed(["warm up"])
    analyzer.analyze("warm up")
    results = []
    for n in sizes:
        queries = corpus.queries(raw, n // corpus.ROWS_PER_USER, args.queries)
        results.append(run_size(server, data.head(n), queries, embedder, analyzer,
                                explain=args.explain, name=f"pgmem_latency_{os.getpid()}_{n}"))
        print(breakdown_table(results[-1]) + "\n", flush=True)
        if args.explain:
            print(results[-1].explain + "\n", flush=True)
    headline = headline_table(results)
    print(headline + "\n")
    print(notes(results, args.queries))
    if not args.no_doc:
        report.write_environment(server, analyzer.model_name, args.torch_threads)
        body = "\n\n".join([
            "## Search latency",
            report.run_header(report.command_line()),
            __doc__.split("\n\n", 2)[2].strip(),
            headline,
            *(breakdown_table(r) for r in results),
            notes(results, args.queries),
        ])
        report.write_section("latency", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
