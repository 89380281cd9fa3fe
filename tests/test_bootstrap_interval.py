"""What the bootstrap interval is: confidence band of f̂ or prediction interval for a new y;
evaluation points outside the training range are flagged and warned about."""

import itertools
import os
import warnings

import dask.array as da
import numpy as np
import pytest
from scipy.stats import norm

import bigkernel
from bigkernel import ExactKernelRidge, ExtrapolationWarning, RandomFeatureRidge
from bigkernel.bands import bootstrap as bootstrap_module
from bigkernel.bands.bootstrap import bootstrap, load_bootstrap
from bigkernel.data.synthetic import SyntheticSpec, generate_rows, true_function
from bigkernel.errors import DataError, IncompleteStoreError, ParameterError
from bigkernel.io.band_store import open_store
from bigkernel.numerics.residuals import (
    DRAWS_PER_REPLICATE,
    EVAL_BLOCK,
    finish_residuals,
    prediction_interval,
    residual_draws,
    residual_summary,
)

SIGMA = 0.3


def sine(n, seed=0, noise=SIGMA):
    a = generate_rows(SyntheticSpec("sine", n, 1, noise, seed), 0, n)
    return a[:, :1], a[:, 1]


def rff(**kw):
    return RandomFeatureRidge(**{"length_scale": 0.1, "n_components": 48, "alpha": 1.0, "random_state": 5, **kw})


# --------------------------------------------------------------------------------------------
# Training range: flags and the warning
# --------------------------------------------------------------------------------------------
def test_out_of_range_points_warn_once_and_are_flagged(tmp_path):
    X, y = sine(200)
    lo, hi = X.min(), X.max()
    E = np.array([[lo - 0.1], [lo], [0.5], [hi], [hi + 0.2], [hi + 1.0]])
    with pytest.warns(ExtrapolationWarning) as record:
        res = bootstrap(rff(), X, y, E, n_bootstraps=3, random_state=0, store=tmp_path / "b.zarr")
    assert len(record) == 1
    msg = str(record[0].message)
    assert "3 of 6 evaluation points" in msg and "feature 0: 3 points" in msg
    assert f"[{lo:.6g}, {hi:.6g}]" in msg and "extrapolation" in msg
    assert record[0].filename == __file__  # points at the caller
    np.testing.assert_array_equal(res.out_of_range, [True, False, False, False, True, True])
    np.testing.assert_array_equal(res.data_min, X.min(axis=0))
    np.testing.assert_array_equal(res.data_max, X.max(axis=0))
    # read back: the same flags, no warning (pytest turns warnings into errors)
    back = load_bootstrap(tmp_path / "b.zarr")
    np.testing.assert_array_equal(back.out_of_range, res.out_of_range)
    np.testing.assert_array_equal(back.data_min, res.data_min)


def test_in_range_points_do_not_warn_and_dask_input_finds_the_range():
    X, y = sine(200)
    E = np.linspace(X.min(), X.max(), 7)[:, None]  # the ends are in range (closed interval)
    Xd, yd = da.from_array(X, chunks=37), da.from_array(y, chunks=37)
    res = bootstrap(rff(), Xd, yd, E, n_bootstraps=3, random_state=0)  # warnings are errors
    assert not res.out_of_range.any()
    np.testing.assert_array_equal(res.data_min, X.min(axis=0))
    np.testing.assert_array_equal(res.data_max, X.max(axis=0))


def test_warning_names_only_the_features_out_of_range():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (150, 3))
    y = X @ [1.0, -2.0, 0.5] + 0.1 * rng.standard_normal(150)
    E = np.full((4, 3), 0.5)
    E[1, 2] = 1.5  # feature 2 only
    E[3, 2] = -0.5
    est = RandomFeatureRidge(gamma=1.0, n_components=32, alpha=0.1, random_state=0)
    with pytest.warns(ExtrapolationWarning, match=r"2 of 4 evaluation points") as record:
        res = bootstrap(est, X, y, E, n_bootstraps=2, random_state=0)
    msg = str(record[0].message)
    assert "feature 2: 2 points" in msg and "feature 0" not in msg and "feature 1" not in msg
    np.testing.assert_array_equal(res.out_of_range, [False, True, False, True])
    assert issubclass(ExtrapolationWarning, UserWarning)
    assert bigkernel.ExtrapolationWarning is ExtrapolationWarning


