"""``pgmem mcp``: serve memories to agents over the Model Context Protocol
(:mod:`pgmem.mcp_server`; the ``mcp`` extra)."""

from __future__ import annotations

import argparse

from pgmem.cli.options import Commands, scope, scope_options
from pgmem.cli.session import Session
from pgmem.errors import ConfigurationError


def register(commands: Commands) -> None:
    """Add ``mcp``."""
    p = commands.add(
        "mcp", cmd_mcp,
        "serve memories to agents over MCP: stdio (the default) or streamable HTTP",
    )
    p.add_argument("--http", action="store_true",
                   help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default: 8000)")
    scope_options(p, "that every call is pinned to (default: each call names its scope)")


def cmd_mcp(args: argparse.Namespace, session: Session) -> int:
    """Serve until the client leaves (stdio) or the process is stopped (HTTP)."""
    try:
        from pgmem.mcp_server import serve
    except ImportError as exc:
        raise ConfigurationError(
            f"pgmem mcp needs the MCP SDK: pip install 'pgmem[mcp]' ({exc})"
        ) from exc
    from pgmem.aio import AsyncMemory

    embedder, analyzer = session.models()
    memory = AsyncMemory(session.dsn(), embedder=embedder, nlp=analyzer,
                         schema=session.schema, tenant=session.tenant)
    serve(memory, transport="streamable-http" if args.http else "stdio", host=args.host,
          port=args.port, **scope(args, required=False))
    return 0
