"""The default feature dtype ``dtype="auto"`` of RandomFeatureRidge: float32 features, checked.

The default fit agrees with the fit on float64 features to the stated tolerances on the lecture
examples (predictions, the α path, GCV/df, the evidence, the posterior std, bootstrap bands);
on ill-conditioned cases (tiny α, large γ) the check switches to float64 and says so; whenever
the check keeps float32, the agreement holds (the estimates bound the measured differences).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from sklearn.base import clone

from bigkernel import RandomFeatureRidge, bootstrap
from bigkernel.errors import DataError
from bigkernel.io.model_store import load, save_model
from bigkernel.numerics.precision import FLOAT32_RTOL, FLOAT32_STD_RTOL, float32_check

pytestmark = pytest.mark.numerics

#: the lecture examples: configs/sine_intervals.yaml (matern 2.5, ℓ = 0.2, cossin, evidence)
#: and the rbf sine of the random-features guide (α chosen by GCV)
LECTURES = {
    "sine_intervals": dict(kernel="matern", nu=2.5, length_scale=0.2, n_components=256, form="cossin",
                           alpha="evidence"),
    "sine_rbf_gcv": dict(kernel="rbf", gamma=10.0, n_components=512, alpha="gcv"),
}  # fmt: skip


def _sine(n: int = 300, noise: float = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 1))
    return X, np.sin(2 * np.pi * X[:, 0]) + noise * rng.standard_normal(n)


def _pair(params: dict, X, y):
    auto = RandomFeatureRidge(random_state=0, **params).fit(X, y)
    ref = RandomFeatureRidge(random_state=0, dtype="float64", **params).fit(X, y)
    return auto, ref


@pytest.mark.parametrize("name", sorted(LECTURES))
def test_lecture_examples_agree_with_float64(name):
    X, y = _sine()
    auto, ref = _pair(LECTURES[name], X, y)
    assert auto.dtype_ == "float32" and auto.dtype_check_["ok"]  # the default really ran float32
    assert ref.dtype_ == "float64" and ref.dtype_check_ is None
    sd = y.std()
    E = np.linspace(0, 1, 101)[:, None]
    mu, std = auto.predict(E, return_std=True)
    mu64, std64 = ref.predict(E, return_std=True)
    np.testing.assert_allclose(mu, mu64, rtol=0, atol=FLOAT32_RTOL * sd)
    np.testing.assert_allclose(std, std64, rtol=FLOAT32_STD_RTOL)
    # the α path: the same grid (relative to the mean eigenvalue), the same choice
    np.testing.assert_allclose(auto.alphas_, ref.alphas_, rtol=1e-5)
    assert auto.alpha_ == pytest.approx(ref.alpha_, rel=1e-5)
    # df, GCV and the evidence along the path where float32 resolves them (α ≥ alpha_floor;
    # below it float32's noise eigenvalues add df: there the check refuses a choice)
    floor = auto.dtype_check_["alpha_floor"]
    resolved = auto.alphas_ >= floor
    assert floor < auto.alpha_ and resolved.sum() >= 5
    np.testing.assert_allclose(auto.df_path_[resolved], ref.df_path_[resolved], rtol=FLOAT32_STD_RTOL)
    np.testing.assert_allclose(auto.df_, ref.df_, rtol=1e-3)
    gcv, gcv64 = np.ravel(auto.gcv_)[resolved], np.ravel(ref.gcv_)[resolved]
    assert np.isfinite(gcv).all()
    np.testing.assert_allclose(gcv, gcv64, rtol=1e-3)
    # the evidence: log marginal likelihood along the path and at the choice, and σ²
    lml, lml64 = auto.log_marginal_likelihood_path_[resolved], ref.log_marginal_likelihood_path_[resolved]
    np.testing.assert_allclose(lml, lml64, rtol=0, atol=FLOAT32_STD_RTOL * np.abs(lml64).max())
    assert auto.log_marginal_likelihood_ == pytest.approx(ref.log_marginal_likelihood_, abs=1e-2)
    assert auto.sigma2_ == pytest.approx(ref.sigma2_, rel=1e-3)


@pytest.mark.parametrize("alpha", ["evidence", 0.2])
def test_bootstrap_of_the_default_runs_float64_replicates(tmp_path, alpha):
    """dtype="auto" replicates are float64, fitted or not: no check covers a replicate's own
    solve (float32 replicates choosing α again by the evidence gave bands 0.6·sd(y) off here).
    The bands therefore equal those of the float64 model, and the fitted model's own float32
    predictions lie within the tolerance of their centre's float64 counterpart."""
    X, y = _sine()
    auto, ref = _pair({**LECTURES["sine_intervals"], "alpha": alpha}, X, y)
    assert auto.dtype_ == "float32"
    E = np.linspace(0.02, 0.98, 41)[:, None]  # inside the training range
    kw = dict(n_bootstraps=20, random_state=3, batch_size=10)
    band = bootstrap(auto, X, y, E, store=tmp_path / "auto.zarr", **kw)
    band64 = bootstrap(ref, X, y, E, store=tmp_path / "f64.zarr", **kw)
    unfitted = bootstrap(clone(auto), X, y, E, store=tmp_path / "unfitted.zarr", **kw)
    for a, b in ((band.mean, band64.mean), (band.lower, band64.lower), (band.upper, band64.upper)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(unfitted.lower, band64.lower)
    np.testing.assert_allclose(auto.predict(E), ref.predict(E), rtol=0, atol=FLOAT32_RTOL * y.std())


@pytest.mark.parametrize(("gamma", "alpha"), [(0.5, 1e-9), (10.0, 1e-6), (1000.0, 1e-9)])
def test_ill_conditioned_fit_switches_to_float64(gamma, alpha, caplog):
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, (2000, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(2000)
    params = dict(gamma=gamma, alpha=alpha, n_components=512)
    with caplog.at_level(logging.WARNING, logger="bigkernel.solvers.primal"):
        auto, ref = _pair(params, X, y)
    assert auto.dtype_ == "float64"
    check = auto.dtype_check_
    assert not check["ok"] and "refitted in float64" in check["reason"]
    assert any("redoing the pass in float64" in r.getMessage() for r in caplog.records)
    E = np.linspace(0, 10, 57)[:, None]
    np.testing.assert_array_equal(auto.predict(E), ref.predict(E))  # the same float64 pass
    # and float32 here really is garbage (what the switch prevents)
    f32 = RandomFeatureRidge(random_state=0, dtype="float32", **params).fit(X, y)
    assert f32.dtype_check_ is None
    if alpha <= 1e-9:
        assert np.max(np.abs(f32.predict(E) - ref.predict(E))) > 0.1 * y.std()


@pytest.mark.parametrize("gamma", [0.5, 10.0, 1000.0])
@pytest.mark.parametrize("alpha", [1.0, 1e-3, 1e-6, 1e-9])
def test_kept_float32_is_within_tolerance(gamma, alpha):
    """Whenever the check keeps float32, the model agrees with float64 features to the tolerance."""
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 10, (1500, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(1500)
    params = dict(gamma=gamma, alpha=alpha, n_components=512)
    f32 = RandomFeatureRidge(random_state=0, dtype="float32", **params).fit(X, y)
    ref = RandomFeatureRidge(random_state=0, dtype="float64", **params).fit(X, y)
    auto = RandomFeatureRidge(random_state=0, **params).fit(X, y)
    E = np.linspace(0, 10, 77)[:, None]
    mu64, std64 = ref.predict(E, return_std=True)
    mu = f32.predict(E)
    try:
        _, std = f32.predict(E, return_std=True)
        std_diff = np.max(np.abs(std - std64) / std64)
    except DataError:  # float32's σ² below its rounding (an interpolating α; the second OpenBLAS set)
        std_diff = None
    mean_diff = np.max(np.abs(mu - mu64)) / y.std()
    check = auto.dtype_check_
    if auto.dtype_ == "float32":
        np.testing.assert_allclose(auto.predict(E), mu, rtol=0, atol=1e-12)
        assert mean_diff <= FLOAT32_RTOL
        if std_diff is None:  # no silent NaN: the kept model refuses return_std as well
            with pytest.raises(DataError, match="not finite"):
                auto.predict(E, return_std=True)
        else:
            assert std_diff <= FLOAT32_STD_RTOL
    # the estimates are never below the measured differences
    assert check["mean_error"] >= mean_diff and (std_diff is None or check["std_error"] >= std_diff)


def test_forced_dtypes_are_not_checked():
    X, y = _sine()
    for dtype in ("float32", "float64", np.float32):
        est = RandomFeatureRidge(n_components=64, random_state=0, dtype=dtype).fit(X, y)
        assert est.dtype_ == np.dtype(dtype).name and est.dtype_check_ is None
        assert est.transform(X[:3]).dtype == np.dtype(dtype)


def test_polynomial_kernel_auto_is_float64():
    X, y = _sine()
    est = RandomFeatureRidge("polynomial", degree=2, n_components=64, random_state=0).fit(X, y)
    assert est.dtype_ == "float64" and est.dtype_check_ is None


def test_saved_model_keeps_its_feature_dtype(tmp_path):
    X, y = _sine()
    est = RandomFeatureRidge(**LECTURES["sine_rbf_gcv"], random_state=0).fit(X, y)
    assert est.dtype_ == "float32"
    back = load(save_model(est, str(tmp_path / "m.zarr")))
    assert back.dtype == "auto" and back.dtype_ == "float32"
    assert back.dtype_check_ == est.dtype_check_
    E = np.linspace(0, 1, 33)[:, None]
    np.testing.assert_array_equal(back.predict(E), est.predict(E))
    np.testing.assert_array_equal(back.predict(E, return_std=True)[1], est.predict(E, return_std=True)[1])
    assert back.transform(E).dtype == np.float32


def test_partial_fit_keeps_the_first_batch_dtype():
    X, y = _sine(600)
    est = RandomFeatureRidge(**LECTURES["sine_rbf_gcv"], random_state=0)
    est.partial_fit(X[:300], y[:300]).partial_fit(X[300:], y[300:])
    full = RandomFeatureRidge(**LECTURES["sine_rbf_gcv"], random_state=0, dtype="float32").fit(X, y)
    assert est.dtype_ == "float32" and est.dtype_check_["ok"]
    E = np.linspace(0.02, 0.98, 33)[:, None]
    np.testing.assert_allclose(est.predict(E), full.predict(E), rtol=0, atol=FLOAT32_RTOL * y.std())


def test_check_arithmetic():
    """The estimates grow as α shrinks and with the features' argument; a zero y scale is safe."""
    s = np.geomspace(1e3, 1e-9, 64)
    beta = np.ones((64, 1))
    kw = dict(feature_scale=0.1, gram_eps=3e-7)
    yy = np.array([1e3])
    big = float32_check(s, beta, 1.0, [1.0], 1e3, yy, argument_bound=10.0, **kw)
    small = float32_check(s, beta, 1e-6, [1e-6], 1e3, yy, argument_bound=10.0, **kw)
    wide = float32_check(s, beta, 1.0, [1.0], 1e3, yy, argument_bound=1e6, **kw)
    assert big.ok and not small.ok and not wide.ok
    assert small.mean_error > big.mean_error and wide.std_error > big.std_error
    assert small.df_error > big.df_error
    flat = float32_check(s, beta, 1.0, [1.0], 1e3, np.array([0.0]), argument_bound=10.0, **kw)
    assert np.isfinite(flat.mean_error)
    assert not float32_check(s, beta, 1.0, [1.0], 1e3, yy, argument_bound=np.inf, **kw).ok
    # a grid reaching below the resolved αs: the smallest resolved one may not be chosen
    grid = np.geomspace(1e-9, 1.0, 19)
    inner = float32_check(s, beta, 1.0, grid, 1e3, yy, argument_bound=10.0, **kw)
    assert inner.ok and 1e-9 < inner.alpha_floor < 1.0
    edge = float32_check(s, beta, inner.alpha_floor, grid, 1e3, yy, argument_bound=10.0, **kw)
    assert not edge.ok
