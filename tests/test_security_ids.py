"""Calls by id never return or change a memory outside the caller's scope (issue 25, item 1):
an id an import brings (``add_many`` items, ``pgmem import``) that another scope's memory has is
an error naming no content, and nothing of its batch is written; the guarded calls by id
(get, update, delete, history) find nothing outside the scope. A hypothesis property test over
random scopes and ids: no call returns a memory of another scope, nor changes one."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import HashEmbedder, counts, rows, scratch_database
from security_support import PgmemCli, pgmem_cli  # noqa: F401 - a fixture

import pgmem

SECRET = "Victim private note: the diagnosis is X"


def test_add_many_with_another_scopes_id_is_refused_naming_no_content(
    memory: pgmem.Memory, db_dsn: str
) -> None:
    victim = memory.add(SECRET, user_id="victim")
    before = counts(db_dsn)
    with pytest.raises(pgmem.IdTakenError, match=r"items\[1\]: id .* is taken") as caught:
        memory.add_many(
            [{"text": "an innocent line"}, {"text": "anything", "id": str(victim.id)}],
            user_id="att",
        )
    assert "diagnosis" not in str(caught.value) and "victim" not in str(caught.value)
    assert counts(db_dsn) == before  # nothing of the batch, not even items[0]
    assert memory.get(victim.id).text == SECRET
    assert memory.get_all(user_id="att").items == ()
    # the same id into its own scope is the import run again: a duplicate of its own memory
    (again,) = memory.add_many([{"text": "anything", "id": victim.id}], user_id="victim")
    assert again.duplicate and again.id == victim.id and again.user_id == "victim"


def test_a_deleted_memorys_id_brought_back_elsewhere_shows_none_of_its_past(
    memory: pgmem.Memory,
) -> None:
    """An import may restore a deleted memory by its id; in another scope, the guarded history
    then shows only the new memory's events, none of the deleted one's texts."""
    victim = memory.add(SECRET, user_id="victim")
    memory.delete(victim.id)
    (mine,) = memory.add_many([{"text": "mine now", "id": victim.id}], user_id="att")
    assert not mine.duplicate and mine.text == "mine now"
    events = memory.history(victim.id, user_id="att")
    assert [(e.event, e.new_text, e.old_text) for e in events] == [("ADD", "mine now", None)]
    assert [e.event for e in memory.history(victim.id)] == ["ADD", "DELETE", "ADD"]


def test_an_id_of_another_tenant_is_not_that_tenants_memory(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    """Ids are per tenant (the primary key is (tenant, id)): the same id in another tenant is
    another memory, and writing it neither reads nor changes the first tenant's."""
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, tenant="a") as a, \
            pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, tenant="b") as b:
        victim = a.add(SECRET, user_id="victim")
        (theirs,) = b.add_many([{"text": "tenant b's own", "id": victim.id}], user_id="victim")
        assert not theirs.duplicate and theirs.text == "tenant b's own"
        assert a.get(victim.id).text == SECRET
        assert [e.new_text for e in a.history(victim.id)] == [SECRET]
        assert [e.new_text for e in b.history(victim.id)] == ["tenant b's own"]


def test_guarded_calls_by_id_do_not_reach_another_scope(
    memory: pgmem.Memory, db_dsn: str
) -> None:
    victim = memory.add(SECRET, user_id="victim", agent_id="a1")
    before = counts(db_dsn)
    for guard in ({"user_id": "att"}, {"user_id": "victim", "agent_id": "a2"},
                  {"run_id": "r1"}):
        for call in (memory.get, memory.history, memory.delete,
                     lambda i, **g: memory.update(i, text="overwritten", **g),
                     lambda i, **g: memory.update(i, metadata={"owned": True}, **g)):
            with pytest.raises(pgmem.NotFoundError) as caught:
                call(victim.id, **guard)
            assert "diagnosis" not in str(caught.value)
    assert counts(db_dsn) == before
    assert memory.get(victim.id, user_id="victim").text == SECRET


def test_cli_import_and_calls_by_id_stay_in_scope(
    pgmem_cli: PgmemCli,  # noqa: F811 - the fixture
    memory: pgmem.Memory, db_dsn: str, tmp_path: Path,
) -> None:
    victim = memory.add(SECRET, user_id="victim")
    before = counts(db_dsn)
    lines = [{"text": "fine", "user_id": "att"},
             {"text": "anything", "user_id": "att", "id": str(victim.id)}]
    path = tmp_path / "attack.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    status, out, err = pgmem_cli("import", str(path))
    assert status == 2 and "line 2: id" in err and "is taken" in err
    assert "diagnosis" not in out + err
    assert counts(db_dsn) == before
    for argv in (["get", str(victim.id)], ["history", str(victim.id)],
                 ["delete", str(victim.id)], ["update", str(victim.id), "--text", "x"]):
        status, out, err = pgmem_cli(*argv, "--user", "att")
        assert status == 2 and "no memory" in err, (argv, out, err)
        assert "diagnosis" not in out + err
    assert counts(db_dsn) == before
    status, out, _ = pgmem_cli("get", str(victim.id), "--user", "victim")
    assert status == 0 and "diagnosis" in out


