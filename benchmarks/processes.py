"""Helpers of the benchmarks (and the tests) that start servers of their own: a command run as
the ``postgres`` account when this process is root (PostgreSQL and PgBouncer refuse to run as
root), and a free port of 127.0.0.1."""

from __future__ import annotations

import os
import socket


def as_postgres(command: list[str]) -> list[str]:
    """``command``, run as ``postgres`` when this process is root."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def free_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
