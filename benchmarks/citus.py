"""Search latency and add rate on a Citus cluster against one PostgreSQL server, same data.

    python -m benchmarks.citus [--tenants 1000] [--memories 100] [--queries 200] [--adds 200]
                               [--breakdown 50] [--dsn DSN] [--citus-dsn DSN]

Loads the same memories into a scratch database on one server (``--dsn``, else
``PGMEM_BENCH_DSN``, else ``PGMEM_TEST_DSN``) and into a new schema on a Citus coordinator
(``--citus-dsn``, else ``PGMEM_TEST_CITUS_DSN``; migrated and distributed with
:func:`pgmem.distribute`): ``--tenants`` tenants of one user each holding ``--memories``
memories (sentences drawn from a pool, each embedded once with MiniLM by the default embedder
backend, ONNX where it is installed, and analysed once with spaCy), then ``VACUUM ANALYZE``.
Then, alternating between the two in rotating order, ``--queries`` searches, each in one random
tenant's user scope (``limit=10``): end to end (``Memory.search``) with the query's vector from
a cache, its SQL round trip (settings and statement, in psycopg's pipeline, timed by
benchmarks.instruments), and the same search as a user calls it (the query embedded by the
model again); and ``--adds`` single adds of new texts, each to a random tenant (the text
embedded and analysed before the clock starts: the rate is pgmem's and the database's). Prints
p50/p95 and the ratios Citus / one server.

Then where a search's SQL goes on the cluster (``--breakdown`` searches, each statement with its
values inlined, as Citus plans it): the statement on the coordinator, the query Citus sends the
tenant's worker (``citus.log_remote_commands``) run on that worker as it is, and the statement
run on that worker (Citus plans it there and executes the shard query locally); beside them the
statement on the one server, planned for its values, and pgmem's prepared statement there. The
scratch database and schema are dropped afterwards.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.sql import SQL, Identifier

import pgmem
from benchmarks.database import coordinator_dsn, scratch_database, server_dsn
from benchmarks.instruments import CLOCK, TimedConnection, TimingCursor
from benchmarks.report import p50, p95, table
from pgmem.citus import distribute
from pgmem.embedding import make_embedder

PEOPLE = ["Helga Norberg", "Tomasz Wilk", "Amara Okafor", "Ilse Brandt", "Ravi Menon",
          "Lucia Ferreira", "Kenji Sato", "Maya Cohen"]
PLACES = ["Tbilisi", "Ostrava", "Valparaiso", "Trondheim", "Kyoto", "Porto", "Accra", "Quito"]
DOINGS = ["likes green tea", "plays chess on Fridays", "is learning to sail", "moved house",
          "adopted a cat", "runs a bakery", "reads crime novels", "fixes old bicycles",
          "sings in a choir", "grows tomatoes"]
QUERIES = ["What does Helga like to drink?", "Who plays chess?", "Where did Kenji move?",
           "Does anyone have a cat?", "Who runs a bakery in Porto?", "hobbies in Kyoto"]


class CachedEmbedder:
    """An embedder whose vectors are kept: each distinct text embedded once (the pool is embedded
    up front)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", None) or inner.model_name
        self.model_name = inner.model_name
        self.cache: dict[str, npt.NDArray[np.float32]] = {}

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing)):
                self.cache[text] = vector
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)


