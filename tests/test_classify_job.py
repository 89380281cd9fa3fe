"""`task: classification` jobs through the real CLI: the example config, string labels from a
table, metrics equal to a direct computation, figures, predictions, and what is refused."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import zarr
from sklearn.metrics import balanced_accuracy_score, confusion_matrix

import bigkernel
from bigkernel import ConfigError, RandomFeatureClassifier
from bigkernel.cli import main
from bigkernel.jobs.config import config_from_dict
from bigkernel.numerics.splits import HoldoutSplit


def _cli(*args):
    r = subprocess.run([sys.executable, "-m", "bigkernel.cli", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def test_example_config_through_the_cli(tmp_path):
    """configs/classification.yaml (smaller n) through `bigkernel run`: the holdout confusion
    matrix and accuracies equal a direct computation with the saved model."""
    text = open("configs/classification.yaml").read()
    text = text.replace("../runs/classification", str(tmp_path / "run")).replace(
        "../data/classes.zarr", str(tmp_path / "c.zarr")
    )
    text = text.replace("n_samples: 100000", "n_samples: 6000").replace("n_components: 512", "n_components: 128")
    (tmp_path / "job.yaml").write_text(text + "progress: false\n")
    r = _cli("run", "-q", str(tmp_path / "job.yaml"))
    assert "balanced accuracy=" in r.stdout
    out = tmp_path / "run"
    m = json.loads((out / "metrics.json").read_text())
    g = zarr.open_group(str(tmp_path / "c.zarr"), mode="r")
    X, y = g["X"][:], g["y"][:]
    model = bigkernel.load(str(out / "model.zarr"))
    assert isinstance(model, RandomFeatureClassifier) and model.class_weight == "balanced"
    hold = HoldoutSplit(0, 0.2).groups(0, y.size) == 1
    for name, rows in (("holdout", hold), ("train", ~hold)):
        pred = model.predict(X[rows])
        s = m["scores"][name]
        np.testing.assert_array_equal(s["confusion_matrix"], confusion_matrix(y[rows], pred, labels=model.classes_))
        assert s["accuracy"] == pytest.approx(np.mean(pred == y[rows]), abs=1e-12)
        assert s["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(y[rows], pred), abs=1e-12)
        assert s["log_loss"] is None and "probabilities" in s["log_loss_note"]
    assert 0.7 < m["scores"]["holdout"]["accuracy"] < 0.95  # noise makes ~15 % of labels unreachable
    assert m["model"]["classes"] == [0.0, 1.0, 2.0] and m["model"]["task"] == "classification"
    assert (out / "confusion_matrix.png").stat().st_size > 1000
    report = (out / "report.md").read_text()
    assert "Confusion matrix (holdout" in report and "log-loss" in report.lower()


def test_string_labels_from_csv_binary_roc_and_predictions(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(3000, 3))
    labels = np.where(X[:, 0] ** 2 + X[:, 1] ** 2 + 0.3 * rng.standard_normal(3000) > 0.6, "outer", "inner")
    df = pd.DataFrame(X, columns=["a", "b", "c"]).assign(kind=labels)
    df.to_csv(tmp_path / "train.csv", index=False)
    df.drop(columns="kind").iloc[:500].to_csv(tmp_path / "new.csv", index=False)
    (tmp_path / "job.yaml").write_text(
        f"""\
task: classification
output: {tmp_path / "out"}
data:
  train: {{path: {tmp_path / "train.csv"}, x: [a, b, c], y: kind}}
