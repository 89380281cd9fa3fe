"""Low-rank preconditioners: Woodbury apply vs dense inverse, factor quality, defaults."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import eigh

from bigkernel.errors import DataError, ParameterError
from bigkernel.kernels import RBF, Matern
from bigkernel.numerics.precond import (
    LowRankFactor,
    LowRankPreconditioner,
    build_preconditioner,
    default_rank,
    kernel_columns,
    nystroem_factor,
    rpcholesky_factor,
)
from tests._tolerance import assert_backward_stable, assert_forward_close

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


@pytest.fixture(scope="module")
def clustered():
    """One large cluster and ten small far-away ones: uniform sampling misses the small ones."""
    rng = np.random.default_rng(0)
    big = rng.normal(scale=0.3, size=(900, 2))
    centres = rng.uniform(-20, 20, size=(10, 2))
    small = np.repeat(centres, 10, axis=0) + rng.normal(scale=0.05, size=(100, 2))
    X = np.vstack([big, small])
    kernel = RBF(gamma=1.0)
    return kernel, X, kernel(X)


def residual_trace(K, L):
    return float(np.trace(K - L @ L.T))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("method", ["rpcholesky", "nystroem"])
def test_apply_matches_dense_inverse(method, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(150, 3))
    kernel = Matern(1.0, 2.5)
    P = build_preconditioner(kernel_columns(kernel, X), kernel.diag(X), 0.05, method=method, rank=30, random_state=seed)
    L = P.factor()
    dense = np.linalg.inv(L @ L.T + 0.05 * np.eye(150))
    R = rng.normal(size=(150, 4))
    np.testing.assert_allclose(P.apply(R), dense @ R, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(P(R[:, 0]), dense @ R[:, 0], rtol=1e-8, atol=1e-10)
    assert P.rank == 30 and P.method == method and len(P.pivots) == 30


def test_apply_from_a_given_factor_and_per_column_shifts():
    rng = np.random.default_rng(2)
    L = rng.normal(size=(60, 8)) @ np.diag(np.geomspace(10, 1e-6, 8))  # ill-conditioned
    P = LowRankPreconditioner(L, alpha=1e-3)
    R = rng.normal(size=(60, 3))
    # cond(LLᵀ + αI) reaches 8e6 at α = 1e-3: an element-wise rtol against np.linalg.solve
    # measured the reference's own forward error (1.7e-7 in one element under OpenBLAS's
    # Haswell kernels). Both are judged by the backward error instead (0.2 ε measured here;
    # a shift off by a relative 1e-6 gives ~1e3 ε).
    shifts = [1e-3, 1e-1, 10.0]
    X = P.apply_shifted(R, shifts)
    for j, a in enumerate(shifts):
        A = L @ L.T + a * np.eye(60)
        assert_backward_stable(A, X[:, j], R[:, j])
        assert_forward_close(X[:, j], np.linalg.solve(A, R[:, j]), np.linalg.cond(A))
    A = L @ L.T + 1e-3 * np.eye(60)
    assert_backward_stable(A, P.apply(R), R)
    # W = LV: orthogonal columns carrying the eigenvalues of LᵀL, and WWᵀ = LLᵀ
    W = P.factor()
    np.testing.assert_allclose(W @ W.T, L @ L.T, atol=1e-12 * np.abs(L @ L.T).max())
    np.testing.assert_allclose(W.T @ W, np.diag(P.eigenvalues), atol=1e-12 * P.eigenvalues.max())
    sv = np.linalg.svd(L, compute_uv=False) ** 2
    np.testing.assert_allclose(np.sort(P.eigenvalues), np.sort(sv), rtol=1e-6, atol=1e-14 * sv.max())


def test_preconditioner_is_symmetric_positive_definite():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 2))
    kernel = RBF(gamma=0.5)
    P = build_preconditioner(kernel_columns(kernel, X), kernel.diag(X), 1e-3, rank=20, random_state=0)
    M = P.apply(np.eye(80))
    np.testing.assert_allclose(M, M.T, atol=1e-9 * np.abs(M).max())
    assert np.linalg.eigvalsh(0.5 * (M + M.T)).min() > 0


def test_rpcholesky_error_decreases_with_rank(clustered):
    kernel, X, K = clustered
    cols = kernel_columns(kernel, X)
    errors = []
    for rank in (5, 10, 20, 40):
        factor = rpcholesky_factor(cols, kernel.diag(X), rank, random_state=0)
        assert isinstance(factor, LowRankFactor) and factor.rank == rank
        err = residual_trace(K, factor.L)
        assert factor.residual_trace == pytest.approx(err, rel=1e-6, abs=1e-9)
        errors.append(err)
    assert all(a > b for a, b in zip(errors[:-1], errors[1:], strict=True)), errors


def test_rpcholesky_beats_uniform_nystroem_on_clusters(clustered):
    kernel, X, K = clustered
    cols = kernel_columns(kernel, X)
    for rank in (20, 40):
        rpc = np.mean(
            [residual_trace(K, rpcholesky_factor(cols, kernel.diag(X), rank, random_state=s).L) for s in range(3)]
        )
        uni = np.mean([residual_trace(K, nystroem_factor(cols, len(X), rank, random_state=s).L) for s in range(3)])
        assert rpc < 0.5 * uni, (rank, rpc, uni)

    # uniform landmarks leave whole clusters unexplained; RPCholesky finds them
    def top_eig(L):
        n = len(K)
        return eigh(K - L @ L.T, eigvals_only=True, subset_by_index=[n - 1, n - 1])[0]

    spectral_rpc = top_eig(rpcholesky_factor(cols, kernel.diag(X), 40, random_state=0).L)
    spectral_uni = top_eig(nystroem_factor(cols, len(X), 40, random_state=0).L)
    assert spectral_rpc < spectral_uni


@pytest.mark.parametrize("block_size", [1, 7, None])
def test_rpcholesky_block_sizes_and_seeds(block_size, clustered):
    kernel, X, K = clustered
    cols = kernel_columns(kernel, X)
    a = rpcholesky_factor(cols, kernel.diag(X), 25, block_size=block_size, random_state=42)
    b = rpcholesky_factor(cols, kernel.diag(X), 25, block_size=block_size, random_state=42)
    np.testing.assert_array_equal(a.L, b.L)  # deterministic for a seed
    assert len(np.unique(a.pivots)) == len(a.pivots) == 25
    # the factor interpolates the pivot columns exactly (Nyström on the pivots)
    np.testing.assert_allclose((a.L @ a.L[a.pivots].T), K[:, a.pivots], atol=1e-8)


def test_rpcholesky_stops_early_on_low_rank_kernel():
    rng = np.random.default_rng(4)
    F = rng.normal(size=(50, 3))
    K = F @ F.T
    factor = rpcholesky_factor(lambda idx: K[:, idx], np.diag(K), 20, random_state=0)
    assert factor.rank == 3
    np.testing.assert_allclose(factor.L @ factor.L.T, K, atol=1e-9)


def test_nystroem_with_duplicate_points_drops_singular_directions():
    X = np.repeat(np.random.default_rng(5).normal(size=(10, 2)), 5, axis=0)
    kernel = RBF(gamma=1.0)
    factor = nystroem_factor(kernel_columns(kernel, X), len(X), 30, random_state=0)
    assert factor.rank <= 10 and np.all(np.isfinite(factor.L))
    np.testing.assert_allclose(factor.L @ factor.L.T, kernel(X), atol=1e-6)


def test_default_rank():
    assert default_rank(1) == 1
    assert default_rank(50) == 50
    assert default_rank(1000) == 100
    assert default_rank(20_000) == 283
    assert default_rank(100_000) == 633
    ranks = [default_rank(n) for n in (10, 100, 1000, 10**4, 10**5, 10**6)]
    assert ranks == sorted(ranks)


def test_errors():
    cols = lambda idx: np.zeros((5, len(idx)))
    with pytest.raises(ParameterError, match="method"):
        build_preconditioner(cols, np.ones(5), 1.0, method="svd")
    with pytest.raises(ParameterError, match="alpha"):
        build_preconditioner(cols, np.ones(5), 0.0)
    with pytest.raises(ParameterError, match="rank"):
        nystroem_factor(cols, 5, 0)
    with pytest.raises(DataError, match="diag"):
        rpcholesky_factor(cols, -np.ones(5), 2)
    with pytest.raises(DataError, match=r"columns\(idx\) returned shape"):
        nystroem_factor(lambda idx: np.zeros((4, len(idx))), 5, 2)
    P = LowRankPreconditioner(np.ones((5, 1)), 1.0)
    with pytest.raises(DataError, match="R must have shape"):
        P.apply(np.ones(4))
    with pytest.raises(ParameterError, match="shifts"):
        P.apply_shifted(np.ones((5, 1)), [0.0])
