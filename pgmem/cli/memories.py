"""The memory commands: ``add``, ``search``, ``get``, ``list``, ``delete``, ``update``,
``history`` — each one call of :class:`~pgmem.Memory`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from pgmem.cli.options import (
    Commands,
    clip,
    json_arg,
    print_json,
    printable,
    scope,
    scope_label,
    scope_options,
)
from pgmem.cli.session import Session
from pgmem.errors import FilterError, InvalidInputError
from pgmem.results import SearchHit
from pgmem.scoring import SEARCH_LIMIT

# The help of the scope options of a command by id: they guard it (Memory.get's scope ids).
GUARD = "the memory must have (optional: a guard)"


def register(commands: Commands) -> None:
    """Add the memory commands."""
    p = commands.add("add", cmd_add, "add one memory to a scope", autostart=True)
    p.add_argument("text", metavar="TEXT", help="the memory's text")
    scope_options(p, "to store it under (at least one of --user/--agent/--run)")
    p.add_argument("--metadata", metavar="JSON", help='a JSON object, e.g. \'{"source": "chat"}\'')
    p.add_argument("--json", action="store_true", help="print the stored memory as JSON")

    p = commands.add("search", cmd_search, "search a scope; a table of each signal's contribution",
                     autostart=True)
    p.add_argument("query", metavar="QUERY", help="what to look for")
    scope_options(p, "to search (at least one)")
    p.add_argument("--limit", type=int, default=SEARCH_LIMIT, metavar="N",
                   help=f"most results (default: {SEARCH_LIMIT}, as Memory.search)")
    p.add_argument("--threshold", type=float, default=0.1, metavar="X",
                   help="drop memories with semantic similarity below X (default: 0.1)")
    p.add_argument("--filters", metavar="JSON",
                   help='metadata filter, e.g. \'{"topic": "work", "year": {"gte": 2024}}\'')
    p.add_argument("--json", action="store_true", help="print the hits with their breakdown "
                   "as JSON")
    p.add_argument("--sql", action="store_true",
                   help="print the search statement (parameters inlined) instead of running it")

    p = commands.add("get", cmd_get, "show one memory", autostart=True)
    p.add_argument("id", metavar="ID", help="the memory's id")
    scope_options(p, GUARD)
    p.add_argument("--json", action="store_true", help="print it as JSON")

    p = commands.add("list", cmd_list, "list a scope's memories, oldest first", autostart=True)
    scope_options(p, "to list (at least one)")
    p.add_argument("--limit", type=int, default=100, metavar="N",
                   help="memories per page (default: 100)")
    p.add_argument("--cursor", metavar="CURSOR", help="the cursor printed after a full page")
    p.add_argument("--filters", metavar="JSON", help="metadata filter (as for search)")
    p.add_argument("--json", action="store_true", help="print the page as JSON")

    p = commands.add("delete", cmd_delete, "delete a memory, or with --all every memory of a "
                     "scope", autostart=True)
    p.add_argument("id", metavar="ID", nargs="?", help="the memory's id")
    p.add_argument("--all", action="store_true", help="delete every memory of the scope")
    scope_options(p, f"whose memories --all deletes; with an ID, {GUARD}")

    p = commands.add("update", cmd_update, "change a memory's text and/or metadata",
                     autostart=True)
    p.add_argument("id", metavar="ID", help="the memory's id")
    p.add_argument("--text", help="the new text (re-embedded, entities re-linked)")
    p.add_argument("--metadata", metavar="JSON", help="new metadata, replacing the old")
    scope_options(p, GUARD)

    p = commands.add("history", cmd_history, "show a memory's ADD/UPDATE/DELETE events",
                     autostart=True)
    p.add_argument("id", metavar="ID", help="the memory's id")
    scope_options(p, f"{GUARD}; the memory must still exist")
    p.add_argument("--json", action="store_true", help="print the events as JSON")


def cmd_add(args: argparse.Namespace, session: Session) -> int:
    """Add one memory."""
    metadata = json_arg(args.metadata, "--metadata", InvalidInputError)
    result = session.memory().add(args.text, metadata=metadata, **scope(args))
    if args.json:
        print_json(result)
    elif result.duplicate:
        print(f"duplicate of {result.id} (already stored; not added again)")
    else:
        print(f"added {result.id}")
    return 0


def cmd_search(args: argparse.Namespace, session: Session) -> int:
    """Search a scope, printing each hit's score breakdown."""
    filters = json_arg(args.filters, "--filters", FilterError)
    memory = session.memory()
    if args.sql:
        print(memory.search_sql(args.query, limit=args.limit, filters=filters, **scope(args)))
        return 0
    hits = memory.search(
        args.query, limit=args.limit, threshold=args.threshold, filters=filters, **scope(args)
    )
    if args.json:
        print_json(hits)
    else:
        print_hits(hits)
    return 0


