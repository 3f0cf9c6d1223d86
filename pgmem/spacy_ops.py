"""spaCy's CPU networks with NumPy's matrix product for batches.

thinc, under spaCy's models, multiplies matrices with its bundled BLIS kernels, which here run
at a third of the speed of NumPy's BLAS (OpenBLAS): a (1280 × 288) by (288 × 288) product, a
batch of 64 short texts, takes 6.9 ms with BLIS and 2.3 ms with NumPy on one thread. With
NumPy's product for the batches of ``nlp.pipe``, ``add_many``'s analysis of the 3,970 dev texts
took 14.5 s instead of 19.4, with the same lemmas and entities on every one of them
(tests/test_nlp.py compares).

A query's products (a dozen rows) stay with BLIS: OpenBLAS splits them over threads that then
spin waiting for more work, and take the core the query's embedding runs on at the same time
(search p50 at 10,000 memories 26.7 ms so, 23.4 ms with OpenBLAS held to one thread); NumPy's
thread count is the application's, not pgmem's to change.

Only the operations object of each network changes; the weights, the layers and spaCy's own
transition loops (which call BLAS from Cython) are as they were.
"""

from __future__ import annotations

from functools import cache
from typing import Any

# Products of at least this many rows go to NumPy: a batch's, never a query's.
MIN_NUMPY_ROWS = 256


def use_numpy_matmul(nlp: Any) -> None:
    """Let every network of the pipeline ``nlp`` multiply batches with NumPy, where it runs on
    thinc's plain CPU operations (a GPU's or another backend's are left alone)."""
    from thinc.api import NumpyOps

    ops = _matmul_ops()
    for _name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if model is None or not hasattr(model, "walk"):
            continue
        for layer in model.walk():
            if type(layer.ops) is NumpyOps:
                layer.ops = ops


@cache
def _matmul_ops() -> Any:
    import numpy
    from thinc.api import NumpyOps

    class MatmulOps(NumpyOps):  # type: ignore[misc]  # thinc's Ops are untyped Cython
        """thinc's NumPy operations, with ``gemm`` of many rows done by ``numpy.matmul``."""

        def gemm(
            self, x: Any, y: Any, out: Any = None, trans1: bool = False, trans2: bool = False
        ) -> Any:
            if x.shape[1 if trans1 else 0] < MIN_NUMPY_ROWS:
                return super().gemm(x, y, out=out, trans1=trans1, trans2=trans2)
            if trans1:
                x = x.T
            if trans2:
                y = y.T
            if out is None:
                return numpy.matmul(x, y)
            numpy.matmul(x, y, out=out)
            return out

    return MatmulOps()
