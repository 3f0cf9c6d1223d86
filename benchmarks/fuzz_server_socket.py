"""Fuzz the socket of ``pgmem server``'s accept loop for a while, then check it still answers.

    python -m benchmarks.fuzz_server_socket [--seconds 60] [--threads 16]

A :class:`pgmem.cli.background.SocketServer` on a temporary socket (the background server's
accept loop and handshake, answering a ``ping`` without models or PostgreSQL) takes hostile
clients from ``--threads`` threads for ``--seconds``: random bytes, headers announcing huge
messages, wrong keys, handshakes cut short, silence. Every second a good client must get its
answer. Prints the clients sent, the good calls answered and the longest good call; exits 1 if
a good call failed. ``tests/test_security_server_socket.py`` runs a few hundred of the same
clients in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pgmem.cli import wire


def hostile_client(path: Path, rng: random.Random) -> None:
    """One client doing one bad thing to the socket at ``path``."""
    kind = rng.randrange(7)
    if kind == 0:  # a key that is not the server's
        with contextlib.suppress(Exception):  # refused, as it should be
            wire.connect(path, rng.randbytes(32), pid=None, timeout=5).close()
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        try:
            sock.connect(str(path))
            if kind == 1:  # random bytes
                sock.sendall(rng.randbytes(rng.randrange(1, 2048)))
            elif kind == 2:  # a header announcing a huge message, then a little of it
                sock.sendall(struct.pack("!I", rng.choice([2**32 - 1, 2**31 - 1, 10**9]))
                             + b"x" * 7)
            elif kind == 3:  # read the challenge, answer garbage of the right shape
                sock.recv(1024)
                sock.sendall(struct.pack("!I", 20) + rng.randbytes(20))
            elif kind == 6:  # read the challenge, answer JSON with a made-up proof
                sock.recv(1024)
                body = b'{"challenge": "' + rng.randbytes(32).hex().encode() + \
                    b'", "proof": "' + rng.randbytes(32).hex().encode() + b'"}'
                sock.sendall(struct.pack("!I", len(body)) + body)
                sock.recv(1024)
            elif kind == 4:  # connect and say nothing, leave before the timeout
                time.sleep(rng.random() * 0.2)
            # kind 5: connect and leave at once
        except OSError:
            pass


def good_call(path: Path, key: bytes) -> object:
    """A client with the right key: ``["ping", {"n": 1}]`` and its answer."""
    with wire.connect(path, key, pid=None, timeout=5) as channel:
        channel.send(["ping", {"n": 1}])
        return channel.recv(idle=5)


def echo(channel: wire.Channel) -> None:
    """Serve a client: answer ``["pong", op, arguments]`` to each request."""
    with channel:
        while True:
            try:
                op, arguments = channel.recv()
            except Exception:  # noqa: BLE001 - gone, or not a request
                return
            reply: Any = ["pong", op, arguments]
            channel.send(reply)


def main(argv: list[str] | None = None) -> int:
    from pgmem.cli import background

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args(argv)
    key = random.randbytes(32)
    with tempfile.TemporaryDirectory() as folder:
        server = background.SocketServer(Path(folder) / "s.sock", key, echo)
        threading.Thread(target=server.run, daemon=True).start()
        end = time.monotonic() + args.seconds
        sent = [0] * args.threads

        def attack(n: int) -> None:
            rng = random.Random(n)
            while time.monotonic() < end:
                hostile_client(server.path, rng)
                sent[n] += 1

        attackers = [threading.Thread(target=attack, args=(n,)) for n in range(args.threads)]
        for thread in attackers:
            thread.start()
        good, failed, slowest = 0, 0, 0.0
        while time.monotonic() < end:
            started = time.monotonic()
            try:
                assert good_call(server.path, key) == ["pong", "ping", {"n": 1}]
                good += 1
            except Exception as exc:  # noqa: BLE001 - counted and shown
                failed += 1
                print(f"good call failed: {exc!r}", file=sys.stderr)
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(1)
        for thread in attackers:
            thread.join()
        final = good_call(server.path, key) == ["pong", "ping", {"n": 1}]
        server.stop()
    print(f"{sum(sent)} hostile clients in {args.seconds:g} s from {args.threads} threads; "
          f"good calls answered {good}, failed {failed}; slowest {slowest * 1000:.0f} ms; "
          f"answering after: {final}")
    return 0 if failed == 0 and final else 1


if __name__ == "__main__":
    sys.exit(main())
