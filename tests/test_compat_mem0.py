"""pgmem.compat.mem0 against the real Mem0 OSS (mem0ai 2.2.1): the same calls on both, their
results compared by keys, types and behaviour (not scores); and a Mem0 script run both ways."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import create_database, drop_database
from mem0_support import mem0_config, mem0_memory, prepare_mem0, require_mem0
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgmem
from pgmem.compat import mem0 as compat

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


@pytest.fixture(scope="module")
def shared_dsn(server_dsn: str, template_database: str) -> Iterator[str]:
    """One migrated database for the module: Mem0's collection and pgmem's schema side by side."""
    require_mem0()
    name = f"pgmem_mem0_{uuid.uuid4().hex[:10]}"
    yield create_database(server_dsn, name, template=template_database)
    drop_database(server_dsn, name)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mem0home")


@pytest.fixture(scope="module")
def real(shared_dsn: str, home: Path) -> Any:
    """The real mem0.Memory."""
    mem = mem0_memory(shared_dsn, "compat_check", home)
    yield mem
    mem.close()


@pytest.fixture(scope="module")
def ours(
    shared_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> Iterator[compat.Memory]:
    with compat.Memory(shared_dsn, embedder=embedder, nlp=analyzer) as mem:
        yield mem


@pytest.fixture
def user() -> str:
    return f"u{uuid.uuid4().hex[:8]}"


def both(real: Any, ours: compat.Memory) -> list[tuple[str, Any]]:
    return [("mem0", real), ("pgmem", ours)]


def shape(value: Any) -> Any:
    """The keys and value types of a result, recursively (None stays None)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return None if value is None else type(value).__name__


FOOD = [
    ("I like pizza with olives", {"topic": "food", "rating": 5, "tags": ["italian"]}),
    ("I like ramen on cold days", {"topic": "food", "rating": 3}),
    ("I like hiking in the Alps", {"topic": "sport", "rating": 4, "place": "Alps"}),
    ("I like reading crime novels", {"topic": "books"}),
]


def add_food(mem: Any, user: str) -> dict[str, str]:
    """The FOOD memories, one add each; their ids by text."""
    ids = {}
    for text, meta in FOOD:
        result = mem.add(text, user_id=user, metadata=meta, infer=False)
        ids[text] = result["results"][0]["id"]
    return ids


def test_add_returns_mem0s_shape(real: Any, ours: compat.Memory, user: str) -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "I moved to Lyon last spring"},
        {"role": "assistant", "content": "Lyon is lovely in May", "name": "concierge"},
        {"role": "user"},  # no content: skipped by both
    ]
    outputs = {}
    for name, mem in both(real, ours):
        outputs[name] = (
            mem.add("Alice prefers tea", user_id=user, agent_id="helper", infer=False),
            mem.add(messages, user_id=user, run_id="r1", metadata={"src": "chat"}, infer=False),
        )
    for got, want in zip(outputs["pgmem"], outputs["mem0"]):
        assert shape(got) == shape(want)
        assert [(r["memory"], r["event"], r["role"], r["actor_id"]) for r in got["results"]] == [
            (r["memory"], r["event"], r["role"], r["actor_id"]) for r in want["results"]
        ]
        for r in got["results"]:
            assert uuid.UUID(r["id"])


def test_get_and_get_all_agree(real: Any, ours: compat.Memory, user: str) -> None:
    got: dict[str, Any] = {}
    for name, mem in both(real, ours):
        ids = add_food(mem, user)
        mem.add([{"role": "assistant", "content": "Noted, olives", "name": "bot"}],
                user_id=user, agent_id="a1", infer=False)
        got[name] = {
            "one": mem.get(ids["I like pizza with olives"]),
            "missing": mem.get(str(uuid.uuid4())),
            "all": mem.get_all(filters={"user_id": user}, top_k=50),
            "agent": mem.get_all(filters={"user_id": user, "agent_id": "a1"}),
            "limited": mem.get_all(filters={"user_id": user}, top_k=2),
        }
    mine, theirs = got["pgmem"], got["mem0"]
    assert shape(mine["one"]) == shape(theirs["one"])
    for key in ("memory", "hash", "metadata", "score", "user_id", "role"):
        assert mine["one"][key] == theirs["one"][key], key
    assert mine["missing"] is None and theirs["missing"] is None
    by_text = lambda rows: {r["memory"]: r for r in rows["results"]}
    assert by_text(mine["all"]).keys() == by_text(theirs["all"]).keys()
    for text, row in by_text(theirs["all"]).items():
        assert shape(by_text(mine["all"])[text]) == shape(row)
        assert "score" not in by_text(mine["all"])[text]
        assert by_text(mine["all"])[text]["metadata"] == row["metadata"]
    assert [r["memory"] for r in mine["agent"]["results"]] == ["Noted, olives"]
    assert [r["memory"] for r in theirs["agent"]["results"]] == ["Noted, olives"]
    assert mine["agent"]["results"][0]["actor_id"] == theirs["agent"]["results"][0]["actor_id"]
    assert len(mine["limited"]["results"]) == len(theirs["limited"]["results"]) == 2


