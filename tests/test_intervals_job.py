"""The ``intervals:`` section through the real CLI: the posterior band beside the bootstrap band in
the band zarr, CSV, report and figure, equal to the saved model's own return_std; config errors."""

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml
import zarr
from scipy.stats import norm

import bigkernel
from bigkernel import ConfigError
from bigkernel.jobs.config import config_from_dict

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _job(tmp_path, interval="confidence", level=0.8):
    cfg = {
        "name": "iv",
        "output": str(tmp_path / "out"),
        "data": {"make": {"kind": "sine", "n_samples": 300, "n_features": 1, "path": str(tmp_path / "s.zarr")}},
        "model": {"kernel": "rbf", "length_scale": 0.2, "n_components": 64, "alpha": "evidence"},
        "bootstrap": {"n_bootstraps": 8, "interval": interval, "eval_grid": {"n_points": 21}, "plot": True},
        "intervals": {"posterior": True, "level": level},
        "cluster": {"local": {"n_workers": 1, "threads_per_worker": 1}},
        "progress": False,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_posterior_band_through_the_cli(tmp_path, interval="confidence"):
    r = subprocess.run(
        [sys.executable, "-m", "bigkernel.cli", "run", "-q", str(_job(tmp_path, interval))],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    band = zarr.open_group(out / "bootstrap_band.zarr", mode="r")
    assert band.attrs["posterior_level"] == 0.8 and band.attrs["posterior_interval"] == interval
    E, fitted = band["X_eval"][:], band["fitted"][:]
    # the band is the saved model's own posterior: fitted ± z·std (+ the noise σ²α for a new y)
    model = bigkernel.load(str(out / "model.zarr"))
    mean, std = model.predict(E, return_std=True)
    if interval == "prediction":
        std = np.sqrt(std**2 + model.sigma2_ * model.alpha_)
    z = norm.ppf(0.9)
    np.testing.assert_allclose(band["posterior_std"][:], std, rtol=1e-12)
    np.testing.assert_allclose(band["posterior_lower"][:], fitted - z * std, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(band["posterior_upper"][:], fitted + z * std, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(mean, fitted, rtol=1e-12, atol=1e-14)
    with open(out / "bootstrap_band.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 21
    np.testing.assert_allclose([float(r["posterior_upper"]) for r in rows], band["posterior_upper"][:], rtol=1e-15)
    metrics = json.loads((out / "metrics.json").read_text())
    post = metrics["bootstrap"]["posterior"]
    assert post["level"] == 0.8 and post["mean_band_width"] == pytest.approx(2 * z * std.mean(), rel=1e-9)
    assert post["log_marginal_likelihood"] == pytest.approx(model.log_marginal_likelihood_)
    report = (out / "report.md").read_text()
    assert "posterior lower | posterior upper" in report and "The posterior band is the 80 %" in report
    assert (out / "bootstrap_band.png").stat().st_size > 0


def test_posterior_band_for_a_new_y_adds_the_noise_variance():
    from bigkernel import RandomFeatureRidge
    from bigkernel.jobs.bootstrap_job import posterior_band

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (200, 1))
    y = np.sin(2 * np.pi * X[:, 0]) + 0.3 * rng.standard_normal(200)
    m = RandomFeatureRidge(length_scale=0.2, n_components=64, alpha="evidence", random_state=0).fit(X, y)
    E = np.linspace(0, 1, 11)[:, None]
    fitted, std_f = m.predict(E, return_std=True)
    conf = posterior_band(m, E, fitted, 0.9, "confidence")
    pred = posterior_band(m, E, fitted, 0.9, "prediction")
    np.testing.assert_allclose(conf["std"], std_f)
    np.testing.assert_allclose(pred["std"] ** 2, std_f**2 + m.sigma2_ * m.alpha_, rtol=1e-12)
    # σ²α is the noise variance of the Gaussian-process reading: near the true 0.3² here
    assert 0.05 < m.sigma2_ * m.alpha_ < 0.15
    np.testing.assert_allclose(pred["upper"] - fitted, norm.ppf(0.95) * pred["std"], rtol=1e-12)


def test_intervals_needs_a_bootstrap_section_and_a_level_in_0_1(tmp_path):
    base = yaml.safe_load(_job(tmp_path).read_text())
    no_boot = {k: v for k, v in base.items() if k != "bootstrap"}
    with pytest.raises(ConfigError, match="intervals.posterior: the posterior band is drawn beside the bootstrap"):
        config_from_dict(no_boot)
    with pytest.raises(ConfigError, match="intervals.level"):
        config_from_dict({**base, "intervals": {"level": 1.5}})
    with pytest.raises(ConfigError, match="intervals.levle"):
        config_from_dict({**base, "intervals": {"levle": 0.9}})
    cfg = config_from_dict({**base, "intervals": {}})
    assert cfg.intervals.posterior and cfg.intervals.level is None  # level: the bootstrap's


@pytest.mark.slow
def test_sine_intervals_config_runs(tmp_path):
    """The example config (copied so its outputs land in tmp_path), as `bigkernel run` runs it."""
    (tmp_path / "configs").mkdir()
    shutil.copy(os.path.join(ROOT, "configs", "sine_intervals.yaml"), tmp_path / "configs" / "sine_intervals.yaml")
    r = subprocess.run(
        [sys.executable, "-m", "bigkernel.cli", "run", "-q", str(tmp_path / "configs" / "sine_intervals.yaml")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    band = zarr.open_group(tmp_path / "runs" / "sine_intervals" / "bootstrap_band.zarr", mode="r")
    width = band["posterior_upper"][:] - band["posterior_lower"][:]
    assert np.all(width > 0) and band.attrs["posterior_level"] == 0.9