# -- the property: no call by id crosses scopes -------------------------------------------------

USERS = ["u0", "u1", "u2"]
AGENTS = ["a0", "a1", None]


@pytest.fixture(scope="module")
def world(
    server_dsn: str, template_database: str, analyzer: pgmem.TextAnalyzer
) -> Iterator[tuple[str, pgmem.Memory]]:
    """Memories in every (user, agent) scope."""
    with scratch_database(server_dsn, template_database) as dsn, \
            pgmem.Memory(dsn, embedder=HashEmbedder(), nlp=analyzer) as mem:
        mem.add_many([
            {"text": f"note {n} of {user}/{agent}", "user_id": user, "agent_id": agent}
            for user in USERS for agent in AGENTS for n in range(2)
        ])
        yield dsn, mem


def _snapshot(dsn: str) -> list[tuple[Any, ...]]:
    return rows(dsn, "SELECT id, user_id, agent_id, text, metadata::text FROM pgmem.memories"
                     " ORDER BY id")


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    user=st.sampled_from(USERS + ["nobody"]),
    agent=st.sampled_from(AGENTS),
    pick=st.integers(min_value=0, max_value=10**6),
    fresh=st.booleans(),
    call=st.sampled_from(["get", "history", "update", "add_many", "delete"]),
)
def test_no_call_by_id_returns_or_changes_another_scopes_memory(
    world: tuple[str, pgmem.Memory],
    user: str, agent: str | None, pick: int, fresh: bool, call: str,
) -> None:
    dsn, mem = world
    live = {m.id: (m.user_id or "", m.agent_id) for u in USERS + ["nobody"]
            for m in mem.get_all(user_id=u, limit=1000).items}
    ids = sorted(live, key=str)
    memory_id = uuid.uuid4() if fresh or not ids else ids[pick % len(ids)]
    guard = {"user_id": user, **({"agent_id": agent} if agent else {})}
    ours = memory_id in live and live[memory_id][0] == user and (
        agent is None or live[memory_id][1] == agent)
    before = _snapshot(dsn)
    try:
        if call == "get":
            found = [mem.get(memory_id, **guard)]
        elif call == "history":
            mem.history(memory_id, **guard)
            found = [mem.get(memory_id)]
        elif call == "update":
            found = [mem.update(memory_id, metadata={"touched": pick}, **guard)]
        elif call == "delete":
            mem.delete(memory_id, **guard)
            found = []
            assert ours
        else:
            found = mem.add_many([{"text": f"import {pick}", "id": memory_id, **guard}])
    except pgmem.NotFoundError:
        assert not ours
        found = []
    except pgmem.IdTakenError:
        # A guard without an agent id matches any agent; an item's scope is exact.
        assert call == "add_many" and memory_id in live and live[memory_id] != (user, agent)
        found = []
    for record in found:
        assert record.id == memory_id and record.user_id == user
        if agent is not None:
            assert record.agent_id == agent
    after = _snapshot(dsn)
    assert [r for r in after if r[0] != memory_id] == [r for r in before if r[0] != memory_id]
    if not ours and not (call == "add_many" and found):
        assert [r for r in after if r[0] == memory_id] == [r for r in before if r[0] == memory_id]
    if call == "add_many" and found and not found[0].duplicate:
        assert memory_id not in live
        mem.delete(memory_id)  # keep the world as it was


def test_compat_mem0_calls_by_id_take_the_scope_as_a_guard(
    memory: pgmem.Memory, db_dsn: str
) -> None:
    from pgmem.compat.mem0 import Memory as Mem0Memory
    from pgmem.compat.mem0 import MemoryNotFoundError

    victim = memory.add(SECRET, user_id="victim")
    mem0 = Mem0Memory(memory=memory)
    before = counts(db_dsn)
    assert mem0.get(str(victim.id), user_id="att") is None
    assert mem0.history(str(victim.id), user_id="att") == []
    with pytest.raises(MemoryNotFoundError):
        mem0.update(str(victim.id), text="overwritten", user_id="att")
    with pytest.raises(MemoryNotFoundError):
        mem0.update(str(victim.id), metadata={"owned": True}, user_id="att")
    with pytest.raises(MemoryNotFoundError):
        mem0.delete(str(victim.id), user_id="att")
    assert counts(db_dsn) == before
    found = mem0.get(str(victim.id), user_id="victim")
    assert found is not None and found["memory"] == SECRET
