"""The named blocks of sql/queries.sql, as pgmem loads them."""

from __future__ import annotations

import re
from importlib.resources import files

from pgmem.queries import named_blocks, raw_queries


def test_blocks_are_loaded_without_their_comments() -> None:
    blocks = named_blocks("-- name: one\n-- a comment\nSELECT 1  -- trailing\n\n  FROM t\n"
                          "-- name: two\nSELECT 2\n")
    assert blocks == {"one": "SELECT 1\n  FROM t", "two": "SELECT 2"}


def test_no_string_literal_holds_a_comment_marker() -> None:
    """Comments are stripped line by line, which is only safe while no literal holds ``--``."""
    source = files("pgmem.sql").joinpath("queries.sql").read_text(encoding="utf-8")
    code = [line.split("--", 1)[0] for line in source.splitlines()]
    literals = [lit for line in code for lit in re.findall(r"'[^']*'", line)]
    assert literals, "the file has string literals"
    whole = [line for line in source.splitlines() if "'" in line and "--" in line]
    for line in whole:
        before = line.split("--", 1)[0]
        assert before.count("'") % 2 == 0, f"a -- inside a string literal: {line!r}"
    assert all("--" not in block for block in raw_queries().values())


def test_unfiltered_statements_are_composed_once_per_scope_shape() -> None:
    from psycopg import sql

    from pgmem.filters import compile_filters
    from pgmem.queries import NO_FILTER, Queries

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
