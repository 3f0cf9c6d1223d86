"""``pgmem mcp``: serve memories to agents over the Model Context Protocol
(:mod:`pgmem.mcp_server`; the ``mcp`` extra)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from pgmem.cli.options import Commands, scope, scope_options
from pgmem.cli.session import Session
from pgmem.errors import ConfigurationError
from pgmem.settings import Settings, variable_of

if TYPE_CHECKING:
    from pgmem.mcp_server import Credential

#: The environment variable holding the HTTP bearer token (``--token`` wins).
TOKEN_ENV = variable_of("mcp_token")


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
    p.add_argument("--token", metavar="TOKEN",
                   help=f"HTTP: the bearer token clients must send (default: ${TOKEN_ENV}, "
                        "else one made on first start and kept in pgmem's home, mcp.token, "
                        "mode 0600)")
    p.add_argument("--tokens", metavar="FILE",
                   help='HTTP: a JSON file (mode 0600) from each token to the scope it pins, '
                        'e.g. {"<token>": {"user_id": "alice"}}: one server, many users')
    p.add_argument("--allowed-host", action="append", metavar="NAME",
                   help="HTTP beyond loopback: a Host name clients use (repeat; default: this "
                        "machine's names and the bound address)")


def cmd_mcp(args: argparse.Namespace, session: Session) -> int:
    """Serve until the client leaves (stdio) or the process is stopped (HTTP)."""
    try:
        from pgmem import mcp_server
    except ImportError as exc:
        raise ConfigurationError(
            f"pgmem mcp needs the MCP SDK: pip install 'pgmem[mcp]' ({exc})"
        ) from exc
    from pgmem.aio import AsyncMemory

    credentials = _credentials(args, session.settings, mcp_server) if args.http else None
    embedder, analyzer = session.models()
    memory = AsyncMemory(session.dsn(), settings=session.settings, embedder=embedder, nlp=analyzer)
    mcp_server.serve(memory, transport="streamable-http" if args.http else "stdio",
                     host=args.host, port=args.port, credentials=credentials,
                     allowed_hosts=args.allowed_host, **scope(args, required=False))
    return 0


def _credentials(
    args: argparse.Namespace, settings: Settings, mcp_server: ModuleType
) -> list[Credential]:
    """The bearer tokens of ``--tokens``, ``--token``, ``$PGMEM_MCP_TOKEN``, or the one kept in
    pgmem's home (made on first start); where they come from goes to stderr, never a token."""
    token = args.token or settings.mcp_token
    if args.tokens:
        if token:
            raise ConfigurationError("give --tokens or --token (or $PGMEM_MCP_TOKEN), not both")
        credentials: list[Credential] = mcp_server.read_token_map(Path(args.tokens))
        source = f"the {len(credentials)} of {args.tokens}"
    elif token:
        credentials = [mcp_server.Credential(token)]
        source = "--token" if args.token else f"${TOKEN_ENV}"
    else:
        from pgmem.embedded_server import data_home

        token, path = mcp_server.stored_token(data_home(settings))
        credentials = [mcp_server.Credential(token)]
        source = f"the one in {path}"
    print(f"pgmem mcp: clients send 'Authorization: Bearer <token>' with {source}",
          file=sys.stderr)
    return credentials
