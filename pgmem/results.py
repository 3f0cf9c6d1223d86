"""What pgmem returns: frozen records with named fields."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload


@dataclass(frozen=True)
class MemoryRecord:
    """A stored memory."""

    id: uuid.UUID
    text: str
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    tenant: str = "default"


@dataclass(frozen=True)
class AddResult(MemoryRecord):
    """What ``add`` and ``add_many`` return for one text: the memory that stands for it.

    ``duplicate`` is True when the scope already held (or the batch had just stored) the same
    text, so nothing new was written: the record is then the existing memory, with its own
    metadata and timestamps.
    """

    duplicate: bool = False


@dataclass(frozen=True)
class Page(Sequence[MemoryRecord]):
    """One page of ``get_all``: its memories (``items``), and the cursor of the next page
    (``next_cursor``, None at the end). A sequence of its memories: ``len(page)``,
    ``for record in page``, ``page[0]`` (an empty page is false)."""

    items: tuple[MemoryRecord, ...]
    next_cursor: str | None

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, index: int) -> MemoryRecord: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[MemoryRecord, ...]: ...

    def __getitem__(self, index: int | slice) -> MemoryRecord | tuple[MemoryRecord, ...]:
        return self.items[index]

    def __iter__(self) -> Iterator[MemoryRecord]:
        return iter(self.items)


@dataclass(frozen=True)
class HistoryEvent:
    """One change to a memory: ``event`` is ADD (``new_text`` set), UPDATE (both set; equal when
    only the metadata changed) or DELETE (``old_text`` set)."""

    event: str
    old_text: str | None
    new_text: str | None
    created_at: datetime


@dataclass(frozen=True)
class Exported:
    """What :meth:`pgmem.Memory.export` wrote: how many memories (after the first line, which
    describes the file), the model, dimension and storage of the schema's vectors, and how
    many memories deleted before had their history written (a whole tenant's, with
    ``history=True``)."""

    memories: int
    model: str | None
    dim: int
    storage: str
    deleted: int = 0


@dataclass(frozen=True)
class EntityHit:
    """A query entity's link to a memory: the stored entity's name, the similarity of the
    two, how many memories in the searched scope the entity links to (``spread``), and the
    weight the scoring gives that spread (1: no attenuation; see ``Explain.scope_size``)."""

    name: str
    similarity: float
    spread: int
    weight: float = 1.0


@dataclass(frozen=True)
class Explain:
    """How a search hit's score was made (see :mod:`pgmem.scoring`).

    ``score = (semantic + keyword + entity + context) / max_possible``, as the ``scoring``
    profile ("default" or "mem0") makes them; ``context`` is what the memory took from a
    neighbour (a memory stored up to two places before or after it, ``context_from``) whose own
    score was higher (0 with Mem0's scoring). ``keyword_raw`` is the BM25 score before normalising
    (None when no query term matched); ``legs`` names the legs that found the
    memory; ``signals`` the signals this query could use, and ``notes`` why one could not.
    ``scope_size`` is the searched scope's size (exact up to 5,000 memories), against which
    each of ``entity_hits`` had its spread weighed. ``query_terms`` is how many keyword terms
    the query had (they pick the keyword sigmoid's row) and ``keyword_docs`` the scope's size
    as the keyword scale counts it (None: not used): with them, ``pgmem.scoring.fuse`` makes
    this score again from the parts above (the inspector switches signals off that way).
    """

    semantic: float
    keyword_raw: float | None
    keyword: float
    entity: float
    max_possible: float
    score: float
    keyword_score: str
    scoring: str = "default"
    entity_hits: tuple[EntityHit, ...] = ()
    legs: tuple[str, ...] = ()
    signals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    rerank_score: float | None = None
    context: float = 0.0
    context_from: uuid.UUID | None = None
    scope_size: int | None = None
    query_terms: int = 0
    keyword_docs: float | None = None


@dataclass(frozen=True)
class SearchHit:
    """One search result: the memory, its final score and the score's breakdown."""

    id: uuid.UUID
    text: str
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    score: float
    explain: Explain = field(repr=False)


def jsonable(value: Any) -> Any:
    """``value`` (these records, lists, dicts, UUIDs, datetimes) as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)  # UUID, datetime
