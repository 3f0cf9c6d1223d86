"""The search-statement benchmark's variants (benchmarks.search_legs) against the statement as
pgmem composes it now: each must switch its part off, so that a change of the statement fails
here rather than in a benchmark run. No database, no models."""

from __future__ import annotations

import pytest

from benchmarks.search_legs import VARIANTS
from pgmem.queries import Queries


@pytest.mark.parametrize("name", [name for name in VARIANTS if name != "whole statement"])
def test_each_variant_changes_the_small_scope_statement(name: str) -> None:
    text = Queries("pgmem").get("search_small", scope_ids=("user_id",)).as_string(None)
    varied = VARIANTS[name](text)  # a SystemExit if what it switches is no longer there
    assert varied != text
    assert varied.count("WHERE false") + varied.count("NULL::uuid AS") > text.count(
        "WHERE false") + text.count("NULL::uuid AS")