@pytest.fixture(scope="module")
def food_user(real: Any, ours: compat.Memory) -> str:
    """A user holding the FOOD memories in both stores (read-only tests share it)."""
    user = f"food{uuid.uuid4().hex[:8]}"
    for _, mem in both(real, ours):
        add_food(mem, user)
    return user


@pytest.mark.parametrize(
    "condition",
    [
        {},
        {"topic": "food"},
        {"rating": {"gte": 4}},
        {"rating": {"gt": 3, "lte": 5}},
        {"topic": {"in": ["food", "books"]}},
        {"topic": {"nin": ["food"]}},
        {"topic": {"ne": "sport"}},
        {"place": "*"},
        {"topic": {"contains": "oo"}},
        {"topic": {"icontains": "FOO"}},
        {"OR": [{"topic": "sport"}, {"rating": 3}]},
        {"AND": [{"topic": "food"}, {"rating": {"lt": 4}}]},
        {"NOT": [{"topic": "food"}]},
        {"NOT": [{"topic": "food"}, {"topic": "books"}]},
        {"topic": ["sport", "books"]},
        # keys some memories lack (books has no rating, only sport has a place): Mem0 leaves
        # those memories out under ne, nin and NOT, as SQL's NULL does
        {"place": {"ne": "Paris"}},
        {"rating": {"ne": 5}},
        {"rating": {"nin": [3, 4]}},
        {"NOT": [{"rating": 3}]},
        {"NOT": [{"topic": "books"}, {"rating": 3}]},
        {"NOT": [{"place": "*"}]},
        {"NOT": [{"rating": {"ne": 5}}]},
        {"OR": [{"rating": {"ne": 5}}, {"place": "*"}]},
    ],
    ids=repr,
)
def test_search_filters_mean_the_same(
    real: Any, ours: compat.Memory, food_user: str, condition: dict[str, Any]
) -> None:
    found = {}
    for name, mem in both(real, ours):
        result = mem.search("What do I like?", filters={"user_id": food_user, **condition},
                            top_k=20, threshold=0.0)
        found[name] = result
    assert {r["memory"] for r in found["pgmem"]["results"]} == {
        r["memory"] for r in found["mem0"]["results"]
    }
    for mine in found["pgmem"]["results"]:
        theirs = next(r for r in found["mem0"]["results"] if r["memory"] == mine["memory"])
        assert shape(mine) == shape(theirs)
        assert isinstance(mine["score"], float)


@pytest.mark.parametrize("condition", [{"rating": {"ne": 5}}, {"$not": [{"rating": 3}]}],
                         ids=repr)
def test_get_all_filters_mean_the_same(
    real: Any, ours: compat.Memory, food_user: str, condition: dict[str, Any]
) -> None:
    found = {
        name: {r["memory"] for r in mem.get_all(filters={"user_id": food_user, **condition})[
            "results"]}
        for name, mem in both(real, ours)
    }
    assert found["pgmem"] == found["mem0"]
    assert "I like reading crime novels" not in found["pgmem"]  # it has no rating


def test_get_all_reads_and_or_not_unlike_mem0(
    real: Any, ours: compat.Memory, food_user: str
) -> None:
    """A documented difference: Mem0's get_all hands NOT to its store unread (it matches
    nothing there); pgmem's reads it as search does."""
    condition = {"user_id": food_user, "NOT": [{"topic": "food"}]}
    assert real.get_all(filters=condition)["results"] == []
    assert {r["memory"] for r in ours.get_all(filters=condition)["results"]} == {
        "I like hiking in the Alps", "I like reading crime novels"}


def test_search_top_k_and_scope(real: Any, ours: compat.Memory, user: str) -> None:
    other = f"{user}x"
    for name, mem in both(real, ours):
        add_food(mem, user)
        mem.add("I like pizza with olives", user_id=other, infer=False)
        best = mem.search("pizza", filters={"user_id": user}, top_k=1)["results"]
        assert [r["memory"] for r in best] == ["I like pizza with olives"], name
        assert best[0]["user_id"] == user
        assert mem.search("pizza", filters={"user_id": user}, top_k=0)["results"] == [], name
    # pgmem's additions: scope ids as keywords (Mem0 1.x's form) and limit for top_k.
    hits = ours.search("pizza", user_id=user, limit=2)["results"]
    assert len(hits) == 2 and all(h["user_id"] == user for h in hits)


