"""Search latency at 10,000 and 100,000 memories, beside a bare pgvector top-k query.

    python -m benchmarks.latency [--sizes 10000,100000] [--queries 200] [--dsn DSN]
                                 [--torch-threads 1] [--explain] [--no-doc] [--json PATH]

For each size the run loads the corpus of :mod:`benchmarks.corpus` (100 memories per user,
cached embeddings) into a scratch database on the server given by ``--dsn`` (else
``PGMEM_BENCH_DSN``, else ``PGMEM_TEST_DSN``), then asks every query (LoCoMo questions, each in
the scope of one user, ``limit=20``, ``threshold=0.1``) once to warm up and once measured, in
rotating order:

- **pgmem**: ``Memory.search`` itself, with its pieces timed at pgmem's public seams
  (:mod:`benchmarks.instruments`): the embedder (query embedding: the query, embedded while the
  analyzer runs, then the entity names pgmem has not embedded before) and the analyzer (NLP:
  lemmas and entities; where spaCy runs in a process of its own, from sending the query to
  reading its analysis back, the embedding meanwhile) are timed wrappers; the ``Memory`` runs
  on a caller's connection whose cursor class times and counts every statement ("SQL" is the
  search's one round trip: its settings and its statement, sent together in psycopg's
  pipeline mode, from queueing them until the rows are in; any BEGIN, SET or COMMIT sent apart
  would be counted apart) and whose transaction blocks time BEGIN and COMMIT; the rest of the
  wall time (less the model work: the time during which the embedder or the analyzer ran, as
  the two overlap or follow each other) is pgmem's Python: argument checks, the search plan,
  reading the rows and fusing them.
- **bare embedding**: the same embedder's ``embed`` of the query text alone (after the query's
  NLP, untimed, as in a search).
- **bare pgvector**: on another connection, after the query's NLP and embedding (untimed, so
  that it meets the CPU caches as the search's statement does), sent and timed as the search's
  round trip is: in one round trip with the same settings the search sent
  (``plan_cache_mode = force_generic_plan``, ``jit = off``,
  ``hnsw.iterative_scan = relaxed_order``, ``hnsw.ef_search`` = 40),
  ``SELECT id FROM pgmem.memories WHERE tenant = ... AND user_id = ... ORDER BY embedding <=> q
  LIMIT k`` with the query's vector, for k = 20 (the caller's limit) and k = 40 (what pgmem's
  semantic leg fetches).

Both are server-prepared statements, as pgmem sends its search (and as psycopg sends any
statement it has run five times). The headlines: ``Memory.search`` end to end over the bare
embedding plus the bare k=20 top-k (p50; target at most 1.5x), and pgmem's SQL round trip over
the bare k=20 statement (p50; target at most 2x at 100,000 memories). ``--torch-threads 0``
leaves torch's default threads (its own section of docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row

import pgmem
from benchmarks import corpus, dialogues, report
from benchmarks.database import scratch_database
from benchmarks.instruments import (
    CLOCK,
    Sent,
    TimedAnalyzer,
    TimedConnection,
    TimedEmbedder,
    TimingCursor,
)
from pgmem import scoring
from pgmem.filters import compile_filters
from pgmem.nlp import quote_lexeme
from pgmem.queries import Queries, named_blocks, sql_blocks

LIMIT = 20
THRESHOLD = 0.1
BARE_KS = (LIMIT, scoring.internal_limit(LIMIT))
BARE = (
    "SELECT m.id FROM pgmem.memories m"
    " WHERE m.tenant = %(tenant)s AND m.user_id = %(user_id)s"
    " ORDER BY m.embedding <=> %(embedding)s::vector LIMIT %(k)s"
)


@dataclass(frozen=True)
class Searched:
    """One ``Memory.search``: seconds by piece, its hits, and what it sent."""

    seconds: dict[str, float]
    hits: list[pgmem.SearchHit]
    settings: list[str]  # the SET statements
    statements: list[Sent]  # the others

    @property
    def statement(self) -> Sent:
        """The search statement (the one data statement)."""
        return self.statements[-1]


class Searcher:
    """``Memory.search`` on an instrumented connection; and the bare pgvector query, per-leg
    statements and EXPLAIN on a plain one, after the same SET statements the search sent."""

    def __init__(self, dsn: str, embedder: Any, analyzer: pgmem.TextAnalyzer) -> None:
        self.timed_conn = TimedConnection.connect(
            dsn, autocommit=True, cursor_factory=TimingCursor)
        self.embedder = embedder
        self.memory = pgmem.Memory(
            self.timed_conn, embedder=TimedEmbedder(embedder), nlp=TimedAnalyzer(analyzer))
        self.conn = psycopg.connect(dsn, autocommit=True)
        register_vector(self.conn)

    def close(self) -> None:
        self.memory.close()
        self.timed_conn.close()
        self.conn.close()

    def search(self, query: corpus.Query) -> Searched:
        """``Memory.search`` of the query, timed piece by piece."""
        CLOCK.reset()
        began = time.perf_counter()
        hits = self.memory.search(query.text, user_id=query.user_id, limit=LIMIT,
                                  threshold=THRESHOLD)
        total = time.perf_counter() - began
        settings = [s for s in CLOCK.sent if s.is_set]
        statements = [s for s in CLOCK.sent if not s.is_set]
        pipelined = CLOCK.get("pipeline")
        seconds = {
            "embedding": CLOCK.get("embedding"),
            "nlp": CLOCK.get("nlp"),
            # the round trip of the settings and the statement sent together (pipeline mode);
            # statements sent one by one are timed each
            "sql": pipelined or sum(s.seconds for s in statements),
            "transaction": (0.0 if pipelined else sum(s.seconds for s in settings))
            + CLOCK.get("begin") + CLOCK.get("commit"),
        }
        # The model work: the time during which the embedder or the analyzer ran (the query
        # embeds while spaCy analyses it, or before it: the two may overlap).
        seconds["python"] = total - CLOCK.get("models") - seconds["sql"] - seconds["transaction"]
        seconds["total"] = total
        cursor = psycopg.ClientCursor(self.conn)
        texts = [cursor.mogrify(s.text, s.params) for s in settings]
        return Searched(seconds, hits, texts, statements)

    def embed_query(self, query: corpus.Query) -> float:
        """The bare model: seconds to embed the query alone, with the embedder the search
        uses."""
        began = time.perf_counter()
        self.embedder.embed([query.text])
        return time.perf_counter() - began

    def timed(self, settings: Sequence[str], statement: str, params: Any, *,
              prepare: bool = False) -> tuple[float, list[dict[str, Any]]]:
        """Run ``statement`` in a transaction after ``settings``; seconds, rows."""
        with self.conn.transaction(), self.conn.cursor(row_factory=dict_row) as cur:
            for setting in settings:
                cur.execute(setting)
            began = time.perf_counter()
            rows = cur.execute(statement, params, prepare=prepare).fetchall()
            return time.perf_counter() - began, rows

    def pipelined(self, settings: Sequence[str], statement: str, params: Any, *,
                  prepare: bool = False) -> tuple[float, list[dict[str, Any]]]:
        """Send ``settings`` and ``statement`` in one round trip, as a search sends its own
        (pipeline mode, the implicit transaction of the round trip); seconds from queueing
        them until the rows are in, rows."""
        began = time.perf_counter()
        with self.conn.pipeline():
            for setting in settings:
                self.conn.execute(setting)
            cur = self.conn.cursor(row_factory=dict_row)
            cur.execute(statement, params, prepare=prepare)
        rows = cur.fetchall()
        return time.perf_counter() - began, rows

    def bare(self, query: corpus.Query, searched: Searched, k: int) -> tuple[float, int]:
        """The bare pgvector top-k in the query's scope: seconds and rows returned."""
        params = {"tenant": corpus.TENANT, "user_id": query.user_id,
                  "embedding": searched.statement.params["embedding"], "k": k}
        seconds, rows = self.pipelined(searched.settings, BARE, params, prepare=True)
        return seconds, len(rows)

    def explain(self, query: corpus.Query) -> str:
        """EXPLAIN ANALYZE of the plan a search of ``query`` runs with."""
        plan = self.memory.explain_search(query.text, user_id=query.user_id, limit=LIMIT,
                                          analyze=True)
        return "\n".join(plan_lines(plan["Plan"])) + (
            f"\nExecution Time: {plan['Execution Time']:.3f} ms")

    def explain_other(self, searched: Searched, statement: str) -> str:
        """EXPLAIN (ANALYZE, BUFFERS) of another statement, as :func:`other_settings` run it."""
        _, rows = self.timed(other_settings(searched.settings),
                             "EXPLAIN (ANALYZE, BUFFERS) " + statement,
                             other_params(statement, searched.statement.params))
        return "\n".join(r["QUERY PLAN"] for r in rows)


