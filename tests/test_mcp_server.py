"""``pgmem mcp``: the MCP server driven through the official SDK's own client, against
PostgreSQL -- in-process, over streamable HTTP and over stdio."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import psycopg
import pytest

if not os.environ.get("CI"):  # CI installs the mcp extra: there, a missing SDK fails
    pytest.importorskip("mcp")

from mcp import Client
from mcp.client.stdio import StdioServerParameters

import pgmem
from pgmem.mcp_server import create_server
from tests.citus_support import LOG_REMOTE_COMMANDS, RemoteLog
from tests.test_citus import one_round_on, tenant_node

TOOLS = {"add", "search", "get", "list", "update", "delete", "history"}
Scenario = Callable[[Client, pgmem.AsyncMemory], Awaitable[None]]


def run(
    db_dsn: str,
    embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
    scenario: Scenario,
    **pinned: str,
) -> None:
    """``scenario(client, memory)`` with a client connected in-process to a fresh server."""

    async def main() -> None:
        async with pgmem.AsyncMemory(db_dsn, embedder=embedder, nlp=analyzer) as memory:
            server = create_server(memory, **pinned)
            async with Client(server) as client:
                await scenario(client, memory)

    anyio.run(main)


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result; fails the test on a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def fails(client: Client, tool: str, **arguments: Any) -> str:
    """A tool error's text; fails the test when the call succeeds."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(getattr(block, "text", "") for block in result.content)


@pytest.mark.also_on_citus
def test_every_tool(db_dsn: str, embedder: Any, analyzer: Any) -> None:
    async def scenario(client: Client, memory: pgmem.AsyncMemory) -> None:
        listed = await client.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS
        for tool in listed.tools:
            assert {"user_id", "agent_id", "run_id"} <= tool.input_schema["properties"].keys()
            assert tool.description
        added = await call(client, "add", text="Ana is allergic to penicillin", user_id="ben",
                           metadata={"topic": "health"})
        assert added["user_id"] == "ben" and added["duplicate"] is False
        await call(client, "add", text="Ben's garage reference is 88417", user_id="ben")
        again = await call(client, "add", text="Ana is allergic to penicillin", user_id="ben")
        assert again["duplicate"] is True and again["id"] == added["id"]

        found = await call(client, "search", query="What medication could harm Ana?",
                           user_id="ben", limit=1)
        (hit,) = found["results"]
        assert hit["id"] == added["id"]
        assert {"semantic", "keyword_raw", "keyword", "entity", "max_possible", "score",
                "legs", "entity_hits"} <= hit["explain"].keys()
        assert hit["score"] == pytest.approx(hit["explain"]["score"])
        filtered = await call(client, "search", query="Ana penicillin", user_id="ben",
                              filters={"topic": "health"}, threshold=0.0)
        assert [r["id"] for r in filtered["results"]] == [added["id"]]

        got = await call(client, "get", memory_id=added["id"], user_id="ben")
        assert got["text"] == "Ana is allergic to penicillin"
        assert got["metadata"] == {"topic": "health"}
        page = await call(client, "list", user_id="ben", limit=1)
        assert [m["id"] for m in page["memories"]] == [added["id"]]
        rest = await call(client, "list", user_id="ben", cursor=page["next_cursor"])
        assert [m["text"] for m in rest["memories"]] == ["Ben's garage reference is 88417"]
        assert rest["next_cursor"] is None

        changed = await call(client, "update", memory_id=added["id"], user_id="ben",
                             text="Ana is allergic to penicillin and amoxicillin")
        assert changed["text"].endswith("amoxicillin")
        events = await call(client, "history", memory_id=added["id"], user_id="ben")
        assert [e["event"] for e in events["events"]] == ["ADD", "UPDATE"]
        assert events["events"][1]["old_text"] == "Ana is allergic to penicillin"

        assert await call(client, "delete", memory_id=added["id"], user_id="ben") == {
            "deleted": added["id"]
        }
        assert "no memory" in await fails(client, "get", memory_id=added["id"], user_id="ben")
        with pytest.raises(pgmem.NotFoundError):
            await memory.get(added["id"])

    run(db_dsn, embedder, analyzer, scenario)