# --------------------------------------------------------------------------------------------
# The two intervals
# --------------------------------------------------------------------------------------------
def test_prediction_interval_covers_new_observations_and_the_band_does_not():
    """90 % prediction interval: ~90 % of fresh y at the evaluation points; the confidence
    band (same replicates) covers far fewer. Coverage is computed exactly for Gaussian noise,
    Φ((u − f)/σ) − Φ((l − f)/σ), averaged over 200 points and three training sets."""
    E = np.linspace(0.03, 0.96, 200)[:, None]
    f = true_function("sine", E)
    pred_cov, conf_cov, widths = [], [], []
    for seed in range(3):
        X, y = sine(300, seed=seed)
        res = bootstrap(rff(), X, y, E, n_bootstraps=60, random_state=seed, interval="prediction")
        assert res.interval == "prediction" and not res.out_of_range.any()
        for lo, hi, out in ((res.lower, res.upper, pred_cov), (res.confidence_lower, res.confidence_upper, conf_cov)):
            out.append(np.mean(norm.cdf((hi - f) / SIGMA) - norm.cdf((lo - f) / SIGMA)))
        widths.append(np.mean(res.upper - res.lower))
    assert 0.82 <= np.mean(pred_cov) <= 0.97, pred_cov
    assert np.mean(conf_cov) < 0.5, conf_cov
    # the width of a 90 % interval for N(0, σ²) noise is 2·1.645·σ ≈ 0.99, plus estimation error
    assert 0.85 < np.mean(widths) < 1.3, widths


def test_prediction_interval_parts_equal_the_fitted_model(tmp_path):
    """The centre, df and residual sample are those of the model fitted on the data."""
    X, y = sine(250, seed=4)
    E = np.linspace(0.05, 0.95, 11)[:, None]
    res = bootstrap(rff(), X, y, E, n_bootstraps=20, random_state=3, interval="prediction", store=tmp_path / "p.zarr")
    ref = rff(dtype="float64").fit(X, y)  # an unfitted dtype="auto" bootstraps in float64
    sample, info = open_store(res.store).read_residuals()
    np.testing.assert_allclose(sample.center[:, 0], ref.predict(E), rtol=1e-10, atol=1e-12)
    assert sample.df == pytest.approx(ref.df_, rel=1e-10) and sample.n == 250
    r = y - ref.predict(X)
    scale = np.sqrt(250 / (250 - ref.df_))
    assert sample.scale == pytest.approx(scale, rel=1e-12)
    np.testing.assert_array_equal(sample.rows, np.arange(250))  # n < 20,000: every row
    np.testing.assert_allclose(sample.residuals[:, 0], (r - r.mean()) * scale, atol=1e-10)
    assert info["complete"] and info["capacity"] == 20_000
    # the confidence band of the same replicates is the percentile band
    band = np.percentile(res.predictions.compute(), [5, 95], axis=0)
    np.testing.assert_array_equal(res.confidence_lower, band[0])
    np.testing.assert_array_equal(res.confidence_upper, band[1])


