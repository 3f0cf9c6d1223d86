"""Isolation: one user's memories never reach another user's search, through any leg -- the
entity leg included, although users share entity rows ("John", "Paris") within a tenant -- and
spread counts only count the searched scope. Tenants isolate too, and PostgreSQL row-level
security on ``tenant`` works with pgmem unchanged (policies created by the test, no migration).

Real models: entity links only mean something with real entity recognition and embeddings."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from reliability_support import (
    CachedEmbedder,
    assert_in_scope,
    counts,
    rows,
    scratch_database,
)

import pgmem

USERS = [f"user{i}" for i in range(8)]
SHARED = [
    "John said Paris is lovely in the spring.",
    "I had dinner with John in Paris last Friday.",
    "John booked a flight to Paris for the conference.",
    "Paris reminded John of his first trip abroad.",
    "John and Maria walked along the Seine in Paris.",
    "John's sister lives near Paris.",
]
# Entities only one user ever mentions.
PRIVATE = {
    "user3": ["Kowalski repaired the boat in Zanzibar.", "Kowalski owes me twenty dollars."],
    "user6": ["The Okonkwo family moved to Reykjavik.", "Okonkwo plays the cello."],
}
QUERIES = [
    "John", "Paris", "Where does John's sister live?", "dinner with John in Paris",
    "Kowalski", "Zanzibar boat", "Okonkwo Reykjavik", "cello",
]


def john_count(user_index: int) -> int:
    """How many John memories a user holds: 1 for user0, more for the others."""
    return 1 + user_index % len(SHARED)


@pytest.fixture(scope="module")
def shared_names(
    server_dsn: str, template_database: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> Iterator[tuple[str, pgmem.Memory]]:
    """Eight users whose memories mention the same people and places, each with an agent and
    two runs, plus a few entities only one user mentions."""
    with scratch_database(server_dsn, template_database) as dsn, \
            pgmem.Memory(dsn, embedder=CachedEmbedder(embedder), nlp=analyzer) as mem:
        items = []
        for i, user in enumerate(USERS):
            for k, text in enumerate(SHARED[: john_count(i)]):
                items.append({"text": text, "user_id": user, "agent_id": f"agent{k % 2}",
                              "run_id": f"{user}-run{k % 2}"})
            for text in PRIVATE.get(user, []):
                items.append({"text": text, "user_id": user, "agent_id": "agent0"})
            # the same user id in another tenant must never matter: see test_tenants
        mem.add_many(items)
        yield dsn, mem


def linked_count(dsn: str, entity: str, user_id: str) -> int:
    (row,) = rows(
        dsn,
        "SELECT count(DISTINCT me.memory_id) FROM pgmem.memory_entities me"
        " JOIN pgmem.entities e ON e.tenant = me.tenant AND e.id = me.entity_id"
        " JOIN pgmem.memories m ON m.tenant = me.tenant AND m.id = me.memory_id"
        " WHERE e.name = %s AND m.user_id = %s",
        entity, user_id,
    )
    return int(row[0])


def test_the_corpus_shares_entity_rows_between_users(
    shared_names: tuple[str, pgmem.Memory]
) -> None:
    dsn, _ = shared_names
    assert rows(dsn, "SELECT count(*) FROM pgmem.entities WHERE name IN ('john', 'paris')") == [
        (2,)
    ]
    total = sum(john_count(i) for i in range(len(USERS)))
    for i, user in enumerate(USERS):
        assert linked_count(dsn, "john", user) == john_count(i)
    assert rows(
        dsn,
        "SELECT count(*) FROM pgmem.memory_entities me JOIN pgmem.entities e"
        " ON e.tenant = me.tenant AND e.id = me.entity_id WHERE e.name = 'john'",
    ) == [(total,)]


MODES = ["hybrid", "semantic", "keyword", "entity", "keyword+entity"]


@pytest.mark.parametrize("mode", MODES)
def test_no_leg_returns_another_users_memory(
    shared_names: tuple[str, pgmem.Memory], mode: str
) -> None:
    _, mem = shared_names
    used_legs: set[str] = set()
    for user in ("user0", "user1", "user3", "user6"):
        own = {m.id for m in mem.get_all(user_id=user, limit=1000).items}
        for query in QUERIES:
            hits = mem.search(query, user_id=user, limit=100, threshold=0.0, mode=mode)
            for hit in hits:
                assert_in_scope(hit, user_id=user)
                assert hit.id in own
                used_legs.update(hit.explain.legs)
    expected = {"hybrid": {"semantic", "keyword", "entity"},
                "keyword+entity": {"keyword", "entity"}}
    assert used_legs == expected.get(mode, {mode})


@pytest.mark.parametrize("leg", ["semantic", "keyword", "entity"])
def test_each_leg_alone_stays_in_the_scope(
    shared_names: tuple[str, pgmem.Memory], leg: str
) -> None:
    _, mem = shared_names
    for user in ("user0", "user3", "user7"):
        for query in QUERIES:
            for hit in mem.search(query, user_id=user, limit=100, threshold=0.0, legs=[leg]):
                assert_in_scope(hit, user_id=user)
                assert hit.explain.legs == (leg,)


def test_an_entity_only_another_user_mentions_finds_nothing(
    shared_names: tuple[str, pgmem.Memory]
) -> None:
    dsn, mem = shared_names
    private_names = {"kowalski", "zanzibar", "okonkwo", "reykjavik"}
    assert private_names <= {n for (n,) in rows(dsn, "SELECT name FROM pgmem.entities")}
    for user in ("user0", "user1", "user5", "user7"):
        for query in ("Kowalski", "Zanzibar", "Okonkwo in Reykjavik"):
            for hit in mem.search(query, user_id=user, limit=50, threshold=0.0):
                assert hit.user_id == user
                assert not {h.name for h in hit.explain.entity_hits} & private_names
    # while its owner finds it through the entity leg
    (hit, *_) = mem.search("Kowalski", user_id="user3", limit=5, mode="entity")
    assert "kowalski" in {h.name for h in hit.explain.entity_hits}


def test_spread_counts_only_the_searched_scope(shared_names: tuple[str, pgmem.Memory]) -> None:
    dsn, mem = shared_names
    seen = 0
    for i, user in enumerate(USERS):
        for hit in mem.search("John", user_id=user, limit=50, threshold=0.0):
            for entity_hit in hit.explain.entity_hits:
                if entity_hit.name == "john" and entity_hit.similarity > 0.999:
                    assert entity_hit.spread == linked_count(dsn, "john", user) == john_count(i)
                    seen += 1
    assert seen == sum(john_count(i) for i in range(len(USERS)))
    # narrower scopes count narrower: user5's run0 holds three of its John memories
    for hit in mem.search("John", user_id="user5", run_id="user5-run0", limit=50, threshold=0.0):
        assert_in_scope(hit, user_id="user5", run_id="user5-run0")
        (john,) = [h for h in hit.explain.entity_hits if h.name == "john"]
        assert john.spread == 3


def test_agent_and_run_scopes_hold_too(shared_names: tuple[str, pgmem.Memory]) -> None:
    _, mem = shared_names
    for user in ("user2", "user5"):
        for agent in ("agent0", "agent1"):
            for run in (None, f"{user}-run0", f"{user}-run1", "user0-run0"):
                page = mem.get_all(user_id=user, agent_id=agent, run_id=run, limit=1000)
                for item in page.items:
                    assert_in_scope(item, user, agent, run)
                for query in ("John in Paris", "Kowalski"):
                    hits = mem.search(query, user_id=user, agent_id=agent, run_id=run,
                                      limit=100, threshold=0.0)
                    for hit in hits:
                        assert_in_scope(hit, user, agent, run)
                    assert {h.id for h in hits} <= {m.id for m in page.items}
                    if query.startswith("John") and page.items:
                        assert hits
    # an agent across users: every user's agent0 memories, none of agent1's
    for hit in mem.search("John", agent_id="agent0", limit=100, threshold=0.0):
        assert hit.agent_id == "agent0"


def test_tenants_are_isolated(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    cached = CachedEmbedder(embedder)
    with pgmem.Memory(db_dsn, embedder=cached, nlp=analyzer, tenant="acme") as acme, \
            pgmem.Memory(db_dsn, embedder=cached, nlp=analyzer, tenant="globex") as globex:
        mine = acme.add_many(SHARED[:2], user_id="u1")
        theirs = globex.add_many(SHARED, user_id="u1")  # same user id, same texts, more of them
        globex.add_many(PRIVATE["user3"], user_id="u1")
        assert rows(db_dsn, "SELECT tenant, count(*) FROM pgmem.entities WHERE name = 'john'"
                            " GROUP BY 1 ORDER BY 1") == [("acme", 1), ("globex", 1)]
        for query in QUERIES:
            for mode in MODES:
                for hit in acme.search(query, user_id="u1", limit=100, threshold=0.0, mode=mode):
                    assert hit.id in {m.id for m in mine}
        for hit in acme.search("John", user_id="u1", limit=10, threshold=0.0):
            assert [h.spread for h in hit.explain.entity_hits if h.name == "john"] == [2]
        assert {m.id for m in acme.get_all(user_id="u1").items} == {m.id for m in mine}
        before = counts(db_dsn)
        for other in theirs:
            for call in (acme.get, acme.history, acme.delete,
                         lambda i: acme.update(i, text="overwritten"),
                         lambda i: acme.update(i, metadata={"owned": True})):
                with pytest.raises(pgmem.NotFoundError):
                    call(other.id)
        assert counts(db_dsn) == before
        assert acme.delete_all(user_id="u1") == 2
        assert sorted(m.text for m in globex.get_all(user_id="u1").items) == sorted(
            SHARED + PRIVATE["user3"]
        )
        assert globex.search("John", user_id="u1", limit=3)


# -- row-level security ----------------------------------------------------------------------

RLS_POLICY = """
ALTER TABLE pgmem.{table} ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON pgmem.{table}
    USING (tenant = current_user) WITH CHECK (tenant = current_user);
