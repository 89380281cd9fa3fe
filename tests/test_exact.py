"""ExactKernelRidge: scikit-learn contract, agreement with scikit-learn's KernelRidge and with a
dense centred solution, df(α) exact and estimated, GCV, numpy/dask, persistence."""

import tracemalloc
import warnings

import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
from sklearn.utils.estimator_checks import parametrize_with_checks

import bigkernel
from bigkernel import ExactKernelRidge
from bigkernel.data.sources import as_dataset
from bigkernel.errors import NotPSDError, ParameterError
from bigkernel.kernels import RBF, Matern
from bigkernel.numerics.splits import HoldoutSplit
from bigkernel.solvers import budget as exact_module
from tests._tolerance import EPS, assert_forward_close, relative_residual
from tests.conftest import friedman

MiB = 2**20


@parametrize_with_checks([
    ExactKernelRidge(),
    ExactKernelRidge(kernel="laplacian", alpha=[0.1, 1.0], dtype="float32", memory_budget="64MB"),
])  # fmt: skip
def test_sklearn_compatible(estimator, check):
    check(estimator)


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.numerics
@pytest.mark.parametrize(
    "kernel,params",
    [("rbf", {"gamma": 0.5}), ("laplacian", {"gamma": 0.3}), ("polynomial", {"degree": 2, "gamma": 0.1, "coef0": 1.0}),
     ("linear", {})],
)  # fmt: skip
def test_matches_sklearn_kernel_ridge_without_intercept(kernel, params):
    X, y = friedman(1200, seed=1)
    Xt, _ = friedman(300, seed=2)
    Y = np.column_stack([y, np.sin(y)])  # two targets share every matvec
    ref = SkKernelRidge(kernel=kernel, alpha=0.1, **params).fit(X, Y)
    ours = ExactKernelRidge(kernel, alpha=0.1, fit_intercept=False, tol=1e-10, random_state=0, **params).fit(X, Y)
    assert ours.dual_coef_.shape == (1200, 2) and ours.intercept_.shape == (2,)
    assert np.all(ours.intercept_ == 0)
    assert _rel(ours.predict(Xt), ref.predict(Xt)) < 1e-7
    assert _rel(ours.dual_coef_, ref.dual_coef_) < 1e-6
    assert np.all(ours.residual_ < 1e-9)


@pytest.mark.numerics
def test_intercept_matches_the_dense_centred_solution():
    X, y = friedman(800, seed=3)
    Xt, _ = friedman(200, seed=4)
    k, alpha, n = Matern(length_scale=1.5, nu=2.5), 0.05, 800
    K = k(X)
    H = np.eye(n) - 1.0 / n
    a = np.linalg.solve(H @ K @ H + alpha * np.eye(n), H @ y)
    b = y.mean() - (K @ a).mean()
    m = ExactKernelRidge(k, alpha=alpha, tol=1e-11, random_state=0).fit(X, y)
    # CG stops at a relative residual of 1e-11 of the centred system, which puts its solution
    # within cond·residual of the dense one, normwise (an element-wise rtol held the smallest
    # coefficients to more than that; the error is set by where CG stops, not by rounding)
    A = H @ K @ H + alpha * np.eye(n)
    r = relative_residual(A, m.dual_coef_, H @ y)[0]
    assert r <= 2e-11
    assert_forward_close(m.dual_coef_, a, np.linalg.cond(A), residual=r)
    # b = ȳ − mean(K a) of the coefficients found (to rounding), hence within ‖K‖‖Δa‖/√n of b
    scale = abs(y.mean()) + np.mean(np.abs(K) @ np.abs(m.dual_coef_))
    assert abs(m.intercept_ - (y.mean() - (K @ m.dual_coef_).mean())) <= 16 * EPS * scale
    db = np.linalg.norm(K, 2) * np.linalg.norm(m.dual_coef_ - a) / np.sqrt(n)
    assert abs(m.intercept_ - b) <= db + 16 * EPS * scale
    # k̄(x)ᵀa + ȳ of the post, with k̄(x) = H(k(x) − K1/n), equals k(x)ᵀa + b
    kbar = (k(Xt, X) - K.mean(axis=0)) @ H
    np.testing.assert_allclose(m.predict(Xt), kbar @ a + y.mean(), rtol=1e-8)
    # df: trace of the hat matrix 11ᵀ/n + K̄(K̄ + αI)⁻¹
    Kc = H @ K @ H
    assert m.df_ == pytest.approx(1 + np.trace(Kc @ np.linalg.inv(Kc + alpha * np.eye(n))), rel=1e-8)
    assert m.df_stderr_ == 0.0 and m.solver_info_["df_method"] == "exact"