def test_score_details_have_mem0s_keys(real: Any, ours: compat.Memory, food_user: str) -> None:
    """search(explain=True): code reading Mem0's score_details keys reads pgmem's."""
    details = {}
    for name, mem in both(real, ours):
        hits = mem.search("pizza with olives", filters={"user_id": food_user}, top_k=2,
                          threshold=0.2, explain=True)["results"]
        details[name] = hits[0]["score_details"]
        assert hits[0]["memory"] == "I like pizza with olives", name
    assert details["pgmem"].keys() == details["mem0"].keys()
    assert shape(details["pgmem"]) == shape(details["mem0"])
    mine = details["pgmem"]
    assert mine["threshold"] == 0.2 and mine["semantic_score"] > 0.5
    assert mine["final_score"] == pytest.approx(mine["raw_score"] / mine["max_possible_score"])


def test_threshold_zero_keeps_every_memory(real: Any, ours: compat.Memory, user: str) -> None:
    """Mem0 clamps similarity at 0, so threshold=0.0 keeps memories pointing away from the
    query (cosine < 0 with MiniLM), which pgmem's own threshold 0.0 drops."""
    texts = ["I like pizza with olives", "Quarterly VAT filing deadline 2031",
             "Tax form 1099-B box 12", "The mitochondria is the powerhouse of the cell"]
    found = {}
    for name, mem in both(real, ours):
        for text in texts:
            mem.add(text, user_id=user, infer=False)
        found[name] = mem.search("What do I like?", filters={"user_id": user}, top_k=10,
                                 threshold=0.0, explain=True)["results"]
    assert {r["memory"] for r in found["pgmem"]} == {r["memory"] for r in found["mem0"]} == set(
        texts
    )
    for hits in found.values():
        assert all(r["score"] >= 0 and r["score_details"]["semantic_score"] >= 0 for r in hits)
    native = ours.memory.search("What do I like?", user_id=user, limit=10, threshold=0.0)
    assert len(native) < len(texts)  # pgmem's own API keeps its meaning (cosine >= 0) ...
    assert len(ours.memory.search("What do I like?", user_id=user, limit=10,
                                  threshold=-1.0)) == len(texts)  # ... and -1 drops none


def test_update_history_delete_agree(real: Any, ours: compat.Memory, user: str) -> None:
    trace: dict[str, Any] = {}
    for name, mem in both(real, ours):
        added = mem.add([{"role": "user", "content": "I live in Paris"}], user_id=user,
                        metadata={"topic": "home", "since": 2019}, infer=False)
        mid = added["results"][0]["id"]
        steps = [
            mem.update(mid, "I live in Lyon"),
            mem.update(mid, data="I live in Nice", metadata={"since": 2024, "user_id": "x"}),
            mem.update(mid, metadata={"floor": 3}),
        ]
        after = mem.get(mid)
        history_before = mem.history(mid)
        steps.append(mem.delete(mid))
        history = mem.history(mid)
        with pytest.raises(ValueError):
            mem.delete(mid)
        with pytest.raises(ValueError):
            mem.update(mid, "gone")
        trace[name] = (steps, after, history_before, history, mem.get(mid),
                       mem.history(str(uuid.uuid4())))
    (steps, after, before, history, gone, unknown) = trace["pgmem"]
    (w_steps, w_after, w_before, w_history, w_gone, w_unknown) = trace["mem0"]
    assert steps == w_steps
    assert shape(after) == shape(w_after)
    assert after["memory"] == w_after["memory"] == "I live in Nice"
    assert after["metadata"] == w_after["metadata"] == {"topic": "home", "since": 2024, "floor": 3}
    assert after["user_id"] == w_after["user_id"] == user
    assert after["created_at"] < after["updated_at"]
    assert shape(before) == shape(w_before)
    # Once deleted, pgmem's history no longer knows the memory's role (Mem0 copies it into
    # every history row): a documented difference.
    unknown_role = lambda h: {**shape(h), "role": None, "actor_id": None}
    assert [unknown_role(h) for h in history] == [unknown_role(h) for h in w_history]
    fields = ("event", "old_memory", "new_memory", "is_deleted")
    assert [tuple(h[f] for f in fields) for h in history] == [
        tuple(h[f] for f in fields) for h in w_history
    ]
    assert [h["event"] for h in history] == ["ADD", "UPDATE", "UPDATE", "UPDATE", "DELETE"]
    assert before[-1]["role"] == w_before[-1]["role"] == "user"
    assert all(h["memory_id"] == history[0]["memory_id"] for h in history)
    assert history[0]["created_at"] == history[-1]["created_at"]
    assert gone is None and w_gone is None
    assert unknown == w_unknown == []


