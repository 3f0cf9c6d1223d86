"""spaCy's CPU networks with NumPy's matrix product, on one BLAS thread.

thinc, under spaCy's models, multiplies matrices with its bundled BLIS kernels, which here run
at well under half the speed of NumPy's BLAS (OpenBLAS) on one thread, for a query's products
and a batch's alike; an analysis is faster so, with the same lemmas and entities
(tests/test_nlp.py compares; the figures: docs/benchmarks.md, "Figures behind the code's
choices").

On one thread, because OpenBLAS splits even a query's products over its threads, which then
spin waiting for more work and take the core the query's embedding runs on (a search is
slower so than on one thread). :func:`one_blas_thread` holds
OpenBLAS to one thread while analyses run: the first to start sets it, the last to end gives
back what was there (a count under a lock, as pgmem's threads analyse concurrently). The
limit is process-wide while it lasts, as OpenBLAS has no other. For ``add_many``'s batches one
thread or two made no difference.

Where NumPy's BLAS is not an OpenBLAS pgmem can hold to one thread (threadpoolctl, which
scikit-learn brings with sentence-transformers, finds it), the networks keep thinc's own
product. Only the operations object of each network changes; the weights, the layers and
spaCy's own transition loops (which call BLAS from Cython) are as they were.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, NamedTuple


class _Threads(NamedTuple):
    get: Callable[[], int]
    set: Callable[[int], Any]


def use_numpy_matmul(nlp: Any) -> None:
    """Let every network of the pipeline ``nlp`` multiply with NumPy, where it runs on thinc's
    plain CPU operations (a GPU's or another backend's are left alone) and NumPy's BLAS can be
    held to one thread."""
    if not _openblas_threads():
        return
    from thinc.api import NumpyOps

    ops = _matmul_ops()
    for _name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if model is None or not hasattr(model, "walk"):
            continue
        for layer in model.walk():
            if type(layer.ops) is NumpyOps:
                layer.ops = ops


class _Running:
    """How many analyses run now, and the thread counts to give back when none does."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.restore: list[tuple[_Threads, int]] = []


_RUNNING = _Running()


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """NumPy's OpenBLAS on one thread while the block runs (nothing changes where there is no
    OpenBLAS to hold)."""
    libraries = _openblas_threads()
    if not libraries:
        yield
        return
    with _RUNNING.lock:
        if _RUNNING.count == 0:
            _RUNNING.restore = [(lib, lib.get()) for lib in libraries]
            for lib in libraries:
                lib.set(1)
        _RUNNING.count += 1
    try:
        yield
    finally:
        with _RUNNING.lock:
            _RUNNING.count -= 1
            if _RUNNING.count == 0:
                for lib, threads in _RUNNING.restore:
                    lib.set(threads)
                _RUNNING.restore = []


@cache
def _openblas_threads() -> tuple[_Threads, ...]:
    """The thread-count functions of each OpenBLAS NumPy has loaded with its own thread pool
    (an OpenMP build's count is per calling thread already, and left alone)."""
    try:
        import numpy  # noqa: F401  # loads NumPy's BLAS, so that the controller finds it
        from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]
    except ImportError:
        return ()
    found = []
    for lib in ThreadpoolController().select(internal_api="openblas").lib_controllers:
        if getattr(lib, "threading_layer", None) == "openmp":
            continue
        try:
            dll = ctypes.CDLL(lib.filepath)
        except OSError:
            continue
        # OpenBLAS's own names, or those of a build with a symbol prefix/suffix (NumPy's
        # wheels: scipy_openblas_set_num_threads64_).
        for prefix, suffix in (("", ""), ("scipy_", "64_"), ("", "64_"), ("scipy_", "")):
            get = getattr(dll, f"{prefix}openblas_get_num_threads{suffix}", None)
            set_ = getattr(dll, f"{prefix}openblas_set_num_threads{suffix}", None)
            if get is not None and set_ is not None:
                found.append(_Threads(get, set_))
                break
    return tuple(found)


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
