"""The SVM's Newton step through the curved rows (issue 22): the n_a × n_a dual system gives the
(D+1)² bordered solve's direction, and a fit over features kept in memory gives the streamed
fit's solution, at n < D and n ≫ D, both losses, with and without intercept, several classes
and row weights; classes of equal curvature share one syrk / one factorisation."""

from __future__ import annotations

import numpy as np
import pytest

from bigkernel.data.sources import as_dataset
from bigkernel.models._base import RowWeights
from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.svm import SVMPassState, SVMPassSums, accumulate_block, loss_terms, newton_direction
from bigkernel.numerics.svm_directions import DenseDirections, DenseSystem, DualSystem
from bigkernel.numerics.svm_kept import KeptDirections, KeptFeatures
from bigkernel.solvers.primal_svm import fit_primal_svm, keeps_features

pytestmark = pytest.mark.numerics


def _system(n_a, D, seed, zero_weights=False):
    rng = np.random.default_rng(seed)
    phi = rng.standard_normal((n_a, D)) / np.sqrt(D)
    w = np.zeros(n_a) if zero_weights else rng.uniform(0.1, 3.0, n_a)
    return phi, w, rng.standard_normal(D), float(rng.standard_normal())


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize(("n_a", "D"), [(7, 50), (50, 50), (120, 40), (0, 30)])
@pytest.mark.parametrize("alpha", [1e-3, 0.5])
def test_dual_system_equals_the_bordered_dense_solve(n_a, D, fit_intercept, alpha):
    phi, w, gw, gb = _system(n_a, D, seed=n_a + D)
    ps = phi * np.sqrt(w)[:, None]
    want = newton_direction(ps.T @ ps, w @ phi, float(w.sum()), gw, gb, alpha, fit_intercept)
    got = DualSystem(phi, phi @ phi.T, w, alpha, fit_intercept).direction(gw, gb)
    dense = DenseSystem(ps.T @ ps, w @ phi, float(w.sum()), alpha, fit_intercept).direction(gw, gb)
    for d in (got, dense):
        np.testing.assert_allclose(d[0], want[0], rtol=1e-8, atol=1e-10 * np.abs(want[0]).max())
        assert d[1] == pytest.approx(want[1], rel=1e-7, abs=1e-12)
    if not fit_intercept:
        assert got[1] == 0.0


def test_dual_system_floors_the_intercept_like_the_dense_solve():
    """Tiny curvature: the intercept's diagonal is floored (the line search sees a long but
    finite intercept step); the dual system adds the same floor to the Schur complement."""
    phi, w, gw, gb = _system(5, 40, seed=3)
    w = w * 1e-14
    ps = phi * np.sqrt(w)[:, None]
    want = newton_direction(ps.T @ ps, w @ phi, float(w.sum()), gw, gb, 0.5, True)
    got = DualSystem(phi, phi @ phi.T, w, 0.5, True).direction(gw, gb)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-8)
    assert got[1] == pytest.approx(want[1], rel=1e-7)
    assert abs(got[1]) > 1e6 * abs(gb)  # the floored diagonal, not the tiny Σw


def _pass_state(D, k, seed, loss="squared_hinge"):
    rng = np.random.default_rng(seed)
    return SVMPassState(
        0.3 * rng.standard_normal((D, k)), rng.standard_normal(k), rng.standard_normal((D, k)),
        rng.standard_normal(k), np.tile([1.0, 0.5, 0.0], (k, 1)), np.full(k, 0.5), loss, np.full(k, 0.3),
    )  # fmt: skip


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_kept_pass_and_directions_equal_the_streamed_ones(loss):
    rng = np.random.default_rng(0)
    n, D, k = 90, 30, 3
    phi = rng.standard_normal((n, D))
    Y = np.where(rng.standard_normal((n, k)) > 0, 1.0, -1.0)
    c = rng.uniform(0.5, 2.0, n)
    state = _pass_state(D, k, seed=1, loss=loss)
    streamed = SVMPassSums.zeros(D, k, 3, k)
    for lo in range(0, n, 32):  # the streamed pass's sub-blocks
        accumulate_block(streamed, phi[lo : lo + 32], Y[lo : lo + 32], c[lo : lo + 32], state, 1.0)
    kept = KeptFeatures(phi, 1.0, Y, c, block_rows=32)
    sums = kept.pass_sums(state)
    for f in ("loss", "hinge", "lam", "lam2", "v", "hess_c", "n_curved"):
        np.testing.assert_allclose(getattr(sums, f), getattr(streamed, f), rtol=1e-12, atol=1e-12)
    dense, dual = DenseDirections(0.2, True), KeptDirections(kept, 0.2, True)
    for h in range(k):
        gw, gb = rng.standard_normal(D), float(rng.standard_normal())
        want, got = dense(streamed, h, gw, gb), dual(sums, h, gw, gb)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-8, atol=1e-10 * np.abs(want[0]).max())
        assert got[1] == pytest.approx(want[1], rel=1e-8)


