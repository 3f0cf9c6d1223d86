"""Stored text reaches the operator's terminal escaped (issue 25, item 6): ``pgmem list``,
``search``, ``get`` and ``history`` print a memory's control characters and escape sequences
as visible escapes (an agent writes memories over MCP; its text must not drive the terminal);
``--json`` stays exact JSON."""

from __future__ import annotations

import json

from security_support import PgmemCli, pgmem_cli  # noqa: F401 - a fixture

import pgmem
from pgmem.cli.options import printable

# Clear the screen, set the window title, an 8-bit CSI, a right-to-left override, a bell.
HOSTILE = "Ana likes tea\x1b[2J\x1b]0;owned\x07 and \x9b31m coffee \u202egnp.exe\r\nend"
CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def test_printable_escapes_controls_and_keeps_the_rest() -> None:
    assert printable("a\x1b[31mb\tc\nd\u202e\x7f") == "a\\x1b[31mb\\tc\\nd\\u202e\\x7f"
    assert printable("Zoë 東京 👨‍👩‍👧 ok") == "Zoë 東京 👨‍👩‍👧 ok"  # ZWJ emoji untouched


def test_list_search_get_history_escape_stored_text(
    pgmem_cli: PgmemCli,  # noqa: F811 - the fixture
    memory: pgmem.Memory,
) -> None:
    record = memory.add(HOSTILE, user_id="ana\x1b[8m", metadata={"note": "x\x9by"})
    memory.update(record.id, text=HOSTILE + " again")
    scope = ["--user", "ana\x1b[8m"]
    for argv in (["list", *scope], ["search", "tea", *scope], ["get", str(record.id)],
                 ["history", str(record.id)]):
        status, out, err = pgmem_cli(*argv)
        assert status == 0, err
        assert not any(c in out for c in CONTROLS), (argv, out)
        assert "\\x1b[2J" in out, (argv, out)
    status, out, _ = pgmem_cli("get", str(record.id))
    assert "\\u202egnp.exe" in out and "x\\x9by" in out and "ana\\x1b[8m" in out
    for argv in (["list", *scope, "--json"], ["search", "tea", *scope, "--json"],
                 ["get", str(record.id), "--json"]):
        status, out, _ = pgmem_cli(*argv)
        text = json.dumps(json.loads(out))
        assert json.dumps(HOSTILE + " again") in text, argv  # the exact text, JSON-escaped
    status, out, _ = pgmem_cli("history", str(record.id), "--json")
    assert [e["new_text"] for e in json.loads(out)] == [HOSTILE, HOSTILE + " again"]


def test_stats_escapes_scope_ids_and_tenant_names(
    pgmem_cli: PgmemCli,  # noqa: F811 - the fixture
    db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder, analyzer: pgmem.TextAnalyzer,
) -> None:
    """`pgmem stats` printed scope ids and tenant names raw: an OSC window title, a clear-screen
    and SGR colours reached the terminal, and --json left U+009B and U+202E as they were."""
    tenant = "t\x1b]0;owned\x07\x9b2J\u202e"
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer, tenant=tenant) as memory:
        memory.add("Ana likes tea.", user_id="u\x1b[2J\x1b[31m", agent_id="a\x9b1m",
                   run_id="r\u202eexe")
    for argv in (["stats"], ["--tenant", tenant, "stats"]):
        status, out, err = pgmem_cli(*argv)
        assert status == 0, err
        assert not any(c in out for c in CONTROLS), (argv, out)
    assert "u\\x1b[2J\\x1b[31m" in out and "a\\x9b1m" in out and "r\\u202eexe" in out
    assert "t\\x1b]0;owned\\x07\\x9b2J\\u202e" in out
    status, out, _ = pgmem_cli("--tenant", tenant, "stats", "--json")
    assert status == 0 and not any(c in out for c in CONTROLS), out
    assert "\\u009b" in out and "\\u202e" in out
    data = json.loads(out)  # still the exact values
    assert tenant in [row["tenant"] for row in data["tenants"]]
    assert data["scopes"][0]["user_id"] == "u\x1b[2J\x1b[31m"
    assert data["scopes"][0]["run_id"] == "r\u202eexe"
