"""OpenTelemetry spans: one per public call of ``Memory`` and ``AsyncMemory``.

Only ``opentelemetry-api`` is used (the ``otel`` extra); the application owns the SDK, its
exporters and sampling. Without the API installed, or with ``tracing=False`` (``PGMEM_TRACING=0``),
:func:`call` yields None and costs one ``if``; with the API but no SDK the span does not record,
and nothing is timed either.

A span ``pgmem.<call>`` (``pgmem.search``, ``pgmem.add``, ...) carries (docs/production.md,
"Tracing"): the call and the tenant; ``pgmem.scope_hash``, the first 16 hex digits of the
SHA-256 of the call's scope ids (never the ids: the same scope always has the same hash, so its
calls can be grouped; an id easy to guess can be found by hashing guesses); ``pgmem.hits`` for
a search or ``get_all`` (``pgmem.items`` for ``add_many``); the time of each leg of the call
in order (``pgmem.legs``: ``model``, ``primary`` or ``replica``; ``pgmem.legs_ms``: their
milliseconds) and the sums (``pgmem.model_ms``, ``pgmem.db_ms``); and ``pgmem.fallback`` when a
read meant for the replica ran on the primary. Never a memory's text, a query or metadata: an
error sets the span's status to ERROR with the exception's class name only (its message may
quote an input).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator, Sized
from typing import Any

try:  # the otel extra: without it, no span and no timing
    from opentelemetry import trace as _otel_trace
except ImportError:  # pragma: no cover - depends on what is installed
    _otel_trace = None  # type: ignore[assignment]

#: The calls whose results are counted, and the attribute of the count.
_COUNTED = {"search": "pgmem.hits", "get_all": "pgmem.hits", "add_many": "pgmem.items"}
#: The instrumentation scope's name (``get_tracer``'s first argument).
TRACER_NAME = "pgmem"


def available() -> bool:
    """Whether ``opentelemetry-api`` is installed."""
    return _otel_trace is not None


def scope_hash(user_id: object, agent_id: object, run_id: object) -> str | None:
    """The first 16 hex digits of the SHA-256 of the scope ids (None: no id given)."""
    if user_id is None and agent_id is None and run_id is None:
        return None
    key = "\x00".join("" if value is None else f"{type(value).__name__}:{value}"
                      for value in (user_id, agent_id, run_id))
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class CallTrace:
    """The timings of one call, set on its span when the call ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.legs: list[str] = []
        self.legs_ms: list[float] = []
        self.fallback = False
        self.attributes: dict[str, Any] = {}

    def leg(self, kind: str, started: float) -> None:
        """A leg of ``kind`` (``model``, ``primary``, ``replica``) that began at ``started``
        (``time.perf_counter()``) ends now."""
        self.legs.append(kind)
        self.legs_ms.append(round((time.perf_counter() - started) * 1000, 3))

    def result(self, value: object) -> None:
        """Count what the call returned: a search's hits and a ``get_all`` page's records
        (``pgmem.hits``), ``add_many``'s items (``pgmem.items``)."""
        key = _COUNTED.get(self.name)
        if key is not None and isinstance(value, Sized):
            self.attributes[key] = len(value)

    def span_attributes(self) -> dict[str, Any]:
        """The attributes of the call's span."""
        model = sum(ms for kind, ms in zip(self.legs, self.legs_ms) if kind == "model")
        db = sum(ms for kind, ms in zip(self.legs, self.legs_ms) if kind != "model")
        attributes = {
            **self.attributes,
            "pgmem.legs": list(self.legs),
            "pgmem.legs_ms": list(self.legs_ms),
            "pgmem.model_ms": round(model, 3),
            "pgmem.db_ms": round(db, 3),
        }
        if self.fallback:
            attributes["pgmem.fallback"] = True
        return attributes


@contextlib.contextmanager
def call(
    name: str, *, tenant: str, enabled: bool = True, scope: tuple[object, object, object] = (
        None, None, None
    ),
) -> Iterator[CallTrace | None]:
    """The span of a call named ``name`` (``pgmem.<name>``) around the block, which fills the
    :class:`CallTrace` it gets (None when nothing records: no API, ``enabled`` false, or a span
    that does not record)."""
    if _otel_trace is None or not enabled:
        yield None
        return
    tracer = _otel_trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"pgmem.{name}", record_exception=False, set_status_on_exception=False
    ) as span:
        if not span.is_recording():
            yield None
            return
        span.set_attribute("pgmem.call", name)
        span.set_attribute("pgmem.tenant", tenant)
        span.set_attribute("db.system", "postgresql")
        hashed = scope_hash(*scope)
        if hashed is not None:
            span.set_attribute("pgmem.scope_hash", hashed)
        trace = CallTrace(name)
        try:
            yield trace
        except BaseException as exc:
            span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR, type(exc).__name__))
            span.set_attribute("error.type", type(exc).__name__)
            raise
        finally:
            span.set_attributes(trace.span_attributes())