def plan_lines(node: dict[str, Any], depth: int = 0) -> Iterator[str]:
    """An EXPLAIN (FORMAT JSON) plan as an indented tree, without the nodes that did not run."""
    if node.get("Actual Loops", 1) == 0:
        return
    name = node.get("Index Name") or node.get("CTE Name") or node.get("Subplan Name") or ""
    yield (f"{'  ' * depth}{node['Node Type']} {name}".rstrip()
           + f"  (rows={node.get('Actual Rows')} loops={node.get('Actual Loops')}"
           f" time={node.get('Actual Total Time')} ms)")
    for child in node.get("Plans", []):
        yield from plan_lines(child, depth + 1)


def leg_statement(search: str, select: str) -> str:
    """The search statement's CTEs followed by ``select`` instead of its final SELECT: how one
    leg is timed alone (CTEs nobody references are not run)."""
    final = search.rindex("\nSELECT ")  # the top-level SELECT; CTE bodies are indented
    return search[: final + 1] + select


def other_statement(conn: psycopg.Connection, path: Path) -> str:
    """Another search statement, composed as pgmem composes its own, for the benchmark's
    searches (scoped by user, without metadata filters): the ``search`` block of a queries file
    (e.g. an older revision's, from ``git show REV:sql/queries.sql``, with its own ``scope``
    blocks), or a file holding just such a block's text."""
    condition, _ = compile_filters(None)
    source = path.read_text(encoding="utf-8")
    blocks = {**sql_blocks(), **(named_blocks(source) or {"search": source})}
    return Queries(corpus.SCHEMA, blocks).get("search", condition, ["user_id"]).as_string(conn)