@pytest.mark.numerics
def test_alpha_list_is_chosen_by_exact_gcv():
    X, y = friedman(600, seed=5)
    alphas = [1e-3, 1e-2, 1e-1, 1.0]
    m = ExactKernelRidge(gamma=0.5, alpha=alphas, tol=1e-10, random_state=0).fit(X, y)
    K = RBF(gamma=0.5)(X)
    n = 600
    H = np.eye(n) - 1.0 / n
    gcv = []
    for a in alphas:
        S = np.full((n, n), 1.0 / n) + H @ K @ H @ np.linalg.inv(H @ K @ H + a * np.eye(n))
        r = y - S @ y
        gcv.append(n * (r @ r) / (n - np.trace(S)) ** 2)
    np.testing.assert_allclose(m.gcv_, gcv, rtol=1e-6)
    assert m.alpha_ == alphas[int(np.argmin(gcv))]
    assert m.df_path_.shape == (4,) and np.all(np.diff(m.df_path_) < 0)


@pytest.mark.numerics
def test_hutchinson_df_agrees_with_exact_within_its_standard_error(monkeypatch):
    X, y = friedman(1500, seed=6)
    exact = ExactKernelRidge(gamma=0.5, alpha=[0.01, 0.3], random_state=0).fit(X, y)
    monkeypatch.setattr(exact_module, "EXACT_DF_MAX_N", 100)  # force the estimate at this n
    est = ExactKernelRidge(gamma=0.5, alpha=[0.01, 0.3], n_probes=30, rank=200, random_state=0).fit(X, y)
    assert est.solver_info_["df_method"] == "hutchinson"
    assert np.all(est.df_stderr_path_ > 0)
    # the preconditioner as control variate keeps the error small relative to df itself
    assert np.all(est.df_stderr_path_ < 0.02 * exact.df_path_)
    assert np.all(np.abs(est.df_path_ - exact.df_path_) < 4 * est.df_stderr_path_ + 1e-6)
    assert est.alpha_ == exact.alpha_


@pytest.mark.parametrize("method", ["exact", "hutchinson", "none"])
def test_df_is_logged_as_known_never_nan(method, monkeypatch, caplog):
    """Exact df: ``df=12.3``; Hutchinson: ``df=12.3±0.4``; no probes: ``df not computed``."""
    import logging

    X, y = friedman(400, seed=7)
    if method == "hutchinson":
        monkeypatch.setattr(exact_module, "EXACT_DF_MAX_N", 100)
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        est = ExactKernelRidge(gamma=0.5, alpha=0.1, n_probes=0 if method == "none" else 16, random_state=0).fit(X, y)
    assert est.solver_info_["df_method"] == method
    lines = [r.getMessage() for r in caplog.records if r.name in ("bigkernel.models.exact", "bigkernel.numerics.dual")]
    assert len(lines) == 2 and not any("nan" in line for line in lines), lines
    want = {
        "exact": f"df={est.df_:.1f}",
        "hutchinson": f"df={est.df_:.1f}±{est.df_stderr_:.1f}",
        "none": "df not computed",
    }[method]
    assert all(want in line for line in lines), (want, lines)
    assert ("±" in " ".join(lines)) == (method == "hutchinson")  # a standard error only when estimated
    assert np.isnan(est.df_) == (method == "none")


def test_preconditioner_cuts_iterations_by_more_than_three():
    X, y = friedman(2000, seed=7)
    kw = dict(gamma=0.5, alpha=1e-2, tol=1e-6, random_state=0, n_probes=0)
    plain = ExactKernelRidge(preconditioner=None, **kw).fit(X, y)
    rpc = ExactKernelRidge(preconditioner="rpcholesky", rank=200, **kw).fit(X, y)
    nys = ExactKernelRidge(preconditioner="nystroem", rank=200, **kw).fit(X, y)
    assert 3 * rpc.n_iter_ <= plain.n_iter_ and nys.n_iter_ < plain.n_iter_
    assert _rel(rpc.predict(X[:200]), plain.predict(X[:200])) < 1e-5
    assert rpc.solver_info_["rank"] == 200 and plain.solver_info_["rank"] == 0


