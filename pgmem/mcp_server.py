"""pgmem as a Model Context Protocol server (``pgmem mcp``), on the official ``mcp`` SDK.

Tools: ``add``, ``search`` (each hit with its score breakdown), ``get``, ``list``, ``update``,
``delete`` and ``history`` of memories. Every tool takes ``user_id`` / ``agent_id`` / ``run_id``;
a server started with some of them (``pgmem mcp --user alice``) pins those: a call may repeat
them but not change them. A tool that names a memory by id reaches it only when the memory is
in the call's scope (its scope ids equal the call's); otherwise the memory does not exist for
the call. Bad arguments and pgmem's errors come back as tool errors (``isError``), never as a
crash of the server.

One :class:`pgmem.AsyncMemory`, and its connection pool, serves the whole process:
:func:`create_server` takes it, :func:`serve` makes it from a DSN and closes it at the end.
Transports: stdio (an agent starts the server as a subprocess) and streamable HTTP (one server
shared by several agents, ``/mcp`` on ``host:port``).

Needs the ``mcp`` extra: ``pip install 'pgmem[mcp]'``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from pgmem.aio import AsyncMemory
from pgmem.errors import PgmemError, ScopeError
from pgmem.results import AddResult, HistoryEvent, MemoryRecord, SearchHit, jsonable

__all__ = ["SCOPE_KEYS", "create_server", "serve"]

logger = logging.getLogger(__name__)

SCOPE_KEYS = ("user_id", "agent_id", "run_id")

INSTRUCTIONS = """\
Long-term memory in PostgreSQL. Store short facts with `add`, find them with `search` \
(hybrid: meaning, keywords and named entities; each hit says how it scored), and keep them \
right with `update`, `delete` and `history`. Every call is scoped by user_id, agent_id and/or \
run_id."""


def create_server(
    memory: AsyncMemory,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    name: str = "pgmem",
) -> MCPServer[Any]:
    """An MCP server whose tools read and write ``memory`` (which the caller owns and closes).
    ``user_id`` / ``agent_id`` / ``run_id`` pin the scope of every call (see the module)."""
    pinned = {k: v for k, v in zip(SCOPE_KEYS, (user_id, agent_id, run_id)) if v is not None}
    server: MCPServer[Any] = MCPServer(name, instructions=INSTRUCTIONS)

    def scope(user_id: str | None, agent_id: str | None, run_id: str | None) -> dict[str, Any]:
        given = dict(zip(SCOPE_KEYS, (user_id, agent_id, run_id)))
        effective = dict(pinned)
        for key, value in given.items():
            if value is None:
                continue
            if key in pinned and pinned[key] != value:
                raise ToolError(
                    f"this server serves {key}={pinned[key]!r} only; {key}={value!r} is refused"
                )
            effective[key] = value
        if not effective:
            raise ToolError(ScopeError().args[0])
        return effective

    @server.tool()
    async def add(
        text: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Store a memory: a short, self-contained fact (e.g. "Ana is allergic to penicillin").
        A text the scope already holds is not stored twice (the result says duplicate)."""
        call_scope = scope(user_id, agent_id, run_id)
        with _tool_errors():
            added = await memory.add(text, **call_scope, metadata=metadata)
        return _record(added)

    @server.tool()
    async def search(
        query: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = 10,
        threshold: float = 0.1,
        filters: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The memories of the scope most relevant to the query, best first. Each hit has its
        score and the breakdown: semantic similarity, keyword score (BM25, raw and
        normalised), entity boost, and the legs that found it. `filters` constrain metadata,
        e.g. {"topic": "work"} or {"rating": {"gte": 4}}."""
        call_scope = scope(user_id, agent_id, run_id)
        with _tool_errors():
            hits = await memory.search(query, **call_scope, limit=limit, threshold=threshold,
                                       filters=filters)
        return {"results": [_hit(hit) for hit in hits]}

    @server.tool()
    async def get(
        memory_id: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """One memory of the scope, by id."""
        call_scope = scope(user_id, agent_id, run_id)
        with _tool_errors():  # a memory of another scope is not found (Memory.get's guard)
            return _record(await memory.get(memory_id, **call_scope))

    @server.tool(name="list")
    async def list_memories(
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        filters: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The scope's memories, oldest first, a page at a time: pass `next_cursor` back as
        `cursor` for the next page (null at the end)."""
        call_scope = scope(user_id, agent_id, run_id)
        with _tool_errors():
            page = await memory.get_all(**call_scope, limit=limit, cursor=cursor,
                                        filters=filters)
        return {"memories": [_record(r) for r in page.items], "next_cursor": page.next_cursor}

    @server.tool()
    async def update(
        memory_id: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Change a memory's text, its metadata (replaced as a whole), or both."""
        call_scope = scope(user_id, agent_id, run_id)
        with _tool_errors():
            return _record(
                await memory.update(memory_id, text=text, metadata=metadata, **call_scope)
            )

    @server.tool()
    async def delete(
        memory_id: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Delete a memory of the scope."""
        call_scope = scope(user_id, agent_id, run_id)
        with _tool_errors():
            await memory.delete(memory_id, **call_scope)
        return {"deleted": memory_id}

    @server.tool()
    async def history(
        memory_id: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """How a memory of the scope came to be: its ADD and UPDATE events, oldest first."""
        call_scope = scope(user_id, agent_id, run_id)
        with _tool_errors():
            events = await memory.history(memory_id, **call_scope)
        return {"memory_id": memory_id, "events": [_event(e) for e in events]}

    return server


def serve(
    memory: AsyncMemory,
    *,
    transport: Literal["stdio", "streamable-http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
) -> None:
    """Serve ``memory`` over ``transport`` until the client goes away (stdio) or the process
    is stopped (HTTP), then close it. The models load before the first request is read."""
    server = create_server(memory, user_id=user_id, agent_id=agent_id, run_id=run_id)

    async def main() -> None:
        try:
            await anyio.to_thread.run_sync(_warm_up, memory)
            if transport == "stdio":
                await server.run_stdio_async()
            else:
                await server.run_streamable_http_async(host=host, port=port)
        finally:
            await memory.close()

    anyio.run(main)


def _warm_up(memory: AsyncMemory) -> None:
    memory.embedder.embed(["warm up"])
    memory.analyzer.analyze("warm up")


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """Turn pgmem's errors into tool errors with their message."""
    try:
        yield
    except PgmemError as exc:
        raise ToolError(str(exc)) from exc


def _scope_of(record: MemoryRecord | SearchHit) -> dict[str, Any]:
    return {k: getattr(record, k) for k in SCOPE_KEYS}


def _record(record: MemoryRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": str(record.id),
        "text": record.text,
        **_scope_of(record),
        "metadata": record.metadata,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
    }
    if isinstance(record, AddResult):
        out["duplicate"] = record.duplicate
    return out


def _hit(hit: SearchHit) -> dict[str, Any]:
    return {
        "id": str(hit.id),
        "text": hit.text,
        "score": hit.score,
        **_scope_of(hit),
        "metadata": hit.metadata,
        "created_at": hit.created_at.isoformat(),
        "explain": jsonable(hit.explain),
    }


def _event(event: HistoryEvent) -> dict[str, Any]:
    return {
        "event": event.event,
        "old_text": event.old_text,
        "new_text": event.new_text,
        "created_at": event.created_at.isoformat(),
    }
