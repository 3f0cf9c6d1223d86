"""OpenTelemetry spans of Memory and AsyncMemory calls (pgmem.tracing), read back with the SDK's
in-memory exporter: what a span carries, and what it never carries (a text, a query, a scope
id in clear)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import pgmem
from pgmem import tracing

USER = "user-7f3a-secret"
TEXT = "Hannah's allergy: she cannot eat peanuts"
QUERY = "what is Hannah allergic to"

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def provider() -> TracerProvider:
    """The process's tracer provider, an SDK one exporting to :data:`_EXPORTER` (OpenTelemetry
    lets a process set it once)."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        current.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        return current
    made = TracerProvider()
    made.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(made)
    return made


@pytest.fixture
def spans(provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _assert_nothing_in_clear(span: ReadableSpan, *secrets: str) -> None:
    shown = repr(_attributes(span)) + repr(span.status.description) + repr(span.events)
    for secret in secrets:
        assert secret not in shown, (span.name, secret)


def test_the_spans_of_an_add_and_a_search(
    spans: InMemorySpanExporter, memory: pgmem.Memory
) -> None:
    added = memory.add(TEXT, user_id=USER, metadata={"kind": "health"})
    hits = memory.search(QUERY, user_id=USER)
    assert [hit.id for hit in hits] == [added.id]
    found = _by_name(spans)
    (add,), (search,) = found["pgmem.add"], found["pgmem.search"]
    for span in (add, search):
        attributes = _attributes(span)
        assert attributes["pgmem.tenant"] == "default"
        assert attributes["db.system"] == "postgresql"
        assert attributes["pgmem.scope_hash"] == tracing.scope_hash(USER, None, None)
        legs, legs_ms = attributes["pgmem.legs"], attributes["pgmem.legs_ms"]
        assert len(legs) == len(legs_ms) and all(ms >= 0 for ms in legs_ms)
        assert "model" in legs and "primary" in legs and "replica" not in legs
        assert attributes["pgmem.model_ms"] == pytest.approx(
            sum(ms for leg, ms in zip(legs, legs_ms) if leg == "model"), abs=0.01
        )
        assert attributes["pgmem.db_ms"] == pytest.approx(
            sum(ms for leg, ms in zip(legs, legs_ms) if leg != "model"), abs=0.01
        )
        assert attributes["pgmem.model_ms"] > 0 and attributes["pgmem.db_ms"] > 0
        assert span.status.status_code is StatusCode.UNSET
        _assert_nothing_in_clear(span, TEXT, QUERY, USER, "Hannah", "peanuts", "health")
    assert _attributes(search)["pgmem.call"] == "search"
    assert _attributes(search)["pgmem.hits"] == 1
    assert _attributes(add)["pgmem.call"] == "add"
    assert "pgmem.hits" not in _attributes(add)
    # The search's span is the same trace's child of the caller's span, when there is one.
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as parent:
        memory.get_all(user_id=USER)
    (page,) = _by_name(spans)["pgmem.get_all"]
    assert page.parent is not None and page.parent.span_id == parent.get_span_context().span_id
    assert _attributes(page)["pgmem.hits"] == 1


def test_a_failed_call_says_its_error_class_only(
    spans: InMemorySpanExporter, memory: pgmem.Memory
) -> None:
    secret = "x" * 20 + "-my-secret-text"
    with pytest.raises(pgmem.InvalidInputError):
        memory.add(secret, user_id=USER, metadata={"bad": float("nan")})
    (span,) = _by_name(spans)["pgmem.add"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "InvalidInputError"
    assert _attributes(span)["error.type"] == "InvalidInputError"
    assert not span.events  # no exception event: its message may quote the input
    _assert_nothing_in_clear(span, secret, USER)


def test_the_async_memory_has_the_same_spans(
    spans: InMemorySpanExporter, db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer,
) -> None:
    async def scenario() -> None:
        async with pgmem.AsyncMemory(db_dsn, embedder=embedder, nlp=analyzer,
                                     tenant="acme") as mem:
            await mem.add(TEXT, user_id=USER)
            await mem.search(QUERY, user_id=USER)

    asyncio.run(scenario())
    found = _by_name(spans)
    (search,) = found["pgmem.search"]
    assert _attributes(search)["pgmem.tenant"] == "acme"
    assert _attributes(search)["pgmem.hits"] == 1
    assert "model" in _attributes(search)["pgmem.legs"]
    assert len(found["pgmem.add"]) == 1


def test_no_span_without_the_api_or_when_turned_off(
    spans: InMemorySpanExporter, db_dsn: str, embedder: pgmem.SentenceTransformerEmbedder,
    analyzer: pgmem.TextAnalyzer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer,
                      settings=pgmem.Settings(tracing=False)) as mem:
        mem.add(TEXT, user_id=USER)
        assert mem.search(QUERY, user_id=USER)
    assert spans.get_finished_spans() == ()
    monkeypatch.setattr(tracing, "_otel_trace", None)  # as without opentelemetry-api
    with tracing.call("search", tenant="default") as nothing:
        assert nothing is None
    with pgmem.Memory(db_dsn, embedder=embedder, nlp=analyzer) as mem:
        assert mem.search(QUERY, user_id=USER)
    assert spans.get_finished_spans() == ()


def test_the_scope_hash_is_stable_and_tells_scopes_apart() -> None:
    assert tracing.scope_hash(None, None, None) is None
    first = tracing.scope_hash("alice", None, None)
    assert first == tracing.scope_hash("alice", None, None)
    assert first is not None and len(first) == 16 and "alice" not in first
    assert len({first, tracing.scope_hash(None, "alice", None),
                tracing.scope_hash("alice", "a1", None),
                tracing.scope_hash("bob", None, None)}) == 4
