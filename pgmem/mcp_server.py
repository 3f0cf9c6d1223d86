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

Over HTTP every request needs a bearer token (:class:`BearerTokens`, compared in constant time;
``401`` with a ``WWW-Authenticate`` header pointing at the OAuth protected resource metadata
otherwise). A token may pin a scope of its own, so that one server serves many users, each only
their own. Beyond loopback the Host and Origin headers are checked against ``allowed_hosts``.

Needs the ``mcp`` extra: ``pip install 'pgmem[mcp]'``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl

from pgmem import safe_paths, validate
from pgmem.aio import AsyncMemory
from pgmem.embedding import QUERY, embed_kind
from pgmem.errors import ConfigurationError, PgmemError, ScopeError
from pgmem.http_guard import LOOPBACK, HostGuard, TokenSet, default_allowed_hosts, url_host
from pgmem.queries import SCOPE_IDS
from pgmem.results import AddResult, HistoryEvent, MemoryRecord, SearchHit, jsonable

__all__ = [
    "SCOPE_IDS", "BearerTokens", "Credential", "create_server", "read_token_map", "serve",
    "stored_token",
]

logger = logging.getLogger(__name__)


INSTRUCTIONS = """\
Long-term memory in PostgreSQL. Store short facts with `add`, find them with `search` \
(hybrid: meaning, keywords and named entities; each hit says how it scored), and keep them \
right with `update`, `delete` and `history`. Every call is scoped by user_id, agent_id and/or \
run_id."""


#: Shortest token accepted: 128 bits of a generated token's 256, in URL-safe base64.
MIN_TOKEN_LENGTH = 22
#: The claim of an :class:`AccessToken` that carries the scope its token pins.
SCOPE_CLAIM = "pgmem_scope"
TOKEN_FILE = "mcp.token"


@dataclass(frozen=True)
class Credential:
    """A bearer token and the scope ids it pins (none: the server's own pins apply)."""

    token: str = field(repr=False)
    scope: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < MIN_TOKEN_LENGTH:
            raise ConfigurationError(
                f"an MCP bearer token must be a string of {MIN_TOKEN_LENGTH} characters or more"
            )
        if not self.token.isascii() or not self.token.isprintable() or " " in self.token:
            raise ConfigurationError("an MCP bearer token must be printable ASCII, no spaces")
        unknown = set(self.scope) - set(SCOPE_IDS)
        if unknown:
            raise ConfigurationError(
                f"a token's scope holds only {', '.join(SCOPE_IDS)}, got {sorted(unknown)}"
            )
        validate.scope_ids(*(self.scope.get(key) for key in SCOPE_IDS))


