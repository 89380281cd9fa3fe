"""Every kernel name of scikit-learn's ``pairwise_kernels`` is a bigkernel kernel: same values
(1e-12), same parameter names and defaults, the same fits as scikit-learn's KernelRidge."""

from __future__ import annotations

import contextlib
import inspect

import numpy as np
import pytest
from sklearn.kernel_ridge import KernelRidge as SklearnKernelRidge
from sklearn.metrics.pairwise import KERNEL_PARAMS, PAIRWISE_KERNEL_FUNCTIONS, pairwise_kernels

from bigkernel import ExactKernelRidge, NystroemRidge, RandomFeatureRidge
from bigkernel.errors import DataError, ParameterError
from bigkernel.kernels import make_kernel
from bigkernel.kernels.registry import BY_N_FEATURES, kernel_spec
from bigkernel.numerics.gram_tiles import GramTiler

pytestmark = pytest.mark.numerics

NAMES = sorted(PAIRWISE_KERNEL_FUNCTIONS)  # the installed scikit-learn's list
#: non-default parameters per name, in scikit-learn's names
PARAMS = {"chi2": {"gamma": 0.7}, "rbf": {"gamma": 0.3}, "laplacian": {"gamma": 0.4},
          "sigmoid": {"gamma": 0.2, "coef0": 0.5}, "polynomial": {"degree": 2, "gamma": 0.5, "coef0": 0.3},
          "poly": {"degree": 4, "gamma": 0.2, "coef0": 2.0}}  # fmt: skip


def _not_psd_warning(name: str):
    return (
        pytest.warns(UserWarning, match="not positive semi-definite") if name == "sigmoid" else contextlib.nullcontext()
    )


def _data(n: int, d: int = 4, seed: int = 0) -> np.ndarray:
    X = np.random.default_rng(seed).uniform(size=(n, d))  # non-negative: chi2 and additive_chi2
    X[1] = 0.0  # a zero row: cosine's convention, chi2's 0/0 terms
    X[2, 1] = 0.0
    return X


def _close(got: np.ndarray, ref: np.ndarray, tol: float = 1e-12) -> None:
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * max(1.0, np.abs(ref).max()))


def test_the_names_are_the_installed_scikit_learn_list():
    assert set(NAMES) >= {"additive_chi2", "chi2", "linear", "poly", "polynomial", "rbf", "laplacian", "sigmoid"}
    for name in NAMES:
        assert kernel_spec(name).serves("exact") and kernel_spec(name).serves("nystroem"), name


@pytest.mark.parametrize("name", NAMES)
def test_parameter_names_and_defaults_are_scikit_learns(name):
    """The registry's parameters are those scikit-learn passes to each kernel function, with its
    defaults (None for gamma is scikit-learn's 1 / n_features)."""
    spec = kernel_spec(name)
    signature = inspect.signature(PAIRWISE_KERNEL_FUNCTIONS[name]).parameters
    assert set(KERNEL_PARAMS[name]) == set(spec.param_names()) & set(KERNEL_PARAMS[name]) == set(KERNEL_PARAMS[name]), (
        name,
        spec.param_names(),
    )
    for p in KERNEL_PARAMS[name]:
        ours = spec.param(p).default
        theirs = signature[p].default
        assert ours == (BY_N_FEATURES if theirs is None else theirs), (name, p, ours, theirs)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("with_params", [False, True])
def test_kernel_values_equal_pairwise_kernels(name, with_params):
    X, Z = _data(50), _data(30, seed=1)
    params = PARAMS.get(name, {}) if with_params else {}
    with _not_psd_warning(name):
        k = make_kernel(name, n_features=X.shape[1], **params)
    for A, B in ((X, None), (X, Z)):
        ref = pairwise_kernels(A, B, metric=name, **params)
        _close(k(A, B), ref)
    _close(k.diag(X), np.diag(pairwise_kernels(X, metric=name, **params)))
    # the exact path's tiles (the rbf family takes its own GEMM route) and cross blocks
    tiler = GramTiler(k, X)
    _close(tiler.dense(), pairwise_kernels(X, metric=name, **params))
    _close(tiler.cross(Z), pairwise_kernels(Z, X, metric=name, **params))


def _sklearn_params(name: str, params: dict) -> dict:
    # scikit-learn's KernelRidge passes gamma=None on to chi2_kernel, which refuses it
    return {"gamma": 1.0, **params} if name == "chi2" else params


def _alpha(K: np.ndarray) -> float:
    """A penalty that makes K + αI well conditioned and positive definite (sigmoid and
    additive_chi2 are not PSD; without an intercept additive_chi2 has a negative eigenvalue)."""
    lam = np.linalg.eigvalsh(K)
    return float(max(0.5, 2.0 * -lam[0]))