def test_errors_keep_their_meaning(real: Any, ours: compat.Memory, user: str) -> None:
    for name, mem in both(real, ours):
        with pytest.raises(Exception) as no_scope:
            mem.add("no scope", infer=False)
        assert "user_id" in str(no_scope.value), name
        for bad in (
            lambda m=mem: m.search("x", filters={"topic": "a"}),
            lambda m=mem: m.search("x", filters={"user_id": user}, threshold=2),
            lambda m=mem: m.search("x", filters={"user_id": user}, top_k=-1),
            lambda m=mem: m.search("   ", filters={"user_id": user}),
            lambda m=mem: m.get_all(filters={}),
            lambda m=mem: m.delete_all(),
            lambda m=mem: m.add("x", user_id="has space", infer=False),
            lambda m=mem: m.update(str(uuid.uuid4())),
        ):
            with pytest.raises(ValueError):
                bad()
    with pytest.raises(compat.ValidationError) as no_scope_ours:
        ours.add("no scope")
    assert not isinstance(no_scope_ours.value, ValueError)  # as Mem0's ValidationError
    assert no_scope_ours.value.error_code == "VALIDATION_001"
    with pytest.raises(compat.InferenceNotSupportedError, match="stores text as given"):
        ours.add("extract facts please", user_id=user, infer=True)
    with pytest.raises(compat.MemoryNotFoundError):
        ours.delete(str(uuid.uuid4()))
    with pytest.raises(pgmem.FilterError, match="top level"):
        ours.search("x", filters={"user_id": user, "OR": [{"user_id": "someone-else"}]})
    with pytest.raises(pgmem.InvalidInputError):
        ours.get("not-a-uuid")
    assert ours.get_all(filters={"user_id": user})["results"] == []  # nothing half-written


def test_delete_all_and_expiry(real: Any, ours: compat.Memory, user: str) -> None:
    for name, mem in both(real, ours):
        add_food(mem, user)
        mem.add("an old coupon", user_id=user, expiration_date="2001-01-01", infer=False)
        mem.add("a fresh coupon", user_id=user, expiration_date="2999-01-01", infer=False)
        listed = {r["memory"] for r in mem.get_all(filters={"user_id": user})["results"]}
        assert "an old coupon" not in listed and "a fresh coupon" in listed, name
        shown = mem.get_all(filters={"user_id": user}, show_expired=True)["results"]
        assert "an old coupon" in {r["memory"] for r in shown}, name
        fresh = next(r for r in shown if r["memory"] == "a fresh coupon")
        assert fresh["expiration_date"] == "2999-01-01", name
        hits = mem.search("coupon", filters={"user_id": user}, threshold=0.0)["results"]
        assert "an old coupon" not in {r["memory"] for r in hits}, name
        assert mem.delete_all(user_id=user) == {"message": "Memories deleted successfully!"}
        assert mem.get_all(filters={"user_id": user})["results"] == [], name


def test_extractor_makes_infer_work(ours: compat.Memory, user: str) -> None:
    seen = []

    def extractor(messages: list[dict[str, Any]]) -> list[str]:
        seen.append(messages)
        return [f"fact: {m['content']}" for m in messages if m["role"] == "user"]

    smart = compat.Memory(memory=ours.memory, extractor=extractor)
    result = smart.add([{"role": "system", "content": "s"}, {"role": "user", "content": "I ski"}],
                       user_id=user, infer=True)
    assert [r["memory"] for r in result["results"]] == ["fact: I ski"]
    assert seen == [[{"role": "user", "content": "I ski"}]]


def test_reset_empties_the_tenant(
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer
) -> None:
    with compat.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem, \
            compat.Memory(db_dsn, embedder=embedder, nlp=analyzer, tenant="other") as other:
        add_food(mem, "u1")
        other.add("kept", user_id="u1")
        assert mem.reset() is None
        assert mem.get_all(filters={"user_id": "u1"})["results"] == []
        assert [r["memory"] for r in other.get_all(filters={"user_id": "u1"})["results"]] == [
            "kept"
        ]


MEM0_SCRIPT = '''
from mem0 import Memory

m = Memory.from_config(CONFIG)
added = m.add(
    [{"role": "user", "content": "I'm vegetarian and allergic to nuts"},
     {"role": "assistant", "content": "Got it: no meat, no nuts"}],
    user_id=USER, metadata={"category": "diet"}, infer=False,
)
m.add("I play the cello on Sundays", user_id=USER, metadata={"category": "hobby"}, infer=False)
diet = m.search("what can I eat?", filters={"user_id": USER, "category": "diet"}, top_k=5)
trace.append(sorted(r["memory"] for r in diet["results"]))
first = added["results"][0]["id"]
trace.append(m.update(first, text="I'm vegan and allergic to nuts"))
trace.append(m.get(first)["memory"])
trace.append([(h["event"], h["old_memory"], h["new_memory"]) for h in m.history(first)])
trace.append(m.delete(first))
trace.append(m.get(first))
rest = m.get_all(filters={"user_id": USER})
trace.append(sorted(r["memory"] for r in rest["results"]))
trace.append(m.delete_all(user_id=USER))
'''