class BearerTokens:
    """The MCP SDK's ``TokenVerifier`` over a fixed set of :class:`Credential`: a token is
    compared with every one in constant time (:class:`pgmem.http_guard.TokenSet`). The access
    token it returns names the credential (``client_id``: an HTTP session stays with the
    credential that opened it) and carries its pinned scope."""

    def __init__(self, credentials: list[Credential]) -> None:
        if not credentials:
            raise ConfigurationError("the MCP HTTP server needs at least one bearer token")
        tokens = [c.token for c in credentials]
        if len(set(tokens)) != len(tokens):
            raise ConfigurationError("two MCP credentials have the same token")
        self._tokens = TokenSet(tokens)
        self._scopes = [dict(c.scope) for c in credentials]

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access token for ``token``, or None when no credential has it."""
        found = self._tokens.match(token)
        if found is None:
            return None
        return AccessToken(
            token="", client_id=f"pgmem-credential-{found}", scopes=[],
            claims={SCOPE_CLAIM: self._scopes[found]},
        )


def stored_token(home: Path) -> tuple[str, Path]:
    """The bearer token kept in ``home/mcp.token`` -- made on first use (256 random bits),
    readable by its owner only -- and the file's path. The data directory and the file must
    belong to the current user (:mod:`pgmem.safe_paths`): a token another user planted is never
    used.

    Raises:
        UnsafePathError: the folder or the file belongs to another user, or others can write
            (or read) it.
        ConfigurationError: the file cannot be read or made.
    """
    path = home / TOKEN_FILE
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        safe_paths.check_home(home)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            safe_paths.check(path, secret=True)
            return path.read_text().strip(), path
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
        return path.read_text().strip(), path
    except OSError as exc:
        raise ConfigurationError(f"cannot keep the MCP token in {path}: {exc}") from exc


def read_token_map(path: Path) -> list[Credential]:
    """The credentials of a token map file: a JSON object from each token to the scope it pins
    (``{"<token>": {"user_id": "alice"}, "<token>": {}}``). The file must be readable by its
    owner only.

    Raises:
        ConfigurationError: the file is missing, readable by others, or not such a map.
    """
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise ConfigurationError(
                f"{path} holds tokens but is readable by other users (mode {mode:o}): chmod 600 it"
            )
        entries = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the MCP token map {path}: {exc}") from exc
    if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
        raise ConfigurationError(
            f"{path} must be a JSON object from each token to the scope it pins, e.g. "
            '{"<token>": {"user_id": "alice"}}'
        )
    return [Credential(token, scope) for token, scope in entries.items()]


def create_server(
    memory: AsyncMemory,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    name: str = "pgmem",
    credentials: list[Credential] | None = None,
    resource_url: str | None = None,
) -> MCPServer[Any]:
    """An MCP server whose tools read and write ``memory`` (which the caller owns and closes).
    ``user_id`` / ``agent_id`` / ``run_id`` pin the scope of every call (see the module).

    ``credentials`` (for HTTP): the bearer tokens it accepts, each with the scope it pins on
    top of the server's (a token may not pin another value of an id the server pins);
    ``resource_url`` is the server's URL (``http://host:port/mcp``), which its protected
    resource metadata and 401 answers name."""
    pinned = {k: v for k, v in zip(SCOPE_IDS, (user_id, agent_id, run_id)) if v is not None}
    auth: dict[str, Any] = {}
    if credentials is not None:
        for credential in credentials:
            clash = {k for k, v in credential.scope.items() if pinned.get(k, v) != v}
            if clash:
                raise ConfigurationError(
                    f"a token pins {sorted(clash)} other than the server does"
                )
        url = resource_url or "http://127.0.0.1:8000/mcp"
        base = url.rsplit("/", 1)[0]
        auth = {
            "token_verifier": BearerTokens(credentials),
            # pgmem issues its tokens itself (no OAuth flow): it names itself the issuer.
            "auth": AuthSettings(issuer_url=AnyHttpUrl(base), resource_server_url=AnyHttpUrl(url),
                                 validate_token_resource=False),
        }
    server: MCPServer[Any] = MCPServer(name, instructions=INSTRUCTIONS, **auth)

    def scope(user_id: str | None, agent_id: str | None, run_id: str | None) -> dict[str, Any]:
        given = dict(zip(SCOPE_IDS, (user_id, agent_id, run_id)))
        access = get_access_token()
        token_pins = (access.claims or {}).get(SCOPE_CLAIM, {}) if access is not None else {}
        effective = {**pinned, **token_pins}
        pins = dict(effective)
        for key, value in given.items():
            if value is None:
                continue
            if key in pins and pins[key] != value:
                raise ToolError(
                    f"this server serves {key}={pins[key]!r} only; {key}={value!r} is refused"
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
    credentials: list[Credential] | None = None,
    allowed_hosts: list[str] | None = None,
) -> None:
    """Serve ``memory`` over ``transport`` until the client goes away (stdio) or the process
    is stopped (HTTP), then close it. The models load before the first request is read.

    HTTP needs ``credentials`` (see :func:`create_server`). Bound beyond loopback, requests
    must name one of ``allowed_hosts`` (default :func:`default_allowed_hosts`) in their Host
    header, and a browser's Origin must be one of them too.

    Raises:
        ConfigurationError: HTTP without credentials (nothing is served).
    """
    http = transport == "streamable-http"
    if http and not credentials:
        raise ConfigurationError(
            "the MCP HTTP server needs a bearer token: give one (a token, or a token map); "
            "refusing to serve without one"
        )
    server = create_server(
        memory, user_id=user_id, agent_id=agent_id, run_id=run_id,
        credentials=credentials if http else None,
        resource_url=f"http://{url_host(host)}:{port}/mcp",
    )
    security = None
    if http and host not in LOOPBACK:  # the SDK checks loopback names itself
        guard = HostGuard.of(allowed_hosts or default_allowed_hosts(host))
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(guard.hosts), allowed_origins=list(guard.origins),
        )

    async def main() -> None:
        try:
            await anyio.to_thread.run_sync(_warm_up, memory)
            if transport == "stdio":
                await server.run_stdio_async()
            else:
                await server.run_streamable_http_async(
                    host=host, port=port, transport_security=security
                )
        finally:
            await memory.close()

    anyio.run(main)


def _warm_up(memory: AsyncMemory) -> None:
    embed_kind(memory.embedder, ["warm up"], QUERY)
    memory.analyzer.analyze("warm up")


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """Turn pgmem's errors into tool errors with their message."""
    try:
        yield
    except PgmemError as exc:
        raise ToolError(str(exc)) from exc


def _scope_of(record: MemoryRecord | SearchHit) -> dict[str, Any]:
    return {k: getattr(record, k) for k in SCOPE_IDS}


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