def other_params(statement: str, params: dict[str, Any]) -> dict[str, Any]:
    """The search's parameters, plus those an older statement takes that pgmem no longer sends."""
    if "%(lexeme_queries)s" in statement and "lexeme_queries" not in params:
        return {**params, "lexeme_queries": [quote_lexeme(t) for t in params["lexemes"]]}
    return params


def other_settings(settings: Sequence[str]) -> list[str]:
    """The search's settings, for another revision's statement: without the plan-cache mode of
    pgmem's prepared statement (sent unprepared, the other statement is planned for its
    values, as older revisions ran it)."""
    return [s.replace("set_config('plan_cache_mode', 'force_generic_plan', true),", "")
            for s in settings]


def comparable(rows: Sequence[dict[str, Any]]) -> dict[Any, tuple[Any, ...]]:
    """The search statement's rows by id, floats rounded: to compare two statements (entity
    hits as this revision returns them, or as older ones did, in one jsonb list)."""
    def num(x: Any) -> Any:
        return None if x is None else round(float(x), 9)

    out = {}
    for r in rows:
        if "entity_hits" in r:
            triples = [(h["name"], h["similarity"], h["spread"]) for h in r["entity_hits"] or []]
        else:
            triples = list(zip(r["entity_names"] or [], r["entity_similarities"] or [],
                               r["entity_spreads"] or []))
        hits = sorted((name, num(similarity), spread) for name, similarity, spread in triples)
        legs = r["legs"] if "legs" in r else [
            leg for leg in ("entity", "keyword", "semantic") if r[f"{leg}_leg"]]
        out[r["id"]] = (num(r["semantic"]), num(r["bm25"]), tuple(hits), tuple(legs))
    return out


