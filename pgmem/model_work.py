"""The models of a ``Memory`` and how they run: :class:`ModelWork`.

One object holds the embedder, the text search configurations' analyzers
(:class:`~pgmem.languages.Languages`), the reranker, the cache of entity names' vectors, the
thread a query embeds in while spaCy analyses it, and the limit on calls running model work at
once. It is built from :class:`~pgmem.settings.Settings` and the objects a caller passes, the
same way for :class:`pgmem.Memory`, :class:`pgmem.AsyncMemory`, the ``pgmem`` command and its
background server; :meth:`ModelWork.close` lets go of the thread and of the spaCy processes it
started (a later call makes them again). For an embedder with an async client
(:func:`~pgmem.embedding.awaits`), ``AsyncMemory`` awaits the ``a``-twins of the methods that
embed (:meth:`ModelWork.aembedded_beside`). :mod:`pgmem.operations` decides when model work
runs; this module how.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from pgmem.builders import BatchEntities, Vectors, batch_entities, query_entities
from pgmem.embedding import (
    DOCUMENT,
    QUERY,
    VectorCache,
    acached_embeddings,
    achecked_embeddings,
    awaits,
    cached_embeddings,
    checked_embeddings,
    embeds_beside_analysis,
    usable_cores,
)
from pgmem.embedding_space import EmbeddingSpace, checked_scale, embedder_dimension, embedder_name
from pgmem.languages import Analyzers, Languages, TextSearch
from pgmem.next_model import NextModel, NextVectors
from pgmem.nlp import Analysis, TextAnalyzer
from pgmem.providers import embedder_from
from pgmem.rerank import Reranker
from pgmem.results import SearchHit
from pgmem.settings import CORES, Settings

logger = logging.getLogger(__name__)

T = TypeVar("T")


def model_concurrency(settings: Settings) -> int | None:
    """How many calls may run model work at once: ``settings.model_concurrency``
    (``PGMEM_MODEL_CONCURRENCY``: a positive integer, or None for no limit); by default the
    number of cores this process may use.

    Model work is CPU-bound: one call's embedding already keeps a core busy and spaCy holds the
    GIL for much of its work, so calls computing side by side beyond the cores only contend
    (thread switches, GIL hand-offs, an OpenMP team per calling thread): on an idle machine a
    limit of the cores keeps 16 threads as fast as 4, where no limit loses a third
    (``python -m benchmarks.concurrency``; docs/benchmarks.md). On a machine shared with other
    busy processes no limit can win instead (more runnable threads get more of the cores):
    measure, and set ``none`` if so.
    """
    value = settings.model_concurrency
    return usable_cores() if value == CORES else value


def rerank_hits(
    reranker: Reranker, query: str, hits: list[SearchHit], limit: int
) -> list[SearchHit]:
    """The reranker's order of ``hits``, cut to ``limit``; when it fails, the fused order, each
    hit's ``explain.notes`` saying so."""
    try:
        return list(reranker.rerank(query, hits, limit))[:limit]
    except Exception as exc:
        logger.warning("the reranker failed; returning the fused order", exc_info=True)
        note = f"the reranker failed ({type(exc).__name__}: {exc}): the fused order"
        return [
            replace(hit, explain=replace(hit.explain, notes=(*hit.explain.notes, note)))
            for hit in hits[:limit]
        ]


def _one_later(text_search: TextSearch, text: str) -> Callable[[], Callable[[], Analysis]]:
    """``later`` for :meth:`ModelWork.embedded_beside` of one text's analysis."""

    def later() -> Callable[[], Analysis]:
        wait = text_search.analyze_many_later([text])
        return lambda: wait()[0]

    return later


def _query_names(analysis: Analysis) -> list[str]:
    """The surface forms of the query's entities the entity leg embeds."""
    return [entity.surface for entity in query_entities(analysis)]


def _entity_names(analysis: Analysis) -> list[str]:
    """The surface forms of the entities a memory's text names."""
    return [entity.surface for entity in analysis.entities]


