"""NystroemRidge(solver="cg"): Falkon's preconditioned CG, one Dask pass per iteration.

References: the one-pass solver with the same centres (the same problem solved another way),
ExactKernelRidge when the centres are all training rows, dense numpy for the pass itself.
"""

import numpy as np
import pytest
import zarr
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

import bigkernel
from bigkernel import ExactKernelRidge, NystroemRidge
from bigkernel.errors import ParameterError
from bigkernel.numerics.nystroem_block import kernel_block_products
from bigkernel.numerics.nystroem_features import NystroemMap
from bigkernel.numerics.splits import HoldoutSplit

pytestmark = pytest.mark.numerics


def _data(n=4000, d=5, k=None, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2]
    if k is None:
        return X, f + 0.1 * rng.normal(size=n)
    Y = np.column_stack([f * (j + 1) + j + 0.1 * rng.normal(size=n) for j in range(k)])
    return X, Y


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


KW = dict(gamma=0.3, n_components=200, landmarks="uniform", random_state=0)


def test_block_products_equal_dense_formulas():
    X, Y = _data(700, k=2)
    rng = np.random.default_rng(1)
    from bigkernel.kernels.factory import make_kernel

    kernel = make_kernel("rbf", gamma=0.3)
    C = X[rng.choice(700, 40, replace=False)]
    fmap = NystroemMap.raw(kernel, C)
    K = kernel(X, C)
    w = rng.uniform(0, 2, size=700)
    w[::7] = 0.0
    split = HoldoutSplit(3, 0.2)
    held = split.groups(100, 800) == 1
    wt = np.where(held, 0.0, w)
    V = rng.normal(size=(40, 3))
    out = kernel_block_products(fmap, V, split, lambda a, b: w[None, a - 100 : b - 100], X, Y, 100, panel_rows=64)
    # relative to the largest entry: sums with cancellation round differently per BLAS kernel set
    ref = K.T @ (wt[:, None] * (K @ V))
    np.testing.assert_allclose(out.g, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    ref = (K @ V)[held]
    np.testing.assert_allclose(out.held_rows(), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    first = kernel_block_products(fmap, None, split, lambda a, b: w[None, a - 100 : b - 100], X, Y, 100)
    ref = K.T @ (wt[:, None] * np.column_stack([np.ones(700), Y]))
    np.testing.assert_allclose(first.g, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    np.testing.assert_allclose(first.sums, [wt.sum(), *(wt @ Y), np.count_nonzero(wt)])
    np.testing.assert_allclose(first.held_rows(), np.column_stack([Y[held], w[held]]))
    np.testing.assert_array_equal(first.x_min, X[wt > 0].min(axis=0))


@pytest.mark.parametrize("alpha", [1e-2, 1.0, 30.0])
def test_cg_equals_the_direct_solution_with_the_same_centres(alpha):
    """Weights, intercept, 3 targets: predictions within 1e-6 relative of the one-pass solver."""
    X, Y = _data(5000, k=3)
    w = np.random.default_rng(2).uniform(0.5, 2.0, size=len(X))
    direct = NystroemRidge(alpha=alpha, **KW).fit(X, Y, sample_weight=w)
    cg = NystroemRidge(alpha=alpha, solver="cg", tol=1e-10, max_iter=300, **KW).fit(X, Y, sample_weight=w)
    np.testing.assert_array_equal(cg.feature_map_.landmarks, direct.feature_map_.landmarks)
    assert direct.feature_map_.n_components == 200  # K_mm full rank: the same model space
    Z, _ = _data(500, seed=9)
    assert _rel(cg.predict(Z), direct.predict(Z)) < 1e-6
    assert cg.coef_.shape == (3, 200) and cg.intercept_.shape == (3,)  # (n_targets, M), as coef_ elsewhere
    assert cg.solver_info_["converged"] and cg.residuals_.shape == (cg.n_iter_ + 1, 3)


def test_cg_equals_exact_kernel_ridge_when_the_centres_are_the_training_rows():
    X, y = _data(300)
    exact = ExactKernelRidge(gamma=0.3, alpha=0.5, tol=1e-12).fit(X, y)
    cg = NystroemRidge(gamma=0.3, alpha=0.5, n_components=300, landmarks="uniform", solver="cg", tol=1e-12,
                       max_iter=500, random_state=0).fit(X, y)  # fmt: skip
    assert np.unique(cg.feature_map_.landmarks, axis=0).shape[0] == 300
    Z, _ = _data(200, seed=5)
    assert _rel(cg.predict(Z), exact.predict(Z)) < 1e-6


def test_every_alpha_rides_the_same_passes():
    """A grid of 4 α costs the passes of its slowest α, and its model at the chosen α equals a
    fit at that α alone, with the same centres, on the training rows of the split (held-out
    rows weighted 0); the held-out score of the chosen α is that model's own."""
    import dataclasses

    from bigkernel.data.sources import as_dataset
    from bigkernel.models._base import RowWeights
    from bigkernel.solvers.nystroem_cg import NystroemCGSolver

    X, Y = _data(4000, k=2)
    alphas = [0.01, 0.3, 3.0, 30.0]
    grid = NystroemRidge(alpha=alphas, solver="cg", tol=1e-10, max_iter=300, **KW).fit(X, Y)
    assert grid.solver_info_["passes"] == grid.n_iter_ + 1  # the moments pass + one per iteration
    assert grid.validation_scores_.shape == (4, 2)
    best = int(np.argmin(grid.validation_scores_.mean(axis=1)))
    assert grid.alpha_ == alphas[best]
    held = HoldoutSplit(_split_seed(grid), 0.1).groups(0, len(X)) == 1
    solver = NystroemCGSolver.from_params({**grid.get_params(), "alpha": grid.alpha_})
    ds = as_dataset(X, Y)
    fixed = dataclasses.replace(solver.prepare(ds), fmap=grid.feature_map_)  # the grid's centres
    alone = solver.fit(fixed, ds, RowWeights((~held).astype(float)))
    np.testing.assert_allclose(grid.coef_, alone.coef.T, rtol=1e-7, atol=1e-7 * np.abs(alone.coef).max())
    np.testing.assert_allclose(grid.intercept_, alone.intercept, rtol=1e-7)
    pred = grid.predict(X[held])
    mse = ((Y[held] - pred) ** 2).mean(axis=0)
    np.testing.assert_allclose(grid.validation_scores_[best], mse, rtol=1e-6)


def _split_seed(est):
    from bigkernel.solvers.nystroem_cg import HOLDOUT_SEED_SALT
    from bigkernel.validation import int_seed

    return int_seed(est.random_state) ^ HOLDOUT_SEED_SALT


def _iterations(est, tol):
    r = est.residuals_
    return np.array([int(np.argmax(r[:, j] <= tol)) if (r[:, j] <= tol).any() else -1 for j in range(r.shape[1])])


def test_iterations_to_1e_6_do_not_grow_with_n(monkeypatch):
    """The preconditioner from sampled training rows (8 per centre, centred): the iterations to
    1e-6 of every α of the grid α/n = 1e-7 … 1e-1 are at most 25 and about the same at n = 4000
    and 16000 (M = 200). Falkon's centres alone took 37–61 at α/n = 1e-4 … 1e-7 here."""
    import bigkernel.solvers.nystroem_cg as nystroem_cg
    from bigkernel.solvers.nystroem_cg import DEFAULT_RELATIVE_ALPHAS

    # at M = 200 every row costs fewer than SKETCH_EXACT_BUDGET passes: the exact preconditioner
    # would be taken; this test is about the sampled one (what large M get)
    monkeypatch.setattr(nystroem_cg, "SKETCH_EXACT_BUDGET", 0)
    counts = {}
    for n in (4000, 16000):
        X, y = _data(n)
        est = NystroemRidge(alpha=list(n * DEFAULT_RELATIVE_ALPHAS), solver="cg", tol=1e-6, **KW).fit(X, y)
        counts[n] = _iterations(est, 1e-6)
        assert est.solver_info_["converged"] and est.n_iter_ == counts[n].max()
        assert est.solver_info_["preconditioner_rows"] >= 2 * 200
    assert np.all(counts[16000] <= 1.2 * counts[4000] + 2), counts
    assert np.all(counts[16000] >= 0.7 * counts[4000] - 2), counts
    assert counts[4000].max() <= 25 and counts[16000].max() <= 25, counts


def test_the_preconditioner_rows_rule():
    """8 sampled rows per centre, capped by the cost of 10 passes; Falkon's centres below 2 per
    centre; every row when there are fewer or when all of them cost at most 25 passes (then the
    preconditioner is exact: one iteration)."""
    from bigkernel.solvers.nystroem_cg import sketch_rows

    assert sketch_rows(10**6, 2000, 10, 7) == 16_000
    # a CPU pass's entries count 100 flops beside the products: 74,000 rows cost 10 passes
    assert sketch_rows(2 * 10**6, 20_000, 10, 7) == 74_000
    assert sketch_rows(2 * 10**6, 20_000, 10, 7, entry_flops=0) == 0  # a GPU's: 24,000 < 2M: the centres
    assert sketch_rows(43_134, 1000, 26, 7) == 43_134  # diamonds: all rows cost 11 passes
    assert sketch_rows(43_134, 4000, 26, 7) == 9_705  # all rows would cost 44
    # all rows, cheaper than 25 passes: the exact preconditioner, one or two passes at any α
    X, y = _data(6000)
    tiny = NystroemRidge(alpha=6000 * 1e-10, solver="cg", tol=1e-8, max_iter=50, **KW).fit(X, y)
    assert tiny.solver_info_["preconditioner_rows"] == 6000 and tiny.n_iter_ <= 2


def test_a_grid_below_relative_alpha_1e_7_buys_the_exact_preconditioner_up_to_half_max_iter(monkeypatch):
    """Below α/n = 1e-7 a sample of 8 rows per centre needs far more than 25 passes (diamonds,
    M = 4,000: 100+), so every row is sampled when it costs at most max_iter / 2 passes."""
    import bigkernel.solvers.nystroem_cg as nystroem_cg
    from bigkernel.solvers.nystroem_cg import sketch_rows

    assert sketch_rows(43_134, 4000, 26, 7, exact_budget=50) == 43_134  # 44 passes ≤ max_iter / 2
    monkeypatch.setattr(nystroem_cg, "SKETCH_EXACT_BUDGET", 0)  # only the small-α rule can pick all rows
    X, y = _data(6000)
    rows = {}
    for rel in (1e-9, 1e-5):
        est = NystroemRidge(alpha=6000 * rel, solver="cg", tol=1e-8, max_iter=60, **KW).fit(X, y)
        rows[rel] = est.solver_info_["preconditioner_rows"]
    assert rows[1e-9] == 6000 and 2 * 200 <= rows[1e-5] < 6000, rows
    # with max_iter = 2 even half of it does not pay for every row: the sample again
    est = NystroemRidge(alpha=6000 * 1e-9, solver="cg", tol=1e-8, max_iter=2, **KW)
    with pytest.warns(Warning):
        est.fit(X, y)
    assert est.solver_info_["preconditioner_rows"] < 6000
    assert sketch_rows(1000, 200, 5, 1) == 1000
    X, y = _data(1200)
    est = NystroemRidge(alpha=1e-3, solver="cg", tol=1e-10, max_iter=50, **KW).fit(X, y)
    assert est.solver_info_["preconditioner_rows"] == 1200 and est.n_iter_ <= 2
    falkon = NystroemRidge(alpha=1e-3, solver="cg", tol=1e-10, max_iter=300, **{**KW, "n_components": 600})
    falkon.fit(*_data(1400))  # 8M > n: all rows again; the model equals the direct one
    direct = NystroemRidge(alpha=1e-3, **{**KW, "n_components": 600}).fit(*_data(1400))
    Z, _ = _data(300, seed=4)
    assert _rel(falkon.predict(Z), direct.predict(Z)) < 1e-5


def test_zarr_input_streamed_equals_in_memory(tmp_path, monkeypatch):
    from bigkernel.solvers import nystroem_cg

    X, y = _data(3000)
    g = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    g.create_array("X", data=X, chunks=(700, 5))
    g.create_array("y", data=y, chunks=(700,))
    mem = NystroemRidge(alpha=[0.1, 1.0], solver="cg", tol=1e-9, **KW).fit(X, y)
    monkeypatch.setattr(nystroem_cg, "PERSIST_FRACTION", 0.0)  # every pass reads the store
    src = bigkernel.open_source(str(tmp_path / "d.zarr"))
    streamed = NystroemRidge(alpha=[0.1, 1.0], solver="cg", tol=1e-9, **KW).fit(src.X, src.y)
    assert streamed.solver_info_["data_in_memory"] is False and mem.solver_info_["data_in_memory"] is True
    assert streamed.alpha_ == mem.alpha_
    assert _rel(streamed.coef_, mem.coef_) < 1e-9


def test_save_load_predicts_the_same_numpy_and_dask(tmp_path):
    import dask.array as da

    X, Y = _data(2000, k=2)
    est = NystroemRidge(alpha=[0.1, 1.0], solver="cg", **KW).fit(X, Y)
    path = est.save(str(tmp_path / "m.zarr"))
    back = bigkernel.load(path)
    assert back.solver == "cg" and back.n_iter_ == est.n_iter_
    np.testing.assert_array_equal(back.predict(X[:50]), est.predict(X[:50]))
    np.testing.assert_array_equal(back.residuals_, est.residuals_)
    np.testing.assert_array_equal(back.validation_scores_, est.validation_scores_)
    lazy = back.predict(da.from_array(X[:300], chunks=100))
    np.testing.assert_allclose(lazy.compute(), est.predict(X[:300]), rtol=1e-12)


def test_what_cg_refuses_says_what_to_do():
    X, y = _data(500)
    est = NystroemRidge(solver="cg", **KW).fit(X, y)
    with pytest.raises(Exception, match="posterior|return_std"):
        est.predict(X[:5], return_std=True)
    with pytest.raises(ParameterError, match="partial_fit"):
        NystroemRidge(solver="cg", **KW).partial_fit(X, y)
    with pytest.raises(ParameterError, match="held-out split"):
        NystroemRidge(solver="cg", alpha="gcv", **KW).fit(X, y)
    with pytest.raises(ParameterError, match="solver"):
        NystroemRidge(solver="falkon", **KW).fit(X, y)


def test_non_convergence_warns_with_what_to_change(monkeypatch):
    from sklearn.exceptions import ConvergenceWarning

    import bigkernel.solvers.nystroem_cg as nystroem_cg

    # more rows than 8 per centre and no exact preconditioner (at M = 200 all rows would cost
    # fewer than SKETCH_EXACT_BUDGET passes): a sampled one, which needs more than 2 passes
    monkeypatch.setattr(nystroem_cg, "SKETCH_EXACT_BUDGET", 0)
    X, y = _data(4000)
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        est = NystroemRidge(alpha=1e-6, solver="cg", max_iter=2, tol=1e-12, **KW).fit(X, y)
    assert est.n_iter_ == 2 and not est.solver_info_["converged"]
    from bigkernel.diagnostics import fit_findings

    finding = [f for f in fit_findings(est, job=True) if f.code == "cg_not_converged"]
    assert finding and "`max_iter: 4`" in finding[0].message  # a job's summary and metrics list it
    assert not [f for f in fit_findings(NystroemRidge(solver="cg", **KW).fit(X, y)) if f.code == "cg_not_converged"]
    # a grid whose winner stopped early says that its score is an early-stopped model's
    with pytest.warns(ConvergenceWarning) as record:
        NystroemRidge(alpha=[1e-6, 1e-5], solver="cg", max_iter=2, tol=1e-12, **KW).fit(X, y)
    assert any("chosen on the held-out split, did not reach tol" in str(w.message) for w in record)


def test_bootstrap_of_the_cg_solver_equals_weighted_refits(tmp_path):
    """Each replicate is the weighted CG fit with the fitted centres: replicate r's predictions
    equal a fit with the replicate's bootstrap counts as sample weights."""
    from bigkernel.data.sources import as_dataset
    from bigkernel.models._base import RowWeights
    from bigkernel.numerics.resample import BootstrapWeights
    from bigkernel.solvers.nystroem_cg import NystroemCGSolver
    from bigkernel.solvers.primal import PrimalFixed

    X, y = _data(1500)
    est = NystroemRidge(alpha=0.5, solver="cg", tol=1e-10, max_iter=300, **KW).fit(X, y)
    Z = X[:7]
    res = bigkernel.bootstrap(est, X, y, Z, n_bootstraps=3, random_state=4, store=str(tmp_path / "b.zarr"))
    assert res.predictions.shape[0] == 3
    counts = BootstrapWeights(seed_entropy=4, replicates=(0, 1, 2), n=len(X))(0, len(X))  # random_state=4
    solver = NystroemCGSolver.from_params(est.get_params())
    for r in range(3):
        sol = solver.fit(PrimalFixed(est.feature_map_), as_dataset(X, y), RowWeights(counts[r]))
        ref = est.feature_map_.transform(Z) @ sol.coef[:, 0] + sol.intercept[0]
        np.testing.assert_allclose(np.ravel(res.predictions[r]), ref, rtol=1e-8, atol=1e-10)
    assert not np.allclose(counts[0], 1.0)  # the replicates really were resampled


@pytest.mark.parametrize("kernel", ["rbf", "laplacian"])
def test_block_products_on_another_namespace_equal_numpy(kernel):
    """The device path of a pass block (array-api-strict standing in for CuPy): the rbf panels
    computed in that namespace (augmented GEMM + exp), other kernels' host panels copied in."""
    xps = pytest.importorskip("array_api_strict")
    from bigkernel.kernels.factory import make_kernel
    from bigkernel.numerics.nystroem_block import _Rows, block_products_in

    X, Y = _data(900, k=2)
    rng = np.random.default_rng(3)
    fmap = NystroemMap.raw(make_kernel(kernel, gamma=0.3), X[rng.choice(900, 60, replace=False)])
    held = rng.uniform(size=900) < 0.2
    w = np.where(held, 0.0, rng.uniform(0.5, 2, size=900))
    rows = _Rows(X, Y, w, held)
    V = rng.normal(size=(60, 3))
    for v in (None, V):
        g_np, im_np = block_products_in(None, fmap, v, rows, "float64", 128)
        g_st, im_st = block_products_in(xps, fmap, v, rows, "float64", 256)
        assert isinstance(g_st, np.ndarray)
        np.testing.assert_allclose(g_st, g_np, rtol=1e-11, atol=1e-11 * np.abs(g_np).max())
        if v is not None:
            np.testing.assert_allclose(np.concatenate(im_st), np.concatenate(im_np), rtol=1e-11, atol=1e-13)


def test_alpha_grid_by_one_eigendecomposition_when_the_factors_exceed_the_budget(caplog):
    """Every α's Cholesky factor held at once is (2 + n_alphas)·M²·8 bytes; past the memory budget
    one eigendecomposition of K_MM serves every α (2·M²·8), in the same passes and with the same
    model; past that: refused."""
    from bigkernel.numerics.falkon import FalkonPreconditioner
    from bigkernel.numerics.falkon_eigen import EigenFalkonPreconditioner

    X, y = _data(2000)
    kw = dict(alpha=[0.01, 0.1, 1.0, 10.0], solver="cg", tol=1e-10, max_iter=300, **KW)
    cholesky = NystroemRidge(**kw).fit(X, y)
    assert cholesky.solver_info_["preconditioner"] == "cholesky"
    budget = FalkonPreconditioner.memory_bytes(200, 2)
    assert EigenFalkonPreconditioner.memory_bytes(200) <= budget < FalkonPreconditioner.memory_bytes(200, 4)
    with caplog.at_level("INFO", logger="bigkernel.solvers.nystroem_cg"):
        eigen = NystroemRidge(**kw, memory_budget=budget).fit(X, y)
    assert eigen.solver_info_["preconditioner"] == "eigen" and "one eigendecomposition" in caplog.text
    assert eigen.solver_info_["passes"] == eigen.n_iter_ + 1  # every α in the same passes
    assert eigen.solver_info_["preconditioner_bytes"] < cholesky.solver_info_["preconditioner_bytes"] / 4
    assert eigen.alpha_ == cholesky.alpha_
    # the eigen route takes Falkon's centres, the Cholesky one sampled rows: other iterations, the same model
    assert eigen.solver_info_["preconditioner_rows"] == 0 < cholesky.solver_info_["preconditioner_rows"]
    np.testing.assert_allclose(eigen.validation_scores_, cholesky.validation_scores_, rtol=1e-8)
    assert _rel(eigen.coef_, cholesky.coef_) < 1e-8
    with pytest.raises(ParameterError, match="n_components=200 needs about"):
        NystroemRidge(**kw, memory_budget=budget // 4).fit(X, y)


def test_a_long_alpha_grid_takes_the_eigendecomposition_route(monkeypatch):
    """Past EIGEN_MIN_ALPHAS distinct α one eigh is cheaper than a Cholesky factor per α; the
    model is the Cholesky route's."""
    from bigkernel.solvers import nystroem_cg

    X, y = _data(1000)
    alphas = list(np.logspace(-2, 2, nystroem_cg.EIGEN_MIN_ALPHAS))
    kw = dict(alpha=alphas, solver="cg", tol=1e-10, max_iter=300, **KW)
    eigen = NystroemRidge(**kw).fit(X, y)
    assert eigen.solver_info_["preconditioner"] == "eigen"
    assert eigen.residuals_.shape[1] == len(alphas) and eigen.solver_info_["converged"]
    monkeypatch.setattr(nystroem_cg, "EIGEN_MIN_ALPHAS", len(alphas) + 1)
    cholesky = NystroemRidge(**kw).fit(X, y)
    assert cholesky.solver_info_["preconditioner"] == "cholesky"
    assert eigen.alpha_ == cholesky.alpha_
    np.testing.assert_allclose(eigen.validation_scores_, cholesky.validation_scores_, rtol=1e-8)
    assert _rel(eigen.coef_, cholesky.coef_) < 1e-8


_NO_PARTIAL_FIT = "solver='cg' refuses partial_fit (no sufficient statistics): a ParameterError says so"
_EXPECTED = {
    "check_fit_score_takes_y": _NO_PARTIAL_FIT,
    "check_n_features_in_after_fitting": _NO_PARTIAL_FIT,
    "check_estimators_partial_fit_n_features": _NO_PARTIAL_FIT,
    # the centres are a seeded draw of rows: repeating a row changes which rows are drawn
    "check_sample_weight_equivalence_on_dense_data": "Nyström centres are drawn from the rows",
    "check_sample_weight_equivalence_on_sparse_data": "Nyström centres are drawn from the rows",
}


@parametrize_with_checks(
    [NystroemRidge(solver="cg", n_components=20, tol=1e-10, max_iter=500, random_state=0)],
    expected_failed_checks=lambda est: _EXPECTED,
)
def test_cg_estimator_passes_scikit_learns_checks(estimator, check):
    check(estimator)


def test_float32_panels_converge_where_float32_products_broke_down(monkeypatch):
    """float32 kernel panels are multiplied in float64: with float32 products the preconditioned
    directions lost what α/n = 1e-10 needs and CG broke down (pᵀAp = −1.3e11 at iteration 32 on
    these diamonds-like data: 10 standard and 16 binary columns, small γ; −4e14 on diamonds)."""
    import bigkernel.solvers.nystroem_cg as nystroem_cg

    monkeypatch.setattr(nystroem_cg, "SKETCH_EXACT_BUDGET", 0)  # the sampled preconditioner
    rng = np.random.default_rng(0)
    n = 6000
    X = rng.normal(size=(n, 26))
    X[:, 10:] = X[:, 10:] > 0.8
    y = np.sin(X[:, 0]) + 0.3 * X[:, 1] + 0.05 * rng.normal(size=n)
    kw = dict(solver="cg", n_components=400, gamma=0.01, alpha=n * 1e-10, landmarks="uniform", random_state=0)
    fits = {dt: NystroemRidge(dtype=dt, tol=1e-6, **kw).fit(X, y) for dt in ("float64", "float32")}
    assert all(f.solver_info_["converged"] for f in fits.values())
    assert fits["float32"].n_iter_ <= fits["float64"].n_iter_ + 2
    p64, p32 = (fits[dt].predict(X[:500]) for dt in ("float64", "float32"))
    # the float32 kernel values (relative 6e-8) move this nearly unpenalised fit by ~1e-4
    assert np.linalg.norm(p32 - p64) <= 1e-3 * np.linalg.norm(p64)


def test_a_fit_no_better_than_the_mean_on_its_held_out_rows_is_flagged():
    """The chosen α's held-out MSE against predicting the training mean on the same rows (both
    recomputed here from the split): on pure noise the kernel fit overfits and is flagged; on
    the signal it is not."""
    from bigkernel.diagnostics import fit_findings
    from bigkernel.numerics.splits import HoldoutSplit

    X, y = _data(3000)
    noise = np.random.default_rng(5).normal(size=y.size)
    kw = {**KW, "gamma": 0.5, "n_components": 300, "alpha": [3e-5, 3e-3]}
    flagged = NystroemRidge(solver="cg", **kw).fit(X, noise)
    held = HoldoutSplit(_split_seed(flagged), 0.1).groups(0, y.size) == 1
    info = flagged.solver_info_
    constant = np.mean((noise[held] - noise[~held].mean()) ** 2)
    np.testing.assert_allclose(info["held_out_constant_mse"], constant, rtol=1e-10)
    np.testing.assert_allclose(info["held_out_mse"], np.mean((flagged.predict(X[held]) - noise[held]) ** 2), rtol=1e-6)
    assert info["held_out_mse"] > info["held_out_constant_mse"]
    finding = [f for f in fit_findings(flagged, job=True) if f.code == "held_out_r2_not_positive"]
    assert finding and "`standardize: true`" in finding[0].message
    good = NystroemRidge(solver="cg", **kw).fit(X, y)
    assert good.solver_info_["held_out_mse"] < 0.1 * good.solver_info_["held_out_constant_mse"]
    assert not [f for f in fit_findings(good) if f.code == "held_out_r2_not_positive"]


def _one_d(n=4000):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (n, 1))
    return X, np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(n)


def test_a_breakdown_at_one_alpha_of_a_grid_leaves_that_alpha_out():
    """1-d rbf centres, every row sampled, α/n = 1e-14: round-off makes the computed system
    indefinite and CG breaks down in that column. In a grid the column stops, is left out of the
    choice (warned, named in solver_info_) and the other α finish as they would alone; one α
    alone still raises NotPSDError saying what to change."""
    from bigkernel.errors import NotPSDError

    X, y = _one_d()
    n = len(y)
    kw = dict(gamma=1.0, n_components=300, landmarks="uniform", random_state=0, solver="cg", tol=1e-6)
    with pytest.warns(ConvergenceWarning, match=r"broke down .*α=4e-11 .*left out of the held-out choice"):
        grid = NystroemRidge(alpha=[1e-14 * n, 1e-6 * n, 1e-3 * n], **kw).fit(X, y)
    assert grid.solver_info_["breakdown_alphas"] == [1e-14 * n] and grid.alpha_ != 1e-14 * n
    assert grid.solver_info_["converged"]  # the other columns converged
    pair = NystroemRidge(alpha=[1e-6 * n, 1e-3 * n], **kw).fit(X, y)
    assert grid.alpha_ == pair.alpha_
    # (another preconditioner: the grid's smallest α buys every row; the same model to tol)
    assert _rel(grid.predict(X), pair.predict(X)) < 1e-4
    np.testing.assert_allclose(grid.validation_scores_[1:], pair.validation_scores_, rtol=1e-4)
    with pytest.raises(NotPSDError, match=r"CG broke down .*the only α.* larger α"):
        NystroemRidge(alpha=1e-14 * n, **kw).fit(X, y)


def test_an_early_stopped_alpha_must_clearly_beat_the_converged_ones(monkeypatch):
    """An α whose CG stopped at max_iter is chosen over the best converged α only when its
    held-out MSE is EARLY_STOPPED_MARGIN lower: the held-out rows lie among the training rows,
    where CG has shrunk the iterate's error, and cannot see it elsewhere (diamonds, M = 8,000:
    1.4 % better held out, test RMSE 0.197 against 0.100). Falkon's centres (the eigen route)
    leave α = 0.03 above tol = 1e-3 after 20 passes while α = 0.3 converges."""
    from bigkernel.solvers import nystroem_cg

    monkeypatch.setattr(nystroem_cg, "EIGEN_MIN_ALPHAS", 2)
    X, y = _data(3000)
    kw = dict(alpha=[0.03, 0.3], solver="cg", tol=1e-3, max_iter=20, **KW)
    with pytest.warns(ConvergenceWarning, match="did not converge for 1 of 2"):
        est = NystroemRidge(**kw).fit(X, y)
    stopped, done = est.residuals_[-1] > 1e-3
    assert stopped and not done
    early, converged = est.validation_scores_
    assert early < converged < early / (1 - nystroem_cg.EARLY_STOPPED_MARGIN)  # better, but not by the margin
    assert est.alpha_ == 0.3 and est.solver_info_["early_stopped_alpha_passed_over"] == 0.03
    assert est.solver_info_["held_out_mse"] == converged
    # far better held out (α = 30 converged, underfits): the early-stopped α is kept, with the warning
    with pytest.warns(ConvergenceWarning) as seen:
        kept = NystroemRidge(**{**kw, "alpha": [0.03, 30.0]}).fit(X, y)
    assert any("chosen on the held-out split, did not reach tol" in str(w.message) for w in seen)
    assert kept.alpha_ == 0.03 and "early_stopped_alpha_passed_over" not in kept.solver_info_
    from bigkernel.diagnostics import fit_findings

    stopped_model = [f.code for f in fit_findings(kept)] + [f.code for f in fit_findings(est)]
    assert stopped_model.count("cg_not_converged") == 1  # the model's own α stopped early: kept's only