def test_prediction_interval_formula_with_no_noise():
    """With residuals all 0 the interval is the basic bootstrap [2f̂ − q95(f̂*), 2f̂ − q5(f̂*)];
    draws follow fixed evaluation blocks, not the slabs they are read in."""
    rng = np.random.default_rng(1)
    P = rng.normal(size=(40, 9, 2))
    center = rng.normal(size=(9, 2))
    lo, hi = prediction_interval(P, center, np.zeros((5, 2)), seed=3, start=0)
    q5, q95 = np.percentile(P, [5, 95], axis=0)
    np.testing.assert_allclose(lo, 2 * center - q95, rtol=1e-12)
    np.testing.assert_allclose(hi, 2 * center - q5, rtol=1e-12)
    # a constant error shifts it
    lo7, hi7 = prediction_interval(P, center, np.full((5, 2), 0.7), seed=3, start=0)
    np.testing.assert_allclose(lo7, lo + 0.7, rtol=1e-12)
    np.testing.assert_allclose(hi7, hi + 0.7, rtol=1e-12)
    # slabs: the same draws whether points 0..n are read at once or from an offset
    whole = residual_draws(7, 2, 0, EVAL_BLOCK + 50, 1000)
    assert whole.shape == (DRAWS_PER_REPLICATE, EVAL_BLOCK + 50)
    np.testing.assert_array_equal(
        residual_draws(7, 2, EVAL_BLOCK - 10, EVAL_BLOCK + 50, 1000), whole[:, EVAL_BLOCK - 10 :]
    )
    assert not np.array_equal(residual_draws(7, 3, 0, 100, 1000), whole[:, :100])  # per replicate


def test_residual_sample_is_independent_of_the_chunking():
    rng = np.random.default_rng(2)
    n, cap = 1000, 64
    pred, Y = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    whole = residual_summary(pred, Y, 0, seed=9, capacity=cap)
    for cuts in ([0, 1000], [0, 130, 131, 600, 1000], list(range(0, 1001, 50))):
        parts = [residual_summary(pred[a:b], Y[a:b], a, seed=9, capacity=cap) for a, b in itertools.pairwise(cuts)]
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        order = np.argsort(total.rows)
        np.testing.assert_array_equal(total.rows[order], np.sort(whole.rows))
        np.testing.assert_array_equal(total.residuals[order], (Y - pred)[np.sort(whole.rows)])
        np.testing.assert_allclose(total.sum_rr, ((Y - pred) ** 2).sum(axis=0), rtol=1e-12)
        assert total.n == n
    assert whole.rows.size == cap and np.unique(whole.rows).size == cap
    other = residual_summary(pred, Y, 0, seed=10, capacity=cap)
    assert not np.array_equal(np.sort(other.rows), np.sort(whole.rows))  # seeded


