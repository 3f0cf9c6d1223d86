"""``pgmem server start|stop|status``: keep the embedded PostgreSQL, and the models, running
between commands (:mod:`pgmem.cli.background`)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pgmem.cli import background
from pgmem.cli.options import Commands
from pgmem.cli.session import Session
from pgmem.errors import ConfigurationError, DatabaseError

# Starting loads the models; on a busy machine that takes a while.
START_TIMEOUT = 300.0
STOP_TIMEOUT = 60.0


def register(commands: Commands) -> None:
    """Add ``server``."""
    p = commands.add("server", cmd_server, "keep the embedded PostgreSQL and the models "
                     "running between commands (start, stop, status)")
    p.add_argument("action", metavar="ACTION", choices=("start", "stop", "status"),
                   help="start: start the server in the background (and load the models); "
                        "stop: stop it; status: say whether it runs (exit 1 if not)")


def cmd_server(args: argparse.Namespace, session: Session) -> int:
    """Start, stop or report the background server."""
    if not session.embedded:
        raise ConfigurationError(
            "`pgmem server` runs the embedded PostgreSQL; a database is configured "
            "(--dsn, PGMEM_DSN or PG* variables), so commands use that one"
        )
    from pgmem.embedded import data_home

    home = data_home()
    if args.action == "start":
        return _start(home, session.schema)
    if args.action == "stop":
        return _stop(home)
    return _status(home)


def _describe(state: background.ServerState) -> str:
    return f"(pid {state.pid}, data in {state.home}, {state.dsn})"


def _start(home: Path, schema: str) -> int:
    state = background.running(home)
    if state is not None:
        print(f"pgmem server already running {_describe(state)}")
        return 0
    try:
        home.mkdir(parents=True, exist_ok=True)
        log = open(home / background.LOG_FILE, "ab")  # noqa: SIM115 -- handed to the child
    except OSError as exc:
        raise ConfigurationError(f"cannot write to pgmem's data directory {home}: {exc}") from exc
    with log:
        process = subprocess.Popen(
            [sys.executable, "-m", background.MODULE, str(home), schema],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        state = background.running(home)
        if state is not None and state.pid == process.pid:
            print(f"pgmem server started {_describe(state)}; models loaded")
            return 0
        if process.poll() is not None:
            raise DatabaseError(
                f"the pgmem server did not start (exit status {process.returncode}); "
                f"see {home / background.LOG_FILE}"
            )
        time.sleep(0.2)
    process.terminate()
    raise DatabaseError(f"the pgmem server did not start within {START_TIMEOUT:.0f} s; "
                        f"see {home / background.LOG_FILE}")


def _stop(home: Path) -> int:
    state = background.running(home)  # removes a dead server's state
    if state is None:
        print("pgmem server is not running")
        return 0
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        if background.running(home) is None and not _alive(state.pid):
            print(f"pgmem server stopped (pid {state.pid})")
            return 0
        time.sleep(0.1)
    raise DatabaseError(f"the pgmem server (pid {state.pid}) did not stop within "
                        f"{STOP_TIMEOUT:.0f} s; see {home / background.LOG_FILE}")


def _alive(pid: int) -> bool:
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _status(home: Path) -> int:
    state = background.running(home)
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
