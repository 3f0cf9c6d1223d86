"""What the performance benchmarks share: percentiles, Markdown tables, the machine and versions,
and writing a section of ``docs/benchmarks.md``.

Every benchmark command rewrites only its own section of the file (between ``<!-- BEGIN name -->``
and ``<!-- END name -->``) and the environment section; anything else in the file is kept.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import statistics
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import psycopg

REPO_ROOT = Path(__file__).resolve().parent.parent
DOC = REPO_ROOT / "docs" / "benchmarks.md"
SECTIONS = ("intro", "environment", "peers", "peers-user", "latency", "latency-default-threads",
            "latency-onnx", "scale", "ingestion", "concurrency", "onnx")
INTRO = """# Benchmarks

Performance and retrieval quality of pgmem on one machine. Each table below comes with the
command that made it; a command rewrites its own section of this file (text outside the
`BEGIN`/`END` markers is kept). Why a search spends its time where it does:
[architecture.md](architecture.md#where-a-searchs-time-goes).

![Search latency by table size: pgmem's search and its floor](images/search-latency.svg)

![Recall@10 on LoCoMo: pgmem's search, Mem0's scoring and semantic search alone](images/recall.svg)

![pgmem beside Mem0, and PgmemStore beside LangGraph's PostgresStore](images/peers.svg)

`python -m benchmarks.report --plots` draws these figures (`pip install 'pgmem[bench]'`) from the
JSON the benchmarks write with `--json` into `benchmarks/results/`:

```
python -m benchmarks.corpus prepare --conversations dev   # once: the 100,000-row corpus (cached)
python -m benchmarks.latency --conversations dev --json benchmarks/results/latency.json
python -m benchmarks.retrieval --conversations dev --configs hybrid,hybrid-mem0,semantic \\
    --json benchmarks/results/retrieval.json
python -m benchmarks.peers --conversations dev --scenario user --memories 200 \\
    --json benchmarks/results/peers-user.json           # pip install 'pgmem[peers]'
python -m benchmarks.langgraph --conversations dev --json benchmarks/results/langgraph.json
python -m benchmarks.report --plots
```

## What they need

A PostgreSQL server with pgvector where databases may be created (`--dsn`, else
`PGMEM_BENCH_DSN`, else `PGMEM_TEST_DSN`), the models (all-MiniLM-L6-v2, a spaCy English model)
and LoCoMo's conversations: download `data/locomo10.json` from its repository,
<https://github.com/snap-research/LoCoMo> (CC BY-NC 4.0), and set `PGMEM_LOCOMO` to the file or
pass `--data PATH`; it is read as published. The figures here are on its first five
conversations, `--conversations dev`.

The machine had 2 cores and other work running, so every figure that matters is a **ratio
against a baseline measured in the same run, on the same table**, and every time is a **median**
(p50) or a 95th percentile over many calls; absolute milliseconds are given for scale only.
torch runs on one thread in every benchmark process. `latency`, `scale` and `large_scope` take
`--compare PATH` to time another search statement beside pgmem's on the same table (and check
that it returns the same rows), e.g. an older revision's:
`git show d8ae5ca:sql/queries.sql > /tmp/search_d8ae5ca.sql`.
"""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def p50(values: Sequence[float]) -> float:
    """The median."""
    return statistics.median(values) if values else float("nan")


def p95(values: Sequence[float]) -> float:
    """The 95th percentile."""
    return percentile(values, 95)


def table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table; the first column left-aligned, the others right-aligned."""
    lines = [
        "| " + " | ".join(head) + " |",
        "|---" + "|---:" * (len(head) - 1) + "|",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def ms(seconds: float) -> str:
    """Seconds as milliseconds for a table cell."""
    return f"{seconds * 1000:.2f}"


def ratio(value: float, baseline: float) -> str:
    """``value / baseline`` for a table cell."""
    return f"{value / baseline:.2f}x"


# -- machine and versions -----------------------------------------------------------------------


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _commit() -> str:
    """The checked-out commit, read from .git without running git."""
    git = REPO_ROOT / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:12]
        ref = head[5:]
        if (git / ref).exists():
            return (git / ref).read_text().strip()[:12]
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line[:12]
    except OSError:
        pass
    return "unknown"


def environment(dsn: str, spacy_model: str, torch_threads: int) -> list[tuple[str, str]]:
    """The machine, the server and the versions, as (name, value) pairs."""
    with psycopg.connect(dsn) as conn:
        server = conn.execute("SHOW server_version").fetchone()
        pgvector = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        settings = conn.execute(
            "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' ORDER BY name)"
            " FROM pg_settings WHERE name IN ('shared_buffers', 'work_mem', 'fsync',"
            " 'max_parallel_workers_per_gather', 'jit')").fetchone()
    import torch

    return [
        ("machine", (f"{os.cpu_count()} CPUs (nproc), {_ram_gib()} RAM, {_cpu_model()}, "
                     f"{platform.system()} {platform.release()}")),
        ("PostgreSQL", f"{server[0] if server else '?'} ({settings[0] if settings else ''})"),
        ("pgvector", pgvector[0] if pgvector else "not installed in the benchmark database"),
        ("Python", platform.python_version()),
        ("torch", f"{torch.__version__} ({torch_threads} thread)"),
        ("sentence-transformers", f"{_version('sentence-transformers')} (all-MiniLM-L6-v2)"),
        ("spaCy", f"{_version('spacy')} ({spacy_model})"),
        ("psycopg", _version("psycopg")),
        ("pgmem", f"{_version('pgmem')}, commit {_commit()}"),
    ]


def load_average() -> str:
    """The 1-minute load average: how busy the shared machine was."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def run_header(command: str) -> str:
    """The first lines of a section: the exact command, when it ran and how busy the machine was."""
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"```\n{command}\n```\n\nRun {when}; load average {load_average()} at the end."


def command_line() -> str:
    """How this process was started, as a ``python -m`` command."""
    module = sys.modules["__main__"].__spec__
    name = module.name if module else sys.argv[0]
    return " ".join(["python -m", name, *sys.argv[1:]])


# -- docs/benchmarks.md -------------------------------------------------------------------------


def markdown(text: str) -> str:
    """Docstring markup as Markdown: ``code`` as `code`, :mod:`x` as `x` (code fences kept)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            line = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", line).replace("``", "`")
        lines.append(line)
    return "\n".join(lines)


def write_section(name: str, body: str, doc: Path = DOC) -> None:
    """Replace section ``name`` of ``doc`` with ``body`` (creating the file or the section)."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{markdown(body.strip())}\n{end}"
    text = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        # Insert before the first later section that exists, to keep SECTIONS' order.
        rank = SECTIONS.index(name) if name in SECTIONS else len(SECTIONS)
        later = [f"<!-- BEGIN {s} -->" for s in SECTIONS[rank + 1 :]]
        anchor = next((m for m in later if m in text), None)
        if anchor:
            head, tail = text.split(anchor, 1)
            text = head + block + "\n\n" + anchor + tail
        elif text.strip():
            text = text.rstrip("\n") + "\n\n" + block + "\n"
        else:
            text = block + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text, encoding="utf-8")


def write_environment(dsn: str, spacy_model: str, torch_threads: int, doc: Path = DOC) -> str:
    """Rewrite the introduction and the environment section; return the latter."""
    write_section("intro", INTRO, doc)
    body = "## Machine and versions\n\n" + table(
        ("", "value"), environment(dsn, spacy_model, torch_threads))
    write_section("environment", body, doc)
    return body


def main(argv: Sequence[str] | None = None) -> int:
    """``--plots``: draw the figures of docs/benchmarks.md from the benchmarks' JSON."""
    import argparse

    from benchmarks import plots

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.report",
        description="Draw docs/benchmarks.md's figures (SVG) from the benchmarks' JSON.")
    parser.add_argument("--plots", action="store_true", help="write the figures")
    parser.add_argument("--results", type=Path, default=plots.RESULTS, metavar="DIR",
                        help="where the benchmarks' --json files are (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=plots.IMAGES, metavar="DIR",
                        help="where the figures go (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.plots:
        parser.error("nothing to do: pass --plots")
    plots.write_plots(args.results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
