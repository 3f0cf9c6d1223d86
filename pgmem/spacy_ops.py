"""spaCy's CPU networks with NumPy's matrix product.

thinc, under spaCy's models, multiplies matrices with its bundled BLIS kernels. For the small
matrices of a query (a dozen tokens by a few hundred features) NumPy's BLAS does the same
product in about a third of the time: measured on en_core_web_sm, a question's analysis took
5.5 ms before and 4.3 ms after, and ``nlp.pipe`` over the 3,970 dev texts 19.4 s and 14.5 s,
with the same lemmas and entities on every one of them (tests/test_nlp.py compares).

Only the operations object of each network changes; the weights, the layers and spaCy's own
transition loops (which call BLAS from Cython) are as they were.
"""

from __future__ import annotations

from functools import cache
from typing import Any


def use_numpy_matmul(nlp: Any) -> None:
    """Let every network of the pipeline ``nlp`` multiply with NumPy, where it runs on thinc's
    plain CPU operations (a GPU's or another backend's are left alone)."""
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
        """thinc's NumPy operations, with ``gemm`` done by ``numpy.matmul``."""

        def gemm(
            self, x: Any, y: Any, out: Any = None, trans1: bool = False, trans2: bool = False
        ) -> Any:
            if trans1:
                x = x.T
            if trans2:
                y = y.T
            if out is None:
                return numpy.matmul(x, y)
            numpy.matmul(x, y, out=out)
            return out

    return MatmulOps()
