"""An empty pgmem data directory for tests of ``pgmem server`` and the embedded default, and
the cleanup of whatever a test left running in it."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pgmem import server_state
from tests.embedded_support import home_folder, postmaster

__all__ = ["fresh_home", "postmaster", "wait_for"]


@contextlib.contextmanager
def fresh_home() -> Iterator[Path]:
    """A data directory that does not exist yet (see :func:`home_folder`). On leaving, a
    background server still running there is killed, then its PostgreSQL, and the folder goes."""
    with home_folder("pgmem-home-") as home:
        try:
            yield home
        finally:
            state = server_state.running(home)
            if state is not None:
                os.kill(state.pid, signal.SIGKILL)


def wait_for(condition: Callable[[], object], timeout: float = 60) -> None:
    """Wait until ``condition()`` is true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out")