# -- one size -----------------------------------------------------------------------------------


@dataclass
class SizeResult:
    """What one table size measured: seconds per query, by piece or statement."""

    rows: int
    load: corpus.LoadReport
    pieces: dict[str, list[float]] = field(default_factory=dict)
    bare: dict[int, list[float]] = field(default_factory=dict)
    bare_rows: dict[int, list[int]] = field(default_factory=dict)
    embed_query: list[float] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)
    explain: str = ""
    other: list[float] = field(default_factory=list)
    other_label: str = ""
    same_rows: int = 0
    other_explain: str = ""


def measure(
    dsn: str, queries: Sequence[corpus.Query], embedder: Any, analyzer: pgmem.TextAnalyzer,
    result: SizeResult, *, explain: bool, compare: Path | None,
) -> None:
    """A warm-up pass, then a measured one: each query searched, and its bare queries (and the
    ``compare`` statement) run with what the warm-up search sent, in rotating order. Each of those
    is preceded, untimed, by the query's NLP and embedding -- as in a search, and as in an app
    that embeds its query before a bare pgvector query -- so that every statement meets the
    CPU caches as a search's statement does (a statement run right after another one on the
    same scope is up to 1.5x faster)."""
    searcher = Searcher(dsn, embedder, analyzer)

    def prelude(q: corpus.Query) -> None:
        analysis = analyzer.analyze(q.text)
        embedder.embed([q.text, *(e.surface for e in analysis.entities)])

    try:
        searcher.memory.search("warm up", user_id=queries[0].user_id)  # reads the server
        warm = [searcher.search(q) for q in queries]
        if explain:
            result.explain = searcher.explain(queries[0])
        methods = []
        if compare is not None:
            other = other_statement(searcher.conn, compare)
            result.other_label = compare.stem
            params = [other_params(other, w.statement.params) for w in warm]
            for w, p in zip(warm, params):
                rows = [searcher.timed(w.settings, w.statement.text, w.statement.params)[1],
                        searcher.timed(other_settings(w.settings), other, p)[1]]
                result.same_rows += comparable(rows[0]) == comparable(rows[1])
            if explain:
                result.other_explain = searcher.explain_other(warm[0], other)

            def run_other(i: int, q: corpus.Query) -> None:
                prelude(q)
                seconds, _ = searcher.timed(other_settings(warm[i].settings), other, params[i])
                result.other.append(seconds)
            methods.append(run_other)

        def run_search(i: int, q: corpus.Query) -> None:
            searched = searcher.search(q)
            for name, seconds in searched.seconds.items():
                result.pieces.setdefault(name, []).append(seconds)
            result.statements.append(len(searched.statements))
            result.candidates.append(searched.statement.rowcount)

        def run_bare(k: int) -> Any:
            def run(i: int, q: corpus.Query) -> None:
                prelude(q)
                seconds, n = searcher.bare(q, warm[i], k)
                result.bare.setdefault(k, []).append(seconds)
                result.bare_rows.setdefault(k, []).append(n)
            return run

        def run_embed(i: int, q: corpus.Query) -> None:
            analyzer.analyze(q.text)  # as before a search's embedding
            result.embed_query.append(searcher.embed_query(q))

        methods += [run_search, run_embed, *(run_bare(k) for k in BARE_KS)]
        for i, q in enumerate(queries):
            for j in range(len(methods)):
                methods[(i + j) % len(methods)](i, q)
    finally:
        searcher.close()


def run_size(
    server: str, data: corpus.Corpus, queries: Sequence[corpus.Query], embedder: Any,
    analyzer: pgmem.TextAnalyzer, *, explain: bool, name: str, compare: Path | None = None,
) -> SizeResult:
    """Load ``data`` into a scratch database and measure it."""
    with scratch_database(server, name) as dsn:
        pgmem.migrate(dsn)
        corpus.progress(f"{len(data)} rows: loading")
        load = corpus.load_corpus(dsn, data)
        corpus.progress(f"  loaded in {load.total:.0f} s; searching")
        result = SizeResult(rows=len(data), load=load)
        measure(dsn, queries, embedder, analyzer, result, explain=explain, compare=compare)
    return result


