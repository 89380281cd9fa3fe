"""A useless fit is never silent (issue 19, item 2): α/γ on a grid edge, holdout R² <= 0 or
accuracy at the majority rate, feature scales far apart with standardize off — logged at
WARNING by the estimators' ``fit`` and, in jobs, in the log, metrics.json and report.md — and
the job default ``standardize: auto`` (true for tables)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd

from bigkernel import RandomFeatureClassifier, RandomFeatureRidge, RandomFeatureRidgeCV
from bigkernel.cli import main
from bigkernel.diagnostics import score_findings
from bigkernel.jobs.config import load_config


def _raw_table(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """Issue 19's table: an income ≈ 2·10⁴ beside columns of order 1; y depends on all three."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "income": rng.normal(2.0e4, 5.0e3, n), "ratio": rng.uniform(0, 1, n), "share": rng.uniform(0, 1, n),
    })  # fmt: skip
    df["y"] = np.sin(df["income"] / 3.0e3) + 2.0 * df["ratio"] - df["share"] ** 2 + 0.1 * rng.normal(size=n)
    return df


def _findings(caplog) -> dict[str, str]:
    """{code: message} of the fit findings logged (the records of bigkernel.diagnostics)."""
    out = {}
    for r in caplog.records:
        if r.name == "bigkernel.diagnostics" and r.levelno == logging.WARNING:
            message = r.getMessage()
            out[message.rsplit("[", 1)[1].rstrip("]")] = message
    caplog.clear()
    return out


# --------------------------------------------------------------------------------------------
# The Python API: fit logs its findings at WARNING level
# --------------------------------------------------------------------------------------------
def test_api_logs_when_gcv_picks_the_top_of_the_grid_on_raw_columns(caplog):
    """Issue 19's fit through the API: γ=0.5 on raw columns, GCV at the top edge, R² ≈ 0."""
    df = _raw_table()
    X, y = df[["income", "ratio", "share"]], df["y"]
    with caplog.at_level(logging.WARNING, logger="bigkernel"):
        m = RandomFeatureRidge(gamma=0.5, n_components=128, alpha="gcv", random_state=0).fit(X, y)
        found = _findings(caplog)
        assert m.alpha_ == m.alphas_.max() and m.score(X, y) < 0.1
        assert set(found) == {"alpha_at_top_of_grid", "feature_scales"}
        edge = found["alpha_at_top_of_grid"]
        assert edge.startswith("RandomFeatureRidge: ") and "largest" in edge and "standardize=True" in edge
        assert f"α={m.alpha_:.3g}" in edge
        scale = found["feature_scales"]
        assert "'income'" in scale and ("'ratio'" in scale or "'share'" in scale) and "standardize=True" in scale
        # the fix: standardised, the same γ fits well and nothing is logged
        good = RandomFeatureRidge(gamma=0.5, n_components=128, alpha="gcv", random_state=0, standardize=True)
        good.fit(X, y)
        assert _findings(caplog) == {}
    assert good.score(X, y) > 0.9 and good.alphas_.min() < good.alpha_ < good.alphas_.max()


def test_api_grid_edges_bottom_and_a_bracketing_grid(caplog):
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (800, 3))
    y = np.sin(4 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=800)
    with caplog.at_level(logging.WARNING, logger="bigkernel"):
        RandomFeatureRidge(gamma=1.0, n_components=64, alpha=[1e3, 1e4], random_state=0).fit(X, y)
        found = _findings(caplog)
        assert list(found) == ["alpha_at_bottom_of_grid"]
        assert "smallest of the 2 α" in found["alpha_at_bottom_of_grid"]
        assert "reaching below 1e+03" in found["alpha_at_bottom_of_grid"]
        # a grid around the optimum: nothing logged
        m = RandomFeatureRidge(gamma=1.0, n_components=64, alpha=list(np.logspace(-9, 3, 13)), random_state=0)
        m.fit(X, y)
        assert _findings(caplog) == {}
    assert 1e-9 < m.alpha_ < 1e3


def test_api_cv_logs_when_gamma_is_the_smoothest_searched(caplog):
    """RandomFeatureRidgeCV on raw columns: the search runs to the smallest γ of its grid."""
    df = _raw_table(2000)
    X, y = df[["income", "ratio", "share"]].to_numpy(), df["y"].to_numpy()
    with caplog.at_level(logging.WARNING, logger="bigkernel"):
        m = RandomFeatureRidgeCV(gammas=[0.01, 0.1, 1.0], n_components=64, cv=3, random_state=0).fit(X, y)
        found = _findings(caplog)
    assert m.gamma_ == 0.01
    edge = found["gamma_at_bottom_of_grid"]
    assert "γ=0.01" in edge and "smallest of the 3 γ" in edge and "3-fold CV" in edge and "gammas" in edge
    assert "feature 0" in found["feature_scales"]  # no column names in a numpy fit


def test_api_classifier_logs_scales_once_per_fit(caplog):
    df = _raw_table(1000)
    labels = np.where(df["ratio"] > 0.5, "hi", "lo")
    with caplog.at_level(logging.WARNING, logger="bigkernel"):
        RandomFeatureClassifier(gamma=0.5, n_components=32, alpha=0.1, random_state=0).fit(
            df[["income", "ratio", "share"]], labels
        )
        records = [r for r in caplog.records if r.name == "bigkernel.diagnostics"]
    assert len(records) == 1 and "'income'" in records[0].getMessage()


