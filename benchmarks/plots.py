"""The figures of docs/benchmarks.md, drawn as SVG from the JSON the benchmarks write.

    python -m benchmarks.report --plots [--results benchmarks/results] [--out docs/images]

Each figure reads the files its benchmark writes with ``--json PATH`` (the commands of
docs/benchmarks.md write them into ``benchmarks/results/``), so a figure changes when its
numbers do; one whose files are missing is left as it was, and said so. Needs matplotlib
(``pip install 'pgmem[bench]'``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"
IMAGES = REPO_ROOT / "docs" / "images"

PGMEM = "#336791"  # PostgreSQL's blue
OTHER = "#b0b0b0"
FLOOR = "#e07b39"

#: Which results a retrieval figure shows, in order: configuration key and its label.
RECALL_CONFIGS = (
    ("hybrid", "pgmem (hybrid)"),
    ("hybrid-mem0", "pgmem, Mem0's scoring"),
    ("keyword-bm25", "keyword only (BM25)"),
    ("semantic", "semantic only (pgvector)"),
)

Figure = Callable[[dict[str, Any]], Any]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("the figures need matplotlib: pip install 'pgmem[bench]'") from None
    matplotlib.use("Agg")
    matplotlib.rcParams.update({
        "svg.fonttype": "none",  # text stays text: smaller files, searchable labels
        "svg.hashsalt": "pgmem",  # the same numbers write the same file
        "font.size": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
    })
    import matplotlib.pyplot as plt

    return plt


def latency_figure(data: dict[str, Any]) -> Any:
    """``Memory.search`` p50 and p95 by table size, beside its floor: the same query's
    embedding plus a bare pgvector top-k of the scope (``benchmarks.latency --json``)."""
    plt = _pyplot()
    sizes = data["latency"]["sizes"]
    x = [s["memories"] for s in sizes]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(x, [s["search_p50"] * 1000 for s in sizes], "o-", color=PGMEM,
            label="pgmem Memory.search, p50")
    ax.plot(x, [s["search_p95"] * 1000 for s in sizes], "o--", color=PGMEM, alpha=0.6,
            label="pgmem Memory.search, p95")
    ax.plot(x, [(s["embedding_p50"] + s["bare_p50"]) * 1000 for s in sizes], "s-",
            color=FLOOR, label=f"floor: query embedding + bare top-{data['latency']['limit']}, p50")
    ax.set_xscale("log")
    ax.set_xticks(x, [f"{n:,}" for n in x])
    ax.set_xlabel("memories in the table (100 per scope)")
    ax.set_ylabel("ms per search")
    ax.set_ylim(bottom=0)
    ax.set_title("Search latency by table size")
    ax.legend(frameon=False, loc="lower right")
    return fig


def recall_figure(data: dict[str, Any]) -> Any:
    """Recall@10 on LoCoMo by configuration and task (``benchmarks.retrieval --json``)."""
    plt = _pyplot()
    tasks = data["retrieval"]["tasks"]
    names = list(tasks)
    shown = [(key, label) for key, label in RECALL_CONFIGS
             if any(key in tasks[t]["configs"] for t in names)]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    width = 0.8 / len(shown)
    colors = [PGMEM, "#6f97bb", "#9aa9b5", OTHER]
    for i, (key, label) in enumerate(shown):
        values = [tasks[t]["configs"].get(key, {}).get("recall_10", 0.0) for t in names]
        positions = [n + (i - (len(shown) - 1) / 2) * width for n in range(len(names))]
        bars = ax.bar(positions, values, width, label=label, color=colors[i % len(colors)])
        ax.bar_label(bars, fmt="%.3f", fontsize=8, padding=2)
    ax.set_xticks(range(len(names)), [f"{t} ({tasks[t]['memories']:,} memories)" for t in names])
    ax.set_ylabel("recall@10")
    ax.set_ylim(0, 1)
    ax.set_title("Recall@10 on LoCoMo")
    ax.legend(frameon=False, fontsize=8, ncols=2, loc="upper right")
    return fig


def peers_figure(data: dict[str, Any]) -> Any:
    """pgmem beside Mem0 (``benchmarks.peers --scenario user --json``) and PgmemStore beside
    LangGraph's PostgresStore (``benchmarks.langgraph --json``): recall@10, search p50 and
    adds per second, each side's raw figure."""
    plt = _pyplot()
    peers, langgraph = data["peers-user"], data["langgraph"]["stores"]
    pairs = [
        ("pgmem beside Mem0", ("pgmem", peers["pgmem"]), ("Mem0", peers["mem0"])),
        ("PgmemStore beside LangGraph's PostgresStore",
         ("PgmemStore", langgraph["PgmemStore"]), ("PostgresStore", langgraph["PostgresStore"])),
    ]
    metrics = (
        ("recall@10 (higher is better)", lambda r: r["recall_10"], "%.3f"),
        ("search p50, ms (lower is better)", lambda r: r["search_p50"] * 1000, "%.1f"),
        ("adds per second, one call each", lambda r: r["add_rate"], "%.1f"),
    )
    fig = plt.figure(figsize=(8.4, 5.2), layout="constrained")
    for subfig, (title, (ours_name, ours), (theirs_name, theirs)) in zip(
        fig.subfigures(len(pairs), 1, hspace=0.08), pairs, strict=True
    ):
        subfig.suptitle(title, fontweight="bold", fontsize=10)
        for ax, (label, get, fmt) in zip(subfig.subplots(1, len(metrics)), metrics, strict=True):
            bars = ax.bar([ours_name, theirs_name], [get(ours), get(theirs)],
                          color=[PGMEM, OTHER], width=0.6)
            ax.bar_label(bars, fmt=fmt, fontsize=8, padding=2)
            ax.set_ylim(0, max(get(ours), get(theirs)) * 1.25)
            ax.set_yticks([])
            ax.spines["left"].set_visible(False)
            ax.set_title(label, fontsize=9)
    return fig


#: Each figure: its file, the results it reads (``<name>.json`` in the results folder), and
#: how it is drawn.
FIGURES: dict[str, tuple[tuple[str, ...], Figure]] = {
    "search-latency.svg": (("latency",), latency_figure),
    "recall.svg": (("retrieval",), recall_figure),
    "peers.svg": (("peers-user", "langgraph"), peers_figure),
}


def write_plots(results: Path = RESULTS, out: Path = IMAGES) -> list[Path]:
    """Draw every figure whose results are in ``results`` into ``out``; return the files
    written. Prints which figures were left as they were, and why."""
    plt = _pyplot()
    written = []
    for filename, (names, draw) in FIGURES.items():
        missing = [n for n in names if not (results / f"{n}.json").is_file()]
        if missing:
            print(f"{filename}: left as it was, no {', '.join(f'{n}.json' for n in missing)} "
                  f"in {results}")
            continue
        data = {n: json.loads((results / f"{n}.json").read_text(encoding="utf-8"))
                for n in names}
        fig = draw(data)
        out.mkdir(parents=True, exist_ok=True)
        path = out / filename
        fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
        print(f"{filename}: written from {', '.join(f'{n}.json' for n in names)}")
    return written
