"""panel_cholesky against LAPACK's one-call Cholesky; in place, one triangle, errors, order 16,500."""

from __future__ import annotations

import numpy as np
import pytest

from bigkernel.errors import DataError, NotPSDError
from bigkernel.kernels.factory import make_kernel
from bigkernel.numerics.cholesky import panel_cholesky
from bigkernel.numerics.gram_tiles import GramTiler

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


def random_spd(n, seed, cond=1e4):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (Q * np.geomspace(1.0, 1.0 / cond, n)) @ Q.T


@pytest.mark.parametrize(("n", "block"), [(1000, 128), (1001, 128), (300, 300), (257, 64), (129, 128), (5, 1), (1, 4)])
def test_matches_lapack(n, block):
    A = random_spd(n, n)
    A = (A + A.T) / 2
    U = panel_cholesky(A, block=block)
    ref = np.linalg.cholesky(A).T
    assert U.shape == (n, n) and U.dtype == np.float64 and U.flags.c_contiguous
    assert np.all(np.tril(U, -1) == 0)
    np.testing.assert_allclose(U, ref, rtol=0, atol=1e-10 * np.abs(ref).max())
    assert np.abs(U.T @ U - A).max() <= 1e-13 * np.abs(A).max() * n


@pytest.mark.parametrize("order", ["C", "F"])
def test_reads_one_triangle(order):
    A = random_spd(200, 1)
    ref = np.linalg.cholesky(A).T
    B = np.array(A, order=order)
    # the triangle that is not read: lower of a C-ordered array, upper of an F-ordered one
    mask = np.tril(np.ones_like(A, dtype=bool), -1) if order == "C" else np.triu(np.ones_like(A, dtype=bool), 1)
    B[mask] = np.nan
    np.testing.assert_allclose(panel_cholesky(B, block=48), ref, atol=1e-12)


@pytest.mark.parametrize("order", ["C", "F"])
def test_overwrite_semantics(order):
    A = np.array(random_spd(300, 2), order=order)
    keep = A.copy()
    U = panel_cholesky(A, block=64)
    np.testing.assert_array_equal(A, keep)  # not touched without overwrite
    assert not np.shares_memory(U, A)
    U2 = panel_cholesky(A, block=64, overwrite=True)
    assert np.shares_memory(U2, A)  # the factor lives in A's memory
    np.testing.assert_allclose(U2, U, atol=1e-13)
    # float32 (or a strided view) cannot hold the factor: a copy is factored, A is kept
    A32 = keep.astype(np.float32)
    U3 = panel_cholesky(A32, block=64, overwrite=True)
    assert not np.shares_memory(U3, A32) and U3.dtype == np.float64
    np.testing.assert_array_equal(A32, keep.astype(np.float32))


def test_not_positive_definite_names_pivot_and_block():
    A = np.eye(300)
    A[150, 150] = -1.0
    with pytest.raises(NotPSDError, match=r"pivot 150 .*rows 128\.\.191.*jitter"):
        panel_cholesky(A, block=64)
    B = random_spd(100, 3)
    B[40, 40] = np.nan
    with pytest.raises(NotPSDError, match="NaN"):
        panel_cholesky(B, block=32)
    with pytest.raises(DataError, match="square"):
        panel_cholesky(np.ones((3, 4)))


@pytest.mark.slow
def test_order_above_16000():
    """An order at which OpenBLAS's threaded potrf segfaults on some CPUs (issue 21)."""
    n = 16_500
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 5))
    A = GramTiler(make_kernel("rbf", gamma=0.1), X).dense()
    A[np.diag_indices(n)] += 1e-6 * n
    rows = rng.choice(n, 8, replace=False)
    ref = A[rows].copy()
    U = panel_cholesky(A, overwrite=True)
    assert np.all(np.diagonal(U) > 0)
    err = np.abs(U[:, rows].T @ U - ref).max() / np.abs(ref).max()
    assert err < 1e-12
    assert all(np.all(U[r, :r] == 0) for r in rows)
