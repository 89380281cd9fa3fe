"""predict(X, return_std=True / return_cov=True) against dense references: scikit-learn's
GaussianProcessRegressor on the exact path, universal kriging with a flat intercept prior, and the
Bayesian linear regression of explicit random / Nyström features; the truncation bound; dask
and save/load."""

from types import SimpleNamespace

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, Matern

import bigkernel
from bigkernel import (
    DataError,
    ExactKernelRidge,
    ExactKernelRidgeCV,
    KernelRidge,
    NystroemRidge,
    ParameterError,
    RandomFeatureRidge,
    RandomFeatureRidgeCV,
)
from bigkernel.numerics.posterior import COV_MAX_ROWS, primal_posterior

pytestmark = pytest.mark.numerics


def sine(n, seed=0, d=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, d))
    return X, np.sin(2 * X[:, 0]) + 0.5 + 0.2 * rng.standard_normal(n)


def kriging(K, k_star, k_ss, y, alpha, fit_intercept):
    """Dense posterior mean and covariance of f with prior GP(0, k) (+ flat b), noise α."""
    n = y.size
    C = K + alpha * np.eye(n)
    Ci = np.linalg.inv(C)
    cov = k_ss - k_star @ Ci @ k_star.T
    if not fit_intercept:
        return k_star @ Ci @ y, cov
    one = np.ones(n)
    a = one @ Ci @ one
    b = one @ Ci @ y / a
    u = 1 - k_star @ Ci @ one
    return b + k_star @ Ci @ (y - b), cov + np.outer(u, u) / a


def features(model, X):
    fm = model.feature_map_
    return np.asarray(fm.transform_unscaled(X, np.float64)) * fm.scale


@pytest.mark.parametrize(
    ("kwargs", "sk_kernel"),
    [
        (dict(kernel="rbf", gamma=0.7), RBF(1 / np.sqrt(1.4))),
        (dict(kernel="matern", nu=1.5, length_scale=0.8), Matern(0.8, nu=1.5)),
    ],
)
def test_exact_std_and_cov_equal_gaussian_process_regressor(kwargs, sk_kernel):
    X, y = sine(150, seed=1, d=2)
    Xt = np.random.default_rng(9).uniform(-2.5, 2.5, (40, 2))
    m = ExactKernelRidge(alpha=0.03, fit_intercept=False, tol=1e-12, **kwargs).fit(X, y)
    gp = GaussianProcessRegressor(sk_kernel, alpha=0.03, optimizer=None).fit(X, y)
    mean, std = m.predict(Xt, return_std=True)
    g_mean, g_std = gp.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, g_mean, atol=1e-8)
    np.testing.assert_allclose(std / np.sqrt(m.sigma2_), g_std, rtol=1e-9, atol=1e-12)
    _, cov = m.predict(Xt, return_cov=True)
    _, g_cov = gp.predict(Xt, return_cov=True)
    np.testing.assert_allclose(cov / m.sigma2_, g_cov, atol=1e-12)


