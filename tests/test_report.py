"""Figures are non-empty PNGs of the expected size and report.md links files that exist."""

import json
import os
import re

import matplotlib  # noqa: F401 - a core dependency: the figures are not optional
import numpy as np
import pytest
import zarr

import bigkernel
from bigkernel.cli import main
from bigkernel.jobs.report import FIXED_ALPHA_CURVE, no_path_reason, path_table
from bigkernel.numerics.splits import HoldoutSplit

CLUSTER = "cluster:\n  local: {n_workers: 1, threads_per_worker: 1}\nprogress: false\n"


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


@pytest.mark.parametrize("model", ["gamma: [0.1, 0.5]\n  alpha: cv\n  cv: 3", "gamma: 0.5\n  alpha: gcv"])
def test_job_writes_figures_and_report(tmp_path, model):
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: r\noutput: out\nplots: true\ndata:\n  make: {kind: friedman1, n_samples: 20000, path: d.zarr}\n"
        f"model:\n  {model}\n  n_components: 64\ncluster:\n  local: {{n_workers: 1, threads_per_worker: 1}}\n"
    )
    assert main(["-q", "run", str(job)]) == 0
    out = tmp_path / "out"
    for name in ("alpha_path.png", "predicted_vs_observed.png"):
        assert _png_size(out / name) == (700, 450)
        assert os.path.getsize(out / name) > 10_000  # drawn, not blank
    report = (out / "report.md").read_text()
    links = re.findall(r"\]\(([^)]+\.png)\)", report)
    assert sorted(links) == ["alpha_path.png", "predicted_vs_observed.png"]
    assert all((out / link).exists() for link in links)
    n_sample = np.load(out / "holdout_sample.npz")["row"].size
    assert f"`holdout_sample.npz` holds the {n_sample:,} holdout rows among the first 20,000 rows" in report
    metrics = json.loads((out / "metrics.json").read_text())
    assert "report" in metrics["timings_s"] and metrics["outputs"]["report"].endswith("report.md")
    # regenerate from the folder alone
    for name in ("alpha_path.png", "report.md"):
        os.remove(out / name)
    assert main(["report", str(out)]) == 0
    assert _png_size(out / "alpha_path.png") == (700, 450) and (out / "report.md").exists()


def test_holdout_sample_matches_the_model(tmp_path, monkeypatch):
    """holdout_sample.npz: the holdout rows among the first HOLDOUT_SAMPLE_ROWS (here 1000 of
    5000), with their global row indices; report.md's note describes exactly that."""
    from bigkernel.jobs import holdout
    from bigkernel.jobs.report import holdout_sample_note

    monkeypatch.setattr(holdout, "HOLDOUT_SAMPLE_ROWS", 1000)
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: r\noutput: out\nplots: false\ndata:\n  make: {kind: sine, n_samples: 5000, noise: 0.3, path: d.zarr}\n"
        "model: {gamma: 20.0, n_components: 64}\ncluster:\n  local: {n_workers: 1, threads_per_worker: 1}\n"
    )
    assert main(["-q", "run", str(job)]) == 0
    out = tmp_path / "out"
    z = np.load(out / "holdout_sample.npz")
    assert sorted(z.files) == ["pred", "row", "y"]
    assert not (out / "alpha_path.png").exists()
    model = bigkernel.load(out / "model.zarr")
    assert model.n_features_in_ == 1
    # `row`: the global indices of the job's holdout rows (~20 %) among the first 1000
    np.testing.assert_array_equal(z["row"], np.flatnonzero(HoldoutSplit(0, 0.2).groups(0, 1000) == 1))
    assert 100 < z["row"].size < 300
    data = zarr.open_group(tmp_path / "d.zarr", mode="r")
    np.testing.assert_array_equal(z["y"], data["y"][:][z["row"]])
    np.testing.assert_allclose(z["pred"], model.predict(data["X"][:][z["row"]]), rtol=1e-12)
    assert np.sqrt(np.mean((z["y"] - z["pred"]) ** 2)) < 0.4  # noise sd 0.3
    note = holdout_sample_note(str(out), json.loads((out / "metrics.json").read_text()))
    assert f"holds the {z['row'].size:,} holdout rows among the first 1,000 rows of the training data" in note
    assert "`row` (global row index" in note and "`y` (observed" in note and "`pred`" in note


def _dense_gcv_df(Phi, y, alphas):
    """GCV = n·RSS/(n − df)² and df = tr H from the dense hat matrix of [Φ, 1] (β penalized)."""
    n, D = Phi.shape
    A = np.column_stack([Phi, np.ones(n)])
    gcv, df = [], []
    for a in alphas:
        P = a * np.eye(D + 1)
        P[D, D] = 0.0
        H = A @ np.linalg.solve(A.T @ A + P, A.T)
        r = y - H @ y
        df.append(np.trace(H))
        gcv.append(n * (r @ r) / (n - np.trace(H)) ** 2)
    return np.array(gcv), np.array(df)