@pytest.mark.also_on_citus
def test_bad_arguments_are_tool_errors(db_dsn: str, embedder: Any, analyzer: Any) -> None:
    async def scenario(client: Client, memory: pgmem.AsyncMemory) -> None:
        assert "user_id" in await fails(client, "add", text="no scope")
        assert await fails(client, "add", user_id="ben")  # no text
        assert await fails(client, "add", text="   ", user_id="ben")
        assert await fails(client, "add", text="x", user_id="ben", metadata="not a dict")
        assert await fails(client, "search", query="x", user_id="ben", limit="many")
        assert "limit" in await fails(client, "search", query="x", user_id="ben", limit=0)
        assert "threshold" in await fails(client, "search", query="x", user_id="ben",
                                          threshold=7)
        assert "filter" in await fails(client, "search", query="x", user_id="ben",
                                       filters={"rating": {"between": [1, 2]}})
        assert "UUID" in await fails(client, "get", memory_id="not-an-id", user_id="ben")
        assert "cursor" in await fails(client, "list", user_id="ben", cursor="garbage")
        assert await fails(client, "update", memory_id="not-an-id", user_id="ben", text="x")
        # The server is still up, and nothing was written.
        assert (await call(client, "list", user_id="ben"))["memories"] == []
        assert (await memory.get_all(user_id="ben")).items == ()

    run(db_dsn, embedder, analyzer, scenario)


@pytest.mark.also_on_citus
def test_no_call_reaches_another_scope(db_dsn: str, embedder: Any, analyzer: Any) -> None:
    async def scenario(client: Client, memory: pgmem.AsyncMemory) -> None:
        alice = await call(client, "add", text="Alice's PIN is 4921", user_id="alice")
        in_run = await call(client, "add", text="Alice booked a table", user_id="alice",
                            run_id="r1")
        await call(client, "add", text="Bob likes PIN codes", user_id="bob")
        for tool, extra in (("get", {}), ("update", {"text": "hacked"}), ("delete", {}),
                            ("history", {})):
            message = await fails(client, tool, memory_id=alice["id"], user_id="bob", **extra)
            assert "no memory" in message and "4921" not in message
            assert await fails(client, tool, memory_id=in_run["id"], user_id="alice",
                               run_id="r2", **extra)
        hits = await call(client, "search", query="PIN", user_id="bob", threshold=0.0)
        assert {h["user_id"] for h in hits["results"]} == {"bob"}
        listed = await call(client, "list", user_id="bob")
        assert [m["user_id"] for m in listed["memories"]] == ["bob"]
        run_only = await call(client, "list", user_id="alice", run_id="r1")
        assert [m["id"] for m in run_only["memories"]] == [in_run["id"]]
        # The wider scope reaches the narrower one, as search does.
        assert (await call(client, "get", memory_id=in_run["id"], user_id="alice"))["run_id"]
        assert (await memory.get(alice["id"])).text == "Alice's PIN is 4921"

    run(db_dsn, embedder, analyzer, scenario)


@pytest.mark.also_on_citus
def test_a_pinned_server_serves_its_scope_only(
    db_dsn: str, embedder: Any, analyzer: Any
) -> None:
    async def seed(client: Client, memory: pgmem.AsyncMemory) -> None:
        await memory.add("Bob's secret is 1234", user_id="bob")

    run(db_dsn, embedder, analyzer, seed)

    async def scenario(client: Client, memory: pgmem.AsyncMemory) -> None:
        mine = await call(client, "add", text="Alice likes jazz")  # the pinned user
        assert mine["user_id"] == "alice"
        assert await call(client, "get", memory_id=mine["id"], user_id="alice")
        assert "alice" in await fails(client, "search", query="secret", user_id="bob")
        bob = (await memory.get_all(user_id="bob")).items[0]
        assert "no memory" in await fails(client, "get", memory_id=str(bob.id))
        assert await fails(client, "delete", memory_id=str(bob.id))
        hits = await call(client, "search", query="secret", threshold=0.0)
        assert {h["user_id"] for h in hits["results"]} == {"alice"}

    run(db_dsn, embedder, analyzer, scenario, user_id="alice")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_streamable_http(db_dsn: str, embedder: Any, analyzer: Any) -> None:
    port = _free_port()

    async def main() -> None:
        async with pgmem.AsyncMemory(db_dsn, embedder=embedder, nlp=analyzer) as memory:
            server = create_server(memory, agent_id="shared-bot")
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(lambda: server.run_streamable_http_async(port=port))
                with anyio.fail_after(30):
                    while True:
                        try:
                            await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                            break
                        except OSError:
                            await anyio.sleep(0.1)
                url = f"http://127.0.0.1:{port}/mcp"
                async with Client(url) as first, Client(url) as second:
                    added = await call(first, "add", text="The staging database is db-7")
                    hits = await call(second, "search", query="which database is staging?")
                    assert [h["id"] for h in hits["results"]] == [added["id"]]
                tasks.cancel_scope.cancel()

    anyio.run(main)


@pytest.mark.also_on_citus
def test_stdio_through_the_cli(db_dsn: str) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pgmem.cli", "mcp", "--dsn", db_dsn, "--user", "dana"],
        env={**os.environ, "PGMEM_SPACY_MODEL": "blank"},
    )

    async def main() -> None:
        with anyio.fail_after(180):
            async with Client(params) as client:
                tools = await client.list_tools()
                assert {t.name for t in tools.tools} == TOOLS
                added = await call(client, "add", text="Dana's flight lands at 9:40")
                assert added["user_id"] == "dana"
                hits = await call(client, "search", query="when does the flight land?")
                assert [h["id"] for h in hits["results"]] == [added["id"]]
                assert await fails(client, "list", user_id="someone-else")

    anyio.run(main)