def test_exact_with_intercept_equals_kriging_with_a_flat_prior():
    X, y = sine(120, seed=2)
    Xt = np.linspace(-3, 3, 25)[:, None]
    m = ExactKernelRidge(gamma=1.5, alpha=0.05, tol=1e-12).fit(X, y)
    k = m.kernel_
    mean_ref, cov_ref = kriging(k(X), k(Xt, X), k(Xt), y, 0.05, True)
    mean, std = m.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, mean_ref, atol=1e-8)  # the ridge fit is the posterior mean
    np.testing.assert_allclose(std**2 / m.sigma2_, np.diag(cov_ref), rtol=1e-8, atol=1e-13)
    _, cov = m.predict(Xt, return_cov=True)
    np.testing.assert_allclose(cov / m.sigma2_, cov_ref, atol=1e-11)


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("cls", [RandomFeatureRidge, NystroemRidge])
def test_primal_std_equals_dense_bayesian_formulas(cls, fit_intercept):
    X, y = sine(200, seed=3)
    Xt = np.linspace(-3, 3, 30)[:, None]
    alpha = 0.02
    m = cls(gamma=1.0, n_components=60, alpha=alpha, fit_intercept=fit_intercept, random_state=0, dtype="float64").fit(
        X, y
    )
    P, Pt = features(m, X), features(m, Xt)
    # (1) kriging with the explicit kernel ΦΦᵀ and a flat intercept prior
    mean_ref, cov_ref = kriging(P @ P.T, Pt @ P.T, Pt @ Pt.T, y, alpha, fit_intercept)
    # (2) the primal formula σ²α[φcᵀ(ΦcᵀΦc + αI)⁻¹φc + 1/n] directly
    mu = P.mean(axis=0) if fit_intercept else np.zeros(P.shape[1])
    Pc, Ptc = P - mu, Pt - mu
    A = np.linalg.inv(Pc.T @ Pc + alpha * np.eye(P.shape[1]))
    var_ref = alpha * np.einsum("ij,jk,ik->i", Ptc, A, Ptc) + (alpha / 200 if fit_intercept else 0.0)
    np.testing.assert_allclose(np.diag(cov_ref), var_ref, rtol=1e-7)
    mean, std = m.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, mean_ref, atol=1e-7)
    # truncation (POSTERIOR_RTOL = 1e-3) may only over-estimate, by at most rtol/(1 − rtol)
    ratio = std**2 / m.sigma2_ / var_ref
    assert np.all(ratio >= 1 - 1e-7) and np.all(ratio <= 1 + 1e-3 / (1 - 1e-3) + 1e-7)
    _, cov = m.predict(Xt, return_cov=True)
    np.testing.assert_allclose(np.diag(cov), std**2, rtol=1e-9)


@pytest.mark.parametrize("rtol", [1e-2, 0.1, 0.3])
def test_truncation_error_is_within_its_bound(rtol):
    X, y = sine(300, seed=4)
    Xt = np.random.default_rng(1).uniform(-4, 4, (500, 1))
    m = RandomFeatureRidge(gamma=2.0, n_components=150, alpha=0.5, random_state=2).fit(X, y)
    # the full eigendecomposition from explicit features: the same centred system as the fit
    P = features(m, X)
    Pc = P - P.mean(axis=0)
    s, V = np.linalg.eigh(Pc.T @ Pc)
    full = m.posterior_
    path = SimpleNamespace(
        eigvals=np.maximum(s, 0),
        n_features=s.size,
        eigvec_columns=lambda keep: V[:, keep],
        mean_phi=P.mean(axis=0),
        n=300.0,
        fit_intercept=True,
    )
    exact = primal_posterior(path, m.alpha_, m.feature_map_, dtype="float64", rtol=0.0)
    trunc = primal_posterior(path, m.alpha_, m.feature_map_, dtype="float64", rtol=rtol)
    assert trunc.vecs.shape[1] < exact.vecs.shape[1]  # something was dropped
    ve, vt = exact.unit_variance(Xt), trunc.unit_variance(Xt)
    rel = (vt - ve) / ve
    assert rel.min() >= -1e-9 and rel.max() <= rtol / (1 - rtol) + 1e-9
    assert rel.max() > 0  # the bound is not vacuous here
    np.testing.assert_allclose(full.unit_variance(Xt), ve, rtol=1e-3 / (1 - 1e-3) + 1e-9)


def test_multi_target_std_scales_with_each_sigma2():
    X, y = sine(150, seed=5)
    Y = np.column_stack([y, 3 * y])
    m = RandomFeatureRidge(gamma=1.0, n_components=40, alpha=0.05, random_state=0, dtype="float64").fit(X, Y)
    mean, std = m.predict(X[:10], return_std=True)
    assert mean.shape == std.shape == (10, 2)
    np.testing.assert_allclose(std[:, 1], 3 * std[:, 0], rtol=1e-10)
    np.testing.assert_allclose(m.sigma2_[1], 9 * m.sigma2_[0], rtol=1e-10)
    _, cov = m.predict(X[:10], return_cov=True)
    assert cov.shape == (10, 10, 2)
    np.testing.assert_allclose(np.diagonal(cov[:, :, 1]), std[:, 1] ** 2, rtol=1e-9)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomFeatureRidge(gamma=1.0, n_components=40, alpha=0.05, random_state=0, dtype="float64"),
        lambda: ExactKernelRidge(gamma=1.0, alpha=0.05, standardize=True),
    ],
)
def test_dask_in_lazy_mean_and_std_out(make):
    X, y = sine(200, seed=6)
    m = make().fit(X, y)
    Xt = np.linspace(-2, 2, 100)[:, None]
    mean, std = m.predict(da.from_array(Xt, chunks=30), return_std=True)
    assert isinstance(mean, da.Array) and isinstance(std, da.Array)
    want = m.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean.compute(), want[0], rtol=1e-12)
    np.testing.assert_allclose(std.compute(), want[1], rtol=1e-12)