def test_non_convergence_warns_with_the_figures():
    X, y = friedman(500, seed=8)
    with pytest.warns(ConvergenceWarning, match="relative residual"):
        ExactKernelRidge(gamma=0.5, alpha=1e-4, preconditioner=None, max_iter=3).fit(X, y)


def test_float32_gram_is_close_and_partial_cache_gives_the_same_answer():
    X, y = friedman(2500, seed=9)
    Xt, _ = friedman(300, seed=10)
    kw = dict(gamma=0.5, alpha=1e-2, tol=1e-9, random_state=0, n_probes=0)
    full = ExactKernelRidge(**kw).fit(X, y)
    part = ExactKernelRidge(memory_budget=40 * MiB, dtype="float64", **kw).fit(X, y)
    f32 = ExactKernelRidge(dtype="float32", **kw).fit(X, y)
    assert full.solver_info_["gram"]["cached_fraction"] == 1.0
    assert 0 < part.solver_info_["gram"]["cached_fraction"] < 1.0
    assert f32.solver_info_["gram"]["cache_dtype"] == "float32"
    assert _rel(part.predict(Xt), full.predict(Xt)) < 1e-8
    assert _rel(f32.predict(Xt), full.predict(Xt)) < 1e-4


@pytest.mark.numerics
def test_numpy_and_dask_inputs_give_the_same_model():
    X, y = friedman(1000, seed=11)
    kw = dict(gamma=0.5, alpha=0.05, random_state=0)
    a = ExactKernelRidge(**kw).fit(X, y)
    b = ExactKernelRidge(**kw).fit(da.from_array(X, chunks=(300, 10)), da.from_array(y, chunks=300))
    for attr in ("dual_coef_", "intercept_", "df_", "alpha_", "n_iter_"):
        np.testing.assert_allclose(getattr(a, attr), getattr(b, attr), rtol=1e-12, err_msg=attr)
    Xt = friedman(700, seed=12)[0]
    lazy = b.predict(da.from_array(Xt, chunks=(256, 10)))
    assert isinstance(lazy, da.Array) and lazy.shape == (700,) and lazy.chunks[0] == (256, 256, 188)
    np.testing.assert_allclose(lazy.compute(), a.predict(Xt), rtol=1e-12)


@pytest.mark.numerics
def test_fit_dataset_with_a_holdout_split_fits_the_training_rows():
    X, y = friedman(900, seed=13)
    split = HoldoutSplit(3, 0.3)
    train = split.groups(0, 900) == 0
    kw = dict(gamma=0.5, alpha=0.1, random_state=0)
    a = ExactKernelRidge(**kw).fit_dataset(as_dataset(X, y, chunk_rows=200), weights=split)
    b = ExactKernelRidge(**kw).fit(X[train], y[train])
    assert a.n_samples_fit_ == train.sum()
    np.testing.assert_allclose(a.predict(X[:50]), b.predict(X[:50]), rtol=1e-10)


def test_save_load_round_trip_keeps_the_training_points_in_the_store(tmp_path):
    X, y = friedman(700, seed=14)
    Y = np.column_stack([y, 2 * y])
    k = RBF(length_scale=(1.0, 2.0, 1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0)) + Matern(length_scale=2.0)
    m = ExactKernelRidge(k, alpha=[0.01, 0.1], standardize=True, random_state=0).fit(X, Y)
    path = m.save(tmp_path / "m.zarr")
    group = zarr.open_group(path, mode="r")
    np.testing.assert_array_equal(group["X_fit"][:], m.X_fit_)
    assert group["dual_coef"].shape == (700, 2)
    back = bigkernel.load(path)
    assert isinstance(back, ExactKernelRidge) and back.kernel_ == m.kernel_
    Xt = friedman(100, seed=15)[0]
    np.testing.assert_array_equal(back.predict(Xt), m.predict(Xt))
    for attr in ("alpha_", "df_", "df_stderr_", "n_iter_", "residual_", "gcv_", "alphas_"):
        np.testing.assert_array_equal(getattr(back, attr), getattr(m, attr), err_msg=attr)


