"""``python -m benchmarks.report --plots``: each figure is a valid SVG drawn from the JSON the
benchmarks write, shows that JSON's numbers, and a figure whose JSON is missing is left alone.
No database, no models; matplotlib (``pgmem[bench]``)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from benchmarks import plots, report

pytest.importorskip("matplotlib")

SVG = "{http://www.w3.org/2000/svg}"
RESULTS = {
    "latency": {"limit": 20, "sizes": [
        {"memories": 1000, "search_p50": 0.0201, "search_p95": 0.0302, "embedding_p50": 0.015,
         "bare_p50": 0.0008, "sql_p50": 0.0031},
        {"memories": 10000, "search_p50": 0.0212, "search_p95": 0.0311, "embedding_p50": 0.015,
         "bare_p50": 0.0009, "sql_p50": 0.0035},
    ]},
    "retrieval": {"tasks": {
        "turns": {"memories": 40, "configs": {
            "hybrid": {"recall_10": 0.712}, "semantic": {"recall_10": 0.432}}},
        "observations": {"memories": 12, "configs": {
            "hybrid": {"recall_10": 0.654}, "semantic": {"recall_10": 0.598}}},
    }},
    "peers-user": {"pgmem": {"recall_10": 0.801, "search_p50": 0.019, "add_rate": 40.0},
                   "mem0": {"recall_10": 0.613, "search_p50": 0.056, "add_rate": 27.0}},
    "langgraph": {"stores": {
        "PgmemStore": {"recall_10": 0.733, "search_p50": 0.030, "add_rate": 2.0},
        "PostgresStore": {"recall_10": 0.497, "search_p50": 0.020, "add_rate": 2.5}}},
}


def texts(path: Path) -> list[str]:
    """The text of an SVG (which must parse as one)."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def test_the_report_draws_every_figure_from_the_benchmarks_json(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "images"
    results.mkdir()
    for name, data in RESULTS.items():
        (results / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")
    assert report.main(["--plots", "--results", str(results), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(plots.FIGURES)
    assert {"0.712", "0.432", "0.654", "0.598"} <= set(texts(out / "recall.svg"))
    assert {"0.801", "0.613", "56.0", "0.733", "0.497", "PostgresStore"} <= set(
        texts(out / "peers.svg"))
    latency = texts(out / "search-latency.svg")
    assert "1,000" in latency and "10,000" in latency


def test_a_figure_without_its_json_is_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "retrieval.json").write_text(json.dumps(RESULTS["retrieval"]), encoding="utf-8")
    kept = tmp_path / "peers.svg"
    kept.write_text("<svg/>", encoding="utf-8")
    written = plots.write_plots(tmp_path, tmp_path)
    assert [p.name for p in written] == ["recall.svg"]
    assert kept.read_text(encoding="utf-8") == "<svg/>"
    said = capsys.readouterr().out
    assert "peers.svg: left as it was, no peers-user.json, langgraph.json" in said
