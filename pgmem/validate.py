"""Checks on caller input, before any model or database work. Pure functions."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import numpy.typing as npt

from pgmem.errors import ConfigurationError, InvalidInputError, LimitError, ScopeError

MAX_TEXT_LENGTH = 10_000  # characters; Memory(max_text_length=...) changes it
# The most max_text_length may be set to: spaCy analyses at most 1,000,000 characters at once,
# and a text's analysis and keyword lexemes grow with it (see docs/limits.md).
MAX_TEXT_LENGTH_CEILING = 100_000
MAX_LIMIT = 1000
MAX_SCOPE_LENGTH = 255
MAX_METADATA_BYTES = 64_000


class Wildcard(enum.Enum):
    """A scope id that matches any value (but not none): ``ANY``."""

    ANY = "any"

    def __repr__(self) -> str:
        return "ANY"


#: The scope id of a read or ``delete_all`` that matches every memory having that id, whatever
#: its value (Mem0's ``"*"``, through :mod:`pgmem.compat.mem0`); never stored.
ANY = Wildcard.ANY

#: A scope id as the scope of a read takes it.
ScopeId = str | Wildcard

#: The guard of a call by id (``get``, ``update``, ``delete``, ``history``): the scope ids the
#: caller gave, by name (:func:`scope_ids`), which the memory must carry -- one of another scope
#: is not found. Empty: no guard, any memory of the tenant.
Guard = Mapping[str, str]


@dataclass(frozen=True)
class Limits:
    """The largest inputs a ``Memory`` accepts (``Memory(limits=Limits(...))``). Each is checked
    before any model or database work, and a larger input raises
    :class:`~pgmem.errors.LimitError` (for filters :class:`~pgmem.errors.FilterLimitError`)
    naming the field. The defaults keep every call fast and every stored row readable.

    ``max_text_length`` (characters of a memory's text; at most ``MAX_TEXT_LENGTH_CEILING``) and
    ``max_query_length`` (of a search query; None: ``max_text_length``); ``max_metadata_bytes`` (as
    JSON, UTF-8) and
    ``max_metadata_depth`` (nesting of objects and arrays, the metadata object itself being 1);
    ``max_filter_conditions`` (operators applied to keys, each ``in`` / ``nin`` item counted),
    ``max_filter_parameters`` (values bound to the statement; libpq refuses over 65,535) and
    ``max_filter_bytes`` (the filter as JSON).
    """

    max_text_length: int = MAX_TEXT_LENGTH
    max_query_length: int | None = None
    max_metadata_bytes: int = MAX_METADATA_BYTES
    max_metadata_depth: int = 32
    max_filter_conditions: int = 1_000
    max_filter_parameters: int = 5_000
    max_filter_bytes: int = 64_000

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if value is None and item.name == "max_query_length":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"Limits.{item.name} must be a positive integer, got {shown(value)}"
                )
        for name in ("max_text_length", "max_query_length"):
            if (getattr(self, name) or 0) > MAX_TEXT_LENGTH_CEILING:
                raise ConfigurationError(
                    f"{name} may be at most {MAX_TEXT_LENGTH_CEILING} characters, got "
                    f"{getattr(self, name)}: longer texts are refused (split them into several "
                    "memories)"
                )


DEFAULT_LIMITS = Limits()


def query_limit(limits: Limits) -> tuple[int, str]:
    """The longest query ``limits`` accept, and the setting that says so."""
    if limits.max_query_length is None:
        return limits.max_text_length, "max_text_length"
    return limits.max_query_length, "Limits.max_query_length"


@dataclass(frozen=True)
class Scope:
    """Which memories a call is about: a tenant and at least one of user, agent and run (an id,
    or :data:`ANY` in the scope of a read)."""

    tenant: str
    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    run_id: ScopeId | None = None
    #: Store items (pgmem.langgraph) under this namespace prefix instead (``()``: every item).
    namespace: tuple[str, ...] | None = None

    def params(self) -> dict[str, Any]:
        """The scope as the named SQL parameters of the ``scope`` block."""
        params: dict[str, Any] = {
            "tenant": self.tenant,
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "run_id": self.run_id,
        }
        if self.namespace:
            *parents, last = self.namespace
            params["namespace"] = list(self.namespace)
            params["namespace_end"] = [*parents, last + "\x01"]
        elif self.namespace is not None:
            params["any_namespace"] = True
        return params


def scope(
    tenant: str,
    user_id: ScopeId | None,
    agent_id: ScopeId | None,
    run_id: ScopeId | None,
    *,
    wildcard: bool = False,
) -> Scope:
    """A checked :class:`Scope`; with ``wildcard``, an id may be :data:`ANY`. Raises ScopeError
    when none of the three ids is given."""
    ids: dict[str, ScopeId | None] = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    wild = {name for name, value in ids.items() if wildcard and value is ANY}
    given: dict[str, ScopeId] = dict(
        scope_ids(*(None if name in wild else value for name, value in ids.items()))
    )
    given.update(dict.fromkeys(wild, ANY))
    if not given:
        raise ScopeError()
    return Scope(_identifier("tenant", tenant) or "", given.get("user_id"),
                 given.get("agent_id"), given.get("run_id"))


def scope_ids(user_id: object, agent_id: object, run_id: object) -> dict[str, str]:
    """The scope ids given (checked), by name: a call's scope, or the :data:`Guard` of a call
    by id (none: no guard)."""
    given = {
        name: _identifier(name, value)
        for name, value in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id))
    }
    return {name: value for name, value in given.items() if value is not None}


def _identifier(name: str, value: object) -> str | None:
    if value is None and name != "tenant":
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidInputError(f"{name} must not be empty")
    if len(value) > MAX_SCOPE_LENGTH:
        raise InvalidInputError(f"{name} is longer than {MAX_SCOPE_LENGTH} characters")
    if problem := unstorable(value):
        raise InvalidInputError(f"{name} contains {problem}")
    return value


def text(
    value: object, *, what: str = "text", max_length: int = MAX_TEXT_LENGTH,
    setting: str = "max_text_length",
) -> str:
    """A memory text or query: a non-blank string without NUL, at most ``max_length`` long
    (else :class:`LimitError` naming ``setting``)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if len(value) > max_length:  # first: the checks below read the whole string
        raise LimitError(
            f"{what} has {len(value)} characters; the limit is {max_length} ({setting})"
        )
    if not value.strip():
        raise InvalidInputError(f"{what} is empty")
    if problem := unstorable(value):
        raise InvalidInputError(f"{what} contains {problem}")
    return value


def limit(value: object) -> int:
    """A result count from 1 to MAX_LIMIT."""
    return _count("limit", value, MAX_LIMIT)


def _count(name: str, value: object, top: int) -> int:
    """``value``, an integer from 1 to ``top``; else InvalidInputError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise InvalidInputError(f"{name} must be an integer from 1 to {top}, got {shown(value)}")
    return value


def threshold(value: object) -> float:
    """A semantic (cosine) similarity threshold in [-1, 1]: -1 drops nothing."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not -1 <= value <= 1  # before isfinite, which cannot convert a huge int to float
        or not math.isfinite(value)
    ):
        raise InvalidInputError(f"threshold must be a number from -1 to 1, got {shown(value)}")
    return float(value)


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters. Never raises:
    an int too long for ``repr`` (over 4300 digits) is described instead."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - ValueError for huge ints; any broken __repr__
        return f"<{type(value).__name__} too long to show>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def metadata(value: object, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """A JSON object with no NUL and no NaN or infinity, within ``limits``' metadata depth
    and size (else :class:`LimitError`)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"metadata must be a dict, got {type(value).__name__}")
    _check_json_strings(value, limits.max_metadata_depth)  # the depth first: dumps recurses
    try:
        encoded = json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInputError(f"metadata is not JSON-serialisable: {exc}") from exc
    size = len(encoded.encode())
    if size > limits.max_metadata_bytes:
        raise LimitError(
            f"metadata has {size} bytes as JSON; the limit is {limits.max_metadata_bytes} "
            "(Limits.max_metadata_bytes)"
        )
    return dict(value)


