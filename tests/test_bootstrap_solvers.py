"""bootstrap() with every solver: exact (weighted dual solve per replicate), Nyström (landmarks
drawn once), KernelRidge, fitted RandomFeatureRidgeCV, standardization; weighted exact fits;
jobs with exact and Nyström solvers through the real CLI. Real zarr stores on disk."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from bigkernel import (
    ExactKernelRidge,
    KernelRidge,
    NystroemRidge,
    RandomFeatureRidge,
    RandomFeatureRidgeCV,
)
from bigkernel.bands.bootstrap import bootstrap
from bigkernel.errors import ParameterError
from bigkernel.io.band_store import open_store
from bigkernel.numerics.dual import solve_dual
from bigkernel.numerics.resample import bootstrap_counts

N, SEED = 160, 7


def data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    Y = np.column_stack([np.sin(6 * X[:, 0]), X[:, 1] ** 2]) + 0.1 * rng.normal(size=(n, 2))
    return X, Y, rng.uniform(size=(12, 2))


def counts(r, n=N, seed=SEED):
    return bootstrap_counts(seed, r, n, 0, n).astype(int)


def exact(**kw):
    return ExactKernelRidge(**{"gamma": 2.0, "alpha": 0.05, "tol": 1e-12, "random_state": 0, **kw})


# --------------------------------------------------------------------------------------------
# the weighted dual solve
# --------------------------------------------------------------------------------------------
@pytest.mark.numerics
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_weighted_dual_equals_dense_fit_on_repeated_rows(fit_intercept):
    """solve_dual(sample_weight=c) == the dense centred solve on np.repeat(rows, c): predictions,
    GCV for every α (so the chosen α), with exact eigenvalues of the weighted system."""
    X, Y, E = data(50)
    c = counts(0, 50)
    K = lambda A, B: np.exp(-2.0 * ((A[:, None] - B[None]) ** 2).sum(-1))
    alphas = np.array([1e-3, 1e-2, 1e-1, 1.0])
    Xr, Yr = np.repeat(X, c, 0), np.repeat(Y, c, 0)
    Nr = len(Xr)
    H = np.eye(Nr) - 1.0 / Nr if fit_intercept else np.eye(Nr)
    Kr = K(Xr, Xr)
    ev = np.linalg.eigvalsh(H @ Kr @ H)
    s = np.sqrt(c.astype(float))
    Hs = np.eye(50) - np.outer(s, s) / c.sum() if fit_intercept else np.eye(50)
    evw = np.linalg.eigvalsh(Hs @ (s[:, None] * K(X, X) * s) @ Hs)
    # the weighted system has the nonzero spectrum of the repeated one
    np.testing.assert_allclose(np.sort(evw)[-30:], np.sort(ev)[-30:], rtol=1e-8, atol=1e-9)
    sol = solve_dual(
        lambda V: K(X, X) @ V, Y, alphas, fit_intercept=fit_intercept, eigenvalues=evw, tol=1e-13, sample_weight=c
    )
    gcv = []
    for al in alphas:
        a = H @ np.linalg.solve(H @ Kr @ H + al * np.eye(Nr), H @ Yr)
        b = (Yr - Kr @ a).mean(0) if fit_intercept else 0.0
        rss = ((Yr - Kr @ a - b) ** 2).sum(0)
        df = fit_intercept + (ev / (ev + al)).sum()
        gcv.append(Nr * rss / (Nr - df) ** 2)
        if al == sol.alpha:
            ref = K(E, Xr) @ a + b
    np.testing.assert_allclose(sol.gcv, np.array(gcv), rtol=1e-9)
    assert sol.alpha == alphas[np.argmin(np.array(gcv).mean(1))]
    np.testing.assert_allclose(K(E, X) @ sol.coef + sol.intercept, ref, rtol=1e-9, atol=1e-10)


@pytest.mark.numerics
def test_exact_sample_weight_equals_repeated_rows_and_zero_weight_rows_are_dropped():
    X, Y, E = data()
    c = counts(1)
    a = exact().fit(X, Y, sample_weight=c)
    b = exact().fit(np.repeat(X, c, 0), np.repeat(Y, c, 0))
    # two CG solves (tol 1e-12) of systems with cond ≤ 1e3, each within cond·tol of the answer
    np.testing.assert_allclose(a.predict(E), b.predict(E), rtol=2 * 1e3 * 1e-12, atol=1e-10)
    assert a.n_samples_fit_ == int((c > 0).sum())  # rows of weight 0 never enter the Gram
    ones = exact().fit(X, Y, sample_weight=np.ones(N))
    np.testing.assert_array_equal(ones.predict(E), exact().fit(X, Y).predict(E))
    # a dask vector of weights is read once
    import dask.array as da

    lazy = exact().fit(X, Y, sample_weight=da.from_array(c.astype(float), chunks=50))
    np.testing.assert_array_equal(lazy.predict(E), a.predict(E))


@pytest.mark.parametrize(
    "bad, match",
    [
        (-np.ones(N), "(?i)>= 0.*negative"),
        (np.zeros(N), "(?i)non-zero"),
        (np.ones(N - 1), "shape"),
    ],
)
def test_exact_sample_weight_errors(bad, match):
    X, Y, _ = data()
    with pytest.raises(ParameterError, match=match):
        exact().fit(X, Y, sample_weight=bad)


# --------------------------------------------------------------------------------------------
# bootstrap per solver
# --------------------------------------------------------------------------------------------
@pytest.mark.numerics
def test_exact_replicates_equal_weighted_and_repeated_fits(tmp_path):
    X, Y, E = data()
    est = exact(alpha=[1e-3, 1e-2, 0.1, 1.0])  # each replicate repeats the GCV choice
    res = bootstrap(est, X, Y, E, n_bootstraps=5, random_state=SEED, store=tmp_path / "ex.zarr", batch_size=2)
    assert res.n_computed == 5 and res.predictions.shape == (5, 12, 2)
    P = res.predictions.compute()
    C = open_store(res.store).coef_dask().compute()
    assert C.shape == (5, N + 1, 2)
    chosen = set()
    for r in range(5):
        c = counts(r)
        ref = exact(alpha=[1e-3, 1e-2, 0.1, 1.0]).fit(np.repeat(X, c, 0), np.repeat(Y, c, 0))
        np.testing.assert_allclose(P[r], ref.predict(E), rtol=1e-8, atol=1e-9)
        weighted = exact(alpha=[1e-3, 1e-2, 0.1, 1.0]).fit(X, Y, sample_weight=c)
        np.testing.assert_array_equal(P[r], weighted.predict(E))  # the same arithmetic
        assert np.all(C[r, :N][c == 0] == 0)  # rows not drawn carry no coefficient
        np.testing.assert_array_equal(C[r, :N][c > 0], weighted.dual_coef_)
        np.testing.assert_array_equal(C[r, N], weighted.intercept_)
        chosen.add(weighted.alpha_)
        assert weighted.alpha_ == ref.alpha_


@pytest.mark.numerics
def test_exact_values_do_not_depend_on_batch_or_gram_cache(tmp_path, monkeypatch):
    X, Y, E = data()
    y = Y[:, 0]
    base = bootstrap(exact(), X, y, E, n_bootstraps=4, random_state=3, store=tmp_path / "a.zarr", batch_size=4)
    assert base.mean.shape == (12,)
    # no tile cached (every matvec recomputes its tiles) and one replicate per batch
    monkeypatch.setattr("bigkernel.numerics.gram_tiles.TILE_MAX", 64)  # several tiles
    cached = bootstrap(exact(), X, y, E, n_bootstraps=4, random_state=3, store=tmp_path / "c.zarr", batch_size=1)
    monkeypatch.setattr("bigkernel.solvers.exact_plan.task_cache_budget", lambda b, w: 0)
    small = bootstrap(exact(), X, y, E, n_bootstraps=4, random_state=3, store=tmp_path / "b.zarr", batch_size=1)
    np.testing.assert_array_equal(small.predictions.compute(), cached.predictions.compute())
    # batches of 4 and of 1 sum the matvecs in other orders, and CG (tol 1e-12) stops within
    # cond·tol of the solution either way: cond(K̄ + αI) = 540-650 for these replicates on
    # their repeated rows (an rtol=1e-10 measured 0.0004-0.04 of itself across OpenBLAS kernels)
    np.testing.assert_allclose(
        small.predictions.compute(), base.predictions.compute(), rtol=2 * 1e3 * 1e-12, atol=1e-12
    )


def test_exact_standardize_fixes_the_scaling_from_all_rows(tmp_path):
    X, Y, E = data()
    X = X * np.array([1.0, 50.0]) + 3.0
    E = E * np.array([1.0, 50.0]) + 3.0
    res = bootstrap(exact(standardize=True), X, Y, E, n_bootstraps=3, random_state=SEED, store=tmp_path / "s.zarr")
    fitted = exact(standardize=True).fit(X, Y)
    m, s = fitted.scaler_mean_, fitted.scaler_scale_
    for r in range(3):
        c = counts(r)
        ref = exact().fit((X - m) / s, Y, sample_weight=c)
        np.testing.assert_allclose(res.predictions.compute()[r], ref.predict((E - m) / s), rtol=1e-9, atol=1e-10)
    again = bootstrap(fitted, X, Y, E, n_bootstraps=3, random_state=SEED, store=tmp_path / "f.zarr")
    np.testing.assert_array_equal(again.predictions.compute(), res.predictions.compute())


def test_nystroem_replicates_use_the_landmarks_drawn_once(tmp_path):
    X, Y, E = data()
    ny = NystroemRidge(gamma=2.0, n_components=30, alpha=0.1, random_state=4)
    res = bootstrap(ny, X, Y, E, n_bootstraps=4, random_state=SEED, store=tmp_path / "n.zarr", batch_size=3)
    fmap = NystroemRidge(gamma=2.0, n_components=30, alpha=0.1, random_state=4).fit(X, Y).feature_map_
    P = res.predictions.compute()
    for r in range(4):
        c = counts(r)
        ref = Ridge(alpha=0.1).fit(fmap.transform(np.repeat(X, c, 0)), np.repeat(Y, c, 0))
        np.testing.assert_allclose(P[r], ref.predict(fmap.transform(E)), rtol=1e-7, atol=1e-8)
    # the fitted model gives the same replicates (its landmarks are those drawn here)
    fitted = bootstrap(ny.fit(X, Y), X, Y, E, n_bootstraps=4, random_state=SEED, store=tmp_path / "nf.zarr")
    np.testing.assert_array_equal(fitted.predictions.compute(), P)


def test_kernel_ridge_uses_the_plan_of_its_solver(tmp_path):
    X, Y, E = data()
    kr = KernelRidge(gamma=2.0, alpha=0.05, tol=1e-12, random_state=0)
    a = bootstrap(kr, X, Y, E, n_bootstraps=3, random_state=1, store=tmp_path / "k.zarr")
    b = bootstrap(exact(), X, Y, E, n_bootstraps=3, random_state=1, store=tmp_path / "e.zarr")
    assert open_store(a.store).fingerprint["estimator"]["class"].endswith("ExactKernelRidge")
    np.testing.assert_array_equal(a.predictions.compute(), b.predictions.compute())
    kr_rff = KernelRidge(gamma=2.0, alpha=0.05, solver="random_features", n_components=40, random_state=2).fit(X, Y)
    c = bootstrap(kr_rff, X, Y, E, n_bootstraps=3, random_state=1, store=tmp_path / "r.zarr")
    d = bootstrap(
        RandomFeatureRidge(gamma=2.0, alpha=0.05, n_components=40, random_state=2),
        X,
        Y,
        E,
        n_bootstraps=3,
        random_state=1,
        store=tmp_path / "rr.zarr",
    )
    np.testing.assert_array_equal(c.predictions.compute(), d.predictions.compute())


def test_random_feature_cv_is_bootstrapped_at_its_choice(tmp_path):
    X, Y, E = data()
    y = Y[:, 0]
    cv = RandomFeatureRidgeCV(gammas=[0.5, 2.0, 8.0], alphas=[1e-3, 1e-1, 10.0], n_components=40, random_state=5)
    with pytest.raises(ParameterError, match="fitted RandomFeatureRidgeCV"):
        bootstrap(cv, X, y, E, n_bootstraps=2, store=tmp_path / "u.zarr")
    cv.fit(X, y)
    res = bootstrap(cv, X, y, E, n_bootstraps=3, random_state=2, store=tmp_path / "cv.zarr")
    plain = RandomFeatureRidge(gamma=cv.gamma_, alpha=cv.alpha_, n_components=40, random_state=5)
    ref = bootstrap(plain, X, y, E, n_bootstraps=3, random_state=2, store=tmp_path / "p.zarr")
    np.testing.assert_allclose(res.predictions.compute(), ref.predictions.compute(), rtol=1e-12, atol=1e-12)


def test_random_features_standardize_uses_the_scaled_map(tmp_path):
    """standardize=True: the replicates use the standardized map (was silently unscaled)."""
    X, Y, E = data()
    X = X * np.array([1.0, 100.0])
    E = E * np.array([1.0, 100.0])
    est = RandomFeatureRidge(gamma=1.0, n_components=40, alpha=0.1, random_state=3, standardize=True)
    res = bootstrap(est, X, Y, E, n_bootstraps=3, random_state=2, store=tmp_path / "st.zarr")
    fitted = RandomFeatureRidge(gamma=1.0, n_components=40, alpha=0.1, random_state=3, standardize=True).fit(X, Y)
    fmap = fitted.feature_map_
    for r in range(3):
        c = counts(r, seed=2)
        ref = Ridge(alpha=0.1).fit(fmap.transform(np.repeat(X, c, 0)), np.repeat(Y, c, 0))
        np.testing.assert_allclose(res.predictions.compute()[r], ref.predict(fmap.transform(E)), rtol=1e-7, atol=1e-8)


def test_fitted_model_with_other_features_is_refused(tmp_path):
    X, Y, E = data()
    est = exact().fit(X[:, :1], Y)
    with pytest.raises(ValueError, match="expects 1 features; X has 2"):
        bootstrap(est, X, Y, E, n_bootstraps=2, store=tmp_path / "x.zarr")


# --------------------------------------------------------------------------------------------
# jobs
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("solver", ["exact", "nystroem"])
def test_job_bootstrap_with_exact_and_nystroem_solvers(tmp_path, solver):
    """A YAML job with a bootstrap section through the real CLI, then a rerun that resumes."""
    from bigkernel.cli import main

    extra = "  n_components: 40\n" if solver == "nystroem" else ""
    cfg = tmp_path / "job.yaml"
    cfg.write_text(
        f"name: boot-{solver}\noutput: {tmp_path / 'out'}\noverwrite: true\nseed: 3\n"
        "data:\n  make: {kind: sine, n_samples: 300, n_features: 1, noise: 0.3, "
        f"path: {tmp_path / 'sine.zarr'}}}\n  holdout_fraction: 0.2\n"
        f"model:\n  solver: {solver}\n  gamma: 20.0\n  alpha: [0.01, 0.1, 1.0]\n{extra}"
        "bootstrap:\n  n_bootstraps: 6\n  eval_grid: {n_points: 30}\n  plot: false\n"
        "plots: false\n"
    )
    assert main(["run", str(cfg)]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    boot = metrics["bootstrap"]
    assert boot["n_bootstraps"] == 6 and boot["n_computed"] == 6 and boot["mean_band_width"] > 0
    fp = open_store(str(tmp_path / "out" / "bootstrap.zarr")).fingerprint
    cls = {"exact": "ExactKernelRidge", "nystroem": "NystroemRidge"}[solver]
    assert fp["estimator"]["class"].endswith(cls) and fp["estimator"]["fitted"] is True
    assert main(["run", str(cfg)]) == 0
    again = json.loads((tmp_path / "out" / "metrics.json").read_text())["bootstrap"]
    assert again["n_reused"] == 6 and again["mean_band_width"] == boot["mean_band_width"]


# --------------------------------------------------------------------------------------------
# sample_weight on every estimator
# --------------------------------------------------------------------------------------------
@pytest.mark.numerics
@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomFeatureRidge(
            gamma=2.0, n_components=40, alpha=0.1, random_state=3, chunk_rows=64, dtype="float64"
        ),
        lambda: RandomFeatureRidge(
            gamma=2.0,
            n_components=40,
            alpha=[0.01, 0.1, 1.0],
            random_state=3,
            standardize=True,
            chunk_rows=64,
            dtype="float64",
        ),
        lambda: NystroemRidge(gamma=2.0, n_components=30, alpha=0.1, random_state=3, landmarks="uniform"),
        lambda: KernelRidge(gamma=2.0, alpha=0.05, tol=1e-12, random_state=0),
        lambda: exact(standardize=True),
    ],
    ids=["rff", "rff-gcv-standardize", "nystroem", "kernel-ridge", "exact-standardize"],
)
def test_sample_weight_equals_repeated_rows(make):
    X, Y, E = data()
    X = X * np.array([1.0, 30.0])
    E = E * np.array([1.0, 30.0])
    c = counts(2)
    a = make().fit(X, Y, sample_weight=c)
    if isinstance(a, NystroemRidge):
        # landmarks are drawn among the rows of the data set: compare with the same landmarks
        fmap = a.feature_map_
        ref = Ridge(alpha=0.1).fit(fmap.transform(np.repeat(X, c, 0)), np.repeat(Y, c, 0))
        np.testing.assert_allclose(a.predict(E), ref.predict(fmap.transform(E)), rtol=1e-7, atol=1e-8)
        return
    b = make().fit(np.repeat(X, c, 0), np.repeat(Y, c, 0))
    assert a.alpha_ == b.alpha_
    np.testing.assert_allclose(a.predict(E), b.predict(E), rtol=1e-7, atol=1e-8)


def test_random_feature_cv_takes_no_sample_weight():
    X, Y, _ = data()
    with pytest.raises(TypeError, match="sample_weight"):
        RandomFeatureRidgeCV(gammas=[1.0], n_components=20).fit(X, Y[:, 0], sample_weight=np.ones(N))


def test_exact_cv_is_bootstrapped_at_its_choice(tmp_path):
    from bigkernel import ExactKernelRidgeCV

    X, Y, E = data()
    y = Y[:, 0]
    cv = ExactKernelRidgeCV(gammas=[0.5, 2.0, 8.0], alphas=[1e-3, 1e-1, 10.0])
    with pytest.raises(ParameterError, match="fitted ExactKernelRidgeCV"):
        bootstrap(cv, X, y, E, n_bootstraps=2, store=tmp_path / "u.zarr")
    cv.fit(X, y)
    res = bootstrap(cv, X, y, E, n_bootstraps=3, random_state=2, store=tmp_path / "cv.zarr")
    for r in range(3):
        c = counts(r, seed=2)
        ref = ExactKernelRidge(gamma=cv.gamma_, alpha=cv.alpha_, tol=1e-12).fit(np.repeat(X, c, 0), np.repeat(y, c, 0))
        np.testing.assert_allclose(res.predictions.compute()[r], ref.predict(E), rtol=1e-5, atol=1e-6)


def test_job_bootstrap_with_an_exact_search(tmp_path):
    """solver: exact with a gamma search (ExactKernelRidgeCV) and a bootstrap section."""
    from bigkernel.cli import main

    cfg = tmp_path / "job.yaml"
    cfg.write_text(
        f"name: boot-exact-cv\noutput: {tmp_path / 'out'}\nseed: 3\n"
        "data:\n  make: {kind: sine, n_samples: 300, n_features: 1, noise: 0.3, "
        f"path: {tmp_path / 'sine.zarr'}}}\n  holdout_fraction: 0.2\n"
        "model:\n  solver: exact\n  gamma: [5.0, 20.0, 80.0]\n  alpha: cv\n"
        "bootstrap:\n  n_bootstraps: 4\n  eval_grid: {n_points: 20}\nplots: false\n"
    )
    assert main(["run", str(cfg)]) == 0
    boot = json.loads((tmp_path / "out" / "metrics.json").read_text())["bootstrap"]
    assert boot["n_computed"] == 4 and boot["mean_band_width"] > 0


@pytest.mark.parametrize("solver", ["exact", "nystroem"])
def test_resume_recomputes_only_lost_replicates_bitwise(tmp_path, solver):
    import zarr

    X, Y, E = data()
    est = exact() if solver == "exact" else NystroemRidge(gamma=2.0, n_components=30, alpha=0.1, random_state=4)
    full = bootstrap(est, X, Y, E, n_bootstraps=6, random_state=SEED, store=tmp_path / "a.zarr")
    before = full.predictions.compute()
    done = zarr.open_array(full.store, path="done", mode="r+")
    done[1] = 0
    done[4] = 0  # as if the run had been killed before these two were written
    again = bootstrap(est, X, Y, E, n_bootstraps=6, random_state=SEED, store=tmp_path / "a.zarr", batch_size=1)
    assert again.n_computed == 2 and again.n_reused == 4
    np.testing.assert_array_equal(again.predictions.compute(), before)
    for name in ("mean", "lower", "upper"):
        np.testing.assert_array_equal(getattr(again, name), getattr(full, name))
    # a store of this job, asked with another solver's estimator, is refused
    from bigkernel.errors import StoreMismatchError

    other = RandomFeatureRidge(gamma=2.0, n_components=30, alpha=0.1, random_state=4)
    with pytest.raises(StoreMismatchError):
        bootstrap(other, X, Y, E, n_bootstraps=6, random_state=SEED, store=tmp_path / "a.zarr")


@pytest.mark.numerics
def test_local_gram_gives_the_same_bits_cached_or_recomputed(monkeypatch):
    """LocalGram's values do not depend on its budget (what makes exact replicates bitwise
    reproducible on any worker), and the budget does decide what is cached."""
    from bigkernel.kernels import make_kernel
    from bigkernel.numerics.gram_tiles import GramTiler, LocalGram

    monkeypatch.setattr("bigkernel.numerics.gram_tiles.TILE_MAX", 40)  # 4 × 4 tiles, 10 upper ones
    X, _, _ = data()
    kernel = make_kernel("rbf", n_features=2, gamma=2.0)
    V = np.random.default_rng(0).normal(size=(N, 3))
    full, none, part = (LocalGram(kernel, X, b) for b in (10**9, 0, 3 * 40 * 40 * 8))
    assert len(full.tiles) == 10 and full.info()["cached_tiles"] == 10
    assert none.info()["cached_tiles"] == 0 and part.info()["cached_tiles"] == 3
    ref = full.matvec(V)
    np.testing.assert_array_equal(none.matvec(V), ref)
    np.testing.assert_array_equal(part.matvec(V), ref)
    np.testing.assert_allclose(ref, GramTiler(kernel, X).dense() @ V, rtol=1e-12, atol=1e-12)


@pytest.mark.numerics
def test_local_passes_cap_blas_threads_and_never_raise_them():
    """compute() gives each Dask thread its share of the cores in BLAS threads, but never more
    than the caller allows (OPENBLAS_NUM_THREADS=1, threadpool_limits): raising them made the
    passes inside compute round differently from the code around them, and
    test_exact_replicates_equal_weighted_and_repeated_fits failed with OPENBLAS_NUM_THREADS=1
    (under OpenBLAS's Haswell and Nehalem kernels)."""
    import os

    import dask
    from threadpoolctl import threadpool_info, threadpool_limits

    from bigkernel.runtime import compute

    def blas_threads(_):
        return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")

    with threadpool_limits(limits=1, user_api="blas"):
        assert compute(dask.delayed(blas_threads)(0))[0] == 1
    with dask.config.set(scheduler="threads", num_workers=os.cpu_count()):
        assert compute(dask.delayed(blas_threads)(0))[0] == 1  # one BLAS thread per Dask thread


def test_exact_evidence_bootstrap_refuses_replicates_beyond_the_memory_budget():
    """Above the eigenvalue limit each replicate of alpha='evidence' holds K and a Cholesky
    factor (16·n² bytes): W at once must fit half the budget, as one fit must."""
    from bigkernel.bands.plans import make_plan
    from bigkernel.data.sources import as_dataset
    from bigkernel.solvers.budget import EXACT_DF_MAX_N

    n = EXACT_DF_MAX_N + 100
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(n, 2))
    ds = as_dataset(X, np.sin(3 * X[:, 0]))
    each = 16 * n * n
    est = ExactKernelRidge(alpha="evidence", memory_budget=int(3.5 * each))  # half: 1.75 × each
    E = X[:5]
    make_plan(est, ds, E, 0, workers=1)  # one at a time fits
    with pytest.raises(ParameterError, match=r"alpha='evidence'\) at n=2,100.*2 run at once.*set_params\(alpha="):
        make_plan(est, ds, E, 0, workers=2)
    make_plan(ExactKernelRidge(alpha=1e-2, memory_budget=int(3.5 * each)), ds, E, 0, workers=2)  # fixed α: no factor
