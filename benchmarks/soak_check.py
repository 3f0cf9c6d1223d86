"""What the soak's clients were told (:class:`Ledger`), and the check of the database against it
and against pgmem's own invariants (:func:`check`).

Each client is the only writer of its two scopes, so it knows what they must hold: the memories
whose add it was told succeeded, with the text of their last update it was told succeeded, less
those it was told it deleted. A call that failed with a lost connection may or may not have
committed: its outcome is *uncertain* and either is accepted. Any other error means nothing was
written.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

ScopeKey = tuple[str, str | None, str | None, str | None]  # tenant, user_id, agent_id, run_id


@dataclass
class Ledger:
    """One scope's memories as its client was told."""

    key: ScopeKey
    tag: str  # in every text of the scope: a search hit of another scope shows it
    confirmed: dict[uuid.UUID, str] = field(default_factory=dict)
    possible: dict[uuid.UUID, set[str]] = field(default_factory=dict)  # uncertain update
    maybe_deleted: set[uuid.UUID] = field(default_factory=set)
    deleted: set[uuid.UUID] = field(default_factory=set)
    maybe_added: set[str] = field(default_factory=set)  # texts of uncertain adds
    wrong_answers: list[str] = field(default_factory=list)

    def added(self, memory_id: uuid.UUID, text: str) -> None:
        self.confirmed[memory_id] = text

    def updated(self, memory_id: uuid.UUID, text: str) -> None:
        self.confirmed[memory_id] = text
        self.possible.pop(memory_id, None)

    def update_uncertain(self, memory_id: uuid.UUID, text: str) -> None:
        self.possible.setdefault(memory_id, {self.confirmed[memory_id]}).add(text)

    def removed(self, memory_id: uuid.UUID) -> None:
        self.confirmed.pop(memory_id, None)
        self.possible.pop(memory_id, None)
        self.maybe_deleted.discard(memory_id)
        self.deleted.add(memory_id)

    def settled(self, memory_id: uuid.UUID) -> bool:
        """Whether the memory's text is known for sure (no uncertain update or delete)."""
        return memory_id not in self.possible and memory_id not in self.maybe_deleted

    def wrong(self, what: str) -> None:
        self.wrong_answers.append(what)


@dataclass
class Finding:
    """The check's result: counts by kind, and a few examples of each."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, example: str, n: int = 1) -> None:
        self.counts[kind] += n
        shown = self.examples.setdefault(kind, [])
        if len(shown) < 3:
            shown.append(example)

    @property
    def lost(self) -> int:
        return self.counts["lost"]

    @property
    def leaked(self) -> int:
        return self.counts["leaked"]

    @property
    def inconsistent(self) -> int:
        return sum(n for kind, n in self.counts.items() if kind not in ("lost", "leaked"))


# Invariants of the whole database, each a count of what breaks it.
_INVARIANTS = {
    "memory without its ADD event": """
        SELECT count(*) FROM pgmem.memories m WHERE NOT EXISTS (
            SELECT FROM pgmem.history h
             WHERE h.tenant = m.tenant AND h.memory_id = m.id AND h.event = 'ADD')""",
    "memory without entity links": """
        SELECT count(*) FROM pgmem.memories m WHERE NOT EXISTS (
            SELECT FROM pgmem.memory_entities me
             WHERE me.tenant = m.tenant AND me.memory_id = m.id)""",
    "link whose scope is not its memory's": """
        SELECT count(*) FROM pgmem.memory_entities me JOIN pgmem.memories m
            ON m.tenant = me.tenant AND m.id = me.memory_id
         WHERE (me.user_id, me.agent_id, me.run_id)
               IS DISTINCT FROM (m.user_id, m.agent_id, m.run_id)""",
    "orphan link": """
        SELECT count(*) FROM pgmem.memory_entities me WHERE NOT EXISTS (
            SELECT FROM pgmem.memories m WHERE m.tenant = me.tenant AND m.id = me.memory_id)
           OR NOT EXISTS (
            SELECT FROM pgmem.entities e WHERE e.tenant = me.tenant AND e.id = me.entity_id)""",
    "orphan entity": """
        SELECT count(*) FROM pgmem.entities e WHERE NOT EXISTS (
            SELECT FROM pgmem.memory_entities me
             WHERE me.tenant = e.tenant AND me.entity_id = e.id)""",
    "content hash not the text's": """
        SELECT count(*) FROM pgmem.memories
         WHERE content_hash <> encode(sha256(convert_to(text, 'UTF8')), 'hex')""",
    "two memories of one text in one scope": """
        SELECT coalesce(sum(n - 1), 0) FROM (
            SELECT count(*) AS n FROM pgmem.memories
             GROUP BY tenant, user_id, agent_id, run_id, content_hash HAVING count(*) > 1) d""",
    "reembed left behind": """
        SELECT count(*) FROM pgmem.embedding_models WHERE role = 'next'""",
}


def check(dsn: str, ledgers: list[Ledger]) -> Finding:
    """Check the database against the ledgers and pgmem's invariants."""
    finding = Finding()
    with psycopg.connect(dsn, autocommit=True, application_name="pgmem-soak-admin") as conn:
        for kind, query in _INVARIANTS.items():
            row = conn.execute(query).fetchone()
            n = int(row[0]) if row else 0
            if n:
                finding.add(kind, query.split("FROM", 1)[1].split()[0], n)
        memories = {
            (row[0], row[1]): row for row in conn.execute(
                "SELECT tenant, id, user_id, agent_id, run_id, text FROM pgmem.memories")
        }
        events: dict[tuple[str, uuid.UUID], list[tuple[str, str | None, str | None]]] = {}
        for tenant, memory_id, event, old, new in conn.execute(
            "SELECT tenant, memory_id, event, old_text, new_text FROM pgmem.history "
            "ORDER BY tenant, memory_id, id"
        ):
            events.setdefault((tenant, memory_id), []).append((event, old, new))
    _check_histories(finding, memories, events)
    for ledger in ledgers:
        _check_scope(finding, ledger, memories)
    return finding


