"""The identities of DESIGN.md, each against a dense numpy reference on small data."""

import numpy as np
import pytest

from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.primal import eigen_path, solve_primal
from bigkernel.numerics.sums import block_stats

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set


def _stats(fmap, X, y, **kw):
    return block_stats(fmap, X, y.reshape(len(y), -1), 0, **kw)


@pytest.mark.parametrize("D", [20, 200])  # D < n and D > n (n = 60)
def test_primal_equals_dual(rng, D):
    n, d, alpha = 60, 3, 0.3
    X, y = rng.normal(size=(n, d)), rng.normal(size=n)
    fmap = make_feature_map("rbf", d, D, seed=1, gamma=0.5)
    sol = solve_primal(_stats(fmap, X, y, block_rows=16), alpha, fit_intercept=False)
    Phi = fmap.transform(X)
    K = Phi @ Phi.T
    a = np.linalg.solve(K + alpha * np.eye(n), y)
    Xs = rng.normal(size=(7, d))
    dual_pred = fmap.transform(Xs) @ Phi.T @ a
    np.testing.assert_allclose(fmap.transform(Xs) @ sol.coef[:, 0], dual_pred, rtol=1e-8, atol=1e-10)


def test_centering_equals_unpenalized_intercept(rng):
    n, d, D, alpha = 80, 2, 30, 0.7
    X, y = rng.normal(size=(n, d)), 3.0 + rng.normal(size=n)
    fmap = make_feature_map("rbf", d, D, seed=2, gamma=1.0)
    sol = solve_primal(_stats(fmap, X, y), alpha, fit_intercept=True)
    # dense reference: augmented design [Φ, 1], penalty on β only
    A = np.column_stack([fmap.transform(X), np.ones(n)])
    P = alpha * np.eye(D + 1)
    P[D, D] = 0.0
    theta = np.linalg.solve(A.T @ A + P, A.T @ y)
    np.testing.assert_allclose(sol.coef[:, 0], theta[:D], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(sol.intercept[0], theta[D], rtol=1e-8)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_df_is_trace_of_hat_matrix_and_gcv_matches_dense(rng, fit_intercept):
    n, d, D = 50, 2, 40
    X, y = rng.normal(size=(n, d)), rng.normal(size=n)
    fmap = make_feature_map("laplacian", d, D, seed=3, gamma=0.5)
    path = eigen_path(_stats(fmap, X, y), fit_intercept)
    Phi = fmap.transform(X)
    alphas = np.array([1e-3, 0.1, 10.0])
    for a, df, gcv in zip(alphas, path.df(alphas), path.gcv(alphas)[:, 0]):
        if fit_intercept:
            A = np.column_stack([Phi, np.ones(n)])
            P = a * np.eye(D + 1)
            P[D, D] = 0
        else:
            A, P = Phi, a * np.eye(D)
        H = A @ np.linalg.solve(A.T @ A + P, A.T)
        assert df == pytest.approx(np.trace(H), rel=1e-9)
        assert df < n
        rss = np.sum((y - H @ y) ** 2)
        assert gcv == pytest.approx(n * rss / (n - np.trace(H)) ** 2, rel=1e-7)


def test_gcv_choice_is_argmin_of_grid(rng):
    X, y = rng.uniform(size=(300, 1)), None
    y = np.sin(6 * X[:, 0]) + 0.3 * rng.normal(size=300)
    fmap = make_feature_map("rbf", 1, 100, seed=0, gamma=5.0)
    grid = [1e-4, 1e-2, 1.0, 100.0]
    sol = solve_primal(_stats(fmap, X, y), grid, True)
    assert sol.alpha == grid[int(np.argmin(sol.gcv[:, 0]))]
    assert sol.gcv.shape == (4, 1) and sol.df.shape == (4,)
    assert np.all(np.diff(sol.df) < 0)  # more penalty, fewer degrees of freedom


def test_multi_output_equals_separate_fits(rng):
    X = rng.normal(size=(100, 3))
    Y = np.column_stack([np.sin(X[:, 0]), X[:, 1] ** 2])
    fmap = make_feature_map("rbf", 3, 50, seed=0, gamma=0.3)
    both = solve_primal(block_stats(fmap, X, Y, 0), 0.1, True)
    for j in range(2):
        one = solve_primal(block_stats(fmap, X, Y[:, [j]], 0), 0.1, True)
        np.testing.assert_allclose(both.coef[:, j], one.coef[:, 0], rtol=1e-10, atol=1e-12)


def test_float32_features_with_float64_sums_match_float64(rng):
    n, d, D = 20_000, 5, 256
    X = rng.uniform(size=(n, d))
    y = np.sin(3 * X[:, 0]) + X[:, 1]
    fmap = make_feature_map("rbf", d, D, seed=4, gamma=0.5)
    s64 = _stats(fmap, X, y, dtype="float64", block_rows=4096)
    s32 = _stats(fmap, X, y, dtype="float32", block_rows=4096)
    for a, b in [(s32.gram, s64.gram), (s32.phi_y, s64.phi_y), (s32.sum_phi, s64.sum_phi)]:
        assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-6
    Xt = rng.uniform(size=(500, d))
    # predictions inherit the conditioning of the solve: compare at a moderate penalty
    sol64, sol32 = solve_primal(s64, 100.0), solve_primal(s32, 100.0)
    p64 = fmap.transform(Xt) @ sol64.coef[:, 0] + sol64.intercept
    p32 = fmap.transform(Xt) @ sol32.coef[:, 0] + sol32.intercept
    assert np.linalg.norm(p32 - p64) / np.linalg.norm(p64) < 1e-6


def test_weighted_stats_equal_repeated_rows(rng):
    X, y = rng.normal(size=(40, 2)), rng.normal(size=40)
    counts = rng.integers(0, 3, size=40).astype(float)
    fmap = make_feature_map("rbf", 2, 16, seed=0, gamma=1.0)
    w = _stats(fmap, X, y, weights=lambda a, b: counts[np.newaxis, a:b])
    rep = np.repeat(np.arange(40), counts.astype(int))
    r = _stats(fmap, X[rep], y[rep])
    for f in ("n", "sum_phi", "sum_y", "sum_yy", "gram", "phi_y"):
        np.testing.assert_allclose(getattr(w, f), getattr(r, f), rtol=1e-12, atol=1e-12)