# -- output -------------------------------------------------------------------------------------

PIECES = (
    ("embedding", "query embedding (the query during NLP, then entity names not cached)"),
    ("nlp", "NLP (lemmas + entities, spaCy)"),
    ("sql", "SQL: one round trip (settings + search statement)"),
    ("transaction", "BEGIN / SET / COMMIT round trips"),
    ("python", "pgmem's Python (checks, plan, fusion; the rest of the wall time)"),
    ("total", "Memory.search, end to end"),
)


def breakdown_table(r: SizeResult) -> str:
    """p50 and p95 of each piece, and of Memory.search end to end."""
    rows = [(label, report.ms(report.p50(r.pieces[key])), report.ms(report.p95(r.pieces[key])))
            for key, label in PIECES]
    return report.table((f"{r.rows:,} memories: piece", "p50 ms", "p95 ms"), rows)


def end_to_end_table(
    results: Sequence[SizeResult], torch_threads: int, backend: str = "torch"
) -> str:
    """Memory.search end to end against what an app pays at least: embedding the query with
    the same model, and the bare pgvector top-k (target: at most 1.5x, p50)."""
    threads = f"torch on {torch_threads} thread(s)" if torch_threads else "torch's default threads"
    if backend != "torch":
        threads = f"{backend}, its default threads"
    head = (f"memories ({threads})", "Memory.search p50 ms", "query embedding p50 ms",
            f"bare k={LIMIT} p50 ms", "search / (embedding + bare) p50", "search p95 ms",
            "search / (embedding + bare) p95")
    rows = []
    for r in results:
        floor50 = report.p50(r.embed_query) + report.p50(r.bare[LIMIT])
        floor95 = report.p95(r.embed_query) + report.p95(r.bare[LIMIT])
        rows.append((
            f"{r.rows:,}", report.ms(report.p50(r.pieces["total"])),
            report.ms(report.p50(r.embed_query)), report.ms(report.p50(r.bare[LIMIT])),
            report.ratio(report.p50(r.pieces["total"]), floor50),
            report.ms(report.p95(r.pieces["total"])),
            report.ratio(report.p95(r.pieces["total"]), floor95),
        ))
    return report.table(head, rows)


