"""Mem0 OSS's ``Memory`` over pgmem: switch an app with an import change.

::

    # from mem0 import Memory
    from pgmem.compat.mem0 import Memory

    m = Memory.from_config(config)          # the same config dict; its pgvector store's database
    m.add("I moved to Lyon", user_id="alice", metadata={"topic": "home"})
    m.search("where does she live?", filters={"user_id": "alice", "topic": "home"}, top_k=5)

The methods, arguments and return shapes are those of mem0ai 2.2.1's ``Memory`` on its LLM-free
path (``infer=False``): ``add``, ``search``, ``get``, ``get_all``, ``update``, ``delete``,
``delete_all``, ``history``, ``reset``. Results are plain dicts shaped as Mem0's
(``{"results": [{"id", "memory", "hash", "metadata", "score", "created_at", "updated_at",
"user_id", ...}]}``), with pgmem's hybrid score in ``score``. Nothing here imports mem0.

Where it differs from Mem0, on purpose:

- ``infer`` defaults to False and ``infer=True`` raises :class:`InferenceNotSupportedError`:
  pgmem stores text as given and never calls an LLM -- unless the app passes its own
  ``extractor`` (messages -> list of fact strings), whose facts are then stored.
- ``search`` and ``get_all`` also accept ``user_id`` / ``agent_id`` / ``run_id`` as keywords
  (Mem0 1.x's form; 2.2.1 takes them only inside ``filters``), and ``limit`` for ``top_k``.
- Filters compare values with their JSON type (``{"rating": 4}`` does not match ``"4"``; Mem0's
  pgvector store compares text), and ``user_id`` / ``agent_id`` / ``run_id`` may appear only at
  the top level of ``filters``. ``"*"`` (any value) and Mem0's ``NOT`` (none of the listed
  conditions) mean what they mean in Mem0.
- ``update`` merges new metadata into the stored metadata (as Mem0 does) in two steps, a read
  and a write: concurrent metadata updates of one memory may lose one another's keys.
- History lives in PostgreSQL with the memories (``history_db_path`` is ignored); after a delete,
  ``history`` no longer knows the memory's ``role`` and ``actor_id``.
- A memory's ``role`` and ``actor_id`` (from ``add``'s messages) and ``expiration_date`` are kept
  in pgmem's metadata and shown as top-level keys, as Mem0 shows them.

Mem0's exceptions map onto pgmem's (all :class:`~pgmem.errors.PgmemError`):

============================  =============================================================
Mem0                          pgmem
============================  =============================================================
``ValidationError``,          :class:`~pgmem.errors.InvalidInputError` (a ``ValueError``,
``ValueError``                as Mem0's are); a missing scope is
                              :class:`~pgmem.errors.ScopeError`, a bad filter
                              :class:`~pgmem.errors.FilterError`
``MemoryNotFoundError``,      :class:`MemoryNotFoundError` (a
``ValueError("... not         :class:`~pgmem.errors.NotFoundError` and a ``ValueError``)
found")``
``LLMError``                  :class:`InferenceNotSupportedError` (no LLM is ever called)
``ConfigurationError``        :class:`~pgmem.errors.ConfigurationError`
``EmbeddingError``            :class:`~pgmem.errors.EmbeddingError`
``VectorStoreError``,         :class:`~pgmem.errors.DatabaseError`
``DatabaseError``
============================  =============================================================
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, timezone
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgmem.embedding import SentenceTransformerEmbedder
from pgmem.errors import (
    ConfigurationError,
    FilterError,
    InvalidInputError,
    NotFoundError,
    ScopeError,
)
from pgmem.memory import Memory as PgMemory
from pgmem.memory import run
from pgmem.migrate import DEFAULT_DIM, migrate
from pgmem.operations import Steps, result_of, transaction
from pgmem.queries import named_blocks
from pgmem.results import MemoryRecord, SearchHit
from pgmem.store import Statement

if TYPE_CHECKING:
    from typing_extensions import Self

    from pgmem.connection import Source

__all__ = [
    "InferenceNotSupportedError",
    "Memory",
    "MemoryNotFoundError",
    "mem0_filters",
]

logger = logging.getLogger(__name__)

SCOPE_KEYS = ("user_id", "agent_id", "run_id")
# Payload keys Mem0 shows at the top level of a result rather than in its "metadata".
PROMOTED_KEYS = ("actor_id", "role", "attributed_to", "expiration_date")
# Keys caller metadata may not set: the scope comes from the scope arguments only.
IDENTITY_KEYS = (*SCOPE_KEYS, "actor_id")
PROCEDURAL_MEMORY = "procedural_memory"
MAX_PAGE = 1000  # pgmem's largest get_all page
_COMBINATORS = ("AND", "OR", "NOT", "$and", "$or", "$not")
_UNSET: Any = object()

#: An app's fact extractor for ``add(..., infer=True)``: the conversation's messages (system
#: messages dropped) in, the facts to store out.
Extractor = Callable[[list[dict[str, Any]]], Sequence[str]]


class InferenceNotSupportedError(ConfigurationError):
    """pgmem stores text as given and calls no LLM: pass infer=False (each message becomes one
    memory), or give Memory an extractor (messages -> list of facts) to use infer=True."""


class MemoryNotFoundError(NotFoundError, ValueError):
    """No memory has this id (a ValueError too, as Mem0's "not found" is)."""


class Memory:
    """Mem0 OSS's ``Memory`` (mem0ai 2.2.1), its LLM-free path, over a :class:`pgmem.Memory`.

    ``Memory(db, **options)`` builds a :class:`pgmem.Memory` on ``db`` (a DSN, a psycopg pool or
    connection, a SQLAlchemy Engine or Session; see :class:`pgmem.Memory` for ``options``) and
    closes it in :meth:`close`; ``Memory(memory=m)`` wraps one the caller owns.
    :meth:`from_config` takes Mem0's config dict. ``extractor`` (optional) turns a conversation
    into facts for ``add(..., infer=True)``. The schema must exist (:func:`pgmem.migrate`);
    :meth:`from_config` migrates, as Mem0 creates its collection.
    """

    def __init__(
        self,
        db: Source = None,
        *,
        memory: PgMemory | None = None,
        extractor: Extractor | None = None,
        **options: Any,
    ) -> None:
        if memory is not None and (db is not None or options):
            raise ConfigurationError("give either memory= or a database and its options, not both")
        if extractor is not None and not callable(extractor):
            raise ConfigurationError("extractor must be callable: messages -> list of facts")
        self._memory = memory if memory is not None else PgMemory(db, **options)
        self._owns = memory is None
        self.extractor = extractor

    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any]) -> Self:
        """A Memory from Mem0's config dict, on the database of its ``pgvector`` vector store.

        Read: ``vector_store.config`` (``connection_string``, or ``dbname`` / ``user`` /
        ``password`` / ``host`` / ``port`` / ``sslmode``, or ``connection_pool``; and
        ``embedding_model_dims``), a ``huggingface`` embedder's local ``model``, and an optional
        ``"pgmem"`` section of :class:`pgmem.Memory` options (``schema``, ``tenant``, ...). The
        LLM, reranker and ``history_db_path`` are not used. The schema is migrated (created
        when missing) unless ``"pgmem": {"migrate": False}``.

        Raises:
            ConfigurationError: the vector store is not ``pgvector``, or the config is malformed.
        """
        if not isinstance(config_dict, Mapping):
            raise ConfigurationError(
                f"config must be a dict, got {type(config_dict).__name__}"
            )
        store = config_dict.get("vector_store") or {}
        provider = store.get("provider", "pgvector") if isinstance(store, Mapping) else None
        if provider != "pgvector":
            raise ConfigurationError(
                f"pgmem replaces Mem0's pgvector store; this config's vector store is {provider!r}"
            )
        store_config = dict(store.get("config") or {})
        options = dict(config_dict.get("pgmem") or {})
        auto_migrate = bool(options.pop("migrate", True))
        embedder, dims = _embedder_from_config(config_dict.get("embedder"))
        if embedder is not None:
            options.setdefault("embedder", embedder)
            dims = store_config.get("embedding_model_dims") or dims
        db: Any = store_config.get("connection_pool")
        if db is None:
            db = _dsn_from_config(store_config)
            if auto_migrate:
                migrate(
                    db, dim=int(dims or DEFAULT_DIM),
                    **({"schema": options["schema"]} if "schema" in options else {}),
                )
        return cls(db, **options)

    @property
    def memory(self) -> PgMemory:
        """The :class:`pgmem.Memory` underneath, for pgmem's own API."""
        return self._memory

    def close(self) -> None:
        """Close the pgmem Memory if this object made it."""
        if self._owns:
            self._memory.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes ----------------------------------------------------------------------------

    def add(
        self,
        messages: str | Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: Any = None,
        expiration_date: Any = None,
        infer: bool = False,
        memory_type: str | None = None,
        prompt: str | None = None,
    ) -> dict[str, list[dict[str, Any]]]:
        """Store ``messages`` -- a string, a ``{"role", "content"}`` dict or a list of them --
        each user/assistant message as one memory (system messages and malformed ones are
        skipped, as Mem0 does), with ``metadata`` plus the message's ``role`` (and ``name`` as
        ``actor_id``). Texts are stored as given, duplicates included, in one transaction per
        64 messages.

        Returns ``{"results": [{"id", "memory", "event": "ADD", "actor_id", "role"}]}``.

        Raises:
            ScopeError: none of user_id, agent_id, run_id.
            InvalidInputError: bad arguments (nothing is written).
            InferenceNotSupportedError: ``infer=True`` without an extractor, or
                ``memory_type="procedural_memory"`` (which needs an LLM).
        """
        if timestamp is not None:
            raise InvalidInputError("timestamp is a Mem0 Platform parameter; Mem0 OSS rejects it")
        expiry = _expiration_date(expiration_date)
        scope = _scope_args(user_id, agent_id, run_id, required=True)
        base = _caller_metadata(metadata)
        if expiry is not None:
            base["expiration_date"] = expiry
        if memory_type is not None and memory_type != PROCEDURAL_MEMORY:
            raise InvalidInputError(
                f"memory_type must be {PROCEDURAL_MEMORY!r} (or None), got {memory_type!r}"
            )
        if memory_type == PROCEDURAL_MEMORY:
            raise InferenceNotSupportedError(
                "procedural memories are summaries an LLM writes; pgmem calls no LLM"
            )
        listed = _messages(messages)
        if infer:
            return self._add_inferred(listed, scope, base)
        items: list[dict[str, Any]] = []
        for message in listed:
            meta = dict(base, role=message["role"])
            if message.get("name"):
                meta["actor_id"] = message["name"]
            items.append({"text": message["content"], "metadata": meta})
        stored = self._memory.add_many(items, **scope, dedupe=False) if items else []
        return {"results": [
            {
                "id": str(record.id),
                "memory": record.text,
                "event": "ADD",
                "actor_id": record.metadata.get("actor_id"),
                "role": record.metadata["role"],
            }
            for record in stored
        ]}

    def _add_inferred(
        self, messages: list[dict[str, Any]], scope: dict[str, Any], base: dict[str, Any]
    ) -> dict[str, list[dict[str, Any]]]:
        if self.extractor is None:
            raise InferenceNotSupportedError()
        try:
            facts = list(self.extractor([dict(m) for m in messages]))
        except Exception as exc:
            raise InferenceNotSupportedError(
                f"the extractor failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not all(isinstance(fact, str) for fact in facts):
            raise InvalidInputError("the extractor must return a list of strings")
        stored = self._memory.add_many(
            [{"text": fact, "metadata": base} for fact in facts if fact.strip()],
            **scope, dedupe=False,
        )
        return {"results": [
            {"id": str(r.id), "memory": r.text, "event": "ADD"} for r in stored
        ]}

    def update(
        self,
        memory_id: str,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expiration_date: Any = _UNSET,
        data: str | None = None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, str]:
        """Change a memory's text (``data`` is Mem0's older name for it) and merge ``metadata``
        into its metadata (``user_id``, ``agent_id``, ``run_id`` and ``actor_id`` cannot
        change); ``expiration_date=None`` clears the expiry. The scope ids (pgmem's, not
        Mem0's) guard it: given, only a memory of that scope is changed (see :meth:`get`).

        Returns ``{"message": "Memory updated successfully!"}``.

        Raises:
            InvalidInputError: nothing to change, a malformed id or a bad value.
            MemoryNotFoundError: no memory has the id.
        """
        guard = _scope_args(user_id, agent_id, run_id, required=False)
        if text is None:
            text = data
        if text is None and metadata is None and expiration_date is _UNSET:
            raise InvalidInputError(
                "At least one of text, metadata, or expiration_date must be provided."
            )
        new_metadata = None
        if metadata is not None or expiration_date is not _UNSET:
            if metadata is not None and not isinstance(metadata, Mapping):
                raise InvalidInputError(
                    f"metadata must be a dict, got {type(metadata).__name__}"
                )
            stored = self._get_record(memory_id, guard)
            new_metadata = dict(stored.metadata)
            for key, value in (metadata or {}).items():
                if key in IDENTITY_KEYS:
                    if value != _identity_value(stored, key):
                        logger.warning("update(): ignoring metadata[%r]: identity fields cannot "
                                       "be set through metadata", key)
                    continue
                new_metadata[key] = value
            if expiration_date is not _UNSET:
                expiry = _expiration_date(expiration_date)
                if expiry is None:
                    new_metadata.pop("expiration_date", None)
                else:
                    new_metadata["expiration_date"] = expiry
        try:
            self._memory.update(memory_id, text=text, metadata=new_metadata, **guard)
        except NotFoundError as exc:
            raise MemoryNotFoundError(str(exc)) from exc
        return {"message": "Memory updated successfully!"}

    def delete(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, str]:
        """Delete a memory (given scope ids, only one of that scope: see :meth:`get`). Returns
        ``{"message": "Memory deleted successfully!"}``.

        Raises:
            InvalidInputError: a malformed id.
            MemoryNotFoundError: no memory has the id.
        """
        try:
            self._memory.delete(
                memory_id, **_scope_args(user_id, agent_id, run_id, required=False)
            )
        except NotFoundError as exc:
            raise MemoryNotFoundError(str(exc)) from exc
        return {"message": "Memory deleted successfully!"}

    def delete_all(
        self, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, str]:
        """Delete every memory of the scope. Returns
        ``{"message": "Memories deleted successfully!"}``.

        Raises:
            ScopeError: none of user_id, agent_id and run_id (use :meth:`reset` for all).
        """
        scope = _scope_args(user_id, agent_id, run_id, required=False)
        if not scope:
            raise ScopeError(
                "At least one filter is required to delete all memories. If you want to delete "
                "all memories, use the `reset()` method."
            )
        deleted = self._memory.delete_all(**scope)
        logger.info("Deleted %d memories", deleted)
        return {"message": "Memories deleted successfully!"}

    def reset(self) -> None:
        """Delete every memory of this Memory's tenant, with its entities and history (Mem0
        drops its collection and history database)."""
        logger.warning("Resetting all memories")
        memory = self._memory
        statement = Statement(
            "reset_tenant",
            sql.SQL(mem0_queries()["reset_tenant"]).format(schema=sql.Identifier(memory.schema)),
            {"tenant": memory.tenant}, "one", lambda row: int(row["memories"]),
        )

        def steps(_: object) -> Steps[int]:
            return (yield from result_of(statement))

        # The facade's runner, on its connection (pool, or the caller's transaction).
        deleted = run(memory._connector, transaction(steps))
        logger.info("reset deleted %d memories", deleted)

    # -- reads -----------------------------------------------------------------------------

    def get(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any] | None:
        """The memory with this id, shaped as Mem0's (``"score": None``), or None. Mem0's call
        takes no scope and reaches any memory of the collection; pgmem's scope ids guard it:
        given, a memory of another scope is None (pass them when the id comes from outside).

        Raises:
            InvalidInputError: a malformed id.
        """
        try:
            record = self._memory.get(
                memory_id, **_scope_args(user_id, agent_id, run_id, required=False)
            )
        except NotFoundError:
            return None
        return result_item(record, score=None)

    def get_all(
        self,
        *,
        filters: Mapping[str, Any] | None = None,
        top_k: int = 20,
        show_expired: bool = False,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> dict[str, list[dict[str, Any]]]:
        """At most ``top_k`` memories of the scope matching ``filters`` (which hold the scope
        ids, as in Mem0 2.x), oldest first, without ``score``; expired ones only with
        ``show_expired``.

        Raises:
            ScopeError: no scope id in ``filters`` (nor as keywords).
            FilterError, InvalidInputError: bad arguments.
        """
        count = _top_k(top_k, limit)
        scope, condition = mem0_filters(filters, user_id, agent_id, run_id)
        condition = _unexpired(condition, show_expired)
        items: list[dict[str, Any]] = []
        cursor = None
        while len(items) < count:
            page = self._memory.get_all(
                **scope, filters=condition, limit=min(count - len(items), MAX_PAGE),
                cursor=cursor,
            )
            items.extend(result_item(record) for record in page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        return {"results": items}

    def search(
        self,
        query: str,
        *,
        top_k: int = 20,
        filters: Mapping[str, Any] | None = None,
        threshold: float = 0.1,
        rerank: bool = False,
        explain: bool = False,
        reference_date: Any = None,
        show_expired: bool = False,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> dict[str, list[dict[str, Any]]]:
        """The ``top_k`` memories of the scope most relevant to ``query``, best first, by
        pgmem's hybrid score (semantic, keyword and entity signals); ``threshold`` drops those
        whose semantic similarity is lower. ``filters`` holds the scope ids and Mem0's metadata
        conditions. ``rerank`` uses the pgmem Memory's reranker when it has one (and is ignored
        otherwise, as in Mem0). ``explain`` adds each hit's ``score_details`` (pgmem's breakdown).

        Raises:
            ScopeError: no scope id in ``filters`` (nor as keywords).
            FilterError, InvalidInputError: bad arguments.
        """
        if reference_date is not None:
            raise InvalidInputError(
                "reference_date is a Mem0 Platform parameter; Mem0 OSS rejects it"
            )
        count = _top_k(top_k, limit)
        checked_threshold = _threshold(threshold)
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("Invalid query: must be a non-empty string.")
        scope, condition = mem0_filters(filters, user_id, agent_id, run_id)
        condition = _unexpired(condition, show_expired)
        if count == 0:
            return {"results": []}
        hits = self._memory.search(
            query.strip(), **scope, limit=count, threshold=checked_threshold, filters=condition,
            rerank=bool(rerank) and self._memory.reranker is not None,
        )
        results = []
        for hit in hits:
            item = result_item(hit, score=hit.score)
            if explain:
                item["score_details"] = dataclasses.asdict(hit.explain)
            results.append(item)
        return {"results": results}

    def history(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """A memory's changes, oldest first, shaped as Mem0's history rows (``id``,
        ``memory_id``, ``old_memory``, ``new_memory``, ``event``, ``created_at`` -- when the
        memory was made --, ``updated_at`` -- when the event happened --, ``is_deleted``,
        ``actor_id``, ``role``); ``[]`` for an id that never existed (given scope ids: that is
        not a memory of that scope, see :meth:`get`)."""
        try:
            events = self._memory.history(
                memory_id, **_scope_args(user_id, agent_id, run_id, required=False)
            )
        except (NotFoundError, InvalidInputError):
            return []
        try:
            current = self._memory.get(memory_id).metadata
        except NotFoundError:
            current = {}
        made = _iso(events[0].created_at)
        return [
            {
                "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"pgmem:history:{memory_id}:{n}")),
                "memory_id": str(memory_id),
                "old_memory": event.old_text,
                "new_memory": event.new_text,
                "event": event.event,
                "created_at": made,
                "updated_at": _iso(event.created_at),
                "is_deleted": event.event == "DELETE",
                "actor_id": current.get("actor_id"),
                "role": current.get("role"),
            }
            for n, event in enumerate(events)
        ]

    def _get_record(self, memory_id: str, guard: Mapping[str, str]) -> MemoryRecord:
        try:
            return self._memory.get(memory_id, **guard)
        except NotFoundError as exc:
            raise MemoryNotFoundError(str(exc)) from exc


@functools.cache
def mem0_queries() -> dict[str, str]:
    """The named blocks of ``sql/mem0.sql`` (``reset_tenant`` is this module's)."""
    return named_blocks(files("pgmem.sql").joinpath("mem0.sql").read_text(encoding="utf-8"))


# -- shapes ----------------------------------------------------------------------------------


def result_item(
    record: MemoryRecord | SearchHit, score: float | None | object = _UNSET
) -> dict[str, Any]:
    """A memory as Mem0 shows it: ``id``, ``memory``, ``hash`` (md5 of the text, as Mem0's),
    ``metadata`` (None when empty), ``score`` (left out unless given), ``created_at`` and
    ``updated_at`` (ISO 8601, UTC), then the scope ids it has and the promoted keys."""
    extra = {k: v for k, v in record.metadata.items() if k not in PROMOTED_KEYS}
    item: dict[str, Any] = {
        "id": str(record.id),
        "memory": record.text,
        "hash": hashlib.md5(record.text.encode()).hexdigest(),
        "metadata": extra or None,
    }
    if score is not _UNSET:
        item["score"] = score
    item["created_at"] = _iso(record.created_at)
    item["updated_at"] = _iso(record.updated_at)
    for key in SCOPE_KEYS:
        if getattr(record, key) is not None:
            item[key] = getattr(record, key)
    for key in PROMOTED_KEYS:
        if key in record.metadata:
            item[key] = record.metadata[key]
    return item


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


# -- arguments -------------------------------------------------------------------------------


def _entity_id(value: object, name: str) -> str | None:
    """Mem0's check of a scope id: any value as text, trimmed, non-empty, without spaces."""
    if value is None:
        return None
    text = (value if isinstance(value, str) else str(value)).strip()
    if not text:
        raise InvalidInputError(f"Invalid {name}: cannot be empty or whitespace-only.")
    if any(c.isspace() for c in text):
        raise InvalidInputError(f"Invalid {name}: cannot contain whitespace.")
    return text


def _scope_args(
    user_id: object, agent_id: object, run_id: object, *, required: bool
) -> dict[str, Any]:
    checked = {
        name: _entity_id(value, name)
        for name, value in zip(SCOPE_KEYS, (user_id, agent_id, run_id))
    }
    scope = {name: value for name, value in checked.items() if value is not None}
    if required and not scope:
        raise ScopeError("At least one of 'user_id', 'agent_id', or 'run_id' must be provided.")
    return scope


def mem0_filters(
    filters: Mapping[str, Any] | None,
    user_id: object = None,
    agent_id: object = None,
    run_id: object = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split Mem0's ``filters`` into the scope (its ``user_id`` / ``agent_id`` / ``run_id``,
    with the keyword ids) and a :mod:`pgmem.filters` metadata filter meaning what Mem0's does:
    ``{"key": "*"}`` is "has the key", ``{"key": [..]}`` is ``in``, ``NOT: [a, b]`` is
    "neither a nor b".

    Raises:
        ScopeError: no scope id at all.
        InvalidInputError: a keyword id differs from the one in ``filters``.
        FilterError: the filter is not a dict, or names a scope id inside AND/OR/NOT.
    """
    if filters is None:
        filters = {}
    if not isinstance(filters, Mapping):
        raise FilterError(f"filters must be a dict, got {type(filters).__name__}")
    keywords = _scope_args(user_id, agent_id, run_id, required=False)
    scope = dict(keywords)
    parts: list[dict[str, Any]] = []
    for key, value in filters.items():
        if key in SCOPE_KEYS:
            checked = _entity_id(value, key)
            if checked is None:
                continue
            if key in keywords and keywords[key] != checked:
                raise InvalidInputError(
                    f"{key} is {keywords[key]!r} as a keyword but {checked!r} in filters"
                )
            scope[key] = checked
        else:
            parts.append(_entry(key, value))
    if not scope:
        raise ScopeError(
            "filters must contain at least one of: user_id, agent_id, run_id. "
            "Example: filters={'user_id': 'u1'}"
        )
    return scope, _all_of(parts)


def _all_of(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {} if not parts else parts[0] if len(parts) == 1 else {"AND": parts}


def _entry(key: str, value: Any) -> dict[str, Any]:
    """One entry of a Mem0 filter as a pgmem filter."""
    if key in _COMBINATORS:
        name = key.lstrip("$").upper()
        if name in ("AND", "OR") and not isinstance(value, (list, tuple)):
            raise FilterError(f"{key} needs a list of conditions, got {type(value).__name__}")
        conditions = value if isinstance(value, (list, tuple)) else [value]
        if not conditions:
            raise FilterError(f"{key} needs a non-empty list of conditions")
        groups = [_group(condition, key) for condition in conditions]
        if name == "NOT":  # Mem0: NOT [a, b] matches what matches none of them
            return _all_of([{"NOT": group} for group in groups])
        return {name: groups}
    if value == "*":
        return {key: {"exists": True}}
    if isinstance(value, list):
        return {key: {"in": value}}
    return {key: value}


def _group(condition: object, where: str) -> dict[str, Any]:
    """A condition inside AND / OR / NOT: its entries, all of them."""
    if not isinstance(condition, Mapping):
        raise FilterError(
            f"{where}: each condition must be a dict, got {type(condition).__name__}"
        )
    parts = []
    for key, value in condition.items():
        if key in SCOPE_KEYS:
            raise FilterError(
                f"{where}: {key} may only appear at the top level of filters (it is the scope)"
            )
        parts.append(_entry(key, value))
    if not parts:
        raise FilterError(f"{where}: a condition is empty")
    return _all_of(parts)


def _unexpired(condition: dict[str, Any], show_expired: bool) -> dict[str, Any]:
    """``condition`` and -- unless ``show_expired`` -- no expiration_date before today (UTC):
    Mem0 hides expired memories."""
    if show_expired:
        return condition
    today = datetime.now(timezone.utc).date().isoformat()
    return _all_of([c for c in (condition, {"NOT": {"expiration_date": {"lt": today}}}) if c])


def _caller_metadata(metadata: object) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(f"metadata must be a dict, got {type(metadata).__name__}")
    clean = {}
    for key, value in metadata.items():
        if key in IDENTITY_KEYS:
            logger.warning("add(): ignoring metadata[%r]: identity fields cannot be set through "
                           "metadata", key)
            continue
        clean[key] = value
    return clean


def _identity_value(record: MemoryRecord, key: str) -> Any:
    return record.metadata.get(key) if key == "actor_id" else getattr(record, key)


def _messages(messages: object) -> list[dict[str, Any]]:
    """The user and assistant messages to store, as Mem0 reads ``add``'s argument."""
    if isinstance(messages, str):
        listed: list[Any] = [{"role": "user", "content": messages}]
    elif isinstance(messages, Mapping):
        listed = [messages]
    elif isinstance(messages, list):
        listed = messages
    else:
        raise InvalidInputError(
            f"messages must be str, dict, or list[dict], got {type(messages).__name__}"
        )
    kept = []
    for message in listed:
        if (
            not isinstance(message, Mapping)
            or message.get("role") is None
            or message.get("content") is None
        ):
            logger.warning("Skipping invalid message format: %r", message)
            continue
        if message["role"] == "system":
            continue
        if not isinstance(message["content"], str):
            raise InvalidInputError(
                f"a message's content must be a string, got {type(message['content']).__name__}"
            )
        kept.append(dict(message))
    return kept


def _expiration_date(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise InvalidInputError("expiration_date must be a valid date in YYYY-MM-DD format.")


def _top_k(top_k: object, limit: object) -> int:
    if limit is not None:
        if top_k not in (20, limit):
            raise InvalidInputError(f"top_k={top_k!r} and limit={limit!r} differ: give one")
        top_k = limit
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise InvalidInputError("top_k must be a valid integer")
    if top_k < 0:
        raise InvalidInputError(f"Invalid top_k: {top_k}. Must be a non-negative integer.")
    return top_k


def _threshold(threshold: object) -> float:
    if threshold is None:
        return 0.1
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise InvalidInputError("threshold must be a valid number")
    if not 0 <= threshold <= 1:
        raise InvalidInputError(
            f"Invalid threshold: {threshold}. Must be between 0 and 1 (inclusive)."
        )
    return float(threshold)


def _embedder_from_config(config: object) -> tuple[Any, int | None]:
    """The embedder for a Mem0 embedder config: a local sentence-transformers model for
    ``huggingface`` (without a base URL); None (pgmem's default) for any other provider."""
    if not isinstance(config, Mapping):
        return None, None
    provider = config.get("provider")
    settings = config.get("config") or {}
    if provider == "huggingface" and not settings.get("huggingface_base_url"):
        model = settings.get("model")
        return SentenceTransformerEmbedder(model) if model else None, settings.get("embedding_dims")
    logger.warning(
        "pgmem.compat.mem0: the %r embedder is not used; pgmem embeds with its own "
        "(all-MiniLM-L6-v2, 384 dimensions, or Memory(embedder=...) through the 'pgmem' "
        "section of the config)", provider,
    )
    return None, None


def _dsn_from_config(config: Mapping[str, Any]) -> str:
    """The DSN of a Mem0 pgvector config (``connection_string``, else its parts)."""
    dsn = config.get("connection_string")
    parts = {
        "dbname": config.get("dbname"), "user": config.get("user"),
        "password": config.get("password"), "host": config.get("host"),
        "port": config.get("port"), "sslmode": config.get("sslmode"),
    }
    if dsn:
        return make_conninfo(str(dsn), sslmode=parts["sslmode"]) if parts["sslmode"] else str(dsn)
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})