def test_score_findings_thresholds():
    assert score_findings({"holdout": {"n_samples": 10, "rmse": 1.0, "r2": 0.0}})[0].code == "holdout_r2_not_positive"
    assert score_findings({"holdout": {"n_samples": 10, "rmse": 1.0, "r2": 0.01}}) == []
    assert score_findings({"train": {"n_samples": 10, "rmse": 1.0, "r2": -0.5}})[0].code == "train_r2_not_positive"
    # majority class of the training rows ("a": 7 of 10); holdout has 6 "a" of 10
    train = {"accuracy": 0.7, "confusion_matrix": [[7, 0], [3, 0]]}
    at = {"accuracy": 0.6, "confusion_matrix": [[6, 0], [4, 0]]}
    above = {"accuracy": 0.7, "confusion_matrix": [[6, 0], [3, 1]]}
    assert score_findings({"train": train, "holdout": at})[0].code == "holdout_accuracy_at_majority_rate"
    assert score_findings({"train": train, "holdout": above}) == []


# --------------------------------------------------------------------------------------------
# Jobs through the CLI, on a real CSV
# --------------------------------------------------------------------------------------------
def _job(tmp_path, model: str, *, name: str = "raw", task: str = "") -> tuple:
    path = tmp_path / "t.csv"
    if not path.exists():
        _raw_table().to_csv(path, index=False)
    job = tmp_path / f"{name}.yaml"
    job.write_text(
        f"name: {name}\noutput: {name}\n{task}data:\n  train: {{path: t.csv, x: [income, ratio, share], y: y}}\n"
        f"model: {model}\nprogress: false\ncluster:\n  local: {{n_workers: 1, threads_per_worker: 1}}\n"
    )
    return job, tmp_path / name


def test_job_on_raw_columns_with_standardize_off_says_so_everywhere(tmp_path, capfd, caplog):
    """Issue 19's job: raw-scale CSV columns, `standardize: false`, γ=0.5, GCV → warnings in the
    log (terminal and job.log), metrics.json, report.md and summary.txt; exit code 0."""
    job, out = _job(tmp_path, "{gamma: 0.5, n_components: 128, alpha: gcv, standardize: false}")
    assert main(["run", str(job)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    codes = [w["code"] for w in m["warnings"]]
    assert {"alpha_at_top_of_grid", "feature_scales", "holdout_r2_not_positive"} <= set(codes), codes
    assert m["scores"]["holdout"]["r2"] <= 0
    scale = next(w["message"] for w in m["warnings"] if w["code"] == "feature_scales")
    assert "'income'" in scale and "`standardize: true`" in scale
    log = (out / "job.log").read_text()
    for w in m["warnings"]:
        assert f"WARNING bigkernel.jobs.runner: {w['message']} [{w['code']}]" in log
    terminal = caplog.text + capfd.readouterr().err  # the CLI's handler or pytest's capture
    assert "feature_scales" in terminal and "alpha_at_top_of_grid" in terminal
    report = (out / "report.md").read_text()
    head = report.split("| set |")[0]  # the warnings come before the scores
    assert "## Warnings (3)" in head and all(f"**{c}**" in head for c in codes)
    assert "WARNING: " in (out / "summary.txt").read_text()
    assert load_config(job).model.params["standardize"] is False


def test_job_on_a_table_standardises_by_default_and_warns_nothing(tmp_path):
    """The same CSV with the job's defaults: standardize auto → true for a table, a useful R²,
    an empty warnings list."""
    job, out = _job(tmp_path, "{gamma: 0.5, n_components: 128}", name="auto")
    assert load_config(job).model.params["standardize"] is True
    assert main(["-q", "run", str(job)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["warnings"] == [] and m["scores"]["holdout"]["r2"] > 0.8
    assert "standardize: true" in (out / "config.resolved.yaml").read_text()
    assert "Warnings" not in (out / "report.md").read_text()


def test_classification_job_at_the_majority_rate_warns(tmp_path):
    """Labels unrelated to X (70 % one class): the classifier can only predict the majority,
    and the job says so."""
    rng = np.random.default_rng(3)
    df = _raw_table(2000)
    df["y"] = np.where(rng.uniform(size=len(df)) < 0.7, "no", "yes")
    df.to_csv(tmp_path / "t.csv", index=False)
    job, out = _job(tmp_path, "{gamma: 0.5, n_components: 64, alpha: 100.0}", name="cls", task="task: classification\n")
    assert main(["-q", "run", str(job)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    codes = [w["code"] for w in m["warnings"]]
    assert codes == ["holdout_accuracy_at_majority_rate"], m["warnings"]
    conf = np.asarray(m["scores"]["holdout"]["confusion_matrix"])
    assert m["scores"]["holdout"]["accuracy"] <= conf[0].sum() / conf.sum()  # "no" is the majority
    assert "holdout_accuracy_at_majority_rate" in (out / "report.md").read_text().split("| set |")[0]


def test_standardize_auto_resolves_by_source(tmp_path):
    base = "output: o\nmodel: {kernel: %s}\ndata:\n  %s\n"
    cases = {
        ("rbf", "train: {path: t.csv, x: [a], y: y}"): True,
        ("rbf", "train: {path: t.parquet, x: [a], y: y}"): True,
        ("rbf", "train: {path: t.zarr}"): False,
        ("rbf", "make: {path: s.zarr}"): False,
        ("rbf", "make: {path: s.csv}"): True,
        ("fourier", "make: {path: s.csv, kind: sine, n_features: 1}"): False,
    }
    for (kernel, data), want in cases.items():
        (tmp_path / "j.yaml").write_text(base % (kernel, data))
        assert load_config(tmp_path / "j.yaml").model.params["standardize"] is want, (kernel, data)
    (tmp_path / "j.yaml").write_text("output: o\nmodel: {standardize: false}\ndata:\n  train: {path: t.csv, x: [a]}\n")
    assert load_config(tmp_path / "j.yaml").model.params["standardize"] is False
