"""The hinge SVM's dual on the kept Gram matrix (issue 22): SMO with the intercept's equality
constraint equals scikit-learn's SVC(kernel="precomputed") on ΦΦᵀ, coordinate descent without
intercept equals LinearSVC(loss="hinge", fit_intercept=False), row weights are per-row bounds,
the k classes stepping together equal each class solved alone, the certificate bounds the
distance to the optimum, and fit_primal_svm takes the dual path for kept features only (the
streamed path, n ≫ D, is the primal Newton iteration as before)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC, LinearSVC

import bigkernel.numerics.svm_dual as svm_dual
from bigkernel.data.sources import as_dataset
from bigkernel.models._base import RowWeights
from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.svm_dual import best_intercept, prefers_dual, solve_hinge_dual
from bigkernel.numerics.svm_kept import GRAM_ROWS
from bigkernel.solvers.primal_svm import fit_primal_svm

pytestmark = pytest.mark.numerics


def _problem(n, D, k=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4))
    scores = X[:, :k] + 0.5 * np.sin(2 * X[:, 1:2]) + 0.5 * rng.standard_normal((n, k))
    labels = np.argmax(scores, axis=1)
    Y = np.where(labels[:, None] == np.arange(k), 1.0, -1.0)
    fmap = make_feature_map("rbf", 4, D, seed=1, gamma=0.4)
    return X, Y, fmap, fmap.transform(X)


def _primal(Phi, y, w, b, alpha, c):
    return float(c @ np.maximum(0.0, 1.0 - y * (Phi @ w + b)) + alpha * w @ w)


@pytest.mark.parametrize(("n", "D", "alpha"), [(80, 300, 0.05), (80, 300, 2.0), (400, 30, 0.5), (400, 30, 2.0)])
def test_smo_equals_svc_on_the_precomputed_gram(n, D, alpha):
    _, Y, _, Phi = _problem(n, D, seed=n)
    c = np.random.default_rng(3).uniform(0.2, 2.0, n)
    K = Phi @ Phi.T
    sol = solve_hinge_dual(K, Y, c, alpha, tol=1e-10, max_iter=10**6)
    assert sol.converged.all() and (sol.gap <= 1e-10).all()
    for j in range(Y.shape[1]):
        ref = SVC(kernel="precomputed", C=1.0 / (2.0 * alpha), tol=1e-10).fit(K, Y[:, j], sample_weight=c)
        w_ref = Phi[ref.support_].T @ ref.dual_coef_[0]
        w = Phi.T @ sol.dual[:, j]
        ours = _primal(Phi, Y[:, j], w, sol.intercept[j], alpha, c)
        theirs = _primal(Phi, Y[:, j], w_ref, ref.intercept_[0], alpha, c)
        assert sol.objective[j] == pytest.approx(ours, rel=1e-12)
        assert ours <= theirs * (1 + 1e-8)  # ours is certified within 1e-10 of the optimum
        # α‖w − w*‖² ≤ P(w) − P*: both within their distance of the same optimum
        assert np.linalg.norm(w - w_ref) <= np.sqrt(max(theirs - ours, 0) / alpha) + np.sqrt(1e-10 * ours / alpha)
        # the dual itself: 0 ≤ a ≤ C and Σ a y = 0
        a = sol.dual[:, j] * Y[:, j]
        assert (a >= 0).all() and (a <= c / (2 * alpha) * (1 + 1e-15)).all()
        assert abs(sol.dual[:, j].sum()) <= 1e-10 * c.sum()
        np.testing.assert_array_equal(np.sign(Phi @ w + sol.intercept[j]), np.sign(Phi @ w_ref + ref.intercept_[0]))


def test_coordinate_descent_without_intercept_equals_linearsvc():
    _, Y, _, Phi = _problem(150, 60, k=2, seed=7)
    alpha = 0.25
    sol = solve_hinge_dual(Phi @ Phi.T, Y, np.ones(150), alpha, fit_intercept=False, tol=1e-9, max_iter=10**6)
    assert sol.converged.all()
    np.testing.assert_array_equal(sol.intercept, 0.0)
    for j in range(2):
        ref = LinearSVC(C=1 / (2 * alpha), loss="hinge", dual=True, fit_intercept=False, tol=1e-9, max_iter=10**5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            ref.fit(Phi, Y[:, j])
        w = Phi.T @ sol.dual[:, j]
        ours, theirs = (_primal(Phi, Y[:, j], v, 0.0, alpha, np.ones(150)) for v in (w, ref.coef_[0]))
        assert ours <= theirs * (1 + 1e-9)  # liblinear stops looser than our 1e-9 gap
        # α‖v − w*‖² ≤ P(v) − P* for both, and P* ≥ (1 − gap)·P(w)
        bound = np.sqrt(max(theirs - ours, 0.0) / alpha) + 2 * np.sqrt(sol.gap[j] * ours / alpha)
        assert np.linalg.norm(w - ref.coef_[0]) <= bound + 1e-9 * np.linalg.norm(w)


def test_classes_stepping_together_equal_each_class_alone():
    _, Y, _, Phi = _problem(120, 200, k=4, seed=2)
    K, c, alpha = Phi @ Phi.T, np.ones(120), 0.3
    together = solve_hinge_dual(K, Y, c, alpha, tol=1e-9, max_iter=10**6)
    assert together.converged.all()
    for j in range(4):
        alone = solve_hinge_dual(K, Y[:, j : j + 1], c, alpha, tol=1e-9, max_iter=10**6)
        # the same SMO steps up to the rounding of the exact re-multiplications (whose timing
        # differs): both within their certified gaps of the same optimum
        P = max(together.objective[j], alone.objective[0])
        assert abs(together.objective[j] - alone.objective[0]) <= (together.gap[j] + alone.gap[0]) * P
        w1, w2 = Phi.T @ together.dual[:, j], Phi.T @ alone.dual[:, 0]
        bound = sum(np.sqrt(s.gap[i] * s.objective[i] / alpha) for s, i in ((together, j), (alone, 0)))
        assert np.linalg.norm(w1 - w2) <= bound + 1e-12 * np.linalg.norm(w2)
        assert together.intercept[j] == pytest.approx(alone.intercept[0], abs=1e-3)


def test_the_gap_bounds_the_distance_to_the_optimum():
    """Stopped early (few SMO steps), the relative gap still bounds (P − P*)/P."""
    _, Y, _, Phi = _problem(200, 100, k=3, seed=4)
    K, c, alpha = Phi @ Phi.T, np.ones(200), 0.1
    best = solve_hinge_dual(K, Y, c, alpha, tol=1e-12, max_iter=10**6)
    for steps in (1, 10, 50, 200):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            early = solve_hinge_dual(K, Y, c, alpha, tol=1e-12, max_iter=steps)
        assert early.n_iter == steps
        p_star = best.objective * (1 - best.gap)  # a lower bound of P*
        assert (early.objective - best.objective <= early.gap * early.objective + 1e-12).all()
        assert (early.objective >= p_star * (1 - 1e-12)).all()


def test_best_intercept_minimises_the_hinge_sum():
    rng = np.random.default_rng(8)
    for _ in range(20):
        n = int(rng.integers(1, 30))
        F = rng.standard_normal((2, n))
        Y = np.where(rng.standard_normal((2, n)) > 0, 1.0, -1.0)
        C = rng.uniform(0.1, 3.0, n)
        b = best_intercept(F, Y, C)
        # the minimum of a piecewise linear convex function is at one of its kinks, Y − F
        costs = C @ np.maximum(0.0, 1.0 - Y[:, :, None] * (F[:, :, None] + (Y - F)[:, None, :]))  # (2, kinks)
        at_b = (C * np.maximum(0.0, 1.0 - Y * (F + b[:, None]))).sum(axis=1)
        np.testing.assert_array_less(at_b, costs.min(axis=1) + 1e-12)


def test_one_label_columns_and_no_rows():
    _, Y, _, Phi = _problem(40, 20, k=2, seed=5)
    Y[:, 0] = 1.0  # every row positive: a = 0 is the only feasible dual point, w = 0
    sol = solve_hinge_dual(Phi @ Phi.T, Y, np.ones(40), 0.5, tol=1e-8)
    assert sol.converged.all()
    np.testing.assert_array_equal(sol.dual[:, 0], 0.0)
    assert sol.objective[0] == pytest.approx(0.0, abs=1e-12)  # b* puts every margin at ≥ 1
    empty = solve_hinge_dual(np.zeros((0, 0)), np.zeros((0, 2)), np.zeros(0), 0.5)
    assert empty.converged.all() and empty.dual.shape == (0, 2)


# ------------------------------------------------------------------ through fit_primal_svm
def _fit(X, Y, fmap, keep, **kw):
    ds = as_dataset(X, Y, chunk_rows=64)
    return fit_primal_svm(ds, fmap, ds.y, block_rows=32, keep_features=keep, **kw)


@pytest.mark.parametrize(("n", "D", "fit_intercept"), [(60, 128, True), (60, 128, False), (1000, 16, True)])
def test_kept_hinge_equals_the_streamed_newton_fit(n, D, fit_intercept):
    """Kept features: n < D in one pass, the dual; n ≫ D the primal Newton passes over the
    kept features. Streamed (the n ≫ D path of large data): the primal Newton passes as before.
    All within their certified gaps of the same optimum."""
    X, Y, fmap, Phi = _problem(n, D, k=2, seed=n)
    c = np.random.default_rng(2).uniform(0.0, 2.0, n)
    c[::5] = 0.0  # zero-weight rows are left out of both
    kw = dict(alpha=0.2, loss="hinge", fit_intercept=fit_intercept, tol=1e-5, max_iter=300, weights=RowWeights(c))
    kept, newton = _fit(X, Y, fmap, True, **kw), _fit(X, Y, fmap, False, **kw)
    assert kept.converged.all() and newton.converged.all()
    assert newton.n_passes > 1 and "dual_iter" not in newton.history[0]
    if n < D:
        assert kept.n_passes == 1 and all(h["dual_iter"] > 0 for h in kept.history)
    else:
        assert kept.n_passes > 1 and "dual_iter" not in kept.history[0]
    for j in range(Y.shape[1]):
        b = kept.intercept[j]
        assert kept.objective[j] == pytest.approx(_primal(Phi, Y[:, j], kept.coef[:, j], b, 0.2, c), rel=1e-10)
        P = max(kept.objective[j], newton.objective[j])
        assert abs(kept.objective[j] - newton.objective[j]) <= (kept.gap[j] + newton.gap[j]) * P
        bound = sum(np.sqrt(s.gap[j] * s.objective[j] / 0.2) for s in (kept, newton))
        assert np.linalg.norm(kept.coef[:, j] - newton.coef[:, j]) <= bound


def test_the_dual_is_taken_by_rows_per_feature_and_the_gram_limit(monkeypatch):
    assert prefers_dual(1300, 2048) and prefers_dual(400, 40) and not prefers_dual(401, 40)
    assert not prefers_dual(GRAM_ROWS + 1, 10**6)
    X, Y, fmap, _ = _problem(100, 40, seed=6)
    kw = dict(alpha=0.5, loss="hinge", tol=1e-4, max_iter=200)
    assert "dual_iter" in _fit(X, Y, fmap, True, **kw).history[0]
    monkeypatch.setattr(svm_dual, "GRAM_ROWS", 50)  # the Gram matrix of 100 rows is not formed
    sol = _fit(X, Y, fmap, True, **kw)
    assert sol.converged.all() and sol.n_passes > 1 and "dual_iter" not in sol.history[0]


def test_the_dual_warns_when_its_steps_run_out():
    X, Y, fmap, _ = _problem(300, 40, seed=9)
    with pytest.warns(ConvergenceWarning, match="hinge"):
        sol = _fit(X, Y, fmap, True, alpha=0.01, loss="hinge", tol=1e-12, max_iter=1)
    assert sol.n_passes == 1 and not sol.converged.all()
    assert all(h["dual_iter"] == 300 for h in sol.history)  # max_iter · n SMO steps