@pytest.mark.parametrize("name", NAMES)
def test_exact_fit_equals_scikit_learns_kernel_ridge(name):
    X, Xt = _data(120), _data(40, seed=2)
    y = np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2]
    params = PARAMS.get(name, {})
    alpha = _alpha(pairwise_kernels(X, metric=name, **params))
    ref = SklearnKernelRidge(kernel=name, alpha=alpha, **_sklearn_params(name, params)).fit(X, y)
    with _not_psd_warning(name):
        ours = ExactKernelRidge(name, alpha=alpha, fit_intercept=False, tol=1e-14, **params).fit(X, y)
    scale = np.abs(ref.predict(Xt)).max()
    np.testing.assert_allclose(ours.predict(Xt), ref.predict(Xt), rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(ours.dual_coef_, ref.dual_coef_, rtol=0, atol=1e-9 * np.abs(ref.dual_coef_).max())


@pytest.mark.parametrize("name", ["cosine", "chi2", "additive_chi2"])
def test_the_new_kernels_fit_with_an_intercept_on_the_exact_and_nystroem_paths(name):
    """With every row a landmark, Nyström spans the kernel's range: the exact fit. additive_chi2
    is conditionally PSD, so the centred system (intercept) is PSD and both paths serve it."""
    X = _data(80)
    y = np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2]
    exact = ExactKernelRidge(name, alpha=0.5, tol=1e-13).fit(X, y)
    # reference: the centred dual solve in numpy
    K = pairwise_kernels(X, metric=name)
    H = np.eye(80) - 1.0 / 80
    a = np.linalg.solve(H @ K @ H + 0.5 * np.eye(80), H @ y)
    b = y.mean() - (K @ a).mean()
    np.testing.assert_allclose(exact.predict(X), K @ a + b, rtol=0, atol=1e-9)
    nys = NystroemRidge(name, alpha=0.5, n_components=80, landmarks="uniform", random_state=0).fit(X, y)
    if name != "additive_chi2":
        np.testing.assert_allclose(nys.predict(X), exact.predict(X), rtol=0, atol=1e-6)
        return
    # not PSD: features represent the PSD part of K (eigenvalues above round-off), ridge on them
    w, U = np.linalg.eigh(K)
    keep = w > 80 * np.finfo(float).eps * 10 * w[-1]
    Phi = U[:, keep] * np.sqrt(w[keep])
    Pc = Phi - Phi.mean(axis=0)
    beta = np.linalg.solve(Pc.T @ Pc + 0.5 * np.eye(keep.sum()), Pc.T @ (y - y.mean()))
    np.testing.assert_allclose(nys.predict(X), Pc @ beta + y.mean(), rtol=0, atol=1e-6)
    # no positive diagonal to pivot on: RPCholesky landmarks fall back to the uniform ones
    X2 = _data(600, seed=5)
    rp = NystroemRidge(name, n_components=40, landmarks="rpcholesky", random_state=0).fit(X2, X2[:, 0])
    assert rp.feature_map_.landmarks.shape == (40, 4)


@pytest.mark.parametrize("name", ["chi2", "additive_chi2"])
def test_chi2_kernels_refuse_negative_data(name):
    X = _data(20)
    X[7, 2] = -0.25
    with pytest.raises(DataError, match=rf"{name} kernel: X must be non-negative .* -0.25 in row 7"):
        make_kernel(name)(X)
    with pytest.raises(DataError, match="must be non-negative"):
        ExactKernelRidge(name).fit(X, np.ones(20))
    good = ExactKernelRidge(name, alpha=1.0).fit(_data(20), np.ones(20))
    with pytest.raises(DataError, match="must be non-negative"):
        good.predict(X)


@pytest.mark.parametrize("name", ["cosine", "chi2", "additive_chi2", "linear", "sigmoid"])
def test_the_random_feature_path_names_the_paths_that_serve_the_kernel(name):
    with pytest.raises(ParameterError, match="cannot serve it") as err:
        RandomFeatureRidge(name, n_components=8).fit(_data(20), np.ones(20))
    assert "the nystroem path (NystroemRidge) or the exact path (ExactKernelRidge, ExactKernelRidgeCV)" in str(
        err.value
    )


def test_parameter_errors_name_the_kernel():
    with pytest.raises(ParameterError, match="chi2 kernel: gamma must be a finite float > 0"):
        make_kernel("chi2", gamma=-1.0)
    with pytest.raises(ParameterError, match=r"cosine kernel: unknown parameter\(s\) \['gamma'\]"):
        make_kernel("cosine", gamma=1.0)
    # scikit-learn's KernelRidge rule: parameters a kernel does not use are ignored by the estimators
    X = _data(30)
    a = ExactKernelRidge("cosine", gamma=3.0, degree=5, random_state=0).fit(X, X[:, 0])
    b = ExactKernelRidge("cosine", random_state=0).fit(X, X[:, 0])
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    assert make_kernel("chi2", n_features=10).gamma == 1.0  # not 1 / n_features
