"""``pgmem mcp --http`` needs a bearer token (issue 25, item 2): no token or a wrong one gets
``401`` with a ``WWW-Authenticate`` header naming the protected resource metadata; the right
one works; a token pinned to alice cannot read bob's memories; beyond loopback, a request
naming another Host is refused. The real command in a subprocess, driven by the official MCP
client (``mcp``'s streamable HTTP client)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

if not os.environ.get("CI"):  # CI installs the mcp extra: there, a missing SDK fails
    pytest.importorskip("mcp")

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from test_mcp_server import call, fails

import pgmem
from pgmem import http_guard, mcp_server
from pgmem.settings import Settings

ADMIN, ALICE, BOB = ("admin-" + "a" * 40, "alice-" + "b" * 40, "bob-" + "c" * 40)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server(db_dsn: str, tmp_path: Path) -> Iterator[str]:
    """``pgmem mcp --http --host 0.0.0.0`` with a token map (admin unpinned, alice and bob
    pinned to themselves); its URL."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({ADMIN: {}, ALICE: {"user_id": "alice"},
                                  BOB: {"user_id": "bob"}}))
    tokens.chmod(0o600)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pgmem.cli", "mcp", "--dsn", db_dsn, "--http", "--host",
         "0.0.0.0", "--port", str(port), "--tokens", str(tokens)],
        env={**os.environ, "PGMEM_SPACY_MODEL": "blank"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        for _ in range(1800):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, process.communicate()
                time.sleep(0.1)
        else:
            raise AssertionError("the MCP server did not start")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
        assert "Traceback" not in err, err
        for token in (ADMIN, ALICE, BOB):
            assert token not in err  # where the tokens come from is said, never a token


def client(url: str, token: str | None) -> Client:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers)))


