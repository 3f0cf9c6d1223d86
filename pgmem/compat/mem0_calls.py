"""The calls of :mod:`pgmem.compat.mem0`, written once for its ``Memory`` and ``AsyncMemory``.

Each method of :class:`Mem0Calls` is a generator that checks Mem0's arguments, yields the
:mod:`pgmem.operations` calls to run (receiving each one's result, or its error thrown in) and
returns Mem0's result shape. The facades run it: ``Memory`` with :func:`pgmem.memory.run`,
``AsyncMemory`` with :func:`pgmem.aio.run_async` (see ``pgmem/compat/mem0.py``).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from datetime import date, datetime, timezone
from typing import Any, TypedDict, TypeVar

from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgmem.compat.mem0_embedders import mem0_embedder
from pgmem.compat.mem0_filters import all_of, mem0_filters, scope_args
from pgmem.effects import Operation, Steps, result_of, transaction
from pgmem.embedding_space import embedder_dimension
from pgmem.errors import (
    ConfigurationError,
    InvalidInputError,
    NotFoundError,
    PgmemError,
    ScopeError,
)
from pgmem.operations import Configured, Operations
from pgmem.queries import SCOPE_IDS, sql_blocks
from pgmem.results import MemoryRecord, SearchHit
from pgmem.store import Statement
from pgmem.validate import ScopeId

logger = logging.getLogger(__name__)

T = TypeVar("T")
#: A Mem0 call: yields pgmem operations, receives their results, returns Mem0's shape.
Call = Generator[Operation[Any], Any, T]

# Payload keys Mem0 shows at the top level of a result rather than in its "metadata".
PROMOTED_KEYS = ("actor_id", "role", "attributed_to", "expiration_date")
# Keys caller metadata may not set: the scope comes from the scope arguments only.
IDENTITY_KEYS = (*SCOPE_IDS, "actor_id")
PROCEDURAL_MEMORY = "procedural_memory"
MAX_PAGE = 1000  # pgmem's largest get_all page
#: Mem0's default ``collection_name``.
DEFAULT_COLLECTION = "mem0"
#: Mem0's pgvector database when its config names none.
DEFAULT_DBNAME = "postgres"
UNSET: Any = object()
#: Mem0 2.2.1's messages for an update and a delete of an id no memory has.
UPDATE_NOT_FOUND = "Memory with id {id} not found. Please provide a valid 'memory_id'"
DELETE_NOT_FOUND = "Memory with id {id} not found"

#: An app's fact extractor for ``add(..., infer=True)``: the conversation's messages (system
#: messages dropped) in, the facts to store out.
Extractor = Callable[[list[dict[str, Any]]], Sequence[str]]


class InferenceNotSupportedError(ConfigurationError):
    """pgmem stores text as given and calls no LLM: pass infer=False (each message becomes one
    memory), or give Memory an extractor (messages -> list of facts) to use infer=True."""


class MemoryNotFoundError(NotFoundError, ValueError):
    """No memory has this id: ``Memory with id <id> not found``, Mem0's words (a ValueError,
    as Mem0's is)."""


