"""pgmem.http_guard: the Host and Origin rules and the token comparison that the MCP server and
the inspector share; and the inspector's marking of control characters."""

from __future__ import annotations

import pytest

from pgmem.http_guard import LOOPBACK, HostGuard, TokenSet, default_allowed_hosts


def test_loopback_names_on_any_port_and_nothing_else() -> None:
    guard = HostGuard.of(LOOPBACK)
    for host in ("127.0.0.1:8000", "localhost:1", "[::1]:65535"):
        assert guard.refusal(host, None) is None
    assert guard.refusal("127.0.0.1:8000", "http://localhost:3000") is None
    assert guard.refusal("evil.example:80", None) == (421, "Invalid Host header")
    assert guard.refusal(None, None) == (421, "Invalid Host header")
    assert guard.refusal("127.0.0.1.evil.example:80", None) is not None
    assert guard.refusal("127.0.0.1:80", "http://evil.example") == (403, "Invalid Origin header")
    assert guard.refusal("127.0.0.1:80", "null") is not None
    assert guard.refusal("127.0.0.1:80", "http://127.0.0.1:80.evil.example") is not None


def test_default_hosts_of_a_loopback_address_are_the_loopback_names() -> None:
    assert default_allowed_hosts("127.0.0.1") == list(LOOPBACK)
    assert "0.0.0.0" not in default_allowed_hosts("0.0.0.0")


def test_token_set() -> None:
    tokens = TokenSet(["a" * 30, "b" * 30])
    assert tokens.match("b" * 30) == 1
    assert tokens.match("a" * 29) is None
    assert tokens.match(None) is None
    assert tokens.match("\udcff") is None  # a lone surrogate is no crash


@pytest.mark.parametrize(("text", "shown"), [
    ("<b>x</b>", "&lt;b&gt;x&lt;/b&gt;"),
    ("a\u202eb", 'a<span class="ctl" title="a control character">\\u202e</span>b'),
    ("a\x1b[0m", 'a<span class="ctl" title="a control character">\\x1b</span>[0m'),
    ("line\nnext\ttab", "line\nnext\ttab"),
])
def test_the_inspector_marks_control_characters(text: str, shown: str) -> None:
    pytest.importorskip("jinja2")
    from pgmem.ui.web import visible

    assert str(visible(text)) == shown
