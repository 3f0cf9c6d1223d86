"""pgmem's operations for spaCy's networks: NumPy's products equal thinc's own, and NumPy's
OpenBLAS is held to one thread while analyses run and given back after the last."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pgmem.spacy_ops import _matmul_ops, _openblas_threads, one_blas_thread

thinc_api = pytest.importorskip("thinc.api")


@pytest.fixture
def threads() -> list[int]:
    """The thread counts of NumPy's OpenBLAS now (the tests need one to hold)."""
    if not _openblas_threads():
        pytest.skip("NumPy's BLAS is not an OpenBLAS with its own thread pool")
    return blas_threads()


def blas_threads() -> list[int]:
    return [lib.get() for lib in _openblas_threads()]


@pytest.mark.parametrize("rows", [1, 12, 1280])
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


def test_one_thread_inside_and_the_original_after(threads: list[int]) -> None:
    with one_blas_thread():
        assert set(blas_threads()) == {1}
        with one_blas_thread():
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {1}  # the outer analysis still runs
    assert blas_threads() == threads


def test_overlapping_analyses_give_the_threads_back_when_the_last_ends(
    threads: list[int],
) -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[list[int]] = []

    def first() -> None:
        with one_blas_thread():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with one_blas_thread():
            second_in.set()
            first_out.wait(5)
            seen.append(blas_threads())  # the first has ended, this one has not

    workers = [threading.Thread(target=first), threading.Thread(target=second)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert [set(s) for s in seen] == [{1}]
    assert blas_threads() == threads


def test_an_error_inside_gives_the_threads_back(threads: list[int]) -> None:
    with pytest.raises(RuntimeError), one_blas_thread():
        raise RuntimeError("analysis failed")
    assert blas_threads() == threads


def test_a_real_analysis_runs_on_one_thread(threads: list[int]) -> None:
    import pgmem

    seen: list[list[int]] = []
    analyzer = pgmem.TextAnalyzer()
    nlp = analyzer.nlp
    original = nlp.make_doc

    def probing(text: str):  # type: ignore[no-untyped-def]
        seen.append(blas_threads())
        return original(text)

    nlp.make_doc = probing
    try:
        analyzer.analyze("Caroline went to the support group in Boston.")
        analyzer.analyze_many(["Melanie paints.", "Jon travels to Paris."])
    finally:
        nlp.make_doc = original
    assert seen and all(set(s) == {1} for s in seen)
    assert blas_threads() == threads