def test_bad_requests_say_what_to_do():
    X, y = sine(100)
    m = RandomFeatureRidge(n_components=20, alpha=0.1, random_state=0).fit(X, y)
    with pytest.raises(ParameterError, match="at most one of return_std and return_cov"):
        m.predict(X, return_std=True, return_cov=True)
    with pytest.raises(DataError, match=f"limited to {COV_MAX_ROWS:,} points.*return_std=True"):
        m.predict(np.zeros((COV_MAX_ROWS + 1, 1)), return_cov=True)


def test_dense_and_cg_exact_variances_agree(monkeypatch):
    import bigkernel.solvers.budget as dual_models

    X, y = sine(300, seed=7)
    Xt = np.linspace(-2.5, 2.5, 40)[:, None]
    for fit_intercept in (False, True):
        m = ExactKernelRidge(gamma=1.0, alpha=0.02, fit_intercept=fit_intercept, tol=1e-10).fit(X, y)
        dense = m.predict(Xt, return_std=True)[1]
        monkeypatch.setattr(dual_models, "DENSE_POSTERIOR_MAX_N", 100)
        m2 = ExactKernelRidge(gamma=1.0, alpha=0.02, fit_intercept=fit_intercept, tol=1e-10).fit(X, y)
        cg = m2.predict(Xt, return_std=True)[1]
        monkeypatch.undo()
        np.testing.assert_allclose(cg, dense, rtol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomFeatureRidge(gamma=1.0, n_components=40, alpha="evidence", random_state=0, dtype="float32"),
        lambda: NystroemRidge(gamma=1.0, n_components=30, alpha=0.05, random_state=0),
        lambda: ExactKernelRidge(gamma=1.0, alpha="evidence"),
        lambda: ExactKernelRidgeCV(gammas=[0.5, 2.0], criterion="evidence"),
        lambda: RandomFeatureRidgeCV(gammas=[0.5, 2.0], cv="evidence", n_components=30, random_state=0),
        lambda: KernelRidge(gamma=1.0, alpha=0.05, solver="nystroem", n_components=30, random_state=0),
    ],
)
def test_save_load_keeps_std_identical(make, tmp_path):
    X, y = sine(150, seed=8)
    m = make().fit(X, y)
    Xt = np.linspace(-3, 3, 20)[:, None]
    mean, std = m.predict(Xt, return_std=True)
    m.save(str(tmp_path / "m.zarr"))
    back = bigkernel.load(str(tmp_path / "m.zarr"))
    mean2, std2 = back.predict(Xt, return_std=True)
    np.testing.assert_array_equal(std2, std)
    np.testing.assert_array_equal(mean2, mean)
    assert back.sigma2_ == m.sigma2_ and back.log_marginal_likelihood_ == m.log_marginal_likelihood_


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize(
    "make",
    [
        lambda fi: ExactKernelRidge(gamma=1.0, alpha=[0.01, 0.1], fit_intercept=fi, tol=1e-12),
        lambda fi: RandomFeatureRidge(
            gamma=1.0, n_components=40, alpha=[0.01, 0.1], fit_intercept=fi, random_state=0, dtype="float64"
        ),
    ],
)
def test_integer_weights_are_repeated_rows(make, fit_intercept, tmp_path):
    X, y = sine(60, seed=10)
    w = np.random.default_rng(0).integers(0, 3, 60)
    a = make(fit_intercept).fit(X, y, sample_weight=w)
    b = make(fit_intercept).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    Xt = np.linspace(-2, 2, 9)[:, None]
    np.testing.assert_allclose(a.predict(Xt, return_std=True)[1], b.predict(Xt, return_std=True)[1], rtol=1e-7)
    np.testing.assert_allclose(a.log_marginal_likelihood_path_, b.log_marginal_likelihood_path_, rtol=1e-8)
    a.save(str(tmp_path / "a.zarr"))
    back = bigkernel.load(str(tmp_path / "a.zarr"))
    np.testing.assert_array_equal(back.predict(Xt, return_std=True)[1], a.predict(Xt, return_std=True)[1])


