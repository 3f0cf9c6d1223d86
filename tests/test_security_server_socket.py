"""``pgmem server`` survives malformed and hostile clients on its socket (issue 25, item 5).

The accept loop (:class:`pgmem.cli.background.SocketServer`) is fuzzed with a few hundred
clients -- random bytes, message headers announcing huge lengths, wrong keys, a handshake cut
short, silence -- and must then still answer a good client, with no thread left behind; and
the real ``pgmem server`` (real pgserver, real models) takes bad handshakes and still answers
``pgmem server status``. ``python -m benchmarks.fuzz_server_socket`` runs the fuzz for a
minute."""

from __future__ import annotations

import os
import random
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.fuzz_server_socket import good_call, hostile_client
from pgmem import server_state
from pgmem.cli import background, wire

KEY = b"k" * 32


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[background.SocketServer]:
    """A SocketServer on a temporary socket, answering ("pong", arguments) to anything."""
    monkeypatch.setattr(background, "HANDSHAKE_TIMEOUT", 0.5)

    def serve(channel: wire.Channel) -> None:
        with channel:
            while True:
                try:
                    op, arguments = channel.recv()
                except Exception:  # noqa: BLE001
                    return
                channel.send(["pong", op, arguments])

    listener = background.SocketServer(tmp_path / "server.sock", KEY, serve)
    thread = threading.Thread(target=listener.run, daemon=True)
    thread.start()
    yield listener
    listener.stop()
    thread.join(5)
    assert not thread.is_alive()


def test_the_socket_is_private_from_its_creation(server: background.SocketServer) -> None:
    assert stat.S_IMODE(os.stat(server.path).st_mode) == 0o600


def test_hundreds_of_hostile_clients_leave_the_server_answering(
    server: background.SocketServer,
) -> None:
    assert good_call(server.path, KEY) == ["pong", "ping", {"n": 1}]
    baseline = threading.active_count()
    rng = random.Random(25)
    attackers = [
        threading.Thread(target=hostile_client, args=(server.path, random.Random(rng.random())))
        for _ in range(300)
    ]
    for batch in range(0, len(attackers), 30):  # 30 at a time
        for thread in attackers[batch : batch + 30]:
            thread.start()
        for thread in attackers[batch : batch + 30]:
            thread.join(30)
        assert good_call(server.path, KEY) == ["pong", "ping", {"n": 1}]
    # every hostile client's thread has ended (each handshake is bounded)
    deadline = time.monotonic() + 10
    while threading.active_count() > baseline and time.monotonic() < deadline:
        time.sleep(0.1)
    assert threading.active_count() <= baseline


def test_a_silent_client_does_not_hold_up_the_next(
    server: background.SocketServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A timeout long enough that "served before it" cannot depend on the machine's speed.
    monkeypatch.setattr(background, "HANDSHAKE_TIMEOUT", 5.0)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(str(server.path))
        started = time.monotonic()
        assert good_call(server.path, KEY) == ["pong", "ping", {"n": 1}]
        # served while the silent one still holds its handshake, not after its timeout
        assert time.monotonic() - started < background.HANDSHAKE_TIMEOUT
        silent.settimeout(2 * background.HANDSHAKE_TIMEOUT)
        silent.recv(1024)  # the challenge
        assert silent.recv(1024) == b""  # then closed after HANDSHAKE_TIMEOUT


# -- the real server -----------------------------------------------------------------------------

try:
    from test_cli_server import home, run
except pytest.skip.Exception:  # no pgserver
    home = run = None  # type: ignore[assignment]


@pytest.mark.skipif(run is None, reason="pgserver is not installed")
def test_pgmem_server_survives_bad_handshakes(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run(capsys, "server", "start")
    assert status == 0, out
    state = server_state.running(home)
    assert state is not None
    path = Path(state.socket)
    rng = random.Random(5)
    for _ in range(40):
        hostile_client(path, random.Random(rng.random()))
    status, out = run(capsys, "server", "status")
    assert status == 0 and out.startswith("pgmem server running"), out
    assert server_state.running(home) == state
    assert run(capsys, "server", "stop")[0] == 0