def unstorable(value: str) -> str | None:
    """What in ``value`` PostgreSQL's text and jsonb cannot hold, as the end of an error message
    (``f"{what} contains {problem}"``), or None."""
    if "\x00" in value:
        return "a NUL character, which PostgreSQL cannot store"
    if not is_utf8(value):
        return "a lone surrogate, which is not valid Unicode"
    return None


def is_utf8(value: str) -> bool:
    """Whether ``value`` encodes as UTF-8 (lone surrogates, e.g. from bad decoding, do not)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_json_strings(value: object, max_depth: int) -> None:
    """Raise unless every string (key or value) in a JSON-serialisable value is storable --
    jsonb rejects NUL characters and lone surrogates --, every key is a string, and objects and
    arrays nest at most ``max_depth`` deep (a deeper value is LimitError)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (Mapping, list, tuple)) and depth > max_depth:
            raise LimitError(
                f"metadata nests deeper than {max_depth} levels of objects and arrays; the "
                f"limit is {max_depth} (Limits.max_metadata_depth)"
            )
        if isinstance(item, str):
            strings: Iterable[object] = (item,)
        elif isinstance(item, Mapping):
            strings = item.keys()
            stack.extend((child, depth + 1) for child in item.values())
            for key in strings:
                if not isinstance(key, str):  # json.dumps would make it a string
                    raise InvalidInputError(
                        f"metadata keys must be strings, got a {type(key).__name__} key"
                    )
        elif isinstance(item, (list, tuple)):
            strings = ()
            stack.extend((child, depth + 1) for child in item)
        else:
            continue
        for string in strings:
            if not isinstance(string, str):
                continue
            if problem := unstorable(string):
                raise InvalidInputError(f"metadata contains {problem}")