@pytest.mark.parametrize("solver", ["random_features", "nystroem"])
def test_fixed_alpha_path_is_the_fits_own_gcv_and_df_curve(tmp_path, solver):
    """One α: the figure's curve over α·10^[-3, 3] equals a dense hat-matrix computation on the
    fit's own features, and survives save/load (`bigkernel report` redraws it)."""
    from tests.conftest import friedman

    X, y = friedman(600, d=5, seed=2)
    est = (
        bigkernel.RandomFeatureRidge(gamma=0.3, n_components=40, alpha=0.5, random_state=0, dtype="float64")
        if solver == "random_features"
        else bigkernel.NystroemRidge("rbf", gamma=0.3, n_components=40, alpha=0.5, random_state=0)
    ).fit(X, y)
    assert est.alphas_.size == 1
    table = path_table(est)
    np.testing.assert_allclose(table["alpha"], 0.5 * FIXED_ALPHA_CURVE, rtol=1e-15)
    assert np.isclose(table["alpha"], 0.5, rtol=1e-15, atol=0).sum() == 1  # the chosen α is on the grid
    gcv, df = _dense_gcv_df(est.feature_map_.transform(X), y, table["alpha"])
    finite = np.isfinite(table["score"])
    assert finite.sum() > 50  # only a few α far below the chosen one may be below rounding
    np.testing.assert_allclose(table["score"][finite], gcv[finite], rtol=1e-7)
    np.testing.assert_allclose(table["df"], df, rtol=1e-8)
    at = np.argmin(np.abs(table["alpha"] - 0.5))
    assert table["score"][at] == pytest.approx(est.gcv_[0], rel=1e-12)  # the fit's own GCV at α
    loaded = bigkernel.load(est.save(tmp_path / "m.zarr"))
    for key in ("alpha", "score", "df"):
        np.testing.assert_array_equal(path_table(loaded)[key], table[key])


def test_no_fixed_alpha_path_without_a_spectrum_says_why():
    """A Nyström model saved before spectra were kept (format_v1 fixture) has one α: no table."""
    old = bigkernel.load(os.path.join(os.path.dirname(__file__), "fixtures", "format_v1", "nystroem.zarr"))
    assert old.alphas_.size == 1 and old.spectrum_ is None
    assert path_table(old) is None
    assert "saved before bigkernel kept the spectrum" in no_path_reason(old)


