"""The default feature dtype ``dtype="auto"`` of RandomFeatureRidge: float32 features, checked.

The default fit agrees with the fit on float64 features to the stated tolerances on the lecture
examples (predictions, the α path, GCV/df, the evidence, the posterior std, bootstrap bands);
on ill-conditioned cases (tiny α, large γ) the check switches to float64 and says so; whenever
the check keeps float32, the agreement holds (the estimates bound the measured differences).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
from sklearn.base import clone

from bigkernel import RandomFeatureRidge, bootstrap
from bigkernel.errors import DataError
from bigkernel.io.model_store import load, save_model
from bigkernel.numerics.precision import (
    FLOAT32_RTOL,
    FLOAT32_STD_RTOL,
    Float32Rounding,
    feature_rounding,
    float32_check,
    product_rounding,
)
from bigkernel.numerics.primal import eigen_path
from bigkernel.numerics.sums import SufficientStats

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


def _random_fit(alpha: float, n: int = 2000, D: int = 64, y_shift: float = 0.0):
    """(eigen path, β at alpha, stats) of random cosine features."""
    rng = np.random.default_rng(0)
    c = np.sqrt(2.0 / D)
    Phi = c * np.cos(rng.uniform(0, 6, (n, 1)) * rng.standard_normal(D) + rng.uniform(0, 2 * np.pi, D))
    y = Phi[:, :3].sum(axis=1) + y_shift + 0.1 * rng.standard_normal(n)
    stats = SufficientStats(
        np.array([float(n)]), Phi.sum(axis=0)[None], np.array([[y.sum()]]), np.array([[y @ y]]),
        (Phi.T @ Phi)[None], (Phi.T @ y)[None, :, None],
    )  # fmt: skip
    path = eigen_path(stats)
    return path, path.coef(alpha), stats


def test_check_arithmetic():
    """The estimates grow as α shrinks, with the features' rounding, the products' rounding and
    an offset of y (the raw y in the float32 product input); a zero y scale is safe."""
    kw = dict(block_rows=8192, feature_scale=np.sqrt(2 / 64))
    fine = Float32Rounding(feature_sd=1e-8, product_rel=1e-7, **kw)

    def check(alpha, rounding=fine, alphas=None, **fit):
        path, beta, stats = _random_fit(alpha, **fit)
        return float32_check(path, beta, alpha, [alpha] if alphas is None else alphas, stats, rounding)

    big, small = check(1.0), check(1e-9)
    assert big.ok and not small.ok
    assert small.mean_error > big.mean_error and small.std_error > big.std_error and small.df_error > big.df_error
    wide = check(1.0, Float32Rounding(feature_sd=1e-3, product_rel=1e-7, **kw))
    coarse = check(1.0, Float32Rounding(feature_sd=1e-8, product_rel=1e-4, **kw))
    assert wide.mean_error > big.mean_error and coarse.mean_error > big.mean_error and coarse.std_error > big.std_error
    assert check(1.0, y_shift=1e4).mean_error > 100 * big.mean_error
    assert not check(1.0, Float32Rounding(feature_sd=np.inf, product_rel=1e-7, **kw)).ok
    path, beta, stats = _random_fit(1.0)
    flat = float32_check(dataclasses.replace(path, yy=np.zeros(1)), beta, 1.0, [1.0], stats, fine)
    assert np.isfinite(flat.mean_error)
    # a grid reaching below the resolved αs: the smallest resolved one may not be chosen
    grid = np.geomspace(1e-9, 1.0, 19)
    inner = check(1.0, alphas=grid)
    assert inner.ok and 1e-9 < inner.alpha_floor < 1.0
    edge = check(inner.alpha_floor, alphas=grid)
    assert not edge.ok


def test_product_rounding_is_measured_and_bounded():
    """This BLAS's float32 product error is a few u (blocked sums); a GPU's is bounded by the
    sequential sum's u√r/3, which is larger."""
    u = np.finfo(np.float32).eps / 2
    rho = product_rounding(8192)
    assert u <= rho <= 30 * u
    assert product_rounding(8192, 514) <= 30 * u
    assert product_rounding(8192, sequential=True) == pytest.approx(u * np.sqrt(8192) / 3)


def test_feature_rounding_grows_with_the_argument():
    """The probe's feature rounding is about u·|ωᵀx + b|·c, and zero-width ranges are fine."""
    from bigkernel.numerics.fourier_features import make_feature_map

    fm = make_feature_map("rbf", 2, 256, 0, gamma=1.0)
    near = feature_rounding(fm, np.zeros(2), np.ones(2))
    far = feature_rounding(fm, np.zeros(2), np.full(2, 1e3))
    assert 0 < near < far and far > 100 * near
    assert feature_rounding(fm, np.zeros(2), np.array([1.0, np.inf])) == np.inf


