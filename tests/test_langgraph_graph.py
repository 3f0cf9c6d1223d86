"""A LangGraph graph compiled with store=PgmemStore(...): its nodes write and read long-term
memories through the store, sync and async, and through LangMem's memory tools."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph")

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from pgmem.langgraph import PgmemStore

CONVERSATION = [
    "I adopted a border collie named Biscuit last spring.",
    "My sister Ana lives in Lisbon and teaches chemistry.",
    "I am training for the Berlin marathon in September.",
]


class State(TypedDict, total=False):
    user: str
    message: str
    recalled: list[str]


@pytest.fixture
def store(db_dsn: str, embedder: Any, analyzer: Any) -> Iterator[PgmemStore]:
    with PgmemStore(
        db_dsn, index={"dims": 384, "fields": ["text"]}, embedder=embedder, nlp=analyzer
    ) as s:
        yield s


def remember(state: State, *, store: BaseStore) -> State:
    """Recall what the user said before that bears on the message, then remember it."""
    namespace = ("memories", state["user"])
    found = store.search(namespace, query=state["message"], limit=2)
    store.put(namespace, str(uuid.uuid4()), {"text": state["message"]})
    return {"recalled": [item.value["text"] for item in found]}


async def aremember(state: State, *, store: BaseStore) -> State:
    namespace = ("memories", state["user"])
    found = await store.asearch(namespace, query=state["message"], limit=2)
    await store.aput(namespace, str(uuid.uuid4()), {"text": state["message"]})
    return {"recalled": [item.value["text"] for item in found]}


def graph_of(node: Any, store: PgmemStore) -> Any:
    builder = StateGraph(State)
    builder.add_node("remember", node)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    return builder.compile(store=store)


def test_a_graph_remembers_across_runs_through_the_store(store: PgmemStore) -> None:
    graph = graph_of(remember, store)
    for message in CONVERSATION:
        graph.invoke({"user": "u1", "message": message})
    graph.invoke({"user": "u2", "message": "My dog is called Rex."})
    out = graph.invoke({"user": "u1", "message": "What is the name of my dog?"})
    assert out["recalled"][0] == CONVERSATION[0]
    out = graph.invoke({"user": "u1", "message": "Which city does Ana live in?"})
    assert out["recalled"][0] == CONVERSATION[1]
    assert len(store.search(("memories", "u1"), limit=100)) == 5
    assert store.list_namespaces(prefix=("memories",)) == [("memories", "u1"), ("memories", "u2")]


def test_an_async_graph_remembers_through_the_store(store: PgmemStore) -> None:
    graph = graph_of(aremember, store)

    async def conversation() -> list[Any]:
        await asyncio.gather(*[
            graph.ainvoke({"user": f"user{n}", "message": message})
            for n in range(3) for message in CONVERSATION
        ])
        return await asyncio.gather(*[
            graph.ainvoke({"user": f"user{n}", "message": "When is my marathon?"})
            for n in range(3)
        ])

    for out in asyncio.run(conversation()):
        assert out["recalled"][0] == CONVERSATION[2]
    assert len(store.list_namespaces(prefix=("memories",))) == 3


def test_langmems_memory_tools_work_on_the_store(
    db_dsn: str, embedder: Any, analyzer: Any
) -> None:
    langmem = pytest.importorskip("langmem")
    # LangMem's values are {"content": ...}: index the whole value (fields default to "$").
    store = PgmemStore(db_dsn, index={"dims": 384}, embedder=embedder, nlp=analyzer)
    manage = langmem.create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    search = langmem.create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"))

    def tools(state: State) -> State:
        if state["message"].startswith("remember: "):
            manage.invoke({"content": state["message"].removeprefix("remember: "),
                           "action": "create"})
            return {"recalled": []}
        found = json.loads(search.invoke({"query": state["message"], "limit": 2}))
        return {"recalled": [item["value"]["content"] for item in found]}

    graph = graph_of(tools, store)
    config = {"configurable": {"langgraph_user_id": "u7"}}
    for message in CONVERSATION:
        graph.invoke({"user": "u7", "message": f"remember: {message}"}, config)
    out = graph.invoke({"user": "u7", "message": "Who teaches chemistry?"}, config)
    assert out["recalled"][0] == CONVERSATION[1]
    (item,) = [i for i in store.search(("memories", "u7"), limit=10)
               if i.value["content"] == CONVERSATION[1]]
    assert item.namespace == ("memories", "u7")
    store.close()