_LEG_NAMES = {"semantic": "sem", "keyword": "kw", "entity": "ent"}


def print_hits(hits: Sequence[SearchHit], out: TextIO | None = None) -> None:
    """The search results as a table: score, each signal's part, the legs that found it."""
    out = out or sys.stdout
    if not hits:
        print("no memories matched", file=out)
        return
    header = f"{'#':>3} {'score':>6} {'semantic':>8} {'kw raw':>7} {'keyword':>7} " \
             f"{'entity':>6}  {'legs':<11} text"
    print(header, file=out)
    used = len(header) - len("text")
    for rank, hit in enumerate(hits, start=1):
        e = hit.explain
        raw = "-" if e.keyword_raw is None else f"{e.keyword_raw:.2f}"
        legs = "+".join(_LEG_NAMES[leg] for leg in e.legs)
        print(f"{rank:>3} {hit.score:>6.3f} {e.semantic:>8.3f} {raw:>7} {e.keyword:>7.3f} "
              f"{e.entity:>6.3f}  {legs:<11} {clip(hit.text, used)}", file=out)
        for h in e.entity_hits:
            of = "" if e.scope_size is None else f" (of {e.scope_size})"
            print(f"{'':>8}entity {h.name!r} (similarity {h.similarity:.2f}) reaches "
                  f"{h.spread} memor{'y' if h.spread == 1 else 'ies'} of the scope{of}: "
                  f"weight {h.weight:.2f}", file=out)
        if e.context_from is not None:
            print(f"{'':>8}context {e.context:.3f} from its neighbour {e.context_from}", file=out)
    e = hits[0].explain
    parts: list[str] = [name for name in ("semantic", "keyword", "entity") if name in e.signals]
    if any(hit.explain.context for hit in hits):
        parts.append("context")
    print(f"score = ({' + '.join(parts)}) / {e.max_possible:g}; keyword score {e.keyword_score}"
          + "".join(f"; {note}" for note in e.notes), file=out)


def cmd_get(args: argparse.Namespace, session: Session) -> int:
    """Show one memory."""
    record = session.memory().get(args.id, **scope(args, required=False))
    if args.json:
        print_json(record)
        return 0
    for name in ("id", "text", "user_id", "agent_id", "run_id"):
        value = getattr(record, name)
        print(f"{name + ':':<11}{'-' if value is None else printable(str(value))}")
    print(f"{'metadata:':<11}{printable(json.dumps(record.metadata, ensure_ascii=False))}")
    print(f"{'created:':<11}{record.created_at.isoformat(timespec='seconds')}")
    print(f"{'updated:':<11}{record.updated_at.isoformat(timespec='seconds')}")
    return 0


def cmd_list(args: argparse.Namespace, session: Session) -> int:
    """List a scope's memories, oldest first, a page at a time."""
    filters = json_arg(args.filters, "--filters", FilterError)
    page = session.memory().get_all(
        limit=args.limit, cursor=args.cursor, filters=filters, **scope(args)
    )
    if args.json:
        print_json(page)
        return 0
    if not page.items:
        print("no memories")
    for record in page.items:
        when = record.created_at.strftime("%Y-%m-%d %H:%M")
        label = scope_label(record)
        print(f"{record.id}  {when}  {label:<14} {clip(record.text, 71 + max(len(label) - 14, 0))}")
    if page.next_cursor:
        print(f"more: add --cursor {page.next_cursor}")
    return 0


def cmd_delete(args: argparse.Namespace, session: Session) -> int:
    """Delete one memory, or every memory of a scope."""
    given = scope(args, required=False)
    if args.all == (args.id is not None):
        raise InvalidInputError("give a memory ID, or --all with --user/--agent/--run")
    if args.id is not None:
        session.memory().delete(args.id, **given)
        print(f"deleted {args.id}")
    else:
        count = session.memory().delete_all(**scope(args))
        print(f"deleted {count} memor{'y' if count == 1 else 'ies'}")
    return 0


def cmd_update(args: argparse.Namespace, session: Session) -> int:
    """Change a memory's text and/or metadata."""
    metadata = json_arg(args.metadata, "--metadata", InvalidInputError)
    record = session.memory().update(
        args.id, text=args.text, metadata=metadata, **scope(args, required=False)
    )
    print(f"updated {record.id}")
    return 0


def cmd_history(args: argparse.Namespace, session: Session) -> int:
    """Show a memory's ADD, UPDATE and DELETE events."""
    events = session.memory().history(args.id, **scope(args, required=False))
    if args.json:
        print_json(events)
        return 0
    for event in events:
        text = event.new_text if event.new_text is not None else event.old_text
        print(f"{event.created_at.isoformat(timespec='seconds')}  {event.event:<6} "
              f"{printable(text or '')}")
    return 0