def headline_table(results: Sequence[SizeResult]) -> str:
    """pgmem's SQL against the bare pgvector query, per size (and the --compare statement's)."""
    label = next((r.other_label for r in results if r.other), "")
    head = ("memories", "pgmem SQL p50 ms", *(f"bare k={k} p50 ms" for k in BARE_KS),
            *(f"SQL / bare k={k} (p50)" for k in BARE_KS), f"SQL / bare k={LIMIT} (p95)",
            "statements per search",
            *((f"{label} p50 ms", f"{label} / bare k={LIMIT} (p50)") if label else ()))
    rows = []
    for r in results:
        sql_p50 = report.p50(r.pieces["sql"])
        statements = sorted(set(r.statements))
        other: tuple[str, ...] = ()
        if label:
            other = (report.ms(report.p50(r.other)),
                     report.ratio(report.p50(r.other), report.p50(r.bare[LIMIT])))
        rows.append((
            f"{r.rows:,}", report.ms(sql_p50),
            *(report.ms(report.p50(r.bare[k])) for k in BARE_KS),
            *(report.ratio(sql_p50, report.p50(r.bare[k])) for k in BARE_KS),
            report.ratio(report.p95(r.pieces["sql"]), report.p95(r.bare[LIMIT])),
            ", ".join(map(str, statements)), *other,
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
            f"{n_queries} queries; bare k={LIMIT} returned "
            f"{np.mean(r.bare_rows[LIMIT]):.1f} rows on average, k={BARE_KS[1]} "
            f"{np.mean(r.bare_rows[BARE_KS[1]]):.1f}; the search statement returned "
            f"{np.mean(r.candidates):.0f} candidate rows on average"
            + (f"; {r.other_label} returned the same rows as pgmem's statement for "
               f"{r.same_rows} of {n_queries} queries." if r.other else ".")
        )
    return "\n".join(lines)


def readable(plan: str) -> str:
    """An EXPLAIN output with its vector literals shortened."""
    return re.sub(r"'\[[-0-9.,e]+\]'", "'[...]'", plan)


def as_json(results: Sequence[SizeResult], embedder: str, torch_threads: int) -> dict[str, Any]:
    """The run's medians and 95th percentiles by size, in seconds (``--json``; the figures of
    ``python -m benchmarks.report --plots`` read them)."""
    return {
        "benchmark": "latency", "command": report.command_line(), "embedder": embedder,
        "torch_threads": torch_threads, "limit": LIMIT,
        "sizes": [
            {"memories": r.rows,
             "search_p50": report.p50(r.pieces["total"]),
             "search_p95": report.p95(r.pieces["total"]),
             "embedding_p50": report.p50(r.embed_query),
             "bare_p50": report.p50(r.bare[LIMIT]),
             "sql_p50": report.p50(r.pieces["sql"])}
            for r in results
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=dialogues.numbers, default="10000,100000",
                        help="comma-separated corpus sizes (default: %(default)s)")
    parser.add_argument("--queries", type=int, default=200, help="queries per size")
    corpus.run_arguments(parser)
    parser.add_argument("--explain", action="store_true",
                        help="print EXPLAIN (ANALYZE, BUFFERS) of one search per size")
    parser.add_argument("--embedder", choices=("torch", "onnx"), default="torch",
                        help="the search's embedder backend, on both sides of the ratio (the "
                        "corpus's cached vectors are torch's; ONNX's are the same)")
    parser.add_argument("--compare", type=Path, metavar="PATH",
                        help="also time another search statement (a queries.sql of another "
                        "revision, e.g. from `git show d8ae5ca:sql/queries.sql`) and compare "
                        "its rows")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args(argv)
    sizes = args.sizes
    server, embedder, analyzer = corpus.start(args)
    raw = dialogues.load_conversations(args.data, args.conversations)
    cache = corpus.Cache(args.data, embedder, analyzer, raw)
    data = corpus.corpus(raw, max(sizes), cache)
    if args.embedder != "torch":
        embedder = pgmem.embedding.make_embedder(args.embedder)
    embedder.embed(["warm up"])
    analyzer.analyze("warm up")
    results = []
    for n in sizes:
        queries = corpus.queries(raw, n // corpus.ROWS_PER_USER, args.queries)
        results.append(run_size(server, data.head(n), queries, embedder, analyzer,
                                explain=args.explain, name=f"pgmem_latency_{os.getpid()}_{n}",
                                compare=args.compare))
        print(breakdown_table(results[-1]) + "\n", flush=True)
        if args.explain:
            print(readable(results[-1].explain) + "\n", flush=True)
            if results[-1].other_explain:
                print(f"{results[-1].other_label}:\n{readable(results[-1].other_explain)}\n",
                      flush=True)
    headline = headline_table(results)
    end_to_end = end_to_end_table(results, args.torch_threads, args.embedder)
    print(end_to_end + "\n")
    print(headline + "\n")
    print(notes(results, args.queries))
    if args.json:
        args.json.write_text(json.dumps(
            as_json(results, args.embedder, args.torch_threads), indent=2) + "\n")
    if not args.no_doc:
        report.write_environment(server, analyzer.model_name, args.torch_threads)
        section, title = "latency", "## Search latency"
        how = __doc__.split("\n\n", 2)[2].strip()
        if args.embedder != "torch":
            section, title = f"latency-{args.embedder}", f"{title}, the {args.embedder} embedder"
        elif not args.torch_threads:
            section, title = "latency-default-threads", f"{title}, torch's default threads"
        if section != "latency":  # the method is written once, in the first section
            how = "Measured as [Search latency](#search-latency) is."
        report.write_section(section, "\n\n".join([
            title, report.run_header(report.command_line()), how, end_to_end, headline,
            *(breakdown_table(r) for r in results), notes(results, args.queries),
        ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
