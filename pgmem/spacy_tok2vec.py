"""spaCy's token-to-vector networks run as one function instead of thinc's ~40 layer calls.

A question's analysis runs two of these networks (the shared ``tok2vec`` and the entity
recogniser's own), each a chain of feature extraction, four to six hash embeddings, a maxout
layer and four residual window layers. thinc calls each layer through its generic machinery (a closure
for the backward pass, list/ragged conversions, dropout that does nothing at inference), which
for a 12-token question costs about as much as the arithmetic: the network took 1.10 ms a
question and the same operations called in a row 0.79 ms.

:func:`use_fused_tok2vec` gives every network of that layout a forward function that calls the
very operations thinc's layers call (the same hash, gather, matrix product, maxout, moments and
window functions of each layer's own operations object, on arrays laid out as thinc lays them
out, the padding between texts included), so that the vectors are the same to the bit
(tests/test_spacy_tok2vec.py compares them; tests/test_nlp.py compares the analyses with
spaCy's as it loads). A network of another layout,
a training pass, or input other than whole non-empty texts runs thinc's own forward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

_EMBED_LEAVES = ("extract_features", "list2ragged")


class _Maxout(NamedTuple):
    """A maxout layer followed by layer normalisation."""

    ops: Any
    W: Any
    b: Any
    G: Any
    shift: Any

    def __call__(self, X: Any) -> Any:
        nO, nP, nI = self.W.shape
        Y = self.ops.gemm(X, self.ops.reshape2f(self.W, nO * nP, nI), trans2=True)
        Y += self.ops.reshape1f(self.b, nO * nP)
        best, _which = self.ops.maxout(self.ops.reshape3f(Y, Y.shape[0], nO, nP))
        mu = best.mean(axis=1, keepdims=True)
        var = best.var(axis=1, keepdims=True) + 1e-08
        normed = (best - mu) * var ** (-1.0 / 2.0)
        out = normed * self.G
        out += self.shift
        return out


class _Hash(NamedTuple):
    """One hash embedding of one feature column."""

    column: Any
    ops: Any
    E: Any
    seed: int

    def __call__(self, ids: Any) -> Any:
        keys = self.ops.hash(self.ops.as_contig(ids[self.column], dtype="uint64"), self.seed)
        return self.ops.gather_add(self.E, keys % self.E.shape[0])


class _Window(NamedTuple):
    """One residual layer of the encoder: window, maxout, layer normalisation."""

    ops: Any
    size: int
    maxout: _Maxout


class _Plan(NamedTuple):
    extract_ops: Any
    columns: Any
    flatten_ops: Any
    hashes: tuple[_Hash, ...]
    concat_ops: Any
    mix: _Maxout
    unflatten_ops: Any
    pad_ops: Any
    pad: int
    windows: tuple[_Window, ...]


def use_fused_tok2vec(nlp: Any) -> int:
    """Give every token-to-vector network of ``nlp``'s components that has spaCy's standard
    layout (MultiHashEmbed then MaxoutWindowEncoder) the fused forward (once: a network that
    has it keeps it). Returns how many networks run it."""
    count = 0
    for _name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if model is None or not hasattr(model, "walk"):
            continue
        for layer in model.walk():
            if hasattr(layer._func, "thinc_forward"):
                count += 1
                continue
            plan = _plan(layer)
            if plan is not None:
                layer._func = _fused_forward(plan, layer._func)
                count += 1
    return count


def _fused_forward(plan: _Plan, thinc_forward: Callable[..., Any]) -> Callable[..., Any]:
    def forward(model: Any, docs: Any, is_train: bool) -> Any:
        if is_train or not _whole_texts(docs):
            return thinc_forward(model, docs, is_train)
        return _run(plan, docs), _no_backprop

    forward.thinc_forward = thinc_forward  # type: ignore[attr-defined]
    return forward


def _no_backprop(_d_output: Any) -> Any:
    raise NotImplementedError("pgmem's fused token-to-vector forward is for inference only")


def _whole_texts(docs: Any) -> bool:
    return (
        isinstance(docs, list)
        and len(docs) > 0
        and all(hasattr(doc, "to_array") and len(doc) > 0 for doc in docs)
    )


def _run(plan: _Plan, docs: Sequence[Any]) -> list[Any]:
    features = []
    for doc in docs:
        attrs = doc.to_array(plan.columns)
        if attrs.ndim == 1:
            attrs = attrs.reshape((attrs.shape[0], 1))
        features.append(plan.extract_ops.asarray2i(attrs, dtype="uint64"))
    lengths = plan.flatten_ops.asarray1i([len(x) for x in features])
    ids = plan.flatten_ops.flatten(features)
    embedded = plan.concat_ops.xp.hstack([h(ids) for h in plan.hashes])
    rows = plan.unflatten_ops.unflatten(plan.mix(embedded), lengths)
    X = plan.pad_ops.flatten(rows, pad=plan.pad)
    for window in plan.windows:
        X = X + window.maxout(window.ops.seq2col(X, window.size))
    return list(plan.pad_ops.unflatten(X, lengths, pad=plan.pad))


def _leaves(model: Any) -> list[Any]:
    if not model.layers:
        return [model]
    return [leaf for layer in model.layers for leaf in _leaves(layer)]


def _maxout(maxout: Any, norm: Any) -> _Maxout | None:
    if maxout.name != "maxout" or norm.name != "layernorm":
        return None
    W, b = maxout.get_param("W"), maxout.get_param("b")
    if W.shape != (maxout.get_dim("nO"), maxout.get_dim("nP"), maxout.get_dim("nI")):
        return None
    return _Maxout(maxout.ops, W, b, norm.get_param("G"), norm.get_param("b"))


def _plan(model: Any) -> _Plan | None:
    """The operations of a network laid out as spaCy's ``Tok2Vec.v2`` with ``MultiHashEmbed``
    and ``MaxoutWindowEncoder`` (and no static vectors), else None."""
    if len(model.layers) != 2:
        return None
    embed, encode = model.layers
    if not encode.name.startswith("with_array(residual(") or "pad" not in encode.attrs:
        return None
    leaves = _leaves(embed)
    names = [leaf.name for leaf in leaves]
    if tuple(names[:2]) != _EMBED_LEAVES or names[-4:] != ["maxout", "layernorm", "dropout",
                                                           "ragged2list"]:
        return None
    pairs = names[2:-4]
    if not pairs or len(pairs) % 2 or pairs != ["ints-getitem", "hashembed"] * (len(pairs) // 2):
        return None
    if len(embed.layers) != 5 or not embed.layers[2].name.startswith("with_array("):
        return None
    hashes = []
    for getitem, hashembed in zip(leaves[2:-4:2], leaves[3:-4:2]):
        index = getitem.attrs.get("index")
        if not (isinstance(index, tuple) and len(index) == 2 and isinstance(index[1], int)):
            return None
        hashes.append(_Hash(index, hashembed.ops, hashembed.get_param("E"),
                            hashembed.attrs["seed"]))
    mix = _maxout(leaves[-4], leaves[-3])
    windows = []
    for block in encode.layers[0].layers:
        inner = _leaves(block)
        if not block.name.startswith("residual(") or [x.name for x in inner] != [
            "expand_window", "maxout", "layernorm", "dropout"
        ]:
            return None
        maxout = _maxout(inner[1], inner[2])
        if maxout is None:
            return None
        windows.append(_Window(inner[0].ops, inner[0].attrs["window_size"], maxout))
    if mix is None or not windows:
        return None
    extract = leaves[0]
    return _Plan(
        extract_ops=extract.ops, columns=extract.attrs["columns"], flatten_ops=leaves[1].ops,
        hashes=tuple(hashes), concat_ops=embed.layers[2].layers[0].ops, mix=mix,
        unflatten_ops=leaves[-1].ops, pad_ops=encode.layers[0].ops, pad=encode.attrs["pad"],
        windows=tuple(windows),
    )