def test_a_mem0_script_runs_unchanged_but_the_import(shared_dsn: str, home: Path) -> None:
    traces = {}
    for name, source in (
        ("mem0", MEM0_SCRIPT),
        ("pgmem", MEM0_SCRIPT.replace("from mem0 import", "from pgmem.compat.mem0 import")),
    ):
        assert source.count("import") == 1
        prepare_mem0(home)
        trace: list[Any] = []
        namespace = {"CONFIG": mem0_config(shared_dsn, "script", home),
                     "USER": f"script-{name}", "trace": trace}
        exec(compile(source, f"<{name} script>", "exec"), namespace)  # noqa: S102
        namespace["m"].close()
        traces[name] = trace
    assert traces["pgmem"] == traces["mem0"]
    assert traces["pgmem"][0] == ["Got it: no meat, no nuts", "I'm vegetarian and allergic to nuts"]


# -- one config, both ways ---------------------------------------------------------------------


@pytest.fixture
def configured(
    shared_dsn: str, home: Path, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> Iterator[Any]:
    """``make(collection, **vector_store_config)``: real Mem0 and pgmem.compat.mem0, each made by
    ``from_config`` from the same Mem0 config (pgmem's models passed in its "pgmem" section)."""
    made: list[Any] = []

    def make(
        collection: str, pgmem_options: dict[str, Any] | None = None, **store: Any
    ) -> tuple[Any, compat.Memory]:
        prepare_mem0(home)
        from mem0 import Memory as Mem0Memory

        config = mem0_config(shared_dsn, collection, home)
        config["vector_store"]["config"].update(store)
        config["vector_store"]["config"] = {
            k: v for k, v in config["vector_store"]["config"].items() if v is not None
        }
        pair = (Mem0Memory.from_config(config),
                compat.Memory.from_config({**config, "pgmem": {
                    "embedder": embedder, "nlp": analyzer, **(pgmem_options or {})}}))
        made.extend(pair)
        return pair

    yield make
    for mem in made:
        mem.close()


def test_wildcard_scope_ids(configured: Any) -> None:
    """{"run_id": "*"}: any run, but one; {"user_id": "*"}: every memory that has a user."""
    real, ours = configured(f"wild_{uuid.uuid4().hex[:8]}")
    found: dict[str, dict[str, Any]] = {}
    for name, mem in both(real, ours):
        mem.add("Alice likes green tea", user_id="alice", infer=False)
        mem.add("Alice drank tea in run one", user_id="alice", run_id="r1", infer=False)
        mem.add("Alice spilled tea in run two", user_id="alice", run_id="r2", infer=False)
        mem.add("Bob likes black tea", user_id="bob", infer=False)
        mem.add("The tea agent's note", agent_id="tea-bot", infer=False)
        found[name] = {
            "runs": mem.search("tea", filters={"user_id": "alice", "run_id": "*"},
                               threshold=0.0)["results"],
            "users": mem.search("tea", filters={"user_id": "*"}, threshold=0.0)["results"],
            "listed": mem.get_all(filters={"user_id": "*", "run_id": "*"})["results"],
            "agents": mem.get_all(filters={"agent_id": "*"})["results"],
        }
    texts = {name: {key: {r["memory"] for r in rows} for key, rows in result.items()}
             for name, result in found.items()}
    assert texts["pgmem"] == texts["mem0"]
    assert texts["pgmem"]["runs"] == {"Alice drank tea in run one", "Alice spilled tea in run two"}
    assert texts["pgmem"]["users"] == {"Alice likes green tea", "Alice drank tea in run one",
                                       "Alice spilled tea in run two", "Bob likes black tea"}
    assert texts["pgmem"]["listed"] == texts["pgmem"]["runs"]
    assert texts["pgmem"]["agents"] == {"The tea agent's note"}
    # delete_all's keyword ids: Mem0 reads "*" as any run; pgmem as the run named "*" (a
    # keyword id is a literal name: documented).
    real.delete_all(user_id="alice", run_id="*")
    ours.delete_all(user_id="alice", run_id="*")
    left = {name: {r["memory"] for r in mem.get_all(filters={"user_id": "alice"})["results"]}
            for name, mem in both(real, ours)}
    assert left["mem0"] == {"Alice likes green tea"}
    assert left["pgmem"] == texts["pgmem"]["runs"] | {"Alice likes green tea"}
    assert ours.memory.get_all(user_id="*").items == ()  # pgmem's own API: "*" is a name


def test_collections_are_kept_apart(configured: Any) -> None:
    """Two configs on one database with different collection_name: B sees none of A's
    memories and B's reset() leaves A's alone (pgmem: a collection is a tenant)."""
    tag = uuid.uuid4().hex[:8]
    real_a, ours_a = configured(f"tenant_a_{tag}")
    real_b, ours_b = configured(f"tenant_b_{tag}")
    seen = {}
    for name, (a, b) in (("mem0", (real_a, real_b)), ("pgmem", (ours_a, ours_b))):
        a.add("A's private note", user_id="shared-user", infer=False)
        b.add("B's own note", user_id="shared-user", infer=False)
        listed_by_b = b.get_all(filters={"user_id": "shared-user"})["results"]
        found_by_b = b.search("private note", filters={"user_id": "shared-user"},
                              threshold=0.0)["results"]
        b.reset()
        seen[name] = (
            {r["memory"] for r in listed_by_b}, {r["memory"] for r in found_by_b},
            b.get_all(filters={"user_id": "shared-user"})["results"],
            {r["memory"] for r in a.get_all(filters={"user_id": "shared-user"})["results"]},
        )
    assert seen["pgmem"] == seen["mem0"] == ({"B's own note"}, {"B's own note"}, [],
                                             {"A's private note"})
    assert ours_a.memory.tenant == f"tenant_a_{tag}"


def test_from_config_fills_what_mem0_fills(configured: Any, server_dsn: str) -> None:
    """Mem0's documented pgvector fields without dbname: Mem0 connects to database postgres,
    and so does pgmem (not to a database named after the user)."""
    parts = conninfo_to_dict(server_dsn)
    fields = {"connection_string": None, "host": parts.get("host") or "localhost",
              "port": int(parts.get("port") or 5432), "user": parts.get("user") or "postgres",
              "password": parts.get("password") or "unused"}
    collection = f"nodb_{uuid.uuid4().hex[:8]}"
    schema = f"pgmem_{collection}"
    try:
        real, ours = configured(collection, {"schema": schema}, **fields)
        for name, mem in both(real, ours):
            mem.add("stored in database postgres", user_id="dora", infer=False)
            rows = mem.get_all(filters={"user_id": "dora"})["results"]
            assert [r["memory"] for r in rows] == ["stored in database postgres"], name
        postgres = make_conninfo(server_dsn, dbname="postgres")
        with psycopg.connect(postgres) as conn:
            assert conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                (f"public.{collection}",)).fetchone() == (True,)
            assert conn.execute(
                sql.SQL("SELECT count(*) FROM {}.memories WHERE tenant = %s").format(
                    sql.Identifier(schema)), (collection,)).fetchone() == (1,)
    finally:
        with psycopg.connect(make_conninfo(server_dsn, dbname="postgres"),
                             autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(collection)))
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(schema)))