class Mem0Error(PgmemError):
    """Mem0's root exception (``mem0.exceptions.MemoryError``): a message, an ``error_code``,
    ``details``, a ``suggestion`` and ``debug_info``, as Mem0's have. Not a ValueError, as
    Mem0's is not."""

    def __init__(
        self,
        message: str | None = None,
        error_code: str = "",
        details: Mapping[str, Any] | None = None,
        suggestion: str | None = None,
        debug_info: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = str(self)
        self.error_code = error_code
        self.details = dict(details or {})
        self.suggestion = suggestion
        self.debug_info = dict(debug_info or {})


class ValidationError(Mem0Error):
    """What Mem0 2.2.1 raises as ``mem0.exceptions.ValidationError`` (``add`` with no scope id,
    ``messages`` of another type, a bad ``memory_type``): a :class:`Mem0Error`, not a
    ValueError, so an app's ``except`` catches it where it caught Mem0's."""


def _do(operation: Operation[T]) -> Call[T]:
    """Run one pgmem operation (``yield from`` it, for the type)."""
    result: T = yield operation
    return result


class Mem0Calls:
    """Mem0 2.2.1's ``Memory`` methods as calls (see the module docstring); ``_ops`` is the
    pgmem facade's operations, ``extractor`` the app's fact extractor."""

    def __init__(self, memory: Configured, extractor: Extractor | None) -> None:
        self._memory = memory
        self.extractor = extractor

    @property
    def _ops(self) -> Operations:
        return self._memory._ops

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
    ) -> Call[dict[str, list[dict[str, Any]]]]:
        """Store ``messages`` -- a string, a ``{"role", "content"}`` dict or a list of them --
        each user/assistant message as one memory (system messages and malformed ones are
        skipped, as Mem0 does), with ``metadata`` plus the message's ``role`` (and ``name`` as
        ``actor_id``). Texts are stored as given, duplicates included, in one transaction per
        64 messages. A scope id ``"*"`` is stored as that text.

        Returns ``{"results": [{"id", "memory", "event": "ADD", "actor_id", "role"}]}``.

        Raises:
            ValidationError: none of user_id, agent_id, run_id; ``messages`` of another type; a
                ``memory_type`` other than ``"procedural_memory"`` (Mem0's ValidationError
                cases: not a ValueError).
            InvalidInputError: other bad arguments (nothing is written).
            InferenceNotSupportedError: ``infer=True`` without an extractor, or
                ``memory_type="procedural_memory"`` (which needs an LLM).
        """
        if timestamp is not None:
            raise InvalidInputError("timestamp is a Mem0 Platform parameter; Mem0 OSS rejects it")
        expiry = _expiration_date(expiration_date)
        scope = {k: str(v) for k, v in scope_args(user_id, agent_id, run_id).items()}
        if not scope:
            raise ValidationError(
                "At least one of 'user_id', 'agent_id', or 'run_id' must be provided.",
                "VALIDATION_001",
                {"provided_ids": {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}},
                "Please provide at least one identifier to scope the memory operation.",
            )
        base = _caller_metadata(metadata)
        if expiry is not None:
            base["expiration_date"] = expiry
        if memory_type is not None and memory_type != PROCEDURAL_MEMORY:
            raise ValidationError(
                f"Invalid 'memory_type'. Please pass {PROCEDURAL_MEMORY} to create procedural "
                "memories.", "VALIDATION_002",
                {"provided_type": memory_type, "valid_type": PROCEDURAL_MEMORY},
                f"Use '{PROCEDURAL_MEMORY}' to create procedural memories.",
            )
        if memory_type == PROCEDURAL_MEMORY:
            raise InferenceNotSupportedError(
                "procedural memories are summaries an LLM writes; pgmem calls no LLM"
            )
        listed = _messages(messages)
        if infer:
            return (yield from self._add_inferred(listed, scope, base))
        items: list[dict[str, Any]] = []
        for message in listed:
            meta = dict(base, role=message["role"])
            if message.get("name"):
                meta["actor_id"] = message["name"]
            items.append({"text": message["content"], "metadata": meta})
        stored = (yield from self._add_many(items, scope)) if items else []
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

    def _add_many(self, items: list[dict[str, Any]], scope: dict[str, str]) -> Call[list[Any]]:
        return (yield from _do(self._ops.add_many(
            items, user_id=scope.get("user_id"), agent_id=scope.get("agent_id"),
            run_id=scope.get("run_id"), dedupe=False, batch_size=64, on_progress=None,
        )))

    def _add_inferred(
        self, messages: list[dict[str, Any]], scope: dict[str, str], base: dict[str, Any]
    ) -> Call[dict[str, list[dict[str, Any]]]]:
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
        items = [{"text": fact, "metadata": base} for fact in facts if fact.strip()]
        stored = (yield from self._add_many(items, scope)) if items else []
        return {"results": [
            {"id": str(r.id), "memory": r.text, "event": "ADD"} for r in stored
        ]}

    def update(
        self,
        memory_id: str,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expiration_date: Any = UNSET,
        data: str | None = None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> Call[dict[str, str]]:
        """Change a memory's text (``data`` is Mem0's older name for it) and merge ``metadata``
        into its metadata (``user_id``, ``agent_id``, ``run_id`` and ``actor_id`` cannot
        change); ``expiration_date=None`` clears the expiry (the memory then shows
        ``"expiration_date": None``, as Mem0's). The scope ids (pgmem's, not
        Mem0's) guard it: given, only a memory of that scope is changed (see :meth:`get`).

        Returns ``{"message": "Memory updated successfully!"}``.

        Raises:
            InvalidInputError: nothing to change, a malformed id or a bad value.
            MemoryNotFoundError: no memory has the id ("Memory with id <id> not found. Please
                provide a valid 'memory_id'", Mem0's message).
        """
        guard = _guard(user_id, agent_id, run_id)
        if text is None:
            text = data
        if text is None and metadata is None and expiration_date is UNSET:
            raise InvalidInputError(
                "At least one of text, metadata, or expiration_date must be provided."
            )
        new_metadata = None
        if metadata is not None or expiration_date is not UNSET:
            if metadata is not None and not isinstance(metadata, Mapping):
                raise InvalidInputError(
                    f"metadata must be a dict, got {type(metadata).__name__}"
                )
            stored = yield from self._found(
                self._ops.get(memory_id, **guard), memory_id, UPDATE_NOT_FOUND
            )
            new_metadata = _merged_metadata(stored, metadata, expiration_date)
        yield from self._found(
            self._ops.update(memory_id, text=text, metadata=new_metadata, **guard), memory_id,
            UPDATE_NOT_FOUND,
        )
        return {"message": "Memory updated successfully!"}

    def delete(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> Call[dict[str, str]]:
        """Delete a memory (given scope ids, only one of that scope: see :meth:`get`). Returns
        ``{"message": "Memory deleted successfully!"}``.

        Raises:
            InvalidInputError: a malformed id.
            MemoryNotFoundError: no memory has the id ("Memory with id <id> not found", Mem0's
                message).
        """
        yield from self._found(
            self._ops.delete(memory_id, **_guard(user_id, agent_id, run_id)), memory_id,
            DELETE_NOT_FOUND,
        )
        return {"message": "Memory deleted successfully!"}

    def delete_all(
        self, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Call[dict[str, str]]:
        """Delete every memory of the scope (``"*"``: any value of that id, as in Mem0).
        Returns ``{"message": "Memories deleted successfully!"}``.

        Raises:
            ScopeError: none of user_id, agent_id and run_id (use :meth:`reset` for all).
        """
        scope = scope_args(user_id, agent_id, run_id)
        if not scope:
            raise ScopeError(
                "At least one filter is required to delete all memories. If you want to delete "
                "all memories, use the `reset()` method."
            )
        deleted = yield from _do(self._ops.delete_all(**_ids(scope)))
        logger.info("Deleted %d memories", deleted)
        return {"message": "Memories deleted successfully!"}

    def reset(self) -> Call[None]:
        """Delete every memory of this Memory's tenant -- its collection --, with its entities
        and history (Mem0 drops its collection and history database)."""
        logger.warning("Resetting all memories")
        ops = self._ops
        statement = Statement(
            "reset_tenant",
            sql.SQL(sql_blocks("mem0.sql")["reset_tenant"]).format(schema=sql.Identifier(ops.schema)),
            {"tenant": ops.tenant}, "one", lambda row: int(row["memories"]),
        )

        def steps(_: object) -> Steps[int]:
            return (yield from result_of(statement))

        deleted = yield from _do(transaction(steps))
        logger.info("reset deleted %d memories", deleted)

    # -- reads -----------------------------------------------------------------------------

    def get(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> Call[dict[str, Any] | None]:
        """The memory with this id, shaped as Mem0's (``"score": None``), or None. Mem0's call
        takes no scope and reaches any memory of the collection; pgmem's scope ids guard it:
        given, a memory of another scope is None (pass them when the id comes from outside).

        Raises:
            InvalidInputError: a malformed id.
        """
        try:
            record = yield from _do(
                self._ops.get(memory_id, **_guard(user_id, agent_id, run_id))
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
    ) -> Call[dict[str, list[dict[str, Any]]]]:
        """At most ``top_k`` memories of the scope matching ``filters`` (which hold the scope
        ids, as in Mem0 2.x; ``"*"``: any value), oldest first, without ``score``; expired
        ones only with ``show_expired``.

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
            page = yield from _do(self._ops.get_all(
                **_ids(scope), filters=condition,
                limit=min(count - len(items), MAX_PAGE), cursor=cursor,
            ))
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
    ) -> Call[dict[str, list[dict[str, Any]]]]:
        """The ``top_k`` memories of the scope most relevant to ``query``, best first, by
        pgmem's hybrid score (semantic, keyword and entity signals); ``threshold`` drops those
        whose semantic similarity (clamped at 0, as Mem0's) is lower, so 0.0 drops none.
        ``filters`` holds the scope ids (``"*"``: any value) and Mem0's metadata conditions.
        ``rerank`` uses the pgmem Memory's reranker when it has one (and is ignored otherwise,
        as in Mem0). ``explain`` adds each hit's ``score_details`` under Mem0's keys.

        Raises:
            ScopeError: no scope id in ``filters`` (nor as keywords).
            FilterError, InvalidInputError: bad arguments.
        """
        if reference_date is not None:
            raise InvalidInputError(
                "reference_date is a Mem0 Platform parameter; Mem0 OSS rejects it"
            )
        count = _top_k(top_k, limit)
        gate = _threshold(threshold)
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("Invalid query: must be a non-empty string.")
        scope, condition = mem0_filters(filters, user_id, agent_id, run_id)
        condition = _unexpired(condition, show_expired)
        if count == 0:
            return {"results": []}
        ops = self._ops
        hits = yield from _do(ops.search(
            query.strip(), user_id=scope.get("user_id"), agent_id=scope.get("agent_id"),
            run_id=scope.get("run_id"), limit=count,
            # Mem0 clamps similarity at 0: its threshold 0.0 keeps the opposite-direction ones.
            threshold=gate if gate > 0 else -1.0, filters=condition,
            rerank=bool(rerank) and ops.models.reranker is not None, mode="hybrid", legs=None,
        ))
        results = []
        for hit in hits:
            item = result_item(hit, score=max(hit.score, 0.0))
            if explain:
                item["score_details"] = score_details(hit, gate)
            results.append(item)
        return {"results": results}

    def history(
        self,
        memory_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> Call[list[dict[str, Any]]]:
        """A memory's changes, oldest first, shaped as Mem0's history rows (``id``,
        ``memory_id``, ``old_memory``, ``new_memory``, ``event``, ``created_at`` -- when the
        memory was made --, ``updated_at`` -- when the event happened --, ``is_deleted``,
        ``actor_id``, ``role``); ``[]`` for an id that never existed (given scope ids: that is
        not a memory of that scope, see :meth:`get`)."""
        guard = _guard(user_id, agent_id, run_id)
        try:
            events = yield from _do(self._ops.history(memory_id, **guard))
        except (NotFoundError, InvalidInputError):
            return []
        try:
            current = (yield from _do(self._ops.get(memory_id, **guard))).metadata
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

    def _found(self, operation: Operation[T], memory_id: object, message: str) -> Call[T]:
        """``operation``'s result; its NotFoundError as Mem0's (a ValueError too), with Mem0's
        ``message`` (formatted with the id)."""
        try:
            return (yield from _do(operation))
        except NotFoundError as exc:
            raise MemoryNotFoundError(message.format(id=memory_id)) from exc


# -- shapes ----------------------------------------------------------------------------------


def result_item(
    record: MemoryRecord | SearchHit, score: float | None | object = UNSET
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
    if score is not UNSET:
        item["score"] = score
    item["created_at"] = _iso(record.created_at)
    item["updated_at"] = _iso(record.updated_at)
    for key in SCOPE_IDS:
        if getattr(record, key) is not None:
            item[key] = getattr(record, key)
    for key in PROMOTED_KEYS:
        if key in record.metadata:
            item[key] = record.metadata[key]
    return item


def score_details(hit: SearchHit, threshold: float) -> dict[str, float]:
    """A hit's score breakdown under Mem0's ``score_details`` keys (semantic similarity clamped
    at 0 as Mem0's; ``raw_score`` is pgmem's weighted sum before dividing by
    ``max_possible_score``)."""
    explain = hit.explain
    return {
        "semantic_score": max(explain.semantic, 0.0),
        "bm25_score": explain.keyword,
        "entity_boost": explain.entity,
        "raw_score": explain.score * explain.max_possible,
        "max_possible_score": explain.max_possible,
        "final_score": max(hit.score, 0.0),
        "threshold": threshold,
    }


class _Guard(TypedDict):
    user_id: str | None
    agent_id: str | None
    run_id: str | None


class _Ids(TypedDict):
    user_id: ScopeId | None
    agent_id: ScopeId | None
    run_id: ScopeId | None


def _guard(user_id: object, agent_id: object, run_id: object) -> _Guard:
    """The scope ids guarding a call by id (None: not given), checked as Mem0 checks ids."""
    given = scope_args(user_id, agent_id, run_id)
    ids = {key: None if given.get(key) is None else str(given[key]) for key in SCOPE_IDS}
    return _Guard(user_id=ids["user_id"], agent_id=ids["agent_id"], run_id=ids["run_id"])


def _ids(scope: Mapping[str, ScopeId]) -> _Ids:
    """The three scope ids of a pgmem call (None: not given)."""
    return _Ids(
        user_id=scope.get("user_id"), agent_id=scope.get("agent_id"), run_id=scope.get("run_id")
    )


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


# -- arguments -------------------------------------------------------------------------------


def _merged_metadata(
    stored: MemoryRecord, metadata: Mapping[str, Any] | None, expiration_date: Any
) -> dict[str, Any]:
    """``stored``'s metadata with ``metadata`` merged in (identity keys kept) and the expiry
    set (None: ``"expiration_date": None``, as Mem0 keeps it)."""
    merged = dict(stored.metadata)
    for key, value in (metadata or {}).items():
        if key in IDENTITY_KEYS:
            if value != _identity_value(stored, key):
                logger.warning("update(): ignoring metadata[%r]: identity fields cannot "
                               "be set through metadata", key)
            continue
        merged[key] = value
    if expiration_date is not UNSET:
        merged["expiration_date"] = _expiration_date(expiration_date)  # None: kept, as Mem0
    return merged


def _unexpired(condition: dict[str, Any], show_expired: bool) -> dict[str, Any]:
    """``condition`` and -- unless ``show_expired`` -- no expiration_date before today (UTC):
    Mem0 hides expired memories."""
    if show_expired:
        return condition
    today = datetime.now(timezone.utc).date().isoformat()
    return all_of([c for c in (condition, {"NOT": {"expiration_date": {"lt": today}}}) if c])


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
        raise ValidationError(
            "messages must be str, dict, or list[dict]", "VALIDATION_003",
            {"provided_type": type(messages).__name__,
             "valid_types": ["str", "dict", "list[dict]"]},
            "Convert your input to a string, dictionary, or list of dictionaries.",
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


# -- configuration ---------------------------------------------------------------------------


def config_options(config_dict: object) -> tuple[Any, dict[str, Any], int | None, bool]:
    """What a Mem0 config dict means for pgmem: the database (a DSN, or the config's
    ``connection_pool``), the :class:`pgmem.Memory` options (the tenant is the collection),
    the embedding dimension if the config gives one, and whether to migrate.

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
    options["tenant"] = _tenant(store_config.get("collection_name"), options.get("tenant"))
    dims = None
    if "embedder" not in options:  # the pgmem section's embedder wins: the config's is not made
        embedder, dims = mem0_embedder(config_dict.get("embedder"))
        if embedder is not None:
            options["embedder"] = embedder
            dims = store_config.get("embedding_model_dims") or dims or embedder_dimension(embedder)
    db: Any = store_config.get("connection_pool")
    if db is None:
        db = _dsn_from_config(store_config)
    return db, options, dims, auto_migrate


def _tenant(collection: object, tenant: object) -> str:
    """The pgmem tenant of a Mem0 collection: its name (Mem0's default, ``mem0``, when the
    config names none), unless the config's ``pgmem`` section names the tenant."""
    if tenant is not None:
        if collection is not None and collection != tenant:
            raise ConfigurationError(
                f"the config names collection {collection!r} and pgmem tenant {tenant!r}: a "
                "collection is a pgmem tenant, give one of them"
            )
        return str(tenant)
    if collection is None:
        return DEFAULT_COLLECTION
    if not isinstance(collection, str) or not collection.strip():
        raise ConfigurationError(f"collection_name must be a non-empty string, got {collection!r}")
    return collection


def _dsn_from_config(config: Mapping[str, Any]) -> str:
    """The DSN of a Mem0 pgvector config: ``connection_string``, else its parts, with Mem0's
    defaults for those it leaves out (database ``postgres``)."""
    dsn = config.get("connection_string")
    sslmode = config.get("sslmode")
    if dsn:
        return make_conninfo(str(dsn), sslmode=sslmode) if sslmode else str(dsn)
    parts = {
        "dbname": config.get("dbname") or DEFAULT_DBNAME, "user": config.get("user"),
        "password": config.get("password"), "host": config.get("host"),
        "port": config.get("port"), "sslmode": sslmode,
    }
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})
