"""Ingest throughput: ``Memory.add`` one by one against ``Memory.add_many``, on LoCoMo's turns.

    python -m benchmarks.ingest [--data PATH] [--dsn DSN] [--batch-size N] [--limit N]

Every dialogue turn of LoCoMo (``--data``, ``--conversations``: benchmarks.dialogues) becomes a
memory with
the text ``"{speaker}: {text}"``, ``user_id`` = the conversation id and ``{"dia_id": ...}`` as
metadata. The run creates two databases on the server given by ``--dsn`` (else
``PGMEM_BENCH_DSN``, else ``PGMEM_TEST_DSN``), stores the turns into one with ``add`` and into
the other with ``add_many``, prints memories per second for each and their ratio, checks that
both wrote the same rows (text, hash, lemmas, metadata, entity links, entities and history;
not ids, timestamps or vectors), and drops the databases. The models are loaded and warmed up
before the clocks start; the wall times include spaCy, embedding and the database.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

import pgmem
from benchmarks import dialogues
from benchmarks.database import scratch_database, server_dsn
from pgmem.embedding import embeds_beside_analysis
from pgmem.nlp_process import make_analyzer

# What a memory is, independent of ids, timestamps and float noise in the vectors.
MEMORY_ROWS = """
SELECT m.user_id, m.text, m.content_hash, m.lexemes::text, m.lexeme_count, m.metadata::text,
       array(SELECT e.name || ' @ ' || concat_ws('/', me.user_id, me.agent_id, me.run_id)
               FROM pgmem.memory_entities me
               JOIN pgmem.entities e ON e.tenant = me.tenant AND e.id = me.entity_id
              WHERE me.tenant = m.tenant AND me.memory_id = m.id ORDER BY e.name) AS entities,
       array(SELECT h.event || ':' || coalesce(h.new_text, '') FROM pgmem.history h
              WHERE h.tenant = m.tenant AND h.memory_id = m.id ORDER BY h.id) AS history
  FROM pgmem.memories m
 ORDER BY 1, 2, 3
"""
ENTITY_ROWS = "SELECT name, label FROM pgmem.entities ORDER BY name"


def turn_items(
    path: Path | None, limit: int | None, which: str | None = None
) -> list[dict[str, Any]]:
    """The turns of every conversation as ``add_many`` items, in conversation order."""
    items = [
        {
            "text": f"{turn['speaker']}: {turn['text']}",
            "user_id": conversation["id"],
            "metadata": {"dia_id": turn["dia_id"]},
        }
        for conversation in dialogues.load_conversations(path, which)
        for turn in conversation["turns"]
    ]
    return items[:limit] if limit else items


def ingest_one_by_one(memory: pgmem.Memory, items: Sequence[dict[str, Any]]) -> float:
    """Store ``items`` with one ``add`` each; the wall time in seconds."""
    start = time.perf_counter()
    for item in items:
        memory.add(item["text"], user_id=item["user_id"], metadata=item["metadata"])
    return time.perf_counter() - start


def ingest_batched(
    memory: pgmem.Memory, items: Sequence[dict[str, Any]], batch_size: int
) -> float:
    """Store ``items`` with ``add_many``; the wall time in seconds."""
    start = time.perf_counter()
    memory.add_many(items, batch_size=batch_size)
    return time.perf_counter() - start


def stored_rows(dsn: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The memory rows and entity rows of a database, comparable across databases."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(MEMORY_ROWS).fetchall(), conn.execute(ENTITY_ROWS).fetchall()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    dialogues.data_arguments(parser)
    parser.add_argument("--dsn", help="a server where databases may be created")
    parser.add_argument("--batch-size", type=int, default=64, help="add_many's batch size")
    parser.add_argument("--limit", type=int, help="store only the first N turns")
    args = parser.parse_args(argv)
    dsn = server_dsn(args.dsn)
    items = turn_items(args.data, args.limit, args.conversations)
    embedder = pgmem.SentenceTransformerEmbedder()
    analyzer = make_analyzer(apart=embeds_beside_analysis(embedder))  # as Memory would
    embedder.embed(["warm up the model"])
    analyzer.analyze_many(["Warm up the pipeline in Paris."])

    timings = {}
    rows = {}
    prefix = f"pgmem_ingest_{os.getpid()}"
    for name in ("add", "add_many"):
        with scratch_database(dsn, f"{prefix}_{name}") as db:
            pgmem.migrate(db)
            with pgmem.Memory(db, embedder=embedder, nlp=analyzer) as memory:
                memory.get_all(user_id="warm-up")  # opens the pool, reads the schema
                if name == "add":
                    timings[name] = ingest_one_by_one(memory, items)
                else:
                    timings[name] = ingest_batched(memory, items, args.batch_size)
            rows[name] = stored_rows(db)
        rate = len(items) / timings[name]
        print(f"{name:>8}: {len(items)} turns in {timings[name]:6.1f} s = {rate:7.1f} memories/s")

    print(f"   ratio: add_many is {timings['add'] / timings['add_many']:.2f}x add "
          f"(batch size {args.batch_size}, {os.cpu_count()} CPUs)")
    (memories_one, entities_one), (memories_many, entities_many) = rows["add"], rows["add_many"]
    same = memories_one == memories_many and entities_one == entities_many
    print(f"    rows: {len(memories_one)} memories, {len(entities_one)} entities stored; "
          f"add and add_many wrote {'the same rows' if same else 'DIFFERENT rows'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
