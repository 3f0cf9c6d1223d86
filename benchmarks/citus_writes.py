"""How one tenant's add reaches its worker on Citus: the ways measured in one run.

    python -m benchmarks.citus_writes [--tenants 20] [--adds 200] [--dsn DSN] [--citus-dsn DSN]

Single adds (``Memory.add``: one text, its entities), each to a random tenant, alternating call by
call between:

- **one server**: plain PostgreSQL (``--dsn``, else ``PGMEM_BENCH_DSN``/``PGMEM_TEST_DSN``), the
  baseline of the ratios;
- **routed** (what pgmem does on Citus, :mod:`pgmem.routed`): statements Citus routes to the
  tenant's worker as they are -- a read, multi-row INSERTs, INSERT ... SELECT of the tenant's
  rows;
- **one statement**: pgmem's ``insert_memories`` as on one server, its data-modifying CTEs
  planned by the coordinator, their results sent to both workers, two-phase commit;
- **delegated function**: that statement inside a PL/pgSQL function of the schema, distributed
  with ``create_distributed_function(..., 'p_tenant', colocate_with => memories,
  force_delegation => true)``, so that the coordinator hands the call to the tenant's worker;
- **router floor** (SQL only): the rows an add writes as four router-plannable statements,
  pipelined in one transaction, without pgmem's locks, duplicate check or result rows: what
  no way of writing them can beat. (Its model work is the text's analysis and vector, as an
  add's; it reuses the vectors and lexemes of a stored memory.)

For each: the median and p95 of an add, the commands Citus sent to workers per add, and how
many adds committed with two-phase commit (``citus.log_remote_commands``).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql

import pgmem
from benchmarks.citus import DOINGS, PEOPLE, PLACES, CachedEmbedder
from benchmarks.database import coordinator_dsn, scratch_database, server_dsn
from benchmarks.report import p50, p95, table
from pgmem.citus import distribute
from pgmem.queries import Queries
from pgmem.store import Row, Statement, Store

WAYS = ("one server", "routed", "one statement", "delegated function", "router floor")
_PARAMETER = re.compile(r"%\((\w+)\)([sb])((?:::\w+(?:\[\])?)?)")


class Commands:
    """Counts what Citus sends to workers on a connection (``citus.log_remote_commands``)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.sent = 0
        self.two_phase = 0
        conn.add_notice_handler(self._notice)
        conn.execute("SET citus.log_remote_commands = on")

    def _notice(self, diagnostic: Any) -> None:
        message = diagnostic.message_primary or ""
        if message.startswith("issuing "):
            self.sent += 1
            self.two_phase += message.startswith("issuing PREPARE TRANSACTION")


def delegated_insert(conn: psycopg.Connection[Any], schema: str) -> sql.Composed:
    """Create ``insert_memories`` as a distributed function of ``schema`` (its arguments typed
    as the statement casts them, else as PostgreSQL types its parameters; its columns as the
    statement's) and return the call that takes the statement's parameters."""
    queries = Queries(schema)
    text = queries.get("insert_memories").as_string(conn)
    parameters: dict[str, str] = {}
    for match in _PARAMETER.finditer(text):
        parameters.setdefault(match[1], match[0])
    numbers = {name: n for n, name in enumerate(parameters, start=1)}
    numbered = _PARAMETER.sub(lambda m: f"${numbers[m[1]]}{m[3]}", text)
    conn.pgconn.prepare(b"described", numbered.encode())
    described = conn.pgconn.describe_prepared(b"described")
    conn.execute("DEALLOCATE described")
    oids = [described.param_type(i) for i in range(described.nparams)]
    columns = [(described.fname(i) or b"").decode() for i in range(described.nfields)]
    types = [str(row[0]) for row in conn.execute(
        "SELECT format_type(t, NULL) FROM unnest(%s::oid[]) WITH ORDINALITY u(t, o) ORDER BY o",
        ([*oids, *(described.ftype(i) for i in range(described.nfields))],))]
    arguments = [placeholder.partition("::")[2] or given
                 for placeholder, given in zip(parameters.values(), types)]
    function = sql.Identifier(schema, "bench_insert_memories")
    body = _PARAMETER.sub(lambda m: f"p_{m[1]}{m[3]}", text)
    conn.execute(sql.SQL(
        "CREATE FUNCTION {f}({args}) RETURNS TABLE ({cols}) LANGUAGE plpgsql AS {body}"
    ).format(
        f=function,
        args=sql.SQL(", ").join(sql.SQL(f"p_{name} {kind}")
                                for name, kind in zip(parameters, arguments)),
        cols=sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t))
                                for c, t in zip(columns, types[len(oids):])),
        # the table's columns win over the function's output names (id, text, ...)
        body=sql.Literal(f"#variable_conflict use_column\nBEGIN\nRETURN QUERY {body};\nEND"),
    ))
    conn.execute(
        "SELECT create_distributed_function(%s::regprocedure, 'p_tenant', colocate_with => %s,"
        " force_delegation => true)",
        (sql.SQL("{}({})").format(function, sql.SQL(", ".join(arguments))).as_string(conn),
         f"{schema}.memories"),
    )
    return sql.SQL("SELECT * FROM {f}({args})").format(
        f=function,
        args=sql.SQL(", ").join(sql.SQL(f"p_{name} => {placeholder}")
                                for name, placeholder in parameters.items()),
    )


