"""The protocol of ``pgmem server``'s Unix socket: length-prefixed JSON, both sides proving
they know the key, every wait bounded. No pickle: a message is data, never code.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. Before the handshake
a frame holds at most :data:`HANDSHAKE_LIMIT` bytes, after it :data:`MESSAGE_LIMIT`.

The handshake (the key is the 32 random bytes of ``HOME/server.key``)::

    server -> client   {"pgmem": 1, "challenge": S}                        S: 32 random bytes, hex
    client -> server   {"challenge": C, "proof": HMAC(key, "client" S C)}  C: 32 random bytes, hex
    server -> client   {"proof": HMAC(key, "server" C S)}

Each side checks the other's proof (HMAC-SHA256, compared in constant time) and drops the
connection when it is wrong. On Linux each side also checks that the process at the other end
runs as the same user (``SO_PEERCRED``), and the client that it is the process the server's
state names.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgmem import safe_paths
from pgmem.errors import ConfigurationError

if TYPE_CHECKING:
    from typing_extensions import Self

VERSION = 1
#: Largest frame before the handshake is done.
HANDSHAKE_LIMIT = 1024
#: Largest frame after it (a batch of texts, or of their embeddings).
MESSAGE_LIMIT = 256 * 1024 * 1024
_HEADER = struct.Struct("!I")
_NONCE_BYTES = 32


class WireError(ConnectionError):
    """The other side broke the protocol: a frame too large or not JSON, a wrong proof, a
    peer of another user; the connection is closed."""


class Channel:
    """JSON messages over a connected socket, one frame each."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, message: Any) -> None:
        """Send one message (JSON-able)."""
        data = json.dumps(message, separators=(",", ":")).encode()
        if len(data) > MESSAGE_LIMIT:
            raise WireError(f"a message of {len(data)} bytes is over the limit of {MESSAGE_LIMIT}")
        self.sock.sendall(_HEADER.pack(len(data)) + data)

    def recv(
        self, *, limit: int = MESSAGE_LIMIT, idle: float | None = None, within: float = 60.0
    ) -> Any:
        """The next message: waits up to ``idle`` seconds (None: no bound) for it to begin,
        then up to ``within`` seconds for each further read.

        Raises:
            EOFError: the other side closed the connection.
            TimeoutError: a wait ran out.
            WireError: the frame is over ``limit`` bytes, or is not JSON.
        """
        self.sock.settimeout(idle)
        first = self.sock.recv(_HEADER.size)
        if not first:
            raise EOFError("the other side closed the connection")
        self.sock.settimeout(within)
        (size,) = _HEADER.unpack(first + self._exactly(_HEADER.size - len(first)))
        if size > limit:
            raise WireError(f"a frame of {size} bytes is over the limit of {limit}")
        try:
            return json.loads(self._exactly(size))
        except ValueError as exc:
            raise WireError(f"a frame that is not JSON: {exc}") from exc

    def _exactly(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise EOFError("the other side closed the connection mid-frame")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _proof(key: bytes, role: bytes, first: bytes, second: bytes) -> str:
    return hmac.new(key, role + first + second, hashlib.sha256).hexdigest()


def _nonce(message: Any, field: str) -> bytes:
    try:
        value = bytes.fromhex(message[field])
    except (TypeError, KeyError, ValueError) as exc:
        raise WireError(f"the handshake has no valid {field!r}") from exc
    if len(value) != _NONCE_BYTES:
        raise WireError(f"the handshake's {field!r} is not {_NONCE_BYTES} bytes")
    return value


def _check_proof(message: Any, expected: str) -> None:
    proof = message.get("proof") if isinstance(message, dict) else None
    if not isinstance(proof, str) or not hmac.compare_digest(proof.encode(), expected.encode()):
        raise WireError("the other side does not know the key")


def peer(sock: socket.socket) -> tuple[int, int] | None:
    """The pid and uid of the process at the other end of a Unix socket (Linux's
    ``SO_PEERCRED``), or None where the system does not say."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, 12))
    return pid, uid


def check_peer(sock: socket.socket, pid: int | None = None) -> None:
    """Refuse a peer that runs as another user (or, given ``pid``, is another process).

    Raises:
        WireError: it does.
    """
    found = peer(sock)
    if found is None:
        return
    if found[1] != os.geteuid():
        raise WireError(
            f"the process at the other end of the socket runs as {safe_paths.user_name(found[1])},"
            f" not as {safe_paths.user_name(os.geteuid())}"
        )
    if pid is not None and found[0] != pid:
        raise WireError(f"the process at the other end of the socket is {found[0]}, not {pid}")


def serve_handshake(channel: Channel, key: bytes, timeout: float) -> None:
    """The server's side of the handshake (each wait up to ``timeout`` seconds).

    Raises:
        WireError, EOFError, OSError: the client failed it.
    """
    check_peer(channel.sock)
    server_nonce = secrets.token_bytes(_NONCE_BYTES)
    channel.sock.settimeout(timeout)
    channel.send({"pgmem": VERSION, "challenge": server_nonce.hex()})
    reply = channel.recv(limit=HANDSHAKE_LIMIT, idle=timeout, within=timeout)
    client_nonce = _nonce(reply, "challenge")
    _check_proof(reply, _proof(key, b"client", server_nonce, client_nonce))
    channel.send({"proof": _proof(key, b"server", client_nonce, server_nonce)})


def client_handshake(channel: Channel, key: bytes, timeout: float) -> None:
    """The client's side of the handshake (each wait up to ``timeout`` seconds).

    Raises:
        WireError, EOFError, OSError: the server failed it.
    """
    hello = channel.recv(limit=HANDSHAKE_LIMIT, idle=timeout, within=timeout)
    if not isinstance(hello, dict) or hello.get("pgmem") != VERSION:
        raise WireError("the other side does not speak pgmem's protocol")
    server_nonce = _nonce(hello, "challenge")
    client_nonce = secrets.token_bytes(_NONCE_BYTES)
    channel.sock.settimeout(timeout)
    channel.send({
        "challenge": client_nonce.hex(),
        "proof": _proof(key, b"client", server_nonce, client_nonce),
    })
    reply = channel.recv(limit=HANDSHAKE_LIMIT, idle=timeout, within=timeout)
    _check_proof(reply, _proof(key, b"server", client_nonce, server_nonce))


def connect(path: Path, key: bytes, *, pid: int | None, timeout: float) -> Channel:
    """A channel to the server on the socket ``path``, handshake done, once the socket
    belongs to the current user (:func:`pgmem.safe_paths.check`) and the process behind it
    runs as the current user (and is ``pid``).

    Raises:
        UnsafePathError: the socket belongs to another user, or others can write to it.
        ConfigurationError: there is no socket at ``path``.
        WireError, EOFError, OSError: the server is not this user's, or failed the handshake.
    """
    if safe_paths.check(path) is None:
        raise ConfigurationError(f"the pgmem server's socket {path} is gone")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    channel = Channel(sock)
    try:
        sock.settimeout(timeout)
        sock.connect(str(path))
        check_peer(sock, pid)
        client_handshake(channel, key, timeout)
    except BaseException:
        channel.close()
        raise
    return channel