model: {{gamma: 1.0, n_components: 96, alpha: [1.0e-3, 1.0e-1, 10.0]}}
predict: {{path: {tmp_path / "new.csv"}, x: [a, b, c], output: {tmp_path / "pred.csv"}}}
cluster: {{local: {{n_workers: 1, threads_per_worker: 1}}}}
progress: false
"""
    )
    # in-process: the example config above is the real `bigkernel` subprocess
    assert main(["-q", "run", str(tmp_path / "job.yaml")]) == 0
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["model"]["classes"] == ["inner", "outer"]
    assert m["scores"]["holdout"]["accuracy"] > 0.8
    assert (tmp_path / "out" / "roc.png").stat().st_size > 1000
    model = bigkernel.load(str(tmp_path / "out" / "model.zarr"))
    assert list(model.feature_names_in_) == ["a", "b", "c"]
    pred = pd.read_csv(tmp_path / "pred.csv")["y_pred"].to_numpy()
    new = pd.read_csv(tmp_path / "new.csv")
    np.testing.assert_array_equal(pred, model.predict(new))
    sample = np.load(tmp_path / "out" / "holdout_sample.npz")
    np.testing.assert_allclose(sample["decision"], model.decision_function(df[["a", "b", "c"]].iloc[sample["row"]]))
    # `bigkernel report` rebuilds the figures and report.md of the finished folder
    (tmp_path / "out" / "roc.png").unlink()
    assert main(["-q", "report", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "roc.png").exists() and "balanced accuracy" in (
        tmp_path / "out" / "report.md"
    ).read_text()


def test_string_labels_from_zarr_and_search_by_accuracy(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, size=(2000, 2))
    y = np.array(["lo", "mid", "hi"])[np.digitize(X.sum(axis=1), [0.8, 1.2])]
    g = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    g.create_array("X", data=X, chunks=(512, 2))
    a = g.create_array("y", shape=(2000,), dtype=str, chunks=(512,))
    a[...] = y
    cfg = {
        "task": "classification", "output": str(tmp_path / "out"), "data": {"train": {"path": str(tmp_path / "d.zarr")}},
        "model": {"gamma": [0.5, 5.0], "alpha": "cv", "cv": 3, "n_components": 64},
        "cluster": {"local": {"n_workers": 1, "threads_per_worker": 1}}, "progress": False, "plots": False,
    }  # fmt: skip
    (tmp_path / "job.yaml").write_text(json.dumps(cfg))
    assert main(["-q", "run", str(tmp_path / "job.yaml")]) == 0
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["model"]["classes"] == ["hi", "lo", "mid"]
    assert m["search"]["n_candidates"] == 2 * 20 and m["search"]["best_params"]["gamma"] in (0.5, 5.0)
    assert 0.5 < m["search"]["best_score"] <= 1.0  # cross-validated accuracy
    assert m["scores"]["holdout"]["accuracy"] > 0.85


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"task": "classification", "bootstrap": {"n_bootstraps": 10}}, "bootstrap band is for regression"),
        ({"model": {"class_weight": "balanced"}}, "class_weight is for `task: classification`"),
        ({"task": "classification", "model": {"solver": "exact", "alpha": "loo"}}, "K-fold accuracy"),
        ({"task": "classify"}, "task"),
        ({"model": {"loss": "hinge"}}, "loss: hinge is for `task: classification`"),
        (
            {"task": "classification", "model": {"loss": "squared_hinge", "solver": "exact", "alpha": 0.1}},
            "random_features or nystroem",
        ),
        ({"task": "classification", "model": {"loss": "squared_hinge"}}, "one number for alpha"),
        ({"task": "classification", "model": {"loss": "logistic"}}, "loss"),
    ],
)
def test_what_a_classification_config_refuses(tmp_path, extra, message):
    cfg = {"output": str(tmp_path / "o"), "data": {"make": {"kind": "classes", "path": str(tmp_path / "d.zarr")}}}
    for key, value in extra.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    with pytest.raises(ConfigError, match=message):
        config_from_dict(cfg)


def test_predict_command_writes_string_labels_to_zarr(tmp_path):
    X = np.random.default_rng(3).uniform(size=(400, 2))
    labels = np.where(X[:, 0] > X[:, 1], "above", "below")
    model = RandomFeatureClassifier(gamma=1.0, n_components=32, random_state=0).fit(X, labels)
    model.save(str(tmp_path / "m.zarr"))
    g = zarr.open_group(str(tmp_path / "new.zarr"), mode="w")
    g.create_array("X", data=X[:100], chunks=(64, 2))
    assert (
        main(["-q", "predict", str(tmp_path / "m.zarr"), str(tmp_path / "new.zarr"), "-o", str(tmp_path / "p.zarr")])
        == 0
    )
    stored = zarr.open_group(str(tmp_path / "p.zarr"), mode="r")["y_pred"][:]
    np.testing.assert_array_equal(stored.astype(object), model.predict(X[:100]).astype(object))


def test_a_job_fits_the_squared_hinge_svm(tmp_path):
    """``model.loss`` reaches the classifier: the saved model is the primal SVM the API fits."""
    cfg = {
        "task": "classification", "output": str(tmp_path / "out"),
        "data": {"make": {"kind": "classes", "n_samples": 1500, "path": str(tmp_path / "d.zarr")}},
        "model": {"loss": "squared_hinge", "alpha": 0.05, "gamma": 0.5, "n_components": 64},
        "cluster": {"local": {"n_workers": 1, "threads_per_worker": 1}}, "progress": False, "plots": False,
    }  # fmt: skip
    (tmp_path / "job.yaml").write_text(json.dumps(cfg))
    assert main(["-q", "run", str(tmp_path / "job.yaml")]) == 0
    model = bigkernel.load(str(tmp_path / "out" / "model.zarr"))
    assert model.loss == "squared_hinge" and model.n_iter_ >= 1
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["scores"]["holdout"]["accuracy"] > 0.5  # three classes: chance is about 1/3
    assert m["model"]["n_passes"] == model.n_iter_ and all(m["model"]["converged"])