def test_precomputed_kernel_has_no_posterior_and_says_so():
    X, y = sine(50, seed=11)
    K = np.exp(-((X - X.T) ** 2))
    m = ExactKernelRidge(kernel="precomputed", alpha=0.1).fit(K, y)
    assert m.predict(K[:5]).shape == (5,)
    with pytest.raises(DataError, match="precomputed kernel gives only"):
        m.predict(K[:5], return_std=True)


def test_exact_std_beyond_the_eigenvalue_limit_equals_gaussian_process_regressor():
    """n = 2,500 > EXACT_DF_MAX_N (no eigenvalues, the dense-posterior branch): sigma2_ is known
    and the std over √sigma2_ is scikit-learn's; KernelRidge on the exact path too."""
    import bigkernel.solvers.budget as exact

    n = 2500
    assert n > exact.EXACT_DF_MAX_N
    rng = np.random.default_rng(13)
    X = rng.uniform(0, 1, (n, 1))
    y = np.sin(6 * X[:, 0]) + 0.1 * rng.standard_normal(n)
    Xt = np.linspace(-0.1, 1.1, 30)[:, None]
    gamma, alpha = 20.0, 0.01
    m = ExactKernelRidge(gamma=gamma, alpha=alpha, fit_intercept=False, tol=1e-12).fit(X, y)
    assert np.isnan(m.log_marginal_likelihood_)  # not computed at a fixed alpha above the limit
    gp = GaussianProcessRegressor(RBF(1 / np.sqrt(2 * gamma)), alpha=alpha, optimizer=None).fit(X, y)
    assert m.sigma2_ == pytest.approx(y @ gp.alpha_ / n, rel=1e-9)
    mean, std = m.predict(Xt, return_std=True)
    g_mean, g_std = gp.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, g_mean, atol=1e-8)
    np.testing.assert_allclose(std / np.sqrt(m.sigma2_), g_std, rtol=1e-7, atol=1e-10)
    k = KernelRidge(gamma=gamma, alpha=alpha, fit_intercept=False, solver="exact", tol=1e-12).fit(X, y)
    assert k.sigma2_ == pytest.approx(m.sigma2_, rel=1e-9)


def test_large_n_branch_saves_sigma2_and_predicts_std_after_load(monkeypatch, tmp_path):
    import bigkernel.solvers.budget as exact

    monkeypatch.setattr(exact, "EXACT_DF_MAX_N", 50)
    X, y = sine(120, seed=14)
    m = ExactKernelRidge(gamma=1.0, alpha=0.05, tol=1e-12).fit(X, y)
    Xt = np.linspace(-2, 2, 11)[:, None]
    std = m.predict(Xt, return_std=True)[1]
    k = m.kernel_
    _, cov_ref = kriging(k(X), k(Xt, X), k(Xt), y, 0.05, True)
    np.testing.assert_allclose(std**2 / m.sigma2_, np.diag(cov_ref), rtol=1e-8, atol=1e-13)
    m.save(str(tmp_path / "m.zarr"))
    back = bigkernel.load(str(tmp_path / "m.zarr"))
    assert back.sigma2_ == m.sigma2_ and np.isnan(back.log_marginal_likelihood_)
    np.testing.assert_array_equal(back.predict(Xt, return_std=True)[1], std)


