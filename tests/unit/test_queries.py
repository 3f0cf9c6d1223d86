"""The named blocks of pgmem's .sql files, as pgmem loads them, and the statements it composes
of them."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

import pytest
from psycopg import sql

import pgmem.queries
from pgmem.queries import NO_FILTER, Queries, named_blocks, sql_blocks

#: The files of named blocks (schema.sql is the readable schema, applied whole by the tests).
SQL_FILES = ("queries.sql", "langgraph.sql", "reembed.sql", "catalog.sql", "mem0.sql", "ui.sql",
             "tenant_roles.sql", "export.sql", "scales.sql")
PACKAGE = Path(__file__).parents[2] / "pgmem"


def test_blocks_are_loaded_without_their_comments() -> None:
    blocks = named_blocks("-- name: one\n-- a comment\nSELECT 1  -- trailing\n\n  FROM t\n"
                          "-- name: two\nSELECT 2\n")
    assert blocks == {"one": "SELECT 1\n  FROM t", "two": "SELECT 2"}


@pytest.mark.parametrize("file", SQL_FILES)
def test_no_string_literal_holds_a_comment_marker(file: str) -> None:
    """Comments are stripped line by line, which is only safe while no literal holds ``--``."""
    source = files("pgmem.sql").joinpath(file).read_text(encoding="utf-8")
    code = [line.split("--", 1)[0] for line in source.splitlines()]
    literals = [lit for line in code for lit in re.findall(r"'[^']*'", line)]
    assert literals, "the file has string literals"
    whole = [line for line in source.splitlines() if "'" in line and "--" in line]
    for line in whole:
        before = line.split("--", 1)[0]
        assert before.count("'") % 2 == 0, f"a -- inside a string literal: {line!r}"
    assert all("--" not in block for block in sql_blocks(file).values())


def test_unfiltered_statements_are_composed_once_per_scope_shape() -> None:
    from pgmem.filters import compile_filters

    queries = Queries("pgmem")
    by_user = queries.get("search", NO_FILTER, ["user_id"])
    assert queries.get("search", NO_FILTER, ["user_id"]) is by_user
    by_agent = queries.get("search", NO_FILTER, ["agent_id"])
    assert by_agent is not by_user
    text = by_user.as_string(None)
    assert "m.user_id = %(user_id)s" in text and "m.agent_id =" not in text
    assert "m.agent_id = %(agent_id)s" in by_agent.as_string(None)
    assert compile_filters(None)[0] is NO_FILTER  # no filter: the cached statement
    condition, _ = compile_filters({"city": "Paris"})
    filtered = queries.get("search", condition, ["user_id"])
    assert filtered is not queries.get("search", condition, ["user_id"])
    assert "metadata @>" in filtered.as_string(None)
    assert Queries("other").get("search", NO_FILTER, ["user_id"]).as_string(None) != text
    assert isinstance(by_user, sql.Composed)


def test_a_placeholder_naming_a_block_is_that_block_and_a_variant_leaves_fragments_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocks = {
        "scope": "m.tenant = %(tenant)s {scope_ids} AND {filters}",
        "scope_user_id": "AND m.user_id = %(user_id)s",
        "find": "SELECT 1 FROM {schema}.t m WHERE {scope} {large_path} {{a}}",
        "large_path": "UNION SELECT 2 FROM {schema}.u m WHERE ({scope}) IS TRUE",
    }
    monkeypatch.setitem(pgmem.queries.VARIANTS, "find_small", ("find", "large_"))
    queries = Queries("s", blocks)
    assert queries.get("find", NO_FILTER, ["user_id"]).as_string(None) == (
        'SELECT 1 FROM "s".t m WHERE m.tenant = %(tenant)s AND m.user_id = %(user_id)s AND TRUE'
        ' UNION SELECT 2 FROM "s".u m WHERE (m.tenant = %(tenant)s AND m.user_id = %(user_id)s'
        " AND TRUE) IS TRUE {a}"
    )
    assert queries.get("find_small", sql.SQL("x"), []).as_string(None) == (
        'SELECT 1 FROM "s".t m WHERE m.tenant = %(tenant)s  AND x  {a}'
    )


def test_only_pgmem_queries_reads_the_sql_files() -> None:
    """One loader: every module gets its blocks from pgmem.queries.sql_blocks."""
    readers = sorted(
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
        if '"pgmem.sql"' in path.read_text(encoding="utf-8")
    )
    assert readers == ["queries.py"]
    shipped = [f.name for f in files("pgmem.sql").iterdir() if f.name.endswith(".sql")]
    assert sorted(shipped) == sorted((*SQL_FILES, "schema.sql"))


def test_the_search_params_are_the_search_statements_parameters() -> None:
    """SearchParams names every parameter of the search statement besides the scope's and the
    filter's, and no other (search_small takes all but the large scope's: exact_scan, and
    filtered, which says whether its entity links are checked against a metadata filter)."""
    from dataclasses import fields

    from pgmem.store import SearchParams

    own = {f.name for f in fields(SearchParams)} - {"scope", "filter_params"}
    taken = {
        name: set(re.findall(r"%\((\w+)\)[sb]", Queries("pgmem").get(
            name, NO_FILTER, ["user_id"]).as_string(None))) - {"tenant", "user_id"}
        for name in ("search", "search_small")
    }
    assert taken == {"search": own, "search_small": own - {"exact_scan", "filtered"}}