def test_prediction_interval_does_not_depend_on_the_chunking(tmp_path, monkeypatch):
    """numpy, and dask with two chunkings, with a residual sample smaller than n."""
    monkeypatch.setattr(bootstrap_module, "RESIDUAL_SAMPLE_ROWS", 100)
    X, y = sine(300, seed=1)
    E = np.linspace(0.05, 0.95, 13)[:, None]
    runs = []
    for i, chunks in enumerate((None, 64, 111)):
        data = (X, y) if chunks is None else (da.from_array(X, chunks=(chunks, 1)), da.from_array(y, chunks=chunks))
        runs.append(
            bootstrap(
                rff(), *data, E, n_bootstraps=12, random_state=5, interval="prediction", store=tmp_path / f"c{i}.zarr"
            )
        )
    samples = [open_store(r.store).read_residuals()[0] for r in runs]
    for r, s in zip(runs[1:], samples[1:]):
        np.testing.assert_array_equal(s.rows, samples[0].rows)
        assert s.rows.size == 100
        np.testing.assert_allclose(s.residuals, samples[0].residuals, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(r.lower, runs[0].lower, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(r.upper, runs[0].upper, rtol=1e-9, atol=1e-12)


def test_prediction_run_reuses_a_confidence_store(tmp_path):
    """Replicates are shared; the residual sample is added to the store; reading back picks
    the interval the store holds."""
    X, y = sine(200)
    E = np.linspace(0.05, 0.95, 9)[:, None]
    path = tmp_path / "s.zarr"
    conf = bootstrap(rff(), X, y, E, n_bootstraps=8, random_state=2, store=path)
    assert conf.interval == "confidence"
    np.testing.assert_array_equal(conf.confidence_lower, conf.lower)
    with pytest.raises(IncompleteStoreError, match="no residual sample"):
        load_bootstrap(path, interval="prediction")
    assert load_bootstrap(path).interval == "confidence"
    pred = bootstrap(rff(), X, y, E, n_bootstraps=8, random_state=2, store=path, interval="prediction")
    assert pred.n_computed == 0 and pred.n_reused == 8
    np.testing.assert_array_equal(pred.confidence_lower, conf.lower)
    np.testing.assert_array_equal(pred.confidence_upper, conf.upper)
    assert np.all(pred.lower < conf.lower) and np.all(pred.upper > conf.upper)
    again = bootstrap(rff(), X, y, E, n_bootstraps=8, random_state=2, store=path, interval="prediction")
    np.testing.assert_array_equal(again.lower, pred.lower)  # the stored sample is reused
    back = load_bootstrap(path)
    assert back.interval == "prediction"
    np.testing.assert_array_equal(back.upper, pred.upper)
    conf_back = load_bootstrap(path, interval="confidence", confidence_level=0.8)
    assert conf_back.interval == "confidence" and np.all(conf_back.upper <= conf.upper)


def test_exact_solver_prediction_interval(monkeypatch):
    X, y = sine(150, seed=2)
    E = np.linspace(0.05, 0.95, 7)[:, None]
    est = ExactKernelRidge(gamma=20.0, alpha=0.5, random_state=0)
    res = bootstrap(est, X, y, E, n_bootstraps=6, random_state=1, interval="prediction")
    ref = ExactKernelRidge(gamma=20.0, alpha=0.5, random_state=0).fit(X, y)
    sample = open_store(res.store).read_residuals()[0]
    np.testing.assert_allclose(sample.center[:, 0], ref.predict(E), rtol=1e-5, atol=1e-6)
    assert sample.df == pytest.approx(ref.df_, rel=1e-8)
    assert np.all(res.lower < res.confidence_lower) and np.all(res.upper > res.confidence_upper)
    # above the exact-df size the fit computes no df by default: the original fit then
    # estimates it with Hutchinson probes (close to the exact value)
    from bigkernel.solvers import budget as exact

    monkeypatch.setattr(exact, "EXACT_DF_MAX_N", 100)
    assert np.isnan(ExactKernelRidge(gamma=20.0, alpha=0.5, random_state=0).fit(X, y).df_)
    big = bootstrap(est, X, y, E, n_bootstraps=2, random_state=1, interval="prediction")
    assert open_store(big.store).read_residuals()[0].df == pytest.approx(ref.df_, rel=0.1)


def test_interpolating_fit_has_no_noise_estimate():
    summary = residual_summary(np.zeros((10, 1)), np.ones((10, 1)), 0, seed=0)
    with pytest.raises(DataError, match="requires df < n"):
        finish_residuals(summary, np.zeros((3, 1)), df=10.0)
    assert finish_residuals(summary, np.zeros((3, 1)), df=2.0).scale == pytest.approx(np.sqrt(10 / 8))


def test_interval_parameter_is_checked():
    X, y = sine(100)
    with pytest.raises(ParameterError, match="interval must be one of"):
        bootstrap(rff(), X, y, X[:3], n_bootstraps=2, interval="tolerance")


def test_old_stores_load_without_range_or_residuals():
    from tests.fixtures.make_format_fixtures import ROOT

    for name in ("bootstrap_random_features", "bootstrap_exact"):
        res = load_bootstrap(os.path.join(ROOT, f"{name}.zarr"))
        assert res.interval == "confidence" and res.data_min is None and res.data_max is None
        assert res.out_of_range.dtype == bool and not res.out_of_range.any()
        assert res.out_of_range.shape == (res.mean.shape[0],)
        np.testing.assert_array_equal(res.confidence_lower, res.lower)
        with pytest.raises(IncompleteStoreError):
            load_bootstrap(os.path.join(ROOT, f"{name}.zarr"), interval="prediction")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = bigkernel.load(os.path.join(ROOT, "random_features.zarr"))
    assert model.data_min_ is None and model.data_max_ is None
