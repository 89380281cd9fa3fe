"""kernel="precomputed": the exact path fitted on a Gram matrix K equals the fit with the kernel
that built K; K is never modified; shapes and symmetry are checked with clear errors."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.kernel_ridge import KernelRidge as SklearnKernelRidge
from sklearn.metrics.pairwise import laplacian_kernel, rbf_kernel

import bigkernel
from bigkernel import ExactKernelRidge, ExactKernelRidgeCV, KernelRidge, NystroemRidge, RandomFeatureRidge
from bigkernel.errors import DataError, ParameterError

pytestmark = pytest.mark.numerics

GAMMA = 0.4


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X, Xt = rng.normal(size=(150, 3)), rng.normal(size=(40, 3))
    y = np.column_stack([np.sin(X[:, 0]) + 0.1 * rng.normal(size=150), X[:, 1] * X[:, 2]])
    return X, Xt, y, rbf_kernel(X, gamma=GAMMA), rbf_kernel(Xt, X, gamma=GAMMA)


def _close(a, b, tol=1e-10):
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(1.0, np.abs(b).max()))


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("targets", [1, 2])
def test_precomputed_equals_the_named_kernel(problem, fit_intercept, targets):
    X, Xt, y, K, Kt = problem
    y = y[:, 0] if targets == 1 else y
    kw = dict(alpha=0.1, fit_intercept=fit_intercept, tol=1e-13, random_state=0)
    pre = ExactKernelRidge("precomputed", **kw).fit(K, y)
    ref = ExactKernelRidge("rbf", gamma=GAMMA, **kw).fit(X, y)
    _close(pre.predict(Kt), ref.predict(Xt))
    _close(pre.dual_coef_, ref.dual_coef_, 1e-9)
    np.testing.assert_allclose(pre.df_, ref.df_, rtol=1e-10)
    assert pre.n_features_in_ == 150 and pre.X_fit_ is None and pre.kernel_ is None


def test_precomputed_equals_scikit_learns_kernel_ridge(problem):
    X, Xt, y, K, Kt = problem
    ref = SklearnKernelRidge(kernel="precomputed", alpha=0.1).fit(K, y)
    ours = ExactKernelRidge("precomputed", alpha=0.1, fit_intercept=False, tol=1e-13).fit(K, y)
    _close(ours.predict(Kt), ref.predict(Kt))


def test_the_gram_matrix_is_never_modified(problem):
    X, Xt, y, K, Kt = problem
    K_in, Kt_in = K.copy(), Kt.copy()
    w = np.random.default_rng(1).integers(0, 3, size=150).astype(float)  # zeros drop rows and columns
    for sample_weight in (None, w):
        m = ExactKernelRidge("precomputed", alpha=0.1).fit(K_in, y, sample_weight=sample_weight)
        m.predict(Kt_in)
        np.testing.assert_array_equal(K_in, K)
        np.testing.assert_array_equal(Kt_in, Kt)
        assert K_in.flags.writeable  # the read-only view is the solver's own
    ExactKernelRidgeCV("precomputed", alphas=[0.1, 1.0]).fit(K_in, y).predict(Kt_in)
    KernelRidge("precomputed").fit(K_in, y[:, 0])
    np.testing.assert_array_equal(K_in, K)


def test_sample_weight_equals_the_named_kernel(problem):
    X, Xt, y, K, Kt = problem
    w = np.random.default_rng(2).integers(0, 3, size=150).astype(float)
    assert (w == 0).any()
    kw = dict(alpha=0.2, tol=1e-13, random_state=0)
    pre = ExactKernelRidge("precomputed", **kw).fit(K, y, sample_weight=w)
    ref = ExactKernelRidge("rbf", gamma=GAMMA, **kw).fit(X, y, sample_weight=w)
    assert pre.n_samples_fit_ == int((w > 0).sum())
    _close(pre.predict(Kt), ref.predict(Xt))


def test_dask_and_zarr_gram_matrices(problem, tmp_path):
    X, Xt, y, K, Kt = problem
    ref = ExactKernelRidge("precomputed", alpha=0.1, tol=1e-13, random_state=0).fit(K, y)
    z = zarr.open_array(str(tmp_path / "K.zarr"), mode="w", shape=K.shape, chunks=(64, 64), dtype="f8")
    z[:] = K  # square chunks: rows are read whole
    for K_in in (da.from_array(K, chunks=(50, 150)), da.from_array(K, chunks=(50, 50)), z):
        m = ExactKernelRidge("precomputed", alpha=0.1, tol=1e-13, random_state=0).fit(K_in, y)
        _close(m.predict(Kt), ref.predict(Kt), 1e-12)
    lazy = m.predict(da.from_array(Kt, chunks=(16, 30)))
    assert isinstance(lazy, da.Array)
    _close(lazy.compute(), ref.predict(Kt), 1e-12)
    zt = zarr.open_array(str(tmp_path / "Kt.zarr"), mode="w", shape=Kt.shape, chunks=(20, 64), dtype="f8")
    zt[:] = Kt
    _close(np.asarray(m.predict(zt)), ref.predict(Kt), 1e-12)


def test_shapes_and_symmetry_are_checked(problem):
    X, Xt, y, K, Kt = problem
    with pytest.raises(DataError, match=r"fit takes the square Gram matrix .* found shape \(150, 3\)"):
        ExactKernelRidge("precomputed").fit(X, y)
    with pytest.raises(DataError, match="found shape"):
        ExactKernelRidge("precomputed").fit(K[0], y)
    with pytest.raises(DataError, match=r"fit takes the square Gram matrix .* found shape \(150, 140\)"):
        ExactKernelRidge("precomputed").fit(da.from_array(K[:, :140]), y)
    m = ExactKernelRidge("precomputed", alpha=0.1).fit(K, y)
    with pytest.raises(DataError, match=r"predict takes K\(X\*, X_fit\) of shape \(n_samples, 150\) .* \(40, 3\)"):
        m.predict(Xt)
    with pytest.raises(DataError, match=r"shape \(n_samples, 150\)"):
        m.predict(da.from_array(Kt[:, :100]))
    bad = K.copy()
    bad[3, 7] += 1e-3
    with pytest.raises(DataError, match=r"must be symmetric, found max\|K - K.T\| = 0.001"):
        ExactKernelRidge("precomputed").fit(bad, y)
    with pytest.raises(DataError, match="must be symmetric"):
        ExactKernelRidgeCV("precomputed").fit(bad, y)
    ok = K.copy()
    ok[3, 7] += 1e-14  # round-off passes (the upper triangle is used)
    ExactKernelRidge("precomputed", alpha=0.1).fit(ok, y)


def test_paths_without_a_gram_matrix_say_which_one_takes_it(problem):
    X, Xt, y, K, Kt = problem
    m = KernelRidge("precomputed", alpha=0.1, random_state=0).fit(K, y)
    assert m.solver_ == "exact" and "takes a Gram matrix" in m.solver_reason_
    ref = ExactKernelRidge("precomputed", alpha=0.1, random_state=0).fit(K, y)
    _close(m.predict(Kt), ref.predict(Kt), 1e-12)
    square_chunks = da.from_array(K, chunks=(50, 50))  # read in whole rows, as by ExactKernelRidge
    m2 = KernelRidge("precomputed", alpha=0.1, random_state=0).fit(square_chunks, y)
    _close(m2.predict(da.from_array(Kt, chunks=(20, 50))).compute(), ref.predict(Kt), 1e-12)
    with pytest.raises(DataError, match=r"predict takes K\(X\*, X_fit\)"):
        m2.predict(Kt[:, :5])
    for call in (
        lambda: KernelRidge("precomputed", solver="nystroem").fit(K, y),
        lambda: KernelRidge("precomputed", solver="random_features").fit(K, y),
        lambda: NystroemRidge("precomputed").fit(K, y),
        lambda: RandomFeatureRidge("precomputed").fit(K, y),
    ):
        with pytest.raises(ParameterError, match="cannot serve it: use the exact path") as err:
            call()
        assert "kernel='precomputed'" in str(err.value)
    with pytest.raises(ParameterError, match="standardize=True"):
        ExactKernelRidge("precomputed", standardize=True).fit(K, y)
    with pytest.raises(ParameterError, match="no gamma to search"):
        ExactKernelRidgeCV("precomputed", gammas=[0.1, 1.0]).fit(K, y)


def test_save_and_load(problem, tmp_path):
    X, Xt, y, K, Kt = problem
    w = np.ones(150)
    w[::7] = 0.0
    for i, sample_weight in enumerate((None, w)):
        m = ExactKernelRidge("precomputed", alpha=0.1).fit(K, y, sample_weight=sample_weight)
        back = bigkernel.load(m.save(tmp_path / f"m{i}.zarr"))
        np.testing.assert_array_equal(back.predict(Kt), m.predict(Kt))
        with pytest.raises(DataError, match="predict takes"):
            back.predict(Kt[:, :10])
    cv = ExactKernelRidgeCV("precomputed", alphas=[0.01, 0.1, 1.0]).fit(K, y)
    back = bigkernel.load(cv.save(tmp_path / "cv.zarr"))
    np.testing.assert_array_equal(back.predict(Kt), cv.predict(Kt))


def test_exact_cv_searches_alpha_on_the_gram_matrix(problem):
    X, Xt, y, K, Kt = problem
    alphas = [0.003, 0.03, 0.3, 3.0]
    pre = ExactKernelRidgeCV("precomputed", alphas=alphas).fit(K, y[:, 0])
    ref = ExactKernelRidgeCV("rbf", gammas=[GAMMA], alphas=alphas).fit(X, y[:, 0])
    assert pre.alpha_ == ref.alpha_
    np.testing.assert_allclose(pre.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-10)
    _close(pre.predict(Kt), ref.predict(Xt))


def test_precomputed_laplacian_and_bootstrap_refusal(problem, tmp_path):
    X, Xt, y, K, Kt = problem
    L, Lt = laplacian_kernel(X, gamma=0.3), laplacian_kernel(Xt, X, gamma=0.3)
    pre = ExactKernelRidge("precomputed", alpha=0.1, tol=1e-13, random_state=0).fit(L, y)
    ref = ExactKernelRidge("laplacian", gamma=0.3, alpha=0.1, tol=1e-13, random_state=0).fit(X, y)
    _close(pre.predict(Lt), ref.predict(Xt))
    with pytest.raises(ParameterError, match="bootstrap\\(\\) does not support kernel='precomputed'"):
        bigkernel.bootstrap(ExactKernelRidge("precomputed"), K, y[:, 0], Kt, n_bootstraps=2,
                            store=str(tmp_path / "b.zarr"))  # fmt: skip