def _check_histories(
    finding: Finding, memories: dict[tuple[str, uuid.UUID], Any],
    events: dict[tuple[str, uuid.UUID], list[tuple[str, str | None, str | None]]],
) -> None:
    """Every memory's events replay to its text; a deleted memory's end with its DELETE."""
    for key, chain in events.items():
        text: str | None = None
        broken = ""
        for index, (event, old, new) in enumerate(chain):
            if index == 0:
                if event != "ADD":
                    broken = f"first event {event}"
                    break
                text = new
            elif event == "ADD" or text is None:
                broken = f"{event} after {'a DELETE' if text is None else 'the ADD'}"
                break
            elif old != text:
                broken = f"{event} #{index} old_text is not the text before it"
                break
            else:
                text = new if event == "UPDATE" else None
        row = memories.get(key)
        if not broken and row is not None and text != row[5]:
            broken = "history does not replay to the current text"
        if not broken and row is None and text is not None:
            broken = "memory gone without a DELETE event"
        if broken:
            finding.add("history chain broken", f"{key[1]}: {broken}")


def _check_scope(
    finding: Finding, ledger: Ledger, memories: dict[tuple[str, uuid.UUID], Any]
) -> None:
    tenant, user_id, agent_id, run_id = ledger.key
    stored = {
        row[1]: row[5] for row in memories.values()
        if row[0] == tenant and (row[2], row[3], row[4]) == (user_id, agent_id, run_id)
    }
    for what in ledger.wrong_answers:
        finding.add("wrong answer to a client", what)
    for memory_id, text in ledger.confirmed.items():
        if memory_id not in stored:
            if memory_id not in ledger.maybe_deleted:
                finding.add("lost", f"{ledger.tag} {memory_id}")
        elif stored[memory_id] not in ledger.possible.get(memory_id, {text}):
            finding.add("text not the last one the client was told", f"{memory_id}")
    for memory_id, text in stored.items():
        if ledger.tag not in text:
            finding.add("memory in another scope than its text's", f"{memory_id}")
        if memory_id in ledger.confirmed:
            continue
        if memory_id in ledger.deleted:
            finding.add("leaked", f"{memory_id} came back after its delete")
        elif text not in ledger.maybe_added:
            finding.add("leaked", f"{memory_id} {text[:60]!r} was never confirmed")

