"""A batch of texts embeds in batches that pad little (:func:`pgmem.embedding.length_batches`),
and each text gets the vector it gets alone."""

from __future__ import annotations

import numpy as np
import pytest

import pgmem
from pgmem.embedding import BATCH_TOKENS, length_batches

MIXED = [
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Paris",
    "word " * 400,  # longer than the model's 256 tokens: truncated alike
    "Melanie: Wow, that's great! What did you paint last weekend at the lake house?",
    "ok",
    "Inventory code XJ-4471 belongs to the blue storage crate in the basement.",
    "Jon",
    "The reading group meets on Wednesday; bring snacks.",
]


def test_batches_go_shortest_first_within_their_size_and_token_limits() -> None:
    lengths = [5, 300, 12, 12, 40, 3, 90, 7]
    batches = length_batches(lengths, max_size=3, max_tokens=100)
    assert batches == [[5, 0, 7], [2, 3], [4], [6], [1]]  # 300 tokens: a batch of its own
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 100
    assert length_batches([], max_size=3, max_tokens=100) == []
    assert length_batches([4] * 10, max_size=64, max_tokens=BATCH_TOKENS) == [list(range(10))]


def test_a_batch_gets_the_vectors_its_texts_get_alone(
    embedder: pgmem.SentenceTransformerEmbedder,
) -> None:
    alone = np.vstack([embedder.embed([text]) for text in MIXED])
    assert np.abs(embedder.embed(MIXED) - alone).max() < 1e-5
    one_a_batch = pgmem.SentenceTransformerEmbedder(batch_tokens=1)
    one_a_batch._model = embedder._model  # the same loaded model
    assert np.abs(one_a_batch.embed(MIXED) - alone).max() < 1e-5


def test_the_model_runs_once_a_batch(
    embedder: pgmem.SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The texts go to the model in length_batches' groups: the 400-word text alone."""
    model = embedder.model
    encode, calls = model.encode, []

    def counted(texts: list[str], **kwargs: object) -> object:
        calls.append(len(texts))
        return encode(texts, **kwargs)

    monkeypatch.setattr(model, "encode", counted)
    embedder.embed(MIXED)
    assert sorted(calls) == [1, 7]
    calls.clear()
    one_a_batch = pgmem.SentenceTransformerEmbedder(batch_tokens=1)
    one_a_batch._model = embedder._model
    one_a_batch.embed(MIXED)
    assert calls == [1] * len(MIXED)


@pytest.mark.parametrize("limits", [{"batch_size": 0}, {"batch_tokens": 0}, {"batch_size": 2.5},
                                    {"batch_tokens": True}])
def test_batch_limits_must_be_positive_integers(limits: dict[str, object]) -> None:
    name = next(iter(limits))
    for embedder in (pgmem.SentenceTransformerEmbedder, pgmem.OnnxEmbedder):
        with pytest.raises(pgmem.ConfigurationError, match=name):
            embedder(**limits)  # type: ignore[arg-type]


def test_counting_tokens_leaves_the_models_tokenizer_alone(
    embedder: pgmem.SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batches' token counts come from a tokenizer of the embedder's own: the model's is
    called only as ``encode`` calls it (padded). A call with other padding changed its shared
    settings under a batch another thread was encoding ("Unable to create tensor")."""
    tokenizer = embedder.model.tokenizer
    call, paddings = type(tokenizer).__call__, []

    def watched(self: object, *args: object, **kwargs: object) -> object:
        if self is tokenizer:
            paddings.append(kwargs.get("padding", False))
        return call(self, *args, **kwargs)

    monkeypatch.setattr(type(tokenizer), "__call__", watched)
    embedder.embed(MIXED)
    assert paddings and all(padding not in (False, "do_not_pad") for padding in paddings)
    counted = [len(tokens.ids) for tokens in embedder._counter.get().encode_batch(MIXED)]
    longest = embedder.model.max_seq_length
    assert counted == [len(ids) for ids in tokenizer(MIXED, truncation=True,
                                                     max_length=longest)["input_ids"]]
    assert max(counted) == longest  # the 400-word text, truncated as the model truncates