def _table_like(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The acceptance job's kind of table: 8 columns on raw scales (income ~ 2e4, score ~ 600),
    one-hot city, target with an offset (~ 5)."""
    rng = np.random.default_rng(seed)
    age, income = rng.uniform(18, 80, n), rng.lognormal(10, 0.5, n)
    rooms, dist = rng.integers(1, 8, n).astype(float), rng.exponential(5, n)
    score, tenure, ratio, temp = (
        rng.normal(600, 80, n),
        rng.uniform(0, 30, n),
        rng.uniform(0, 1, n),
        rng.normal(15, 8, n),
    )
    city = rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1])
    y = (np.sin(age / 10) + np.log(income) / 3 + 0.3 * rooms - 0.1 * dist + (score - 600) / 100
         + np.cos(tenure / 5) + ratio**2 + 0.05 * temp + np.array([2.0, 1.0, 0.5, -1.0])[city]
         + rng.normal(0, 0.3, n))  # fmt: skip
    X = np.column_stack([age, income, rooms, dist, score, tenure, ratio, temp, np.eye(4)[city]])
    return X, y


def _measured(auto, X, y, E, params):
    """(max |Δμ|/sd(y), max relative Δstd) of the kept float32 model against float64 features."""
    ref = RandomFeatureRidge(random_state=0, dtype="float64", **params).fit(X, y)
    assert ref.alpha_ == pytest.approx(auto.alpha_, rel=1e-6)  # the same grid point chosen
    mu, std = auto.predict(E, return_std=True)
    mu64, std64 = ref.predict(E, return_std=True)
    return np.max(np.abs(mu - mu64)) / y.std(), np.max(np.abs(std - std64) / std64)


@pytest.mark.parametrize("n", [40_000, pytest.param(160_000, marks=pytest.mark.slow)])
def test_user_table_stays_float32_and_the_estimate_bounds_it(n):
    """The acceptance table's kind of fit (γ = 0.1, D = 512, α by GCV, standardized; the session-9
    estimate redid the pass in float64 at n = 160k) keeps float32, and the estimates lie above
    the measured differences but not far above (a loose upper limit: the check must not drift
    back to worst-case sums)."""
    X, y = _table_like(n)
    params = dict(gamma=0.1, n_components=512, alpha="gcv", standardize=True)
    auto = RandomFeatureRidge(random_state=0, **params).fit(X, y)
    assert auto.dtype_ == "float32" and auto.dtype_check_["ok"]
    mean_diff, std_diff = _measured(auto, X, y, _table_like(5000, seed=1)[0], params)
    check = auto.dtype_check_
    assert mean_diff <= check["mean_error"] <= 100 * mean_diff
    assert std_diff <= check["std_error"] <= 1000 * std_diff


@pytest.mark.parametrize(("gamma", "alpha"), [(0.5, "gcv"), (0.5, 1.0), (2.0, "gcv")])
def test_friedman_estimate_bounds_the_measured_difference(gamma, alpha):
    """Friedman #1 (d = 10, standardized): kept float32, estimates above the measured
    differences."""
    from bigkernel.data.synthetic import SyntheticSpec, generate_rows

    a = generate_rows(SyntheticSpec("friedman1", 40_000, 10, 1.0, 0), 0, 40_000)
    X, y = a[:, :10], a[:, 10]
    params = dict(gamma=gamma, n_components=256, alpha=alpha, standardize=True)
    auto = RandomFeatureRidge(random_state=0, **params).fit(X, y)
    assert auto.dtype_ == "float32"
    E = generate_rows(SyntheticSpec("friedman1", 3000, 10, 1.0, 7), 0, 3000)[:, :10]
    mean_diff, std_diff = _measured(auto, X, y, E, params)
    assert mean_diff <= auto.dtype_check_["mean_error"] <= 100 * mean_diff
    assert std_diff <= auto.dtype_check_["std_error"]


def test_sparse_estimate_bounds_the_measured_difference():
    """Sparse X (d = 2000, 20 stored entries a row): the check probes sparse rows like the
    data's; the fit keeps float32 and its estimates lie above the float32-vs-float64 differences
    measured on the training rows and on new rows, not far above; the sparse probe's feature
    rounding is below the dense probe's (which sums d terms no training row has)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    n, d = 4000, 2000
    X = sp.random(n, d, density=1e-2, format="csr", random_state=4, data_rvs=rng.standard_normal)
    y = np.sin(X @ rng.standard_normal(d)) + 0.1 * rng.standard_normal(n)
    E = sp.random(1000, d, density=1e-2, format="csr", random_state=5, data_rvs=rng.standard_normal)
    params = dict(gamma=0.05, n_components=256, alpha="gcv")
    auto = RandomFeatureRidge(random_state=0, **params).fit(X, y)
    assert auto.dtype_ == "float32" and auto.dtype_check_["ok"]
    ref = RandomFeatureRidge(random_state=0, dtype="float64", **params).fit(X, y)
    assert ref.alpha_ == pytest.approx(auto.alpha_, rel=1e-6)
    mean_diff = max(np.max(np.abs(auto.predict(Z) - ref.predict(Z))) for Z in (X, E)) / y.std()
    (_, std), (_, std64) = auto.predict(E, return_std=True), ref.predict(E, return_std=True)
    std_diff = np.max(np.abs(std - std64) / std64)
    check = auto.dtype_check_
    assert mean_diff <= check["mean_error"] <= 100 * mean_diff
    assert std_diff <= check["std_error"] <= 100 * std_diff
    nnz = auto.stats_.x_nnz[0] / auto.stats_.n[0]
    assert nnz == pytest.approx(X.nnz / n)
    sparse_sd = feature_rounding(auto.feature_map_, auto.data_min_, auto.data_max_, nnz_per_row=nnz)
    assert 0 < sparse_sd < feature_rounding(auto.feature_map_, auto.data_min_, auto.data_max_)


def test_row_weights_scale_the_block_sums():
    """Weights w enter the float32 products as √w·φ, so a block's sums grow with them: the fit
    with every weight 100 at α·100 is the unweighted fit at α (the same relative rounding), and
    its estimates are the same."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, (5000, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(5000)
    plain = RandomFeatureRidge(gamma=10.0, n_components=128, alpha=1.0, random_state=0).fit(X, y)
    heavy = RandomFeatureRidge(gamma=10.0, n_components=128, alpha=100.0, random_state=0)
    heavy.fit(X, y, sample_weight=np.full(5000, 100.0))
    for key in ("mean_error", "std_error"):
        assert heavy.dtype_check_[key] == pytest.approx(plain.dtype_check_[key], rel=0.2)