def test_no_posterior_says_why(tmp_path):
    """A fitted model with a σ² that is not finite is not told to have been 'saved before'; a
    store without sigma2 (an older bigkernel) is."""
    X, y = sine(60, seed=15)
    m = ExactKernelRidge(gamma=1.0, alpha=0.1).fit(X, y)
    m.sigma2_ = np.nan  # as a fit whose quadratic form is below its rounding error
    with pytest.raises(DataError, match="was fitted, but its signal variance sigma2_.*not finite") as err:
        m.predict(X[:3], return_std=True)
    assert "older" not in str(err.value)
    m.save(str(tmp_path / "m.zarr"))  # saved without sigma2: loads as an old store would
    with pytest.raises(DataError, match="saved without what the posterior needs.*older bigkernel"):
        bigkernel.load(str(tmp_path / "m.zarr")).predict(X[:3], return_std=True)


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_cg_posterior_std_and_cov_with_weights_equal_the_dense_factor(monkeypatch, fit_intercept, weighted):
    """The batched-CG posterior (forced at n = 300) gives the covariance and weighted fits'
    variances of the Cholesky posterior (noise σ²α/cᵢ, intercept's regressor √c)."""
    import bigkernel.solvers.budget as dual_models

    X, y = sine(300, seed=16)
    w = np.random.default_rng(2).uniform(0.2, 3.0, 300) if weighted else None
    Xt = np.linspace(-2.5, 2.5, 37)[:, None]
    kw = dict(gamma=1.0, alpha=0.02, fit_intercept=fit_intercept, tol=1e-10)
    m = ExactKernelRidge(**kw).fit(X, y, sample_weight=w)
    std, cov = m.predict(Xt, return_std=True)[1], m.predict(Xt, return_cov=True)[1]
    monkeypatch.setattr(dual_models, "DENSE_POSTERIOR_MAX_N", 100)
    m2 = ExactKernelRidge(**kw).fit(X, y, sample_weight=w)
    cg_std, cg_cov = m2.predict(Xt, return_std=True)[1], m2.predict(Xt, return_cov=True)[1]
    assert type(m2._posterior_cache[1]).__name__ == "CGPosterior"
    np.testing.assert_allclose(cg_std, std, rtol=1e-6)
    np.testing.assert_allclose(cg_cov, cov, rtol=1e-6, atol=1e-9 * np.abs(cov).max())
    np.testing.assert_allclose(np.diag(cg_cov), cg_std**2, rtol=1e-7)


def test_deferred_directions_form_once_per_posterior_and_do_not_wait_for_another():
    """A posterior whose directions are deferred forms them once however many threads ask; its
    lock is its own, so a second posterior forms its directions while the first one's are still
    being formed (a process-wide lock made it wait), and a pickled one carries formed directions."""
    import pickle
    import threading

    from bigkernel.numerics.posterior import PrimalPosterior

    started, release, calls = threading.Event(), threading.Event(), []

    def slow():
        calls.append("slow")
        started.set()
        assert release.wait(30), "the test did not release the first posterior"
        return np.eye(3)[:, :2], np.array([0.5, 0.25])

    def fast():
        calls.append("fast")
        return np.eye(3)[:, :1], np.array([0.75])

    def post(directions):
        return PrimalPosterior(None, np.zeros(3), directions, None, alpha=1.0, n=10.0, fit_intercept=True)

    first, second = post(slow), post(fast)
    readers = [threading.Thread(target=lambda: first.vecs) for _ in range(4)]
    for t in readers:
        t.start()
    assert started.wait(30)
    other = threading.Thread(target=lambda: second.vecs)
    other.start()
    other.join(10)
    done_meanwhile = not other.is_alive()
    release.set()
    for t in readers:
        t.join(30)
    assert done_meanwhile, "the second posterior waited for the first one's directions"
    assert sorted(calls) == ["fast", "slow"]  # each formed once
    np.testing.assert_array_equal(first.weights, [0.5, 0.25])
    back = pickle.loads(pickle.dumps(post(fast)))
    assert isinstance(back.directions, np.ndarray) and back.weights.tolist() == [0.75]
    assert back.vecs.shape == (3, 1)
    # the lock is not part of its identity: dask tokenizes a posterior deterministically
    with dask.config.set({"tokenize.ensure-deterministic": True}):
        assert dask.base.tokenize(back) == dask.base.tokenize(pickle.loads(pickle.dumps(back)))