class DelegatedStore(Store):
    """pgmem's statements, ``insert_memories`` as the call of its distributed function."""

    call: sql.Composed

    def insert_memories(self, params: Row) -> Statement[list[Row]]:
        return Statement("insert_memories", self.call, params, "all", lambda rows: rows)


class RouterSplit:
    """An add as four router-plannable statements, with the rows a stored memory of pgmem's
    holds (its vector, lexemes, entities) under a new id."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str, model: uuid.UUID,
                 models: Callable[[str], object]) -> None:
        self.conn = conn
        self.models = models
        self.schema = sql.Identifier(schema)
        row = conn.execute(
            sql.SQL("SELECT embedding::text, lexemes::text, lexeme_count, ts_config"
                    " FROM {}.memories WHERE id = %s").format(self.schema), (model,)
        ).fetchone()
        assert row is not None
        self.embedding, self.lexemes, self.lexeme_count, self.ts_config = row
        self.entities = conn.execute(
            sql.SQL("SELECT e.name, e.label, e.embedding::text FROM {s}.memory_entities l"
                    " JOIN {s}.entities e ON e.tenant = l.tenant AND e.id = l.entity_id"
                    " WHERE l.memory_id = %s").format(s=self.schema), (model,)
        ).fetchall()

    def add(self, tenant: str, text: str) -> None:
        self.models(text)
        memory = uuid.uuid4()
        s = self.schema
        with self.conn.transaction(), self.conn.pipeline():
            self.conn.execute(
                sql.SQL("INSERT INTO {}.memories (tenant, id, user_id, text, content_hash,"
                        " metadata, embedding, lexemes, lexeme_count, ts_config) VALUES"
                        " (%s, %s, 'u', %s, md5(%s), '{{}}', %s::vector, %s::tsvector, %s, %s)"
                        ).format(s),
                (tenant, memory, text, text, self.embedding, self.lexemes, self.lexeme_count,
                 self.ts_config),
            )
            if self.entities:
                values = sql.SQL(", ").join(
                    sql.SQL("(%s, %s, %s, %s::vector)") for _ in self.entities
                )
                self.conn.execute(
                    sql.SQL("INSERT INTO {}.entities AS e (tenant, name, label, embedding)"
                            " VALUES {} ON CONFLICT (tenant, name) DO UPDATE"
                            " SET name = EXCLUDED.name").format(s, values),
                    [v for name, label, vector in self.entities
                     for v in (tenant, name, label, vector)],
                )
                self.conn.execute(
                    sql.SQL("INSERT INTO {s}.memory_entities (tenant, memory_id, entity_id,"
                            " user_id) SELECT e.tenant, %s, e.id, 'u' FROM {s}.entities e"
                            " WHERE e.tenant = %s AND e.name = ANY(%s)").format(s=s),
                    (memory, tenant, [name for name, _, _ in self.entities]),
                )
            self.conn.execute(
                sql.SQL("INSERT INTO {}.history (tenant, memory_id, event, new_text)"
                        " VALUES (%s, %s, 'ADD', %s)").format(s),
                (tenant, memory, text),
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.citus_writes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--adds", type=int, default=200)
    parser.add_argument("--dsn")
    parser.add_argument("--citus-dsn")
    args = parser.parse_args(argv)
    citus_dsn = coordinator_dsn(args.citus_dsn)
    embedder = CachedEmbedder(pgmem.SentenceTransformerEmbedder())
    analyzer = pgmem.TextAnalyzer()
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with scratch_database(server_dsn(args.dsn), f"pgmem_bench_{uuid.uuid4().hex[:8]}") as single:
        pgmem.migrate(single, schema=schema)
        pgmem.migrate(citus_dsn, schema=schema)
        distribute(citus_dsn, schema=schema)
        try:
            return run(args, single, citus_dsn, schema, embedder, analyzer)
        finally:
            with psycopg.connect(citus_dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def run(args: argparse.Namespace, single: str, citus_dsn: str, schema: str, embedder: Any,
        analyzer: Any) -> int:
    rng = random.Random(27)
    conns = {way: psycopg.connect(single if way == "one server" else citus_dsn, autocommit=True)
             for way in WAYS}
    commands = {way: Commands(conn) for way, conn in conns.items() if way != "one server"}
    call = delegated_insert(conns["delegated function"], schema)
    memories: dict[tuple[str, str], pgmem.Memory] = {}

    def text(i: int) -> str:
        return f"{rng.choice(PEOPLE)} {rng.choice(DOINGS)} in {rng.choice(PLACES)} (add {i})"

    def mem(way: str, tenant: str) -> pgmem.Memory:
        if (way, tenant) not in memories:
            memory = memories[way, tenant] = pgmem.Memory(
                conns[way], embedder=embedder, nlp=analyzer, schema=schema, tenant=tenant
            )
            memory.add(text(-1), user_id="u")  # the schema read, the connection prepared
            if way in ("one statement", "delegated function"):  # the way measured, by hand
                connector = memory._connector
                conn = conns[way]
                connector._capabilities[conn] = dataclasses.replace(
                    connector._capabilities_of(conn), citus=False
                )
            if way == "delegated function":
                memory._ops.store.__class__ = DelegatedStore
                memory._ops.store.call = call  # type: ignore[attr-defined]
        return memories[way, tenant]

    tenants = [f"t{t}" for t in range(args.tenants)]
    for way in WAYS[:-1]:
        for tenant in tenants:
            mem(way, tenant)
    model = mem("routed", tenants[0]).add("Helga Norberg met Tomasz Wilk in Ostrava",
                                          user_id="u").id
    floor = RouterSplit(conns["router floor"], schema, model,
                        lambda x: (analyzer.analyze_many([x]), embedder.embed([x])))
    def adder(way: str) -> Callable[[str, str], object]:
        return lambda tenant, words: mem(way, tenant).add(words, user_id="u")

    calls = {way: adder(way) for way in WAYS[:-1]}
    calls["router floor"] = floor.add
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    sent = {way: 0 for way in commands}
    two_phase = {way: 0 for way in commands}
    for i in range(args.adds):
        tenant, words = rng.choice(tenants), text(i)
        embedder.embed([words])
        for way in WAYS[i % len(WAYS):] + WAYS[:i % len(WAYS)]:
            before = (commands[way].sent, commands[way].two_phase) if way in commands else (0, 0)
            began = time.perf_counter()
            calls[way](tenant, words)
            seconds[way].append(time.perf_counter() - began)
            if way in commands:
                sent[way] += commands[way].sent - before[0]
                two_phase[way] += commands[way].two_phase > before[1]
    for memory in memories.values():
        memory.close()
    for conn in conns.values():
        conn.close()
    base = p50(seconds["one server"])
    rows = [[way, f"{p50(seconds[way]) * 1000:.1f}", f"{p95(seconds[way]) * 1000:.1f}",
             f"{p50(seconds[way]) / base:.2f}x",
             f"{sent[way] / args.adds:.1f}" if way in sent else "",
             f"{two_phase[way]}/{args.adds}" if way in sent else ""]
            for way in WAYS]
    print(f"{args.adds} single adds, each to one of {args.tenants} tenants, alternating\n")
    print(table(["", "add p50 ms", "add p95 ms", "p50 / one server", "commands to workers",
                 "two-phase commits"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
