"""``pgmem demo``: import the demo data and run three searches, each decided by one signal."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from pgmem.cli.importing import demo_rows, import_rows
from pgmem.cli.memories import print_hits
from pgmem.cli.options import Commands
from pgmem.cli.session import Session
from pgmem.results import SearchHit

if TYPE_CHECKING:
    from pgmem.memory import Memory

# (the signal shown, user, query): a garage reference number only the keyword leg matches
# exactly; "NYC", linked to the entity "New York City"; a question sharing no word or entity
# with its answer.
DEMO_QUERIES = (
    ("keyword", "ben", "88417"),
    ("entity", "ben", "Who will be in NYC this autumn?"),
    ("semantic", "alice", "What medication could harm her?"),
)


def register(commands: Commands) -> None:
    """Add ``demo``."""
    commands.add("demo", cmd_demo, "import the demo data and run three example searches",
                 autostart=True)


def cmd_demo(args: argparse.Namespace, session: Session) -> int:
    """Import the demo data and run three searches that show each signal at work."""
    memory = session.memory()
    imported, duplicates, _ = import_rows(memory, demo_rows("demo"), "the demo data")
    print(f"demo data: {imported} memories imported"
          + (f", {duplicates} already there" if duplicates else ""))
    for signal, user, query in DEMO_QUERIES:
        print(f"\n$ pgmem search {json.dumps(query)} --user {user} --limit 3")
        hits = memory.search(query, user_id=user, limit=3)
        print_hits(hits)
        if hits:
            print(_note(memory, signal, user, query, hits[0]))
    return 0


def _note(memory: Memory, signal: str, user: str, query: str, best: SearchHit) -> str:
    semantic = memory.search(query, user_id=user, limit=20, mode="semantic", threshold=0.0)
    rank = next((i for i, h in enumerate(semantic, start=1) if h.id == best.id), None)
    alone = f"#{rank}" if rank else "below the top 20"
    e = best.explain
    if signal == "semantic":
        return (f"-> semantic: no query word or entity in the best hit (keyword {e.keyword:.2f}, "
                f"entity {e.entity:.2f}); similarity {e.semantic:.2f} found it")
    part = e.keyword if signal == "keyword" else e.entity
    return (f"-> {signal}: by similarity alone the best hit ranks {alone}; its {signal} "
            f"score {part:.2f} puts it first")