class CachedAnalyzer(pgmem.TextAnalyzer):
    """spaCy, each distinct memory text analysed once (the memories are drawn from a pool of
    sentences); queries and new texts as pgmem analyses them."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[str, Any] = {}

    def analyze_many(self, texts: Iterable[str], batch_size: int = 64) -> list[Any]:
        texts = list(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            self.cache.update(zip(missing, super().analyze_many(missing, batch_size)))
        return [self.cache[t] for t in texts]


def pool(size: int, rng: random.Random) -> list[str]:
    """``size`` distinct sentences."""
    seen: dict[str, None] = {}
    while len(seen) < size:
        seen[f"{rng.choice(PEOPLE)} {rng.choice(DOINGS)} in {rng.choice(PLACES)} "
             f"(note {len(seen)})"] = None
    return list(seen)


def load(mem_for: Any, tenants: int, memories: int, sentences: list[str],
         rng: random.Random) -> float:
    """Store every tenant's memories (one add_many each); the seconds it took."""
    began = time.perf_counter()
    for t in range(tenants):
        texts = rng.sample(sentences, memories)
        mem_for(f"t{t}").add_many(texts, user_id="u")
    return time.perf_counter() - began


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.citus", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--memories", type=int, default=100, help="per tenant")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--adds", type=int, default=200)
    parser.add_argument("--breakdown", type=int, default=50,
                        help="searches whose SQL is timed part by part (0: none)")
    parser.add_argument("--dsn")
    parser.add_argument("--citus-dsn")
    args = parser.parse_args(argv)
    citus_dsn = coordinator_dsn(args.citus_dsn)
    single = server_dsn(args.dsn)
    rng = random.Random(27)
    embedder = CachedEmbedder(make_embedder())
    analyzer = CachedAnalyzer()
    sentences = pool(max(args.memories * 3, 1000), rng)
    embedder.embed(sentences + QUERIES)
    analyzer.analyze_many(QUERIES)  # loads spaCy before anything is timed
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    name = f"pgmem_bench_citus_{uuid.uuid4().hex[:8]}"
    with scratch_database(single, name) as single_db:
        pgmem.migrate(single_db, schema=schema)
        pgmem.migrate(citus_dsn, schema=schema)
        distribute(citus_dsn, schema=schema)
        try:
            return run(args, {"one server": single_db, "Citus": citus_dsn}, schema, embedder,
                       analyzer, sentences, rng)
        finally:
            with psycopg.connect(citus_dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def run(args: argparse.Namespace, dsns: dict[str, str], schema: str, embedder: Any,
        analyzer: Any, sentences: list[str], rng: random.Random) -> int:
    conns = {k: TimedConnection.connect(d, autocommit=True, cursor_factory=TimingCursor)
             for k, d in dsns.items()}
    memories: dict[tuple[str, str], pgmem.Memory] = {}

    def mem(where: str, tenant: str) -> pgmem.Memory:
        if (where, tenant) not in memories:
            memories[where, tenant] = pgmem.Memory(conns[where], embedder=embedder,
                                                   nlp=analyzer, schema=schema, tenant=tenant)
        return memories[where, tenant]

    loads = {}
    for where in dsns:
        loads[where] = load(lambda t, w=where: mem(w, t), args.tenants, args.memories,
                            sentences, random.Random(7))
        print(f"{where}: loaded {args.tenants * args.memories} memories in "
              f"{loads[where]:.1f} s", file=sys.stderr)
        # as after any bulk load: autovacuum would otherwise vacuum and analyse the tables
        # (their HNSW indexes too) while the clocks run
        for name in ("memories", "entities", "memory_entities"):
            conns[where].execute(
                SQL("VACUUM ANALYZE {}.{}").format(Identifier(schema), Identifier(name)))
    end_to_end: dict[str, list[float]] = {w: [] for w in dsns}
    sql: dict[str, list[float]] = {w: [] for w in dsns}
    adds: dict[str, list[float]] = {w: [] for w in dsns}
    order = list(dsns)
    for where in order:  # warm up every connection's prepared statements
        for q in QUERIES:
            mem(where, "t0").search(q, user_id="u", limit=10)
    called: dict[str, list[float]] = {w: [] for w in dsns}
    for i in range(args.queries):
        tenant, query = f"t{rng.randrange(args.tenants)}", rng.choice(QUERIES)
        for where in order[i % 2:] + order[:i % 2]:
            CLOCK.reset()
            began = time.perf_counter()
            mem(where, tenant).search(query, user_id="u", limit=10)
            end_to_end[where].append(time.perf_counter() - began)
            sql[where].append(CLOCK.get("pipeline"))
            embedder.cache.pop(query)  # as a user calls it: the model embeds the query
            began = time.perf_counter()
            mem(where, tenant).search(query, user_id="u", limit=10)
            called[where].append(time.perf_counter() - began)
    for i in range(args.adds):
        tenant = f"t{rng.randrange(args.tenants)}"
        text = f"{rng.choice(PEOPLE)} {rng.choice(DOINGS)} in {rng.choice(PLACES)} (add {i})"
        embedder.embed([text])
        analyzer.analyze_many([text])  # model work before the clock, as for the memories
        for where in order[i % 2:] + order[:i % 2]:
            began = time.perf_counter()
            mem(where, tenant).add(text, user_id="u")
            adds[where].append(time.perf_counter() - began)
    parts = breakdown(dsns, conns, mem, args, rng) if args.breakdown else None
    for m in memories.values():
        m.close()
    for c in conns.values():
        c.close()
    ms = 1000.0
    rows = []
    for where in order:
        rows.append([where, f"{p50(end_to_end[where]) * ms:.1f}",
                     f"{p95(end_to_end[where]) * ms:.1f}", f"{p50(sql[where]) * ms:.2f}",
                     f"{p95(sql[where]) * ms:.2f}", f"{p50(called[where]) * ms:.1f}",
                     f"{p95(called[where]) * ms:.1f}",
                     f"{len(adds[where]) / sum(adds[where]):.1f}",
                     f"{args.tenants * args.memories / loads[where]:.0f}"])
    one, citus = order
    rows.append(["Citus / one server",
                 *(f"{f(values[citus]) / f(values[one]):.2f}x"
                   for values in (end_to_end, sql, called) for f in (p50, p95)),
                 f"{sum(adds[one]) / sum(adds[citus]):.2f}x",
                 f"{loads[one] / loads[citus]:.2f}x"])
    print(f"{args.tenants} tenants x {args.memories} memories, {args.queries} searches "
          f"(limit 10) and {args.adds} single adds on each, alternating\n")
    print(table(["", "search p50 ms", "search p95 ms", "SQL p50 ms", "SQL p95 ms",
                 "as called p50 ms", "as called p95 ms", "adds/s (one at a time)",
                 "load memories/s (add_many)"], rows))
    if parts:
        print(f"\nWhere a search's SQL goes ({args.breakdown} searches, values inlined, "
              "each part timed in turn, p50)\n")
        base = p50(parts[PARTS[0][0]])
        print(table(["", "p50 ms", "/ pgmem on one server"],
                    [[label, f"{p50(parts[key]) * ms:.2f}", f"{p50(parts[key]) / base:.2f}x"]
                     for key, label in PARTS]))
    return 0


# The parts of a search's SQL that breakdown() times: the search statement with its values
# inlined, sent as a simple query after its settings in a transaction of its own.
PARTS = [
    ("server prepared", "one server: pgmem's round trip (prepared, generic plan)"),
    ("server", "one server: the statement, planned for its values"),
    ("coordinator", "Citus: the statement on the coordinator"),
    ("worker", "Citus: the statement on the tenant's worker (Citus plans it there)"),
    ("shard query", "Citus: the shard query the coordinator sends, on the worker"),
]

Inlined = tuple[list[str], str]  # a search's settings and its statement, values inlined


def breakdown(dsns: dict[str, str], conns: dict[str, Any], mem: Any,
              args: argparse.Namespace, rng: random.Random) -> dict[str, list[float]]:
    """Seconds of each of :data:`PARTS` for ``args.breakdown`` searches in random tenants."""
    one, citus = dsns
    plain = {w: psycopg.connect(d, autocommit=True) for w, d in dsns.items()}
    workers: dict[str, psycopg.Connection[Any]] = {}
    parts: dict[str, list[float]] = {key: [] for key, _ in PARTS}
    for _ in range(args.breakdown):
        tenant, query = f"t{rng.randrange(args.tenants)}", rng.choice(QUERIES)
        texts = {w: inlined(conns[w], mem(w, tenant), query) for w in dsns}
        CLOCK.reset()
        mem(one, tenant).search(query, user_id="u", limit=10)
        parts["server prepared"].append(CLOCK.get("pipeline"))
        parts["server"].append(timed(plain[one], texts[one]))
        shard_query, node = remote_command(plain[citus], texts[citus])
        if node not in workers:
            workers[node] = psycopg.connect(make_conninfo(dsns[citus], **node_address(node)),
                                            autocommit=True)
        parts["coordinator"].append(timed(plain[citus], texts[citus]))
        parts["worker"].append(timed(workers[node], texts[citus]))
        parts["shard query"].append(timed(workers[node], shard_query))
    for conn in [*plain.values(), *workers.values()]:
        conn.close()
    return parts


def inlined(conn: Any, memory: pgmem.Memory, query: str) -> Inlined:
    """The settings and the statement of ``memory.search(query)``, with the values inlined."""
    CLOCK.reset()
    memory.search(query, user_id="u", limit=10)
    cursor = psycopg.ClientCursor(conn)

    def text(sent: Any) -> str:
        return cursor.mogrify(re.sub(r"%\((\w+)\)b", r"%(\1)s", sent.text), sent.params)

    statement = next(s for s in CLOCK.sent if "query_terms" in s.text)
    return [text(s) for s in CLOCK.sent if s.is_set], text(statement)


def timed(conn: psycopg.Connection[Any], search: Inlined) -> float:
    """Seconds of the statement's round trip with its rows, after its settings, in a
    transaction."""
    settings, statement = search
    with conn.transaction():
        for setting in settings:
            conn.execute(setting.encode())
        began = time.perf_counter()
        conn.execute(statement.encode()).fetchall()
        return time.perf_counter() - began


def remote_command(conn: psycopg.Connection[Any], search: Inlined) -> tuple[Inlined, str]:
    """The settings and the shard query Citus sends a worker for ``search``, and that worker's
    address (``citus.log_remote_commands``)."""
    logged: list[tuple[str, str]] = []

    def log(notice: psycopg.errors.Diagnostic) -> None:
        logged.append(((notice.message_primary or "").removeprefix("issuing "),
                       notice.message_detail or ""))

    conn.add_notice_handler(log)
    conn.execute("SET citus.log_remote_commands = on")
    try:
        timed(conn, search)
    finally:
        conn.execute("SET citus.log_remote_commands = off")
        conn.remove_notice_handler(log)
    command, detail = max(logged, key=lambda m: len(m[0]))
    return ([m for m, _ in logged if m.startswith("SET LOCAL")], command), detail


def node_address(detail: str) -> dict[str, str]:
    """Host and port of a worker from Citus' "on server user@host:port" detail."""
    found = re.search(r"@([^:\s]+):(\d+)", detail)
    if not found:
        raise SystemExit(f"no worker address in {detail!r}")
    return {"host": found[1], "port": found[2]}


if __name__ == "__main__":
    sys.exit(main())
