"""``pgmem ui``: the memory inspector in the browser (:mod:`pgmem.ui`; the ``ui`` extra), on
127.0.0.1, behind a token that the URL it prints carries once."""

from __future__ import annotations

import argparse
import secrets
import socket
import sys
import webbrowser

from pgmem.cli.options import Commands
from pgmem.cli.session import Session
from pgmem.errors import ConfigurationError

HOST = "127.0.0.1"


def register(commands: Commands) -> None:
    """Add ``ui``."""
    p = commands.add(
        "ui", cmd_ui,
        "open the memory inspector in the browser: scopes, memories, history, and why a search "
        "answered what it did (read-only unless --write)",
        autostart=True,
    )
    p.add_argument("--port", type=int, default=0,
                   help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--write", action="store_true",
                   help="offer edits (update or delete a memory, delete a scope), each behind a "
                        "confirmation")
    p.add_argument("--no-browser", action="store_true",
                   help="print the URL only; do not open a browser")


def cmd_ui(args: argparse.Namespace, session: Session) -> int:
    """Serve the inspector until the process is stopped."""
    try:
        import uvicorn

        from pgmem import ui
    except ImportError as exc:
        raise ConfigurationError(
            f"pgmem ui needs its web stack: pip install 'pgmem[ui]' ({exc})"
        ) from exc
    if not 0 <= args.port <= 65535:
        raise ConfigurationError(f"--port must be 0 to 65535, got {args.port}")
    memory = session.memory()
    token = secrets.token_urlsafe(32)
    application = ui.app(memory, token=token, write=args.write)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, args.port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {HOST}:{args.port}: {exc}") from exc
    port = sock.getsockname()[1]
    url = f"http://{HOST}:{port}/?token={token}"
    print(f"pgmem ui: tenant {session.tenant!r}, {'edits on' if args.write else 'read-only'}; "
          f"open (the token works once):\n    {url}", flush=True)
    if not args.no_browser:
        try:
            webbrowser.get()
        except webbrowser.Error:
            print("pgmem ui: no browser found here; open the URL above", file=sys.stderr)
        else:
            webbrowser.open(url)
    config = uvicorn.Config(application, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0
