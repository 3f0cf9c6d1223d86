"""Unit tests of the peer benchmark's tables for the user scenario. No database, no models."""

from __future__ import annotations

from benchmarks.peers import SideResult, markdown_tables


def test_the_user_scenario_table_has_no_batch_row_and_sets_search_beside_its_floor() -> None:
    results = {
        "pgmem": SideResult(one_by_one_seconds=[0.05, 0.05], search_seconds=[0.030, 0.040],
                            recall_10=0.8),
        "mem0": SideResult(one_by_one_seconds=[0.1, 0.1], search_seconds=[0.090, 0.120],
                           recall_10=0.6),
        "floor": SideResult(search_seconds=[0.010, 0.020]),
    }
    text = markdown_tables(results, n_questions=2, n_memories=2, limit=20)
    assert "limit 20." in text
    assert "batch ingest" not in text
    assert "| search p50, ms | 35.0 (3.0x) | 105.0 |" in text
    assert "| one-by-one add, memories/s | 20.0 (2.0x) | 10.0 |" in text
    assert "| p50, ms | 35.0 | 15.0 | 2.33x |" in text
    assert "\n| floor |" not in text  # no row of its own: the floor is no side
    assert set(results) == {"pgmem", "mem0", "floor"}  # the results are left as they were