def test_http_needs_the_token_and_a_pinned_token_reads_only_its_scope(http_server: str) -> None:
    url = http_server
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    for token in (None, "wrong-" + "x" * 40, ALICE[:-1], ALICE + "x"):
        auth = {} if token is None else {"Authorization": f"Bearer {token}"}
        response = httpx2.post(url, json=initialize, headers={**headers, **auth})
        assert response.status_code == 401, (token, response.text)
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
        assert "resource_metadata=" in challenge
    # a session stays with the credential that opened it
    opened = httpx2.post(
        url, json=initialize, headers={**headers, "Authorization": f"Bearer {ALICE}"})
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    hijack = httpx2.post(url, json=listing, headers={
        **headers, "Authorization": f"Bearer {BOB}", "Mcp-Session-Id": session,
        "MCP-Protocol-Version": "2025-06-18"})
    assert hijack.status_code == 404
    metadata = httpx2.get(url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"))
    assert metadata.status_code == 200 and metadata.json()["resource"].endswith("/mcp")
    # bound beyond loopback: the Host and Origin checks stay on
    response = httpx2.post(url, json=initialize, headers={
        **headers, "Authorization": f"Bearer {ADMIN}", "Host": "evil.example:80"})
    assert response.status_code == 421
    response = httpx2.post(url, json=initialize, headers={
        **headers, "Authorization": f"Bearer {ADMIN}", "Origin": "http://evil.example"})
    assert response.status_code == 403

    async def main() -> None:
        with anyio.fail_after(120):
            for token in (None, "wrong-" + "x" * 40):
                with pytest.raises(Exception):  # noqa: B017 - the SDK's error for a 401
                    async with client(url, token) as c:
                        await c.list_tools()
            async with client(url, ALICE) as alice, client(url, BOB) as bob, \
                    client(url, ADMIN) as admin:
                secret = await call(alice, "add", text="Alice's locker code is 4471")
                assert secret["user_id"] == "alice"
                mine = await call(bob, "add", text="Bob parks on level 3")
                assert mine["user_id"] == "bob"
                assert "serves user_id='bob' only" in await fails(
                    bob, "list", user_id="alice")
                assert "serves user_id='bob' only" in await fails(
                    bob, "search", query="locker code", user_id="alice")
                for tool in ("get", "history", "delete"):
                    assert "no memory" in await fails(bob, tool, memory_id=secret["id"])
                assert "no memory" in await fails(
                    bob, "update", memory_id=secret["id"], text="overwritten")
                hits = await call(bob, "search", query="Alice's locker code")
                assert [h["id"] for h in hits["results"]] == [mine["id"]]
                listed = await call(bob, "list")
                assert [m["id"] for m in listed["memories"]] == [mine["id"]]
                # the unpinned token names its scope per call, as a stdio client does
                got = await call(admin, "get", memory_id=secret["id"], user_id="alice")
                assert got["text"] == "Alice's locker code is 4471"

    anyio.run(main)


def test_http_without_a_token_refuses_to_start(db_dsn: str) -> None:
    memory = pgmem.AsyncMemory(db_dsn)
    for host in ("0.0.0.0", "127.0.0.1"):
        with pytest.raises(pgmem.ConfigurationError, match="needs a bearer token"):
            mcp_server.serve(memory, transport="streamable-http", host=host, port=free_port())
        with pytest.raises(pgmem.ConfigurationError, match="needs a bearer token"):
            mcp_server.serve(memory, transport="streamable-http", host=host, credentials=[])
    with pytest.raises(pgmem.ConfigurationError, match="22 characters"):
        mcp_server.Credential("short")


def test_the_generated_token_is_kept_private(tmp_path: Path) -> None:
    token, path = mcp_server.stored_token(tmp_path / "home")
    assert len(token) >= 43 and path.stat().st_mode & 0o777 == 0o600
    assert mcp_server.stored_token(tmp_path / "home") == (token, path)  # kept
    path.chmod(0o644)
    with pytest.raises(pgmem.ConfigurationError, match="readable by other users"):
        mcp_server.stored_token(tmp_path / "home")
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({ALICE: {"user_id": "alice"}}))
    tokens.chmod(0o644)
    with pytest.raises(pgmem.ConfigurationError, match="readable by other users"):
        mcp_server.read_token_map(tokens)
    tokens.chmod(0o600)
    assert mcp_server.read_token_map(tokens) == [mcp_server.Credential(ALICE, {"user_id": "alice"})]


def test_tokens_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verifier compares with hmac.compare_digest (pgmem.http_guard.TokenSet, shared with
    the inspector), against every credential."""
    calls: list[tuple[bytes, bytes]] = []
    verifier = mcp_server.BearerTokens([mcp_server.Credential(ALICE), mcp_server.Credential(BOB)])
    real = http_guard.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(http_guard.hmac, "compare_digest", spy)
    found = anyio.run(verifier.verify_token, ALICE)
    assert found is not None and found.claims == {"pgmem_scope": {}}
    assert anyio.run(verifier.verify_token, "nope") is None
    assert len(calls) == 4  # both credentials, for both tokens


def test_the_cli_makes_and_keeps_a_token_in_pgmems_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from pgmem.cli import mcp as mcp_command

    monkeypatch.setenv("PGMEM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(mcp_command.TOKEN_ENV, raising=False)
    args = argparse.Namespace(token=None, tokens=None)
    (first,) = mcp_command._credentials(args, Settings.from_env(), mcp_server)
    path = tmp_path / "home" / mcp_server.TOKEN_FILE
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_text().strip() == first.token
    err = capsys.readouterr().err
    assert str(path) in err and first.token not in err
    (again,) = mcp_command._credentials(args, Settings.from_env(), mcp_server)
    assert again.token == first.token  # kept across starts
    monkeypatch.setenv(mcp_command.TOKEN_ENV, ALICE)
    (from_env,) = mcp_command._credentials(args, Settings.from_env(), mcp_server)
    assert from_env.token == ALICE and ALICE not in capsys.readouterr().err