def test_deep_metadata_and_huge_filters_are_tool_errors_naming_the_limit(
    db_dsn: str, embedder: Any, analyzer: Any
) -> None:
    async def scenario(client: Client, memory: pgmem.AsyncMemory) -> None:
        kept = await call(client, "add", text="Ana keeps a shallow note", user_id="ben")
        deep: dict[str, Any] = {"leaf": 1}
        for _ in range(40):  # past the limit of 32 (the SDK's client sends at most ~250)
            deep = {"k": deep}
        assert "max_metadata_depth" in await fails(
            client, "add", text="Ana hides a deep note", user_id="ben", metadata=deep)
        huge = {"OR": [{"k": i} for i in range(100_000)]}
        assert "max_filter_bytes" in await fails(client, "list", user_id="ben", filters=huge)
        listed = await call(client, "list", user_id="ben")  # the scope's reads keep working
        assert [m["id"] for m in listed["memories"]] == [kept["id"]]

    run(db_dsn, embedder, analyzer, scenario)


@pytest.mark.citus
def test_every_tool_is_routed_to_the_tenants_worker_on_citus(
    citus_dsn: str, citus_schema: str, embedder: Any, analyzer: Any
) -> None:
    """The tools of a server on a distributed schema (an AsyncMemory of tenant ``acme`` on one
    connection whose remote commands are logged): each call reads or writes on the worker
    holding the tenant only, without two-phase commit, and another tenant's memories stay out
    of reach."""
    node = tenant_node(citus_dsn, citus_schema, "acme")
    log = RemoteLog(citus_dsn)

    async def main() -> None:
        async with pgmem.AsyncMemory(citus_dsn, embedder=embedder, nlp=analyzer,
                                     schema=citus_schema, tenant="other") as other:
            theirs = await other.add("Ana's locker code is 5512", user_id="ben")
        conn = await psycopg.AsyncConnection.connect(citus_dsn, autocommit=True)
        log.listen(conn)
        await conn.execute(LOG_REMOTE_COMMANDS)
        try:
            memory = pgmem.AsyncMemory(conn, embedder=embedder, nlp=analyzer,
                                       schema=citus_schema, tenant="acme")
            async with memory, Client(create_server(memory)) as client:
                await scenario(client)
                assert "no memory" in await fails(client, "get", memory_id=str(theirs.id),
                                                  user_id="ben")
        finally:
            await conn.close()

    async def scenario(client: Client) -> None:
        log.clear()
        added = await call(client, "add", text="Ana is allergic to penicillin", user_id="ben",
                           metadata={"topic": "health"})
        one_round_on(log, node)
        await call(client, "add", text="Ben's garage reference is 88417", user_id="ben")
        one_round_on(log, node)
        found = await call(client, "search", query="What medication could harm Ana?",
                           user_id="ben", limit=1)
        assert [h["id"] for h in found["results"]] == [added["id"]]
        one_round_on(log, node)
        filtered = await call(client, "search", query="Ana penicillin", user_id="ben",
                              filters={"topic": "health"}, threshold=0.0)
        assert [h["id"] for h in filtered["results"]] == [added["id"]]
        one_round_on(log, node)
        assert (await call(client, "get", memory_id=added["id"], user_id="ben"))["text"] == (
            "Ana is allergic to penicillin")
        one_round_on(log, node)
        page = await call(client, "list", user_id="ben", limit=1)
        rest = await call(client, "list", user_id="ben", cursor=page["next_cursor"])
        assert [m["text"] for m in page["memories"] + rest["memories"]] == [
            "Ana is allergic to penicillin", "Ben's garage reference is 88417"]
        one_round_on(log, node)
        changed = await call(client, "update", memory_id=added["id"], user_id="ben",
                             text="Ana is allergic to penicillin and amoxicillin")
        assert changed["text"].endswith("amoxicillin")
        one_round_on(log, node)
        events = await call(client, "history", memory_id=added["id"], user_id="ben")
        assert [e["event"] for e in events["events"]] == ["ADD", "UPDATE"]
        one_round_on(log, node)
        assert await call(client, "delete", memory_id=added["id"], user_id="ben") == {
            "deleted": added["id"]}
        one_round_on(log, node)
        assert "no memory" in await fails(client, "get", memory_id=added["id"], user_id="ben")
        assert [m["text"] for m in (await call(client, "list", user_id="ben"))["memories"]] == [
            "Ben's garage reference is 88417"]
        one_round_on(log, node)

    try:
        anyio.run(main)
    finally:
        log.close()