def limits(given: object, max_text_length: object) -> Limits:
    """The limits of a ``Memory``: ``given`` (None: the defaults) with its ``max_text_length``
    replaced by the ``max_text_length`` argument when that is not the default.
    Raises ConfigurationError."""
    if given is None:
        given = DEFAULT_LIMITS
    if not isinstance(given, Limits):
        raise ConfigurationError(f"limits must be a pgmem.Limits, got {type(given).__name__}")
    if max_text_length == MAX_TEXT_LENGTH:
        return given
    if isinstance(max_text_length, bool) or not isinstance(max_text_length, int):
        raise ConfigurationError(
            f"max_text_length must be a positive integer, got {shown(max_text_length)}"
        )
    return dataclasses.replace(given, max_text_length=max_text_length)


def memory_id(value: object) -> uuid.UUID:
    """A memory id: a UUID or its string form. A malformed id cannot name a memory."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise InvalidInputError(f"{shown(value)} is not a memory id (a UUID)")


MAX_BATCH_SIZE = 10_000
ITEM_KEYS = ("text", "metadata", "user_id", "agent_id", "run_id")
# Keys for bringing memories over from another store (pgmem.importers): kept as they were.
IMPORT_KEYS = (
    "id", "created_at", "updated_at", "embedding", "expires_at", "origin", "history",
)
#: The events of one memory's history an import may bring (pgmem export --history).
MAX_HISTORY_EVENTS = 10_000
EVENTS = ("ADD", "UPDATE", "DELETE")


@dataclass(frozen=True)
class PastEvent:
    """An event of an imported memory's history, kept as it was (:func:`history`)."""

    event: str
    old_text: str | None
    new_text: str | None
    created_at: datetime


@dataclass(frozen=True)
class NewMemory:
    """A checked memory to add: where it goes, its text and its metadata; for an import, the
    id, timestamps and embedding it keeps (None: pgmem makes them)."""

    scope: Scope
    text: str
    metadata: dict[str, Any]
    id: uuid.UUID | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    embedding: npt.NDArray[np.float32] | None = None
    #: A store item's namespace and key (pgmem.langgraph), and its time to live in minutes.
    namespace: tuple[str, ...] | None = None
    key: str | None = None
    ttl_minutes: float | None = None
    #: What an export brings back (pgmem.exporting): the expiry, the origin, and the history,
    #: which replaces the ADD event the insert writes (None: the insert's own).
    expires_at: datetime | None = None
    origin: dict[str, Any] | None = None
    history: tuple[PastEvent, ...] | None = None


def new_memory(
    tenant: str,
    text_value: object,
    metadata_value: object,
    user_id: str | None,
    agent_id: str | None,
    run_id: str | None,
    *,
    limits: Limits = DEFAULT_LIMITS,
) -> NewMemory:
    """One checked memory to add. Raises ScopeError or InvalidInputError."""
    return NewMemory(
        scope=scope(tenant, user_id, agent_id, run_id),
        text=text(text_value, max_length=limits.max_text_length),
        metadata=metadata(metadata_value, limits),
    )