# -- AsyncMemory -------------------------------------------------------------------------------


def test_async_memory_has_the_sync_ones_methods() -> None:
    """One set of calls: the two facades' Mem0 methods take the same arguments, and
    AsyncMemory's are coroutines, as mem0.AsyncMemory's."""
    require_mem0()
    import inspect

    import mem0

    names = ["add", "search", "get", "get_all", "update", "delete", "delete_all", "history",
             "reset"]
    for name in names:
        sync_method, async_method = getattr(compat.Memory, name), getattr(compat.AsyncMemory, name)
        assert inspect.signature(sync_method) == inspect.signature(async_method), name
        assert inspect.iscoroutinefunction(async_method), name
        assert inspect.iscoroutinefunction(getattr(mem0.AsyncMemory, name)), name
        theirs = set(inspect.signature(getattr(mem0.Memory, name)).parameters) - {"kwargs"}
        assert theirs <= set(inspect.signature(sync_method).parameters), name


ASYNC_SCRIPT = '''
async def script(m):
    added = await m.add([{"role": "user", "content": "I'm vegetarian"},
                         {"role": "assistant", "content": "Noted: no meat", "name": "chef"}],
                        user_id=USER, metadata={"category": "diet"}, infer=False)
    await m.add("I play the cello on Sundays", user_id=USER, run_id="r1", infer=False)
    first = added["results"][0]["id"]
    trace.append(sorted((r["memory"], r["role"], r["actor_id"]) for r in added["results"]))
    hits = await m.search("what can I eat?", filters={"user_id": USER, "category": "diet"})
    trace.append(sorted(r["memory"] for r in hits["results"]))
    runs = await m.search("music", filters={"user_id": USER, "run_id": "*"}, threshold=0.0)
    trace.append([r["memory"] for r in runs["results"]])
    trace.append(await m.update(first, text="I'm vegan"))
    trace.append((await m.get(first))["memory"])
    trace.append([(h["event"], h["old_memory"], h["new_memory"]) for h in await m.history(first)])
    trace.append(await m.delete(first))
    trace.append(await m.get(first))
    rest = await m.get_all(filters={"user_id": USER})
    trace.append(sorted(r["memory"] for r in rest["results"]))
    trace.append(await m.delete_all(user_id=USER))
    trace.append((await m.get_all(filters={"user_id": USER}))["results"])
    try:
        await m.delete(first)
    except ValueError:
        trace.append("not found")
'''


def test_a_mem0_async_script_runs_unchanged_but_the_import(shared_dsn: str, home: Path) -> None:
    import asyncio

    traces = {}
    for name, module in (("mem0", "mem0"), ("pgmem", "pgmem.compat.mem0")):
        prepare_mem0(home)
        trace: list[Any] = []
        namespace = {"USER": f"async-{name}", "trace": trace}
        exec(compile(ASYNC_SCRIPT, f"<{name} async script>", "exec"), namespace)  # noqa: S102
        memory_class = __import__(module, fromlist=["AsyncMemory"]).AsyncMemory
        mem = memory_class.from_config(mem0_config(shared_dsn, "async_script", home))

        async def main(mem: Any = mem, script: Any = namespace["script"]) -> None:
            async with mem:
                await script(mem)

        asyncio.run(main())
        traces[name] = trace
    assert traces["pgmem"] == traces["mem0"]
    assert traces["pgmem"][2] == ["I play the cello on Sundays"]
    assert traces["pgmem"][-1] == "not found"