"""


def test_row_level_security_on_tenant_with_two_roles(
    server_dsn: str, template_database: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    """An operator can enforce tenant isolation in the database itself: one role per tenant,
    policies ``tenant = current_user`` on the four tables. No schema change is needed."""
    suffix = uuid.uuid4().hex[:8]
    role_a, role_b = f"pgmem_rls_a_{suffix}", f"pgmem_rls_b_{suffix}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for role in (role_a, role_b):
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        with scratch_database(server_dsn, template_database) as dsn:
            with psycopg.connect(dsn, autocommit=True) as owner:
                for role in (role_a, role_b):
                    owner.execute(sql.SQL(
                        "GRANT USAGE ON SCHEMA pgmem TO {r};"
                        " GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA pgmem TO {r}"
                    ).format(r=sql.Identifier(role)))
                for table in ("memories", "entities", "memory_entities", "history"):
                    owner.execute(RLS_POLICY.format(table=table).encode())
            dsn_a = make_conninfo(dsn, user=role_a)
            dsn_b = make_conninfo(dsn, user=role_b)
            with pgmem.Memory(dsn_a, embedder=embedder, nlp=analyzer, tenant=role_a) as a, \
                    pgmem.Memory(dsn_b, embedder=embedder, nlp=analyzer, tenant=role_b) as b, \
                    pgmem.Memory(dsn_b, embedder=embedder, nlp=analyzer, tenant=role_a) as b_as_a:
                secret = a.add("John keeps the spare key under the mat in Paris.", user_id="u1")
                b.add("John likes Paris in the rain.", user_id="u1")
                assert [h.id for h in a.search("John Paris", user_id="u1", limit=5)] == [secret.id]
                # role b claiming tenant a (a misconfigured or compromised app) sees nothing
                assert b_as_a.search("John Paris key", user_id="u1", threshold=0.0) == []
                assert b_as_a.get_all(user_id="u1").items == ()
                with pytest.raises(pgmem.NotFoundError):
                    b_as_a.get(secret.id)
                with pytest.raises(pgmem.NotFoundError):
                    b_as_a.delete(secret.id)
                with pytest.raises(pgmem.DatabaseError, match="row-level security"):
                    b_as_a.add("planted into tenant a", user_id="u1")
                assert [h.user_id for h in b.search("John", user_id="u1", limit=5)] == ["u1"]
                assert a.get(secret.id).text.startswith("John keeps")
            assert rows(dsn, "SELECT tenant, count(*) FROM pgmem.memories GROUP BY 1 ORDER BY 1") \
                == sorted([(role_a, 1), (role_b, 1)])
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            for role in (role_a, role_b):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
