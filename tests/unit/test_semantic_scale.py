"""The semantic scale: the stretch fusion applies, and the scale learned from vectors."""

from __future__ import annotations

import numpy as np
import pytest

from pgmem import semantic_scale
from pgmem.embedding_space import checked_scale, space_of_rows
from pgmem.errors import ConfigurationError
from pgmem.scoring import stretch


def test_stretch_is_the_identity_without_a_scale_and_linear_and_clipped_with_one() -> None:
    assert stretch(-0.2, None) == -0.2 and stretch(0.37, None) == 0.37
    assert stretch(0.80, (0.70, 0.95)) == pytest.approx(0.4)
    assert stretch(0.60, (0.70, 0.95)) == 0.0
    assert stretch(0.99, (0.70, 0.95)) == 1.0


def test_a_learned_scale_maps_the_vectors_quantiles_onto_the_reference() -> None:
    rng = np.random.default_rng(7)
    crowded = rng.normal(size=(300, 48))
    crowded[:, 0] += 20.0  # every vector near one direction: cosines in a narrow band
    low, high = semantic_scale.quantiles(crowded)
    assert 0.7 < low < high < 1.0
    scale = semantic_scale.learn(crowded)
    assert [stretch(q, scale) for q in (low, high)] == pytest.approx(semantic_scale.REFERENCE)
    with pytest.raises(ValueError, match="at least"):
        semantic_scale.learn(crowded[:10])
    with pytest.raises(ValueError, match="do not spread"):
        semantic_scale.learn(np.ones((60, 4)))


def test_a_scale_counts_for_the_model_it_was_learned_for() -> None:
    row = {"role": "current", "model": "e5", "dim": 384, "storage": "vector",
           "scale_model": "e5", "scale_lo": 0.77, "scale_hi": 0.99}
    space = space_of_rows([row])
    assert space is not None and space.scale == (0.77, 0.99)
    switched = space_of_rows([{**row, "model": "another"}])
    assert switched is not None and switched.scale is None
    before_0010 = space_of_rows([{"role": "current", "model": "e5", "dim": 384,
                                  "storage": "vector"}])
    assert before_0010 is not None and before_0010.scale is None
    assert checked_scale([0.7, 0.95], "x") == (0.7, 0.95)
    with pytest.raises(ConfigurationError, match="lo < hi"):
        checked_scale((0.9, 0.8), "semantic_scale")
    with pytest.raises(ConfigurationError, match=r"\(lo, hi\)"):
        checked_scale("wide", "semantic_scale")
