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