def test_equal_curvature_shares_one_syrk_and_one_factorisation():
    """At w = 0 every class has the same curvature weights: one syrk and one factorisation serve
    all, and the sums equal the per-class ones computed apart."""
    rng = np.random.default_rng(4)
    n, D, k = 50, 12, 4
    phi = rng.standard_normal((n, D))
    Y = np.where(rng.standard_normal((n, k)) > 0, 1.0, -1.0)
    c = rng.uniform(0.5, 2.0, n)
    z = np.zeros((D, k))
    state = SVMPassState(z, np.zeros(k), z, np.zeros(k), np.zeros((k, 1)), np.zeros(k), "squared_hinge", np.ones(k))
    acc = SVMPassSums.zeros(D, k, 1, k)
    accumulate_block(acc, phi, Y, c, state, 1.0)
    w = c * loss_terms(np.zeros(n), "squared_hinge")[2]
    for h in range(k):
        np.testing.assert_allclose(acc.hess[h], (phi * w[:, None]).T @ phi, rtol=1e-12)
        np.testing.assert_allclose(acc.hess_phi[h], w @ phi, rtol=1e-12)
    kept = KeptFeatures(phi, 1.0, Y, c)
    dirs = KeptDirections(kept, 0.3, True)
    sums = kept.pass_sums(state)
    for h in range(k):
        dirs(sums, h, rng.standard_normal(D), 0.1)
    assert dirs.counts == {"dual": 0, "dense": 1, "shared": k - 1}


# ------------------------------------------------------------------ whole fits, kept vs streamed
def _labels(n, d, k, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    scores = X[:, :k] + 0.5 * np.sin(2 * X[:, 1:2]) + 0.4 * rng.standard_normal((n, k))
    labels = np.argmax(scores, axis=1)
    return X, np.where(labels[:, None] == np.arange(k), 1.0, -1.0)


def _fit(X, Y, fmap, keep, **kw):
    ds = as_dataset(X, Y, chunk_rows=64)
    return fit_primal_svm(ds, fmap, ds.y, block_rows=32, keep_features=keep, **kw)


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize(("n", "D"), [(70, 160), (600, 24)])
def test_kept_fit_equals_streamed_fit(n, D, loss, fit_intercept):
    X, Y = _labels(n, 4, 3, seed=n)
    fmap = make_feature_map("rbf", 4, D, seed=1, gamma=0.4)
    c = np.random.default_rng(2).uniform(0.0, 2.0, n)
    c[::7] = 0.0  # zero-weight rows are left out of both
    tol = 1e-10 if loss == "squared_hinge" else 1e-5
    kw = dict(alpha=0.3, loss=loss, fit_intercept=fit_intercept, tol=tol, max_iter=300, weights=RowWeights(c))
    streamed, kept = _fit(X, Y, fmap, False, **kw), _fit(X, Y, fmap, True, **kw)
    assert streamed.converged.all() and kept.converged.all()
    if loss == "squared_hinge":  # finite Newton: the same iterates up to rounding
        assert kept.n_passes == streamed.n_passes
        np.testing.assert_allclose(kept.coef, streamed.coef, rtol=1e-7, atol=1e-9 * np.abs(streamed.coef).max())
        np.testing.assert_allclose(kept.intercept, streamed.intercept, atol=1e-8)
        return
    # hinge: both within their certified gaps of the same optimum (α‖w − w*‖² ≤ gap · P)
    for j in range(Y.shape[1]):
        P = max(kept.objective[j], streamed.objective[j])
        assert abs(kept.objective[j] - streamed.objective[j]) <= (kept.gap[j] + streamed.gap[j]) * P
        bound = sum(np.sqrt(s.gap[j] * s.objective[j] / 0.3) for s in (kept, streamed))
        assert np.linalg.norm(kept.coef[:, j] - streamed.coef[:, j]) <= bound


def test_the_default_keeps_small_data_only():
    assert keeps_features(1300, 2048, "float64")
    assert not keeps_features(1_000_000, 1024, "float32")  # bench_svm.py case a streams
    assert not keeps_features(20_000, 2048, "float64")