# -- filters, scope ids and errors as Mem0 means them, sync and async --------------------------


async def _call(mem: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``mem.name(*args, **kwargs)``, awaited when the door is AsyncMemory."""
    import inspect

    result = getattr(mem, name)(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


async def _meanings(mem: Any, user: str) -> dict[str, Any]:
    """What a door answers to the calls whose meaning Mem0 2.2.1 fixes (the same calls on
    mem0.Memory, compat.Memory and compat.AsyncMemory)."""
    seen: dict[str, Any] = {}
    url = {"source.url": "https://x.example/a"}
    pasta = (await _call(mem, "add", "I cook pasta", user_id=user, infer=False, metadata={
        **url, "tags": ["italian", "pasta"], "rating": 5}))["results"][0]["id"]
    await _call(mem, "add", "I cook rice", user_id=user, infer=False,
                metadata={"tags": ["asian"], "rating": 3})
    for label, condition in (
        ("dotted", url), ("icontains list", {"tags": {"icontains": "ITALIAN"}}),
        ("contains list", {"tags": {"contains": "ital"}}),
        ("contains number", {"rating": {"contains": "5"}}),
        ("contains quote", {"tags": {"contains": '"asian"'}}),
    ):
        hits = await _call(mem, "search", "cooking", filters={"user_id": user, **condition},
                           threshold=0.0)
        seen[label] = sorted(r["memory"] for r in hits["results"])
    listed = await _call(mem, "get_all", filters={"user_id": user, **url})
    seen["dotted get_all"] = [r["memory"] for r in listed["results"]]
    await _call(mem, "update", pasta, expiration_date="2999-01-01")
    await _call(mem, "update", pasta, expiration_date=None)
    kept = await _call(mem, "get", pasta)
    seen["expiry cleared"] = ("expiration_date" in kept, kept.get("expiration_date"))
    for label, condition in (("NOT dict", {"NOT": {"rating": 5}}), ("OR dict", {"OR": {}}),
                             ("AND dict", {"AND": {"rating": 5}})):
        with pytest.raises(ValueError) as refused:
            await _call(mem, "search", "x", filters={"user_id": user, **condition})
        seen[label] = str(refused.value)
    missing = str(uuid.uuid4())
    for name in ("update", "delete"):
        with pytest.raises(ValueError) as not_found:
            await _call(mem, name, missing, *(["new text"] if name == "update" else []))
        seen[f"{name} missing"] = str(not_found.value).replace(missing, "<id>")
    for label, args, kwargs in (
        ("no scope", ("x",), {}), ("bad messages", (42,), {"user_id": user}),
        ("bad memory_type", ("x",), {"user_id": user, "memory_type": "episodic"}),
    ):
        with pytest.raises(Exception) as invalid:
            await _call(mem, "add", *args, infer=False, **kwargs)
        seen[label] = (type(invalid.value).__name__, isinstance(invalid.value, ValueError),
                       str(invalid.value))
    return seen


MEANINGS = {
    "dotted": ["I cook pasta"], "dotted get_all": ["I cook pasta"],
    "icontains list": ["I cook pasta"], "contains list": ["I cook pasta"],
    "contains number": ["I cook pasta"], "contains quote": ["I cook rice"],
    "expiry cleared": (True, None),
    "NOT dict": "NOT operator requires a non-empty list of conditions",
    "OR dict": "OR operator requires a non-empty list of conditions",
    "AND dict": "AND operator requires a list of conditions",
    "update missing": "Memory with id <id> not found. Please provide a valid 'memory_id'",
    "delete missing": "Memory with id <id> not found",
    "no scope": ("ValidationError", False,
                 "At least one of 'user_id', 'agent_id', or 'run_id' must be provided."),
    "bad messages": ("ValidationError", False, "messages must be str, dict, or list[dict]"),
    "bad memory_type": ("ValidationError", False, (
        "Invalid 'memory_type'. Please pass procedural_memory to create procedural memories.")),
}


def test_filters_scopes_and_errors_mean_what_mem0s_mean(
    real: Any, ours: compat.Memory, shared_dsn: str,
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    """Dotted metadata keys, contains / icontains on lists and numbers, update(...,
    expiration_date=None), NOT / OR / AND not given a list, a missing id's message, Mem0's
    ValidationError cases: Mem0's answers, from compat.Memory and compat.AsyncMemory."""
    import asyncio

    async def through_async(user: str) -> dict[str, Any]:
        async with compat.AsyncMemory(shared_dsn, embedder=embedder, nlp=analyzer) as mem:
            return await _meanings(mem, user)

    answers = {
        "mem0": asyncio.run(_meanings(real, f"m{uuid.uuid4().hex[:8]}")),
        "pgmem": asyncio.run(_meanings(ours, f"p{uuid.uuid4().hex[:8]}")),
        "pgmem async": asyncio.run(through_async(f"a{uuid.uuid4().hex[:8]}")),
    }
    assert answers["mem0"] == MEANINGS
    assert answers["pgmem"] == answers["pgmem async"] == MEANINGS
    from mem0.exceptions import ValidationError as Mem0ValidationError

    assert not issubclass(Mem0ValidationError, ValueError)  # the class pgmem's lines up with


async def _star_user(mem: Any) -> dict[str, Any]:
    """A user named "*" through the keyword form: a name, never "every user"."""
    tag = uuid.uuid4().hex[:6]
    await _call(mem, "add", f"star's note {tag}", user_id="*", infer=False)
    await _call(mem, "add", f"bob's note {tag}", user_id=f"bob{tag}", infer=False)
    found = await _call(mem, "search", f"note {tag}", user_id=" * ", threshold=0.0)
    listed = await _call(mem, "get_all", user_id="*")
    with pytest.raises(pgmem.InvalidInputError):  # "*" the name against "*" any user
        await _call(mem, "get_all", user_id="*", filters={"user_id": "*"})
    everyone = await _call(mem, "get_all", filters={"user_id": "*"}, top_k=1000)
    await _call(mem, "delete_all", user_id="*")
    after = await _call(mem, "get_all", filters={"user_id": "*"}, top_k=1000)
    return {
        "search": {r["memory"] for r in found["results"] if tag in r["memory"]},
        "get_all": {r["memory"] for r in listed["results"] if tag in r["memory"]},
        "wildcard in filters": {r["memory"] for r in everyone["results"] if tag in r["memory"]},
        "after delete_all": {r["memory"] for r in after["results"] if tag in r["memory"]},
        "user ids": {r["user_id"] for r in listed["results"]},
    }


def test_a_keyword_scope_id_is_a_literal_name(
    real: Any, ours: compat.Memory, shared_dsn: str,
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    """search / get_all / delete_all with user_id="*" (or " * ") as a keyword: the user named
    "*", not every user (Mem0 2.2.1 refuses the keyword form of search and get_all); the
    wildcard stays in filters."""
    import asyncio

    with pytest.raises(ValueError, match="Top-level entity parameters"):
        real.search("x", user_id="*")

    async def through_async() -> dict[str, Any]:
        async with compat.AsyncMemory(shared_dsn, embedder=embedder, nlp=analyzer,
                                      tenant="stars") as mem:
            return await _star_user(mem)

    with compat.Memory(shared_dsn, embedder=embedder, nlp=analyzer, tenant="stars") as mem:
        blocking = asyncio.run(_star_user(mem))
    for seen in (blocking, asyncio.run(through_async())):
        (star,) = seen["search"]
        assert star.startswith("star's note")
        assert seen["get_all"] == seen["search"] and seen["user ids"] == {"*"}
        assert len(seen["wildcard in filters"]) == 2  # "*" in filters: every user
        assert len(seen["after delete_all"]) == 1 and not next(
            iter(seen["after delete_all"])).startswith("star")


def test_nested_nots_end_in_a_filter_limit_error(
    ours: compat.Memory, user: str, shared_dsn: str,
    embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    """About 400 nested NOTs: FilterLimitError (a FilterError, a ValueError), no
    RecursionError, from the sync and the async door."""
    import asyncio

    deep: dict[str, Any] = {"rating": 5}
    for _ in range(400):
        deep = {"NOT": [deep]}
    filters = {"user_id": user, **deep}
    for call in (lambda: ours.search("x", filters=filters),
                 lambda: ours.get_all(filters=filters)):
        with pytest.raises(pgmem.FilterLimitError, match="32 levels"):
            call()

    async def through_async() -> None:
        async with compat.AsyncMemory(shared_dsn, embedder=embedder, nlp=analyzer) as mem:
            for name in ("search", "get_all"):
                with pytest.raises(pgmem.FilterLimitError, match="32 levels"):
                    await _call(mem, name, *(["x"] if name == "search" else []),
                                filters=filters)

    asyncio.run(through_async())


def test_get_all_lists_the_oldest_first(ours: compat.Memory, user: str) -> None:
    """pgmem's order (documented): created_at, then id -- an update does not move a memory, so
    get_all(top_k=2) keeps returning the two oldest."""
    ids = [ours.add(f"note {n}", user_id=user, infer=False)["results"][0]["id"]
           for n in range(3)]
    ours.update(ids[0], "note zero, updated")
    first = ours.get_all(filters={"user_id": user}, top_k=2)["results"]
    assert [r["id"] for r in first] == ids[:2]