def test_fixed_alpha_jobs_primal_curve_and_exact_explanation(tmp_path):
    """A fixed α draws the GCV/df curve for random features; the exact solver (α fixed, no
    probes) gets no one-dot figure but a reason in report.md, and no NaN anywhere."""
    data = "data:\n  make: {kind: friedman1, n_samples: 2000, path: d.zarr}\n"
    (tmp_path / "rf.yaml").write_text(
        f"name: rf\noutput: rf\nplots: true\n{data}model: {{gamma: 0.5, n_components: 64, alpha: 0.1}}\n" + CLUSTER
    )
    (tmp_path / "ex.yaml").write_text(
        f"name: ex\noutput: ex\nplots: true\n{data}model: {{solver: exact, gamma: 0.1, alpha: 0.01, n_probes: 0}}\n"
        + CLUSTER
    )
    assert main(["-q", "run", str(tmp_path / "rf.yaml")]) == 0
    assert _png_size(tmp_path / "rf" / "alpha_path.png") == (700, 450)
    assert os.path.getsize(tmp_path / "rf" / "alpha_path.png") > 20_000  # a curve, not a dot
    report = (tmp_path / "rf" / "report.md").read_text()
    assert "](alpha_path.png)" in report and "α was fixed at 0.1" in report

    assert main(["-q", "run", str(tmp_path / "ex.yaml")]) == 0
    out = tmp_path / "ex"
    assert not (out / "alpha_path.png").exists()
    report = (out / "report.md").read_text()
    assert "alpha_path.png" not in report
    assert "No penalty-path figure: α was fixed (α=0.01) and the exact solver scores only the α" in report
    metrics = json.loads((out / "metrics.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert metrics["model"]["df"] is None and metrics["model"]["df_stderr"] is None
    for name in ("report.md", "summary.txt", "job.log"):
        text = (out / name).read_text()
        assert "nan" not in text.lower().replace("nanos", ""), name
        assert "df not computed" in text, name


def test_report_of_unfinished_folder_is_an_error(tmp_path):
    assert main(["report", str(tmp_path)]) == 2


def _band_job(tmp_path, bootstrap: str, data: str = "{kind: sine, n_samples: 3000, noise: 0.3, path: d.zarr}"):
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: b\noutput: out\nplots: true\ndata:\n  make: {data}\n"
        "model: {gamma: 20.0, alpha: 1.0, n_components: 64}\n"
        f"bootstrap:\n{bootstrap}cluster:\n  local: {{n_workers: 1, threads_per_worker: 1}}\n"
    )
    return job


def _spy_band_figures(monkeypatch):
    """Keep every figure the job's band plot draws (plot_band saves what band_figure returns)."""
    from bigkernel.jobs import plots

    figures, real = [], plots.band_figure

    def spy(*args, **kwargs):
        figures.append(real(*args, **kwargs))
        return figures[-1]

    monkeypatch.setattr(plots, "band_figure", spy)
    return figures


def test_points_job_reports_a_prediction_interval_with_out_of_range_flags(tmp_path, monkeypatch):
    import zarr
    from matplotlib.container import ErrorbarContainer

    figures = _spy_band_figures(monkeypatch)
    job = _band_job(tmp_path, "  n_bootstraps: 8\n  interval: prediction\n  plot: true\n  eval: [0.1, 0.5, 0.9, 1.5]\n")
    assert main(["-q", "run", str(job)]) == 0
    out = tmp_path / "out"
    band = zarr.open_group(str(out / "bootstrap_band.zarr"), mode="r")
    assert band.attrs["interval"] == "prediction"
    np.testing.assert_array_equal(band["out_of_range"][:], [False, False, False, True])
    np.testing.assert_array_equal(band["X_eval"][:, 0], [0.1, 0.5, 0.9, 1.5])
    lower, upper = band["lower"][:], band["upper"][:]
    # in range the prediction interval is wider than the band of f-hat (which leaves out the noise)
    conf_width = band["confidence_upper"][:] - band["confidence_lower"][:]
    assert np.all((upper - lower)[:3] > conf_width[:3])
    metrics = json.loads((out / "metrics.json").read_text())
    b = metrics["bootstrap"]
    assert b["interval"] == "prediction" and b["n_out_of_range"] == 1 and b["n_eval"] == 4

    # the CSV has every point, with the zarr's values
    import csv

    rows = list(csv.DictReader((out / "bootstrap_band.csv").open()))
    assert [r["out_of_range"] for r in rows] == ["False", "False", "False", "True"]
    np.testing.assert_array_equal([float(r["lower"]) for r in rows], lower)
    np.testing.assert_array_equal([float(r["fitted"]) for r in rows], band["fitted"][:])
    np.testing.assert_allclose([float(r["width"]) for r in rows], upper - lower)

    # report.md and summary.txt say what the band is and give the table
    report = (out / "report.md").read_text()
    assert "90 % bootstrap prediction interval for a new observation y" in report
    assert "| point | x | fitted | lower | upper | width | out of range |" in report
    table = [line for line in report.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(table) == 4
    assert table[3].startswith("| 3 | 1.5 |") and table[3].endswith("| **yes** |")
    assert f"| {lower[0]:.4g} | {upper[0]:.4g} |" in table[0]
    assert "1 of 4 points lie outside the training data's range" in report
    assert "](bootstrap_band.csv)" in report and "bootstrap_band.png" in report
    summary = (out / "summary.txt").read_text()
    assert "prediction interval for a new observation y" in summary
    assert sum(line.rstrip().endswith(("yes", "no")) for line in summary.splitlines()) == 4
    assert "extrapolat" in (out / "job.log").read_text()  # the warning is logged, not lost

    # the figure: interval bars, the out-of-range point apart; no shaded band
    (fig,) = figures
    ax = fig.axes[0]
    assert len([c for c in ax.containers if isinstance(c, ErrorbarContainer)]) == 4
    assert ax.get_title().startswith("90 % prediction interval for a new $y$ (bootstrap, B=8)")
    assert _png_size(out / "bootstrap_band.png") == (700, 450)

    # `bigkernel report` rebuilds the table from the folder alone
    os.remove(out / "report.md")
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").read_text().count("| **yes** |") == 1


def test_grid_job_shows_twenty_points_and_says_where_the_rest_are(tmp_path, monkeypatch):
    import zarr
    from matplotlib.collections import PolyCollection

    figures = _spy_band_figures(monkeypatch)
    job = _band_job(tmp_path, "  n_bootstraps: 6\n  plot: true\n  eval_grid: {n_points: 50}\n")
    assert main(["-q", "run", str(job)]) == 0
    out = tmp_path / "out"
    band = zarr.open_group(str(out / "bootstrap_band.zarr"), mode="r")
    assert band.attrs["interval"] == "confidence" and not band["out_of_range"][:].any()
    assert "confidence_lower" not in band  # the band is the confidence band itself
    report = (out / "report.md").read_text()
    assert "90 % bootstrap confidence band for the fitted function f-hat(x)" in report
    assert "not where a new observation y will fall" in report
    table = [line for line in report.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(table) == 20 and table[0].startswith("| 0 |") and table[-1].startswith("| 49 |")
    assert "20 of 50 points, evenly spaced; all of them are in [`bootstrap_band.csv`]" in report
    assert "outside the training data's range" not in report
    assert len((out / "bootstrap_band.csv").read_text().splitlines()) == 1 + 50
    summary = (out / "summary.txt").read_text()
    assert "20 of 50 points" in summary and str(out / "bootstrap_band.csv") in summary
    (fig,) = figures
    ax = fig.axes[0]
    assert not ax.containers and len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1
    assert ax.get_title() == "90 % confidence band for $\\hat f(x)$ (bootstrap, B=6)"
