"""What each part of the small-scope search statement costs: the statement beside itself with one
part switched off, in one run.

    python -m benchmarks.search_legs [--data PATH] [--conversations 2] [--memories 200]
                                     [--questions 60] [--rounds 3] [--dsn DSN]
                                     [--sizes N,N,..]

The first ``--memories`` dialogue turns of each chosen conversation are stored in a scratch
database (one user per conversation, the default models). For each question (in its
conversation's scope, ``limit=20``) pgmem builds its ``search_small`` statement and parameters
as a search would (the query's analysis and vectors made once, beforehand); then the statement
and its variants run on one connection, prepared, in one transaction after the settings pgmem
sends before it (a generic plan, no JIT, no sequential scans or nested loops where another path
exists), taking turns question by question over ``--rounds`` timed passes after one to warm
up. Each variant switches one part off by editing the statement's text: the entity leg (no
links read), the keyword leg (no document matches), the neighbour step (no pairs), or the
window that gives each row of the scope its neighbours. Beside them, the floor's statement: a
bare exact top-20 of the scope by cosine distance. The time is the round trip (send, run, rows
fetched); p50 and the ratio to the whole statement's p50. A variant returns other rows, so its
ratio is what that part costs, not a faster search.

With ``--sizes N,N,..`` the whole statement and the bare top-20 are also timed by scope size:
the first N turns of the first conversation stored again under a scope of their own (one per
size), the same questions asked in each, the sizes taking turns; then the least-squares line
of each through the p50s: a fixed cost and a cost per memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row

import pgmem
from benchmarks import dialogues
from benchmarks.database import scratch_database, server_dsn
from pgmem.builders import search_plan
from pgmem.memory import run
from pgmem.store import execute


def switched(old: str, new: str) -> Callable[[str], str]:
    """A variant of the statement's text: ``old`` (which must be there) replaced by ``new``."""

    def variant(text: str) -> str:
        if old not in text:
            raise SystemExit(f"the search statement no longer holds {old!r}: update the variant")
        return text.replace(old, new)

    return variant


#: The variants, by what they switch off.
VARIANTS: dict[str, Callable[[str], str]] = {
    "whole statement": lambda text: text,
    "without the entity leg": switched(  # scope_links: no link, so no entity matches either
        "WHERE (cardinality(%(entity_embeddings)b::vector[]) > 0",
        "WHERE false AND (cardinality(%(entity_embeddings)b::vector[]) > 0"),
    "without the keyword leg": switched(
        "FROM scope_rows r WHERE r.lexemes IS NOT NULL", "FROM scope_rows r WHERE false"),
    "without the neighbour step": switched("WHERE x.wanted AND", "WHERE false AND"),
    "without the neighbours' window": lambda text: switched(
        "lead(m.id, 1) OVER stored AS after_1, lead(m.id, 2) OVER stored AS after_2",
        "NULL::uuid AS after_1, NULL::uuid AS after_2")(switched(
        "lag(m.id, 1) OVER stored AS before_1, lag(m.id, 2) OVER stored AS before_2",
        "NULL::uuid AS before_1, NULL::uuid AS before_2")(text)),
}


#: The floor of a search's SQL: the scope's nearest 20 by cosine distance, nothing else.
FLOOR = "bare top-20 (the floor's statement)"
BARE_TOP_20 = (
    "SELECT m.id FROM pgmem.memories m WHERE m.tenant = %(tenant)s AND m.user_id = %(user_id)s"
    " ORDER BY m.embedding <=> %(embedding)s::vector LIMIT 20"
)


def statements(
    memory: pgmem.Memory, asked: Sequence[tuple[str, str]], *, limit: int = 20,
    small: bool = True,
) -> list[tuple[Any, dict[str, Any]]]:
    """Each question's ``search_small`` statement (``search`` without ``small``) and
    parameters, as a search makes them."""
    ops = memory._ops
    made = []
    for question, user in asked:
        request = ops._search_request(
            question, user_id=user, agent_id=None, run_id=None, limit=limit, threshold=0.1,
            filters=None, mode="hybrid", legs=None,
        )
        inputs = run(memory._connector, ops.search_inputs(request))
        statement = ops.store.search(
            search_plan(inputs, exact_scan=False).params, request.condition, small=small
        )
        made.append((statement.query, dict(statement.params or {})))
    return made


