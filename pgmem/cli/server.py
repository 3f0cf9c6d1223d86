"""``pgmem server start|stop|status``: keep the embedded PostgreSQL, and the models, running
between commands (:mod:`pgmem.cli.background`)."""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

from pgmem import server_state
from pgmem.cli import background
from pgmem.cli.options import Commands
from pgmem.cli.session import Session
from pgmem.embedded_cluster import living
from pgmem.errors import ConfigurationError, DatabaseError
from pgmem.settings import DEFAULT_IDLE_TIMEOUT

STOP_TIMEOUT = 60.0


def register(commands: Commands) -> None:
    """Add ``server``."""
    p = commands.add("server", cmd_server, "keep the embedded PostgreSQL and the models "
                     "running between commands (start, stop, status)")
    p.add_argument("action", metavar="ACTION", choices=("start", "stop", "status"),
                   help="start: start the server in the background (and load the models); "
                        "stop: stop it; status: say whether it runs (exit 1 if not)")
    p.add_argument("--idle-timeout", type=float, metavar="SECONDS",
                   help="start: stop the server after SECONDS with no command (0: never; "
                        f"default: ${background.IDLE_ENV}, else "
                        f"{DEFAULT_IDLE_TIMEOUT:.0f})")


def cmd_server(args: argparse.Namespace, session: Session) -> int:
    """Start, stop or report the background server."""
    if not session.embedded:
        raise ConfigurationError(
            "`pgmem server` runs the embedded PostgreSQL; a database is configured "
            "(--dsn, PGMEM_DSN or PG* variables), so commands use that one"
        )
    from pgmem.embedded_server import data_home

    home = data_home(session.settings)
    if args.action == "start":
        idle = (
            session.settings.server_idle_timeout if args.idle_timeout is None
            else args.idle_timeout
        )
        if not idle >= 0:
            raise ConfigurationError(f"--idle-timeout must be 0 or more seconds, got {idle:g}")
        return _start(home, session.schema, idle)
    if args.action == "stop":
        return _stop(home)
    return _status(home)


def _describe(state: server_state.ServerState) -> str:
    return f"(pid {state.pid}, data in {state.home}, {state.dsn})"


def _start(home: Path, schema: str, idle: float) -> int:
    state = server_state.running(home)
    if state is not None:
        print(f"pgmem server already running {_describe(state)}")
        return 0
    state = background.start(home, schema, idle)
    print(f"pgmem server started {_describe(state)}; models loaded")
    return 0


def _stop(home: Path) -> int:
    state = server_state.running(home)  # removes a dead server's state
    if state is None:
        print("pgmem server is not running")
        return 0
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        if server_state.running(home) is None and not living(state.pid):
            print(f"pgmem server stopped (pid {state.pid})")
            return 0
        time.sleep(0.1)
    raise DatabaseError(f"the pgmem server (pid {state.pid}) did not stop within "
                        f"{STOP_TIMEOUT:.0f} s; see {home / background.LOG_FILE}")


def _status(home: Path) -> int:
    state = server_state.running(home)
    if state is None:
        print("pgmem server is not running: each command starts and stops its own PostgreSQL "
              "(`pgmem server start` keeps one running)")
        return 1
    client = background.ServerClient(state)
    try:
        info = client.info()
    finally:
        client.close()
    print(f"pgmem server running {_describe(state)}")
    print(f"models: {info['embedder']}, spaCy {info['spacy_model']}")
    return 0
