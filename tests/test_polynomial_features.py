"""Polynomial kernels on the streamed path: the explicit monomial map is the kernel exactly,
TensorSketch approaches it like O(1/sqrt(D)), and the one-pass fit with the explicit map is
the exact (dual) fit."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from sklearn.kernel_approximation import PolynomialCountSketch
from sklearn.metrics.pairwise import polynomial_kernel

import bigkernel
from bigkernel import ExactKernelRidge, KernelRidge, RandomFeatureRidge, RandomFeatureRidgeCV
from bigkernel.errors import DataError, ParameterError
from bigkernel.numerics.polynomial_features import PolynomialFeatureMap, make_polynomial_map, n_monomials

pytestmark = pytest.mark.numerics


def _data(n=300, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X[:, 0] ** 2 - X[:, 1] * X[:, 2] + 0.5 * X[:, 0] ** 3 + 0.1 * rng.normal(size=n)
    return X, y


@pytest.mark.parametrize("degree", [1, 2, 3, 4])
@pytest.mark.parametrize("coef0", [0.0, 1.0, 2.5])
def test_explicit_map_is_the_polynomial_kernel_to_rounding(degree, coef0):
    X = np.random.default_rng(degree).normal(size=(40, 3))
    Z = np.random.default_rng(10 + degree).normal(size=(25, 3))
    fmap = make_polynomial_map(3, 10_000, 0, degree=degree, gamma=0.3, coef0=coef0)
    assert fmap.method == "explicit"
    assert fmap.n_components == math.comb(3 + degree - (coef0 == 0), degree) == n_monomials(3, degree, coef0)
    K = polynomial_kernel(X, Z, degree=degree, gamma=0.3, coef0=coef0)
    got = fmap.transform(X) @ fmap.transform(Z).T
    np.testing.assert_allclose(got, K, rtol=0, atol=1e-13 * np.abs(K).max())


def test_auto_picks_explicit_exactly_when_the_monomials_fit():
    M = n_monomials(4, 3, 1.0)  # C(7, 3) = 35
    assert M == 35
    assert make_polynomial_map(4, M, 0).method == "explicit"
    small = make_polynomial_map(4, M - 1, 0)
    assert small.method == "tensorsketch" and small.n_components == M - 1
    # gamma defaults to scikit-learn's 1 / n_features
    assert make_polynomial_map(4, M, 0).gamma == 0.25


@pytest.mark.parametrize("coef0", [0.0, 1.0])
def test_tensorsketch_is_scikit_learns_polynomial_count_sketch(coef0):
    """Given scikit-learn's hashes and signs, our sketch is its transform (same construction)."""
    X = np.random.default_rng(3).normal(size=(30, 5))
    ref = PolynomialCountSketch(degree=3, gamma=0.4, coef0=coef0, n_components=64, random_state=0).fit(X)
    fmap = PolynomialFeatureMap(
        5, 64, 3, 0.4, coef0, "tensorsketch", np.asarray(ref.indexHash_), np.asarray(ref.bitHash_, float)
    )
    np.testing.assert_allclose(fmap.transform(X), ref.transform(X), rtol=0, atol=1e-12)


