"""A model's semantic scale, learned from its own vectors (pure: NumPy only).

Fusion adds the semantic similarity to keyword and entity signals whose constants were tuned
with all-MiniLM-L6-v2, whose cosine puts unrelated texts near 0. Another model may crowd its
cosines into a narrow band (multilingual-e5-small: unrelated turns at 0.79, near neighbours at
0.96), so that its semantic part barely varies and the other signals decide alone. Its scale
(:func:`pgmem.scoring.stretch`) maps its similarity distribution onto MiniLM's: two quantiles
measured on a sample of the store's own vectors -- the 5th percentile of random pairs
(unrelated texts) and the 95th of each text's nearest neighbour (close texts) -- land where
MiniLM puts them (:data:`REFERENCE`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: all-MiniLM-L6-v2's two quantiles on LoCoMo's dev turns (600 sampled, `python -m
#: benchmarks.retrieval --help` names the file): random pairs' 5th percentile, nearest
#: neighbours' 95th. A scale maps a model's own two quantiles onto these.
REFERENCE = (0.084, 0.831)
#: The fewest vectors a scale is learned from, and the most sampled.
MIN_VECTORS = 50
SAMPLE = 1000


def quantiles(vectors: npt.ArrayLike) -> tuple[float, float]:
    """The (random pairs' 5th percentile, nearest neighbours' 95th percentile) cosine of
    ``vectors`` (one a row; normalised here)."""
    v = np.asarray(vectors, dtype=np.float64)
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    gram = v @ v.T
    off = ~np.eye(len(v), dtype=bool)
    nearest = np.where(off, gram, -np.inf).max(axis=1)
    return float(np.quantile(gram[off], 0.05)), float(np.quantile(nearest, 0.95))


def learn(
    vectors: npt.ArrayLike, reference: tuple[float, float] = REFERENCE
) -> tuple[float, float]:
    """The scale (lo, hi) that maps the quantiles of ``vectors`` (:func:`quantiles`) onto
    ``reference``: ``stretch(q, (lo, hi)) == reference`` for both.

    Raises:
        ValueError: fewer than :data:`MIN_VECTORS` vectors, or quantiles that do not rise
            (every vector alike).
    """
    v = np.asarray(vectors)
    if v.ndim != 2 or len(v) < MIN_VECTORS:
        raise ValueError(f"a scale is learned from {MIN_VECTORS} vectors at least, got {len(v)}")
    low, high = quantiles(v)
    if not high > low:
        raise ValueError("the vectors' similarities do not spread: no scale can be learned")
    slope = (reference[1] - reference[0]) / (high - low)
    lo = low - reference[0] / slope
    return lo, lo + 1.0 / slope