def items(
    values: object,
    *,
    tenant: str,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> list[NewMemory]:
    """The checked items of ``add_many``, all of them before any is written.

    An item is a text, or a dict with ``text`` and optionally ``metadata``, ``user_id``,
    ``agent_id`` and ``run_id``; a scope key present in the dict (even as None) replaces the
    call's value for that item. Raises ScopeError or InvalidInputError naming the item's index.
    """
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise InvalidInputError(
            f"items must be a list of texts or dicts, got {type(values).__name__}"
        )
    checked = []
    first_with_id: dict[uuid.UUID, int] = {}
    for index, item in enumerate(values):
        try:
            checked.append(_item(item, tenant, user_id, agent_id, run_id, limits))
        except InvalidInputError as exc:
            raise type(exc)(f"items[{index}]: {exc}") from None
        kept_id = checked[-1].id
        if kept_id is not None:
            if kept_id in first_with_id:
                raise InvalidInputError(
                    f"items[{index}]: id {kept_id} is also items[{first_with_id[kept_id]}]'s: "
                    "an id names one memory"
                )
            first_with_id[kept_id] = index
    return checked


def _item(
    item: object,
    tenant: str,
    user_id: str | None,
    agent_id: str | None,
    run_id: str | None,
    limits: Limits,
) -> NewMemory:
    if isinstance(item, str):
        return new_memory(tenant, item, None, user_id, agent_id, run_id, limits=limits)
    if not isinstance(item, Mapping):
        raise InvalidInputError(f"an item must be a str or a dict, got {type(item).__name__}")
    unknown = [key for key in item if key not in ITEM_KEYS + IMPORT_KEYS]
    if unknown:
        raise InvalidInputError(
            f"unknown item keys {', '.join(map(repr, unknown))}; an item has "
            f"{ITEM_KEYS + IMPORT_KEYS}"
        )
    if "text" not in item:
        raise InvalidInputError("the item has no 'text'")
    checked = new_memory(
        tenant,
        item["text"],
        item.get("metadata"),
        item.get("user_id", user_id),
        item.get("agent_id", agent_id),
        item.get("run_id", run_id),
        limits=limits,
    )
    if not any(item.get(key) is not None for key in IMPORT_KEYS):
        return checked
    return dataclasses.replace(
        checked,
        id=None if item.get("id") is None else memory_id(item["id"]),
        created_at=timestamp(item.get("created_at"), "created_at"),
        updated_at=timestamp(item.get("updated_at"), "updated_at"),
        embedding=embedding(item.get("embedding")),
        expires_at=timestamp(item.get("expires_at"), "expires_at"),
        origin=None if item.get("origin") is None else metadata(item["origin"], limits),
        history=history(item.get("history"), limits),
    )


def history(value: object, limits: Limits = DEFAULT_LIMITS) -> tuple[PastEvent, ...] | None:
    """An imported memory's history: a list of at most :data:`MAX_HISTORY_EVENTS` events, each
    ``{"event": "ADD" | "UPDATE" | "DELETE", "old_text", "new_text", "created_at"}`` (texts
    or None; a timezone-aware time), in the order they happened; None stays None."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise InvalidInputError(f"history must be a list of events, got {type(value).__name__}")
    if len(value) > MAX_HISTORY_EVENTS:
        raise InvalidInputError(
            f"history has {len(value)} events, more than {MAX_HISTORY_EVENTS}"
        )
    events = []
    for index, event in enumerate(value):
        what = f"history[{index}]"
        if not isinstance(event, Mapping):
            raise InvalidInputError(f"{what} must be a dict, got {type(event).__name__}")
        unknown = [key for key in event
                   if key not in ("event", "old_text", "new_text", "created_at")]
        if unknown or event.get("event") not in EVENTS:
            raise InvalidInputError(
                f"{what} must be {{'event': one of {EVENTS}, 'old_text', 'new_text', "
                f"'created_at'}}, got {shown(event)}"
            )
        texts = [
            None if event.get(key) is None
            else text(event[key], what=f"{what}.{key}", max_length=limits.max_text_length)
            for key in ("old_text", "new_text")
        ]
        created = timestamp(event.get("created_at"), f"{what}.created_at")
        if created is None:
            raise InvalidInputError(f"{what} has no created_at")
        events.append(PastEvent(event["event"], texts[0], texts[1], created))
    return tuple(events)


def timestamp(value: object, what: str) -> datetime | None:
    """A timezone-aware datetime (or its ISO 8601 text), or None."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInputError(f"{what} {shown(value)} is not an ISO 8601 time") from None
    if not isinstance(value, datetime):
        raise InvalidInputError(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        raise InvalidInputError(f"{what} {value.isoformat()} has no time zone")
    try:
        value.astimezone(timezone.utc)
    except OverflowError:  # before year 1 once in UTC: PostgreSQL would refuse it raw
        raise InvalidInputError(f"{what} {value.isoformat()} is out of range") from None
    return value


def embedding(value: object) -> npt.NDArray[np.float32] | None:
    """A stored embedding to keep: a finite, non-zero vector of floats (its dimension is
    checked against the schema's when it is written), or None."""
    if value is None:
        return None
    try:
        vector = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInputError(
            f"embedding must be a list of numbers, got {shown(value)}") from None
    if vector.ndim != 1 or not vector.size:
        raise InvalidInputError(f"embedding must be a flat, non-empty vector, got {vector.shape}")
    if not np.isfinite(vector).all() or not np.any(vector):
        raise InvalidInputError("embedding holds NaN or infinite values, or is a zero vector")
    return vector


def itersize(value: object, top: int) -> int:
    """How many rows a stream fetches at a time: an integer from 1 to ``top``."""
    return _count("itersize", value, top)


def batch_size(value: object) -> int:
    """A batch size from 1 to MAX_BATCH_SIZE."""
    return _count("batch_size", value, MAX_BATCH_SIZE)