def _batch_later(
    text_search: TextSearch, texts: Sequence[str]
) -> Callable[[], Callable[[], tuple[list[Analysis], BatchEntities]]]:
    """``later`` for :meth:`ModelWork.embedded_beside` of a batch's analyses and entities."""

    def later() -> Callable[[], tuple[list[Analysis], BatchEntities]]:
        wait = text_search.analyze_many_later(list(texts))

        def analyzed() -> tuple[list[Analysis], BatchEntities]:
            analyses = wait()
            return analyses, batch_entities(analyses)

        return analyzed

    return later


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark a task's exception as seen (a task left running when its caller was cancelled)."""
    if not task.cancelled():
        task.exception()


class ModelWork:
    """The models of a ``Memory`` (see the module docstring). ``embedder``, ``nlp``,
    ``reranker`` and ``next_embedder`` are ``Memory``'s arguments of those names; what is None
    comes from ``settings``. Nothing loads a model here."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Any = None,
        nlp: Analyzers = None,
        reranker: Reranker | None = None,
        next_embedder: Any = None,
    ) -> None:
        self.settings = settings
        self.embedder = embedder_from(embedder, settings)
        # the pending model of a re-embedding, for the writes made meanwhile (pgmem.next_model)
        self.next_model = NextModel(settings, next_embedder)
        # spaCy runs in a process of its own where the embedder runs beside it (the two would
        # take turns for the GIL; pgmem.nlp_process), unless the caller gave an analyzer -- then
        # the embedder is not asked (torch's answer imports torch: seconds a CLI command).
        self.languages = Languages(
            settings.ts_config, nlp, settings=settings,
            apart=functools.partial(embeds_beside_analysis, self.embedder),
        )
        # The analyzer of the Memory's configuration; English's where PostgreSQL makes that
        # configuration's lexemes.
        self.analyzer: TextAnalyzer = self.languages.get().analyzer or self.languages.english
        self.reranker = reranker
        self._entity_vectors = VectorCache()
        self._embedder_name: str | None = None
        turns = model_concurrency(settings)
        self._turns = None if turns is None else threading.BoundedSemaphore(turns)
        # The thread a text embeds in while spaCy analyses it here (see embedded_beside), made
        # on first use and shut down by close.
        self._overlap: concurrent.futures.ThreadPoolExecutor | None = None
        self._overlap_lock = threading.Lock()

    @property
    def embedder_name(self) -> str:
        """The name the embedder's vectors are recorded under (see
        :func:`pgmem.embedding_space.embedder_name`)."""
        if self._embedder_name is None:
            self._embedder_name = embedder_name(self.embedder)
        return self._embedder_name

    @property
    def semantic_scale(self) -> tuple[float, float] | None:
        """The embedder's ``semantic_scale`` (lo, hi), checked; None when it has none."""
        return checked_scale(getattr(self.embedder, "semantic_scale", None), "semantic_scale")

    def embedder_dimension(self) -> int | None:
        """The embedder's dimension, for an error message; None if unknown (it may load the
        model)."""
        return embedder_dimension(self.embedder)

    def close(self) -> None:
        """Shut the embedding thread down and stop the spaCy processes of the analyzers made
        here (what was passed in is the caller's). A later call makes them again."""
        with self._overlap_lock:
            pool, self._overlap = self._overlap, None
        if pool is not None:
            pool.shutdown(wait=True)
        self.languages.close()

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Wait for a turn to run model work (see :func:`model_concurrency`)."""
        if self._turns is None:
            yield
            return
        with self._turns:
            yield

    def _beside(
        self, texts: Sequence[str], dim: int, kind: str
    ) -> concurrent.futures.Future[Vectors]:
        """The vectors of ``texts`` (as ``kind``), computed in the embedding thread."""
        with self._overlap_lock:
            if self._overlap is None:
                self._overlap = concurrent.futures.ThreadPoolExecutor(
                    thread_name_prefix="pgmem-embed"
                )
            return self._overlap.submit(
                functools.partial(checked_embeddings, kind=kind), self.embedder, texts, dim
            )

    def embedded_beside(
        self,
        texts: Sequence[str],
        dim: int,
        later: Callable[[], Callable[[], T]],
        names: Callable[[T], Sequence[str]],
        *,
        apart: bool,
        kind: str = DOCUMENT,
        short: bool = False,
    ) -> tuple[T, Vectors]:
        """An analysis, and the vectors of ``texts`` (embedded as ``kind``: a query or
        documents) then of the entity ``names(analysis)`` (documents, whatever ``kind``; those
        the cache holds are not embedded again). ``later()`` starts the analysis and
        returns what waits for it (:meth:`TextSearch.analyze_many_later`). The texts embed
        while it runs: in this thread while another process analyses (``apart``: neither
        waits for the other's GIL; with :func:`~pgmem.embedding.embed_apart`, on one thread so
        that the analysis keeps its core, unless the analysis is ``short``: a query's tagged
        analysis ends well before the embedding, which is then faster on every thread); else
        in another thread -- the model releases the GIL for most of its work, so on two cores
        the two overlap -- unless the embedder says that would starve the analysis
        (:func:`~pgmem.embedding.embeds_beside_analysis`: torch with a thread per core); then
        they embed first."""
        beside = embeds_beside_analysis(self.embedder)
        if apart and beside:
            wait = later()
            try:
                text_vectors = checked_embeddings(
                    self.embedder, texts, dim, apart=not short, kind=kind
                )
            except BaseException:
                with contextlib.suppress(Exception):
                    wait()  # collected, so that the analyzer is free again
                raise
            analysis = wait()
        elif beside:
            embedded = self._beside(texts, dim, kind)
            analysis = later()()
            text_vectors = embedded.result()
        else:
            text_vectors = checked_embeddings(self.embedder, texts, dim, kind=kind)
            analysis = later()()
        name_vectors = cached_embeddings(
            self.embedder, [], names(analysis), dim, self._entity_vectors
        )
        return analysis, np.concatenate([text_vectors, name_vectors])

    @property
    def awaits(self) -> bool:
        """Whether the embedder has an async client ``AsyncMemory`` awaits
        (:func:`~pgmem.embedding.awaits`): then the ``a``-twins of :meth:`analyze`,
        :meth:`query_vectors` and :meth:`analyze_batch` serve it."""
        return awaits(self.embedder)

    async def aclose(self) -> None:
        """Close the async client an
        :class:`~pgmem.providers.openai_endpoint.OpenAIEmbedder` made for itself (one passed
        to it stays open; any other embedder is the caller's, left as it is)."""
        from pgmem.providers.openai_endpoint import OpenAIEmbedder  # imported when needed

        if isinstance(self.embedder, OpenAIEmbedder):
            await self.embedder.aclose()

    async def aembedded_beside(
        self,
        texts: Sequence[str],
        dim: int,
        later: Callable[[], Callable[[], T]],
        names: Callable[[T], Sequence[str]],
        *,
        kind: str = DOCUMENT,
    ) -> tuple[T, Vectors]:
        """:meth:`embedded_beside` for an embedder that awaits: the analysis (``later()()``)
        runs in a worker thread, in a turn of model work, while ``texts`` embed by awaiting the
        embedder's client; then the entity ``names(analysis)`` embed (awaited; the cache's
        are not). When the texts' embedding fails, the analysis is waited for (the analyzer
        free again) before the error is raised; when the caller is cancelled, it ends in its
        thread on its own, and its turn with it."""

        def analyze() -> T:
            with self.turn():
                return later()()

        analysis = asyncio.ensure_future(asyncio.to_thread(analyze))
        analysis.add_done_callback(_retrieved)
        try:
            text_vectors = await achecked_embeddings(self.embedder, texts, dim, kind=kind)
        except Exception:
            with contextlib.suppress(Exception):
                await analysis
            raise
        found = await analysis
        name_vectors = await acached_embeddings(
            self.embedder, [], names(found), dim, self._entity_vectors
        )
        return found, np.concatenate([text_vectors, name_vectors])

    def analyze(self, text: str, dim: int, text_search: TextSearch) -> tuple[Analysis, Vectors]:
        """A memory's new text's analysis, and the vectors of the text and of every entity it
        names."""
        with self.turn():
            return self.embedded_beside(
                [text], dim, _one_later(text_search, text), _entity_names,
                apart=text_search.runs_apart,
            )

    async def aanalyze(
        self, text: str, dim: int, text_search: TextSearch
    ) -> tuple[Analysis, Vectors]:
        """:meth:`analyze`, awaiting the embedder (:meth:`aembedded_beside`)."""
        return await self.aembedded_beside(
            [text], dim, _one_later(text_search, text), _entity_names
        )

    def query_vectors(
        self, query: str, dim: int, text_search: TextSearch
    ) -> tuple[Analysis, Vectors]:
        """A query's analysis, and the vectors of the query and of the entities the entity leg
        uses, by ``settings.query_analysis`` (:mod:`pgmem.query_analysis`): ``full`` and
        ``tagged`` analyse while the query embeds (see :meth:`embedded_beside`); ``lookup``
        analyses here first (~0.1 ms) and embeds
        the query alone."""
        lookup = text_search.query_analyzer()
        with self.turn():
            if lookup is None:
                return self.embedded_beside(
                    [query], dim, _one_later(text_search, query), _query_names,
                    apart=text_search.runs_apart, kind=QUERY,
                )
            if not lookup.tagged:
                return lookup.analyze(query), checked_embeddings(
                    self.embedder, [query], dim, kind=QUERY
                )
            return self.embedded_beside(
                [query], dim, lambda: text_search.analyze_tagged_later(query), _query_names,
                apart=text_search.runs_apart, kind=QUERY, short=True,
            )

    async def aquery_vectors(
        self, query: str, dim: int, text_search: TextSearch
    ) -> tuple[Analysis, Vectors]:
        """:meth:`query_vectors`, awaiting the embedder (:meth:`aembedded_beside`): the query
        embeds while it is analysed (the lookup analyzer's too, in the worker thread, which
        may load its table), then the entity leg's names (none with ``lookup``)."""

        def later() -> Callable[[], tuple[Analysis, list[str]]]:
            lookup = text_search.query_analyzer()
            if lookup is None:
                wait = _one_later(text_search, query)()
            elif not lookup.tagged:
                analysis = lookup.analyze(query)
                return lambda: (analysis, [])
            else:
                wait = text_search.analyze_tagged_later(query)
            return lambda: (found := wait(), _query_names(found))

        (analysis, _), vectors = await self.aembedded_beside(
            [query], dim, later, lambda found: found[1], kind=QUERY
        )
        return analysis, vectors

    def analyze_batch(
        self, texts: Sequence[str], to_embed: Sequence[str], dim: int, text_search: TextSearch
    ) -> tuple[list[Analysis], BatchEntities, Vectors]:
        """A batch's analyses (lemmatized together), its entities, and one embedding call's
        vectors: of ``to_embed`` then of the entity names not embedded before (a cache keeps
        the names' vectors). One memory's text embeds during its analysis instead, where the
        embedder gains from that (:func:`~pgmem.embedding.embeds_beside_analysis`)."""
        later = _batch_later(text_search, texts)
        with self.turn():
            if embeds_beside_analysis(self.embedder) and (
                text_search.runs_apart or len(to_embed) == 1 == len(texts)
            ):
                # The texts embed while spaCy analyses them: any batch where spaCy runs in a
                # process of its own, else one memory (an add, which its caller waits on).
                (analyses, entities), vectors = self.embedded_beside(
                    to_embed, dim, later, lambda found: found[1].surfaces,
                    apart=text_search.runs_apart,
                )
            else:
                analyses, entities = later()()
                vectors = cached_embeddings(
                    self.embedder, to_embed, entities.surfaces, dim, self._entity_vectors
                )
        return analyses, entities, vectors

    async def aanalyze_batch(
        self, texts: Sequence[str], to_embed: Sequence[str], dim: int, text_search: TextSearch
    ) -> tuple[list[Analysis], BatchEntities, Vectors]:
        """:meth:`analyze_batch`, awaiting the embedder: ``to_embed`` embeds while the batch
        is analysed, then the new entity names (:meth:`aembedded_beside`)."""
        (analyses, entities), vectors = await self.aembedded_beside(
            to_embed, dim, _batch_later(text_search, texts), lambda found: found[1].surfaces
        )
        return analyses, entities, vectors

    def rerank(
        self, reranker: Reranker, query: str, hits: list[SearchHit], limit: int
    ) -> list[SearchHit]:
        """:func:`rerank_hits`, in a turn of model work."""
        with self.turn():
            return rerank_hits(reranker, query, hits, limit)

    def next_vectors(
        self, target: EmbeddingSpace, texts: Sequence[str], names: Sequence[str]
    ) -> NextVectors | None:
        """A write's vectors of a re-embedding's pending model ``target`` (see
        :class:`~pgmem.next_model.NextModel`), in a turn of model work; None when this process
        cannot make them."""
        with self.turn():
            return self.next_model.vectors(target, self.embedder, texts, names)
