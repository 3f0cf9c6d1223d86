"""get_all pages a scope in index order at 50,000 rows: the plan of a page -- the first, and one
after a cursor, custom or generic -- reads the scope id's index (which ends with created_at, id)
from the cursor on, with no Sort node; and paging a scope through returns each memory once, in
order."""

from __future__ import annotations

import dataclasses
import datetime
import json
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

import pgmem
from pgmem.builders import list_params
from pgmem.filters import compile_filters
from pgmem.store import Store, execute
from pgmem.validate import scope as checked_scope
from tests.conftest import create_database, drop_database

pytestmark = pytest.mark.slow

ROWS = 50_000
SCOPES = {"big": 25_000, **{f"small{i}": 500 for i in range(50)}}
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def paging_db(server_dsn: str, template_database: str) -> Iterator[str]:
    """50,000 memories: user "big" holds half, 50 users 1% each, their created_at interleaved.
    The vectors are random (paging never reads them); the HNSW index is left out to load fast."""
    name = f"pgmem_paging_{uuid.uuid4().hex[:8]}"
    dsn = create_database(server_dsn, name, template=template_database)
    users = [user for user, n in SCOPES.items() for _ in range(n)]
    rng = np.random.default_rng(3)
    rng.shuffle(users)
    vector = json.dumps([round(float(x), 4) for x in rng.normal(size=384)])
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP INDEX pgmem.memories_embedding_idx")
        with conn.cursor().copy(
            "COPY pgmem.memories (user_id, text, content_hash, embedding, lexemes, lexeme_count,"
            " metadata, created_at) FROM STDIN"
        ) as copy:
            for i, user in enumerate(users):
                copy.write_row((
                    user, f"note {i}", f"h{i}", vector, "note", 1,
                    json.dumps({"parity": i % 2}),
                    # a few share a timestamp: the id breaks the tie
                    START + datetime.timedelta(seconds=i // 3),
                ))
        conn.execute("ANALYZE pgmem.memories")
    yield dsn
    drop_database(server_dsn, name)


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def page_plan(
    dsn: str, user: str, *, after: tuple[datetime.datetime, uuid.UUID] | None, generic: bool,
    filters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """EXPLAIN of get_all's statement, as store.list_memories builds it (its generic plan with
    ``generic``, else the plan made for these values)."""
    condition, filter_params = compile_filters(filters)
    params = list_params(checked_scope("default", user, None, None), filter_params, limit=100,
                         after=after)
    statement = Store("pgmem").list_memories(params, condition)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            f"SET plan_cache_mode = {'force_generic_plan' if generic else 'force_custom_plan'}"
        )
        explained = execute(conn, dataclasses.replace(statement, fetch="plan", read=lambda p: p))
    return explained[0]["Plan"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("user", ["big", "small7"])
def test_a_page_is_an_index_range_without_a_sort(paging_db: str, user: str, generic: bool) -> None:
    with psycopg.connect(paging_db) as conn:
        cursor_row = conn.execute(
            "SELECT created_at, id FROM pgmem.memories WHERE user_id = %s"
            " ORDER BY created_at, id OFFSET 300 LIMIT 1", (user,),
        ).fetchone()
    assert cursor_row is not None
    for after in (None, (cursor_row[0], cursor_row[1])):
        for filters in (None, {"parity": 1}):
            plan = page_plan(paging_db, user, after=after, generic=generic, filters=filters)
            found = list(nodes(plan))
            assert not [n for n in found if n["Node Type"] in ("Sort", "Incremental Sort")], plan
            scans = [n for n in found if n.get("Index Name") == "memories_user_idx"]
            assert scans, plan
            # the cursor bounds the index range: deep pages do not walk the pages before them
            assert "created_at" in scans[0].get("Index Cond", ""), scans[0]


def test_paging_a_scope_through_returns_each_memory_once_in_order(
    paging_db: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    seen: list[pgmem.MemoryRecord] = []
    with pgmem.Memory(paging_db, embedder=embedder, nlp=analyzer) as mem:
        cursor = None
        while True:
            page = mem.get_all(user_id="small7", limit=64, cursor=cursor)
            seen.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
    assert len(seen) == 500 and len({r.id for r in seen}) == 500
    keys = [(r.created_at, str(r.id)) for r in seen]
    assert keys == sorted(keys)