@pytest.mark.numerics
def test_standardize_equals_fitting_standardized_data():
    X, y = friedman(500, seed=16)
    X = X * np.arange(1, 11) + 5
    mu, sd = X.mean(axis=0), X.std(axis=0)
    a = ExactKernelRidge(gamma=0.2, alpha=0.1, standardize=True, random_state=0).fit(X, y)
    b = ExactKernelRidge(gamma=0.2, alpha=0.1, random_state=0).fit((X - mu) / sd, y)
    np.testing.assert_allclose(a.predict(X[:40]), b.predict((X[:40] - mu) / sd), rtol=1e-10)


def test_sigmoid_is_flagged_and_breakdown_is_a_clear_error():
    X, y = friedman(300, seed=17)
    with pytest.warns(UserWarning, match="not positive semi-definite"):
        m = ExactKernelRidge("sigmoid", gamma=0.5, coef0=-3.0, alpha=1e-6, preconditioner=None, random_state=0)
        with pytest.raises(NotPSDError, match="not positive definite"):
            m.fit(X, y)
        with pytest.raises(NotPSDError, match=r"k\(x, x\) < 0"):
            ExactKernelRidge("sigmoid", gamma=0.5, coef0=-3.0).fit(X, y)


def test_parameter_errors_name_the_parameter():
    X, y = friedman(50, seed=18)
    for kw, word in [({"preconditioner": "ilu"}, "preconditioner"), ({"tol": 0}, "tol"),
                     ({"memory_budget": "lots"}, "memory_budget"), ({"rank": 0}, "rank"),
                     ({"dtype": "float16"}, "dtype"), ({"alpha": -1.0}, "alpha")]:  # fmt: skip
        with pytest.raises(ParameterError, match=word):
            ExactKernelRidge(**kw).fit(X, y)


def test_fit_stays_within_its_memory_budget(rng):
    """The whole fit (Gram cache, preconditioner, CG vectors) under tracemalloc."""
    X, y = friedman(4000, seed=19)
    budget = 64 * MiB  # the whole Gram matrix is 61 MiB in float64 tiles: it cannot all be cached
    kw = dict(gamma=0.5, alpha=0.1, dtype="float64", n_probes=4, random_state=0)
    ExactKernelRidge(**kw).fit(X[:2100], y[:2100])  # warm up: first-use imports are not data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            m = ExactKernelRidge(memory_budget=budget, **kw).fit(X, y)
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    g = m.solver_info_["gram"]
    assert 0 < g["cached_fraction"] < 1.0
    assert peak <= budget, f"peak {peak / MiB:.1f} MiB > {budget / MiB:.0f} MiB: {g}"


def test_a_tol_below_round_offs_reach_stops_early_with_the_best_iterate():
    """tol = 1e-10 at α = 1e-6 (n = 900) is below what round-off lets CG reach (~3e-9 here):
    CG used to run to max_iter = 9,000 while its iterates drifted and blew up (predictions
    ~1e45, one ConvergenceWarning). It now stops when it makes no more progress, keeps its
    least-residual iterate (scikit-learn's direct solve to ~1e-8) and says what to change."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(900, 3))
    y = np.sin(X[:, 0]) + 0.3 * rng.normal(size=900)
    ref = SkKernelRidge(kernel="rbf", gamma=1 / 3, alpha=1e-6).fit(X, y).predict(X[:50])
    with pytest.warns(ConvergenceWarning, match="stopped improving") as record:
        m = ExactKernelRidge(alpha=1e-6, fit_intercept=False, tol=1e-10).fit(X, y)
    assert "Loosen tol" in str(record[0].message)
    assert m.n_iter_ < 2000 and m.residual_ < 1e-7
    np.testing.assert_allclose(m.predict(X[:50]), ref, atol=1e-6)
    # a reachable tol converges as before, with no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        loose = ExactKernelRidge(alpha=1e-6, fit_intercept=False, tol=1e-8).fit(X, y)
    np.testing.assert_allclose(loose.predict(X[:50]), ref, atol=1e-6)