def timed_rounds(
    conn: psycopg.Connection[Any], runs: Sequence[tuple[str, Sequence[tuple[str, dict[str, Any]]]]],
    rounds: int,
) -> dict[str, list[float]]:
    """Milliseconds of each named sequence of (statement text, parameters), prepared, taking
    turns call by call over ``rounds`` timed passes after one to warm up."""
    times: dict[str, list[float]] = {name: [] for name, _ in runs}
    for round_ in range(rounds + 1):
        for calls in zip(*(calls for _, calls in runs)):
            for (name, _), (text, params) in zip(runs, calls):
                started = time.perf_counter()
                conn.execute(text, params, prepare=True, binary=True).fetchall()
                if round_:
                    times[name].append((time.perf_counter() - started) * 1000)
    return times


def line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares line through ``points``: (value at 0, slope)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return mean_y - slope * mean_x, slope


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search_legs",
                                     description=__doc__.split("\n\n")[0])
    dialogues.data_arguments(parser)
    parser.add_argument("--memories", type=int, default=200, metavar="N",
                        help="turns stored per conversation (default: 200)")
    dialogues.timing_arguments(parser, questions=60)
    parser.add_argument("--sizes", type=dialogues.numbers, metavar="N,N,..",
                        help="also time the statement and the bare top-20 in scopes of these "
                        "sizes (the first N turns of the first conversation)")
    args = parser.parse_args(argv)
    conversations, asked = dialogues.timed_questions(args)
    sizes = args.sizes or []
    with scratch_database(server_dsn(args.dsn), f"pgmem_bench_search_legs_{os.getpid()}") as dsn:
        pgmem.migrate(dsn)
        with pgmem.Memory(dsn) as memory:
            for c in conversations:
                memory.add_many([{"text": m.text, "user_id": c.id}
                                 for m in c.memories[: args.memories]])
            for size in sizes:
                memory.add_many([{"text": m.text, "user_id": f"size-{size}"}
                                 for m in conversations[0].memories[:size]])
            made = statements(memory, asked)
            by_size = {size: statements(memory, [(q, f"size-{size}") for q, _ in asked])
                       for size in sizes}
            # the settings pgmem sends before its small-scope statement (its HNSW settings
            # aside: a small scope is read row by row)
            settings = memory._ops.store.search_settings(None, small=True)
        # one transaction, to which the settings are local
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            register_vector(conn)
            for setting in settings:
                execute(conn, setting)
            runs = [(name, [(vary(query.as_string(conn)), params) for query, params in made])
                    for name, vary in VARIANTS.items()]
            runs.append((FLOOR, [(BARE_TOP_20, params) for _, params in made]))
            times = timed_rounds(conn, runs, args.rounds)
            sized = timed_rounds(conn, [
                run for size, calls in by_size.items() for run in (
                    (f"{size} statement", [(q.as_string(conn), p) for q, p in calls]),
                    (f"{size} bare", [(BARE_TOP_20, p) for _, p in calls]))
            ], args.rounds) if sizes else {}
    whole = statistics.median(times["whole statement"])
    print(f"{len(asked)} questions, {args.memories} memories a scope, {args.rounds} rounds; "
          "p50 of the round trip")
    print()
    print("| statement | p50 ms | / whole |")
    print("|---|---:|---:|")
    for name, values in times.items():
        p50 = statistics.median(values)
        print(f"| {name} | {p50:.2f} | {p50 / whole:.2f} |")
    if sizes:
        print()
        print("| scope size | statement p50 ms | bare top-20 p50 ms | statement / bare |")
        print("|---:|---:|---:|---:|")
        p50s = {name: statistics.median(values) for name, values in sized.items()}
        for size in sizes:
            statement, bare = p50s[f"{size} statement"], p50s[f"{size} bare"]
            print(f"| {size} | {statement:.2f} | {bare:.2f} | {statement / bare:.1f}x |")
        for kind in ("statement", "bare"):
            fixed, slope = line([(size, p50s[f"{size} {kind}"]) for size in sizes])
            print(f"\n{kind}: {fixed:.2f} ms + {slope * 1000:.2f} us a memory (least squares)",
                  end="")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