def test_tensorsketch_kernel_error_shrinks_like_inverse_sqrt_D():
    """RMS error over seeds ~ 1/sqrt(D), in the regime where the (d + 1)^degree tuples outnumber
    the buckets (d = 30); with few tuples (d = 3) collisions vanish and the error falls faster."""
    d = 30
    X = np.random.default_rng(0).uniform(size=(80, d))
    K = polynomial_kernel(X, degree=3, gamma=1.5 / d, coef0=1.0)
    errs = {}
    for D in (256, 4096):
        e = []
        for seed in range(6):
            f = make_polynomial_map(d, D, seed, degree=3, gamma=1.5 / d, coef0=1.0, method="tensorsketch")
            phi = f.transform(X)
            e.append(np.mean((phi @ phi.T - K) ** 2))
        errs[D] = np.sqrt(np.mean(e))
    ratio = errs[256] / errs[4096]  # sqrt(4096 / 256) = 4 expected
    assert 2.5 < ratio < 6.5, (errs, ratio)
    assert errs[4096] < 0.05 * np.abs(K).mean()


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_fit_with_the_explicit_map_is_the_exact_fit(fit_intercept):
    """Primal on the monomials = dual with the polynomial kernel (same α, same objective)."""
    X, y = _data()
    kw = dict(degree=3, gamma=0.5, coef0=1.0, alpha=0.3, fit_intercept=fit_intercept)
    primal = RandomFeatureRidge("poly", n_components=64, **kw).fit(X, y)
    dual = ExactKernelRidge("polynomial", tol=1e-13, **kw).fit(X, y)
    assert primal.feature_map_.method == "explicit" and primal.coef_.shape == (20,)
    Xt = np.random.default_rng(9).normal(size=(50, 3))
    scale = np.abs(dual.predict(Xt)).max()
    np.testing.assert_allclose(primal.predict(Xt), dual.predict(Xt), rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(primal.df_, dual.df_, rtol=1e-9)
    if fit_intercept:
        np.testing.assert_allclose(primal.intercept_, dual.intercept_, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("n_components,method", [(64, "explicit"), (8, "tensorsketch")])
def test_polynomial_models_save_and_load(n_components, method, tmp_path):
    X, y = _data(200)
    for standardize in (False, True):
        m = RandomFeatureRidge(
            "polynomial", degree=2, n_components=n_components, random_state=3, standardize=standardize
        ).fit(X, y)
        assert m.feature_map_.method == method
        back = bigkernel.load(m.save(tmp_path / f"{method}{standardize}.zarr"))
        assert back.feature_map_.method == method and back.feature_map_.to_metadata() == m.feature_map_.to_metadata()
        np.testing.assert_array_equal(back.predict(X[:40]), m.predict(X[:40]))


def test_the_map_used_is_an_attribute_and_logged(caplog):
    X, y = _data(100)
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        RandomFeatureRidge("poly", degree=2, n_components=10).fit(X, y)
    assert "explicit monomial map, 10 monomials" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        m = RandomFeatureRidge("poly", degree=2, n_components=9, random_state=0).fit(X, y)
    assert m.feature_map_.method == "tensorsketch" and "TensorSketch with 9 components" in caplog.text


def test_kernel_ridge_takes_the_explicit_map_when_it_fits(caplog):
    X, y = _data(400)
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        m = KernelRidge("poly", degree=2, gamma=0.5, alpha=0.1, n_components=64).fit(X, y)
    assert m.solver_ == "random_features" and "explicit monomial map" in m.solver_reason_
    assert m.solver_reason_ in caplog.text
    ref = ExactKernelRidge("poly", degree=2, gamma=0.5, alpha=0.1, tol=1e-13).fit(X, y)
    np.testing.assert_allclose(m.predict(X[:30]), ref.predict(X[:30]), rtol=0, atol=1e-8)
    # too many monomials for n_components: the usual rule (here the Gram matrix fits: exact)
    assert KernelRidge("poly", degree=2, n_components=8).fit(X, y).solver_ == "exact"


def test_cv_estimator_searches_the_polynomial_gamma_in_one_pass():
    X, y = _data(300)
    cv = RandomFeatureRidgeCV("poly", degree=3, gammas=[0.05, 0.5], alphas=[0.01, 1.0], n_components=64, cv=3,
                              random_state=0).fit(X, y)  # fmt: skip
    assert sorted(set(cv.cv_results_["param_gamma"])) == [0.05, 0.5]
    assert cv.feature_map_.method == "explicit" and cv.feature_map_.gamma == cv.gamma_


def test_bootstrap_runs_unchanged_on_the_polynomial_map(tmp_path):
    X, y = _data(200)
    est = RandomFeatureRidge("poly", degree=2, gamma=0.5, alpha=0.1, n_components=16, random_state=0)
    res = bigkernel.bootstrap(est, X, y, X[:5], n_bootstraps=4, store=str(tmp_path / "b.zarr"), random_state=0)
    assert res.lower.shape == (5,) and np.all(res.lower <= res.upper)


def test_polynomial_feature_errors():
    X, y = _data(50)
    with pytest.raises(ParameterError, match="coef0=-1.0 < 0 is not positive semi-definite"):
        RandomFeatureRidge("poly", coef0=-1.0).fit(X, y)
    with pytest.raises(ParameterError, match="no length_scale"):
        RandomFeatureRidge("poly", length_scale=1.0).fit(X, y)
    with pytest.raises(ParameterError, match="sampler 'orthogonal' exists for kernel 'rbf' only"):
        RandomFeatureRidge("poly", sampler="orthogonal").fit(X, y)
    with pytest.raises(ParameterError, match="degree must be a positive integer"):
        RandomFeatureRidge("poly", degree=2.5).fit(X, y)
    with pytest.raises(ParameterError, match="method must be one of"):
        make_polynomial_map(3, 10, 0, method="random")
    m = RandomFeatureRidge("poly", degree=2, n_components=10).fit(X, y)
    with pytest.raises(DataError, match="expects 3"):
        m.feature_map_.transform(X[:, :2])


def test_transformer_partial_fit_and_update_take_the_polynomial_map(tmp_path):
    """RandomFeatures("poly") is the estimator's map (φφᵀ = the kernel when explicit), saved and
    loaded; partial_fit over batches equals one fit."""
    X, y = _data(240)
    tr = bigkernel.RandomFeatures("poly", degree=2, gamma=0.5, coef0=1.0, n_components=32).fit(X)
    assert tr.feature_map_.method == "explicit"
    P = tr.transform(X[:50])
    K = polynomial_kernel(X[:50], degree=2, gamma=0.5, coef0=1.0)
    np.testing.assert_allclose(P @ P.T, K, rtol=0, atol=1e-12 * np.abs(K).max())
    back = bigkernel.load(tr.save(str(tmp_path / "tr.zarr")))
    np.testing.assert_array_equal(back.transform(X[:50]), P)
    for n_components in (32, 7):  # explicit, then TensorSketch
        kw = dict(degree=2, alpha=0.1, n_components=n_components, random_state=4)
        one = RandomFeatureRidge("poly", **kw).fit(X, y)
        parts = RandomFeatureRidge("poly", **kw)
        for lo, hi in ((0, 70), (70, 200), (200, 240)):
            parts.partial_fit(X[lo:hi], y[lo:hi])
        assert parts.feature_map_.method == one.feature_map_.method
        np.testing.assert_allclose(parts.predict(X[:40]), one.predict(X[:40]), rtol=1e-10, atol=1e-10)
