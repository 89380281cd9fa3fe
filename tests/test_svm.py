"""The primal SVM (squared hinge and hinge) on explicit random / Nyström features: equal to
scikit-learn's LinearSVC on the same feature matrix (C = 1/(2α)), the duality-gap stopping rule,
pass counting, row weights = repeated rows, chunking invariance, one-vs-rest columns."""

from __future__ import annotations

import warnings
from dataclasses import FrozenInstanceError

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from bigkernel.data.sources import as_dataset
from bigkernel.errors import DataError, ParameterError
from bigkernel.models._base import RowWeights
from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.svm import loss_terms
from bigkernel.solvers.base import Solver
from bigkernel.solvers.primal_svm import PrimalSVMSolver, PrimalSVMSpec, fit_primal_svm

pytestmark = pytest.mark.numerics


def _data(n=400, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    f = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] - 0.3
    y = np.where(f + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def _fit(X, Y, fmap, chunk_rows=200, block_rows=64, **kw):
    Y = Y[:, None] if Y.ndim == 1 else Y
    ds = as_dataset(X, Y, chunk_rows=chunk_rows)
    return fit_primal_svm(ds, fmap, ds.y, block_rows=block_rows, **kw)


def _objective(Phi, y, w, b, alpha, loss, c=None):
    c = np.ones(len(y)) if c is None else c
    r = np.maximum(1.0 - y * (Phi @ w + b), 0.0)
    return float(c @ (r * r if loss == "squared_hinge" else r) + alpha * w @ w)


@pytest.fixture(scope="module")
def problem():
    X, y = _data()
    fmap = make_feature_map("rbf", X.shape[1], 40, seed=3, gamma=0.3)
    return X, y, fmap, fmap.transform(X)


@pytest.mark.parametrize("C", [0.05, 1.0, 20.0])
def test_squared_hinge_equals_linearsvc_without_intercept(problem, C):
    X, y, fmap, Phi = problem
    alpha = 1.0 / (2.0 * C)
    sol = _fit(X, y, fmap, alpha=alpha, loss="squared_hinge", fit_intercept=False, tol=1e-12, max_iter=30)
    ref = LinearSVC(C=C, loss="squared_hinge", dual=False, fit_intercept=False, tol=1e-12, max_iter=100_000)
    ref.fit(Phi, y)
    assert sol.converged.all()
    np.testing.assert_allclose(sol.coef[:, 0], ref.coef_[0], rtol=1e-6, atol=1e-7 * np.abs(ref.coef_).max())
    np.testing.assert_array_equal(np.sign(Phi @ sol.coef[:, 0]), ref.predict(Phi))
    assert sol.n_passes <= 15  # finite Newton: a handful of passes


def test_squared_hinge_unpenalised_intercept_matches_large_intercept_scaling(problem):
    X, y, fmap, Phi = problem
    C = 1.0
    sol = _fit(X, y, fmap, alpha=0.5 / C, loss="squared_hinge", fit_intercept=True, tol=1e-12, max_iter=30)
    # LinearSVC penalises its intercept b/s; with s = 1e3 the penalty is negligible
    ref = LinearSVC(C=C, loss="squared_hinge", dual=False, intercept_scaling=1e3, tol=1e-12, max_iter=100_000)
    ref.fit(Phi, y)
    np.testing.assert_allclose(sol.coef[:, 0], ref.coef_[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sol.intercept[0], ref.intercept_[0], atol=1e-4)
    ours = _objective(Phi, y, sol.coef[:, 0], sol.intercept[0], 0.5 / C, "squared_hinge")
    theirs = _objective(Phi, y, ref.coef_[0], ref.intercept_[0], 0.5 / C, "squared_hinge")
    assert ours <= theirs * (1 + 1e-12)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_hinge_within_its_certified_gap_of_linearsvc(problem, fit_intercept):
    X, y, fmap, Phi = problem
    C, tol = 0.1, 1e-5
    alpha = 1.0 / (2.0 * C)
    sol = _fit(X, y, fmap, alpha=alpha, loss="hinge", fit_intercept=fit_intercept, tol=tol, max_iter=100)
    ref = LinearSVC(
        C=C,
        loss="hinge",
        dual=True,
        fit_intercept=fit_intercept,
        intercept_scaling=1e2,
        tol=1e-8,
        max_iter=10**5,
        random_state=0,  # liblinear visits coordinates in a random order: fixed, the reference repeats
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref.fit(Phi, y)
    w, b = sol.coef[:, 0], sol.intercept[0]
    ours = _objective(Phi, y, w, b, alpha, "hinge")
    theirs = _objective(Phi, y, ref.coef_[0], np.atleast_1d(ref.intercept_)[0], alpha, "hinge")
    assert sol.converged.all() and sol.gap[0] <= tol
    np.testing.assert_allclose(sol.objective[0], ours, rtol=1e-12)
    # the certificate: P(w) − P* ≤ gap·P, and α‖w − w*‖² ≤ P(w) − P*
    assert ours - theirs <= sol.gap[0] * ours + 1e-9 * ours
    bound = np.sqrt(sol.gap[0] * ours / alpha) + np.sqrt(max(theirs - ours, 0.0) / alpha)
    assert np.linalg.norm(w - ref.coef_[0]) <= bound + 1e-3 * np.linalg.norm(ref.coef_[0])
    agree = np.mean(np.sign(Phi @ w + b) == ref.predict(Phi))
    assert agree >= 0.99


def test_gap_is_an_upper_bound_at_every_pass(problem):
    """Every history entry's gap bounds the distance of its objective to the optimum."""
    X, y, fmap, Phi = problem
    alpha = 0.5
    for loss, tol in (("squared_hinge", 1e-12), ("hinge", 1e-6)):
        sol = _fit(X, y, fmap, alpha=alpha, loss=loss, fit_intercept=False, tol=tol, max_iter=100)
        final = _objective(Phi, y, sol.coef[:, 0], 0.0, alpha, loss)
        assert final == pytest.approx(sol.objective[0], rel=1e-12)
        # P* lies in [P_final − gap_final, P_final]; every pass's objective is ≥ P*, and its gap
        # must reach down to P*'s bracket
        lo = final * (1 - sol.gap[0])
        for h in sol.history:
            assert h["exact_objective"] >= lo * (1 - 1e-12)
            assert h["exact_objective"] * (1 - h["gap"]) <= final * (1 + 1e-12)


def test_stopping_rule_and_passes_counted(problem):
    X, y, fmap, _ = problem
    loose = _fit(X, y, fmap, alpha=0.05, loss="squared_hinge", tol=1e-2, max_iter=50)
    tight = _fit(X, y, fmap, alpha=0.05, loss="squared_hinge", tol=1e-12, max_iter=50)
    assert loose.converged.all() and tight.converged.all()
    assert loose.gap[0] <= 1e-2 and tight.gap[0] <= 1e-12
    assert loose.n_passes < tight.n_passes
    for sol in (loose, tight):  # one history entry per pass, numbered 1..n_passes
        assert [h["pass"] for h in sol.history] == list(range(1, sol.n_passes + 1))
        assert sol.history[-1]["gap"] == pytest.approx(sol.gap[0])
        gaps = [h["gap"] for h in sol.history]
        assert all(g > 1e-12 for g in gaps[:-1])  # it stopped at the first pass that met tol
    with pytest.warns(ConvergenceWarning, match="2 passes"):  # the primal Newton path's passes
        short = _fit(X, y, fmap, alpha=0.05, loss="hinge", tol=1e-8, max_iter=2, keep_features=False)
    assert short.n_passes == 2 and not short.converged.any() and short.gap[0] > 1e-8


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_integer_weights_equal_repeated_rows(problem, loss):
    X, y, fmap, _ = problem
    counts = np.random.default_rng(5).integers(0, 4, size=len(y))
    kw = dict(alpha=2.0, loss=loss, tol=1e-12 if loss == "squared_hinge" else 1e-4, max_iter=150)
    weighted = _fit(X, y, fmap, weights=RowWeights(counts.astype(float)), **kw)
    rep = np.repeat(np.arange(len(y)), counts)
    repeated = _fit(X[rep], y[rep], fmap, **kw)
    if loss == "squared_hinge":  # the same iterates, up to rounding
        assert weighted.n_passes == repeated.n_passes
        np.testing.assert_allclose(weighted.coef, repeated.coef, rtol=1e-8, atol=1e-10)
        return
    # hinge: both within their certified gaps of the same optimum
    P = max(weighted.objective[0], repeated.objective[0])
    assert abs(weighted.objective[0] - repeated.objective[0]) <= (weighted.gap[0] + repeated.gap[0]) * P
    dist = np.linalg.norm(weighted.coef - repeated.coef)
    assert dist <= np.sqrt(weighted.gap[0] * P / 2.0) + np.sqrt(repeated.gap[0] * P / 2.0)


def test_class_weights_equal_sample_weights(problem):
    """class_weight = per-row weights of each row's class: the same fit as repeating the rows of
    the up-weighted class (LinearSVC's class_weight scales C per class the same way)."""
    X, y, fmap, Phi = problem
    cw = np.where(y > 0, 3.0, 1.0)
    sol = _fit(X, y, fmap, weights=RowWeights(cw), alpha=0.5, loss="squared_hinge", fit_intercept=False, tol=1e-12)
    ref = LinearSVC(C=1.0, dual=False, fit_intercept=False, class_weight={1.0: 3.0}, tol=1e-12, max_iter=10**5)
    ref.fit(Phi, y)
    np.testing.assert_allclose(sol.coef[:, 0], ref.coef_[0], rtol=1e-5, atol=1e-6 * np.abs(ref.coef_).max())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_chunking_invariance(problem, dtype):
    X, y, fmap, _ = problem
    kw = dict(alpha=0.1, loss="squared_hinge", tol=1e-10 if dtype == "float64" else 1e-6, max_iter=40, dtype=dtype)
    kw["keep_features"] = False  # the streamed passes, whose sums the chunks add up
    a = _fit(X, y, fmap, chunk_rows=64, **kw)  # sub-blocks at multiples of 64: same products
    b = _fit(X, y, fmap, chunk_rows=128, **kw)
    c = _fit(X, y, fmap, chunk_rows=400, **kw)
    if dtype == "float64":
        assert a.n_passes == b.n_passes == c.n_passes
        np.testing.assert_allclose(a.coef, b.coef, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(a.coef, c.coef, rtol=1e-10, atol=1e-12)
        return
    # float32 products round differently with the BLAS path; every fit is within its certified
    # distance sqrt(gap·P/α) of the same optimum. The relative gap is certified down to float32
    # rounding only: below it, it can come out negative (-5e-9 under OpenBLAS's Sandybridge kernels)
    floor = np.finfo(np.float32).eps
    for other in (b, c):
        bound = sum(np.sqrt(max(s.gap[0], floor) * s.objective[0] / 0.1) for s in (a, other))
        assert np.linalg.norm(a.coef - other.coef) <= bound


def test_one_vs_rest_columns_are_independent_binary_fits(problem):
    X, _, fmap, _ = problem
    rng = np.random.default_rng(2)
    labels = np.argmax(X[:, :3] + 0.3 * rng.standard_normal((len(X), 3)), axis=1)
    Y = np.where(labels[:, None] == np.arange(3), 1.0, -1.0)
    kw = dict(alpha=0.2, loss="squared_hinge", tol=1e-11, max_iter=40)
    joint = _fit(X, Y, fmap, **kw)
    for j in range(3):
        alone = _fit(X, Y[:, j], fmap, **kw)
        np.testing.assert_allclose(joint.coef[:, j], alone.coef[:, 0], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(joint.intercept[j], alone.intercept[0], atol=1e-9)


def test_nystroem_features_equal_linearsvc():
    from bigkernel.kernels.factory import make_kernel
    from bigkernel.numerics.nystroem_features import NystroemMap

    X, y = _data(n=400, seed=4)
    fmap = NystroemMap.from_landmarks(make_kernel("rbf", gamma=0.3), X[:40])
    Phi = fmap.transform(X)
    sol = _fit(X, y, fmap, alpha=0.5, loss="squared_hinge", fit_intercept=False, tol=1e-12)
    ref = LinearSVC(C=1.0, dual=False, fit_intercept=False, tol=1e-12, max_iter=10**5).fit(Phi, y)
    np.testing.assert_allclose(sol.coef[:, 0], ref.coef_[0], rtol=1e-6, atol=1e-7 * np.abs(ref.coef_).max())


def test_huber_hinge_terms():
    m = np.array([2.0, 1.0, 0.95, 0.5, -1.0])
    value, ratio, curv = loss_terms(m, "hinge", 0.1)
    np.testing.assert_allclose(value, [0, 0, 0.05**2 / 0.2, 0.5 - 0.05, 2.0 - 0.05])
    np.testing.assert_allclose(ratio, [0, 0, 0.5, 1, 1])
    assert curv[2] == pytest.approx(10.0) and curv[3] == pytest.approx(1.0) and curv[4] == pytest.approx(0.25)
    hinge = np.maximum(1 - m, 0)
    assert np.all(value <= hinge) and np.all(hinge - value <= 0.05 + 1e-15)  # 0 ≤ L − L_μ ≤ μ/2


def test_bad_inputs(problem):
    X, y, fmap, _ = problem
    with pytest.raises(ParameterError, match="squared_hinge"):
        _fit(X, y, fmap, loss="log")
    ds = as_dataset(X, y[:, None], chunk_rows=100)
    with pytest.raises(DataError, match="row chunks"):
        fit_primal_svm(ds, fmap, ds.y.rechunk((150, 1)))


def test_the_solver_interface_is_the_pass_loop(problem):
    """PrimalSVMSolver implements the Solver protocol: spec from params, prepare = the given
    feature path's map, fit = fit_primal_svm bitwise, state/from_state = the saved svm layout."""
    X, y, fmap, _ = problem
    params = {"alpha": 0.5, "loss": "squared_hinge", "fit_intercept": True, "tol": 1e-8, "max_iter": 30,
              "dtype": "float64", "n_components": 40}  # fmt: skip
    calls = []

    def make_map(ds, weights):
        calls.append(weights)
        return fmap

    solver = PrimalSVMSolver.from_params(params, make_map=make_map, block_rows=lambda D, dtype: 64)
    assert isinstance(solver, Solver) and solver.name == "primal_svm"
    assert solver.spec == PrimalSVMSpec(0.5, "squared_hinge", True, 1e-8, 30, "float64")
    with pytest.raises(FrozenInstanceError):
        solver.spec.alpha = 1.0
    ds = as_dataset(X, y, chunk_rows=200)
    w = RowWeights(np.linspace(0.5, 2.0, X.shape[0]))
    fixed = solver.prepare(ds, w)
    assert calls == [w] and fixed.feature_map is fmap and fixed.block_rows == 64
    got = solver.fit(fixed, ds, w)
    ref = _fit(X, y, fmap, weights=w, alpha=0.5, loss="squared_hinge", tol=1e-8, max_iter=30)
    np.testing.assert_array_equal(got.coef, ref.coef)
    np.testing.assert_array_equal(got.intercept, ref.intercept)
    assert got.alpha == 0.5 and got.alphas.tolist() == [0.5] and got.diagnostics["passes"] == ref.n_passes
    attrs, arrays = solver.state(fixed, got)
    assert attrs == {"svm": {"n_iter": ref.n_passes}} and set(arrays) == {"svm_converged", "svm_gap"}
    assert arrays["svm_converged"].dtype == np.int8
    _, back = solver.from_state(attrs, {**arrays, "coef": got.coef.T, "intercept": got.intercept})
    np.testing.assert_array_equal(back.coef, got.coef)
    np.testing.assert_array_equal(back.details.converged, ref.converged)
    np.testing.assert_array_equal(back.details.gap, ref.gap)
    with pytest.raises(ParameterError):
        PrimalSVMSpec.from_params({**params, "loss": "squared_error"})
