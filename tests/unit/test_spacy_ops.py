"""thinc's ``gemm`` through pgmem's operations: the same products as thinc's own, in every
orientation and with or without ``out``, for a query's few rows and a batch's many."""

from __future__ import annotations

import numpy as np
import pytest

thinc_api = pytest.importorskip("thinc.api")

from pgmem.spacy_ops import MIN_NUMPY_ROWS, _matmul_ops


@pytest.mark.parametrize("rows", [12, MIN_NUMPY_ROWS, 4 * MIN_NUMPY_ROWS])
@pytest.mark.parametrize("trans1", [False, True])
@pytest.mark.parametrize("trans2", [False, True])
def test_products_are_thincs(rows: int, trans1: bool, trans2: bool) -> None:
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((96, rows) if trans1 else (rows, 96), dtype=np.float32)
    y = rng.standard_normal((64, 96) if trans2 else (96, 64), dtype=np.float32)
    expected = thinc_api.NumpyOps().gemm(x, y, trans1=trans1, trans2=trans2)
    ops = _matmul_ops()
    got = ops.gemm(x, y, trans1=trans1, trans2=trans2)
    out = np.empty((rows, 64), dtype=np.float32)
    assert ops.gemm(x, y, out=out, trans1=trans1, trans2=trans2) is out
    assert got.shape == expected.shape == (rows, 64) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
