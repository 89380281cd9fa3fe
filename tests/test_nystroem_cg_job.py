"""Jobs with ``model.solver: cg``: NystroemRidge(solver="cg") (NystroemClassifier for
classification) through the real CLI on CSV files; its keys (tol, max_iter,
validation_fraction) read from the class; the config's errors; configs/nystroem_cg.yaml."""

import json
import os
import shutil
import textwrap

import numpy as np
import pandas as pd
import pytest
import yaml

import bigkernel
from bigkernel import NystroemClassifier, NystroemRidge
from bigkernel.cli import main
from bigkernel.data.sources import as_dataset
from bigkernel.jobs.config import config_from_dict, load_config
from bigkernel.jobs.runner import build_estimator
from bigkernel.numerics.splits import HoldoutSplit
from tests._yaml import error_of, with_model

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _csv_job(tmp_path, model: str, task: str = "regression", plots: str = "auto") -> str:
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(2500, 3))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2]
    y = f + 0.1 * rng.normal(size=len(X)) if task == "regression" else np.where(f > 0.2, "high", "low")
    pd.DataFrame(X, columns=["a", "b", "c"]).assign(target=y).to_csv(tmp_path / "train.csv", index=False)
    path = tmp_path / "job.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            task: {task}
            output: {tmp_path / "out"}
            seed: 3
            data:
              train: {{path: {tmp_path / "train.csv"}, x: [a, b, c], y: target}}
              holdout_fraction: 0.2
            model: {model}
            cluster: {{local: {{n_workers: 1, threads_per_worker: 1}}}}
            progress: false
            plots: {plots}
            """
        )
    )
    return str(path)


MODEL = "{solver: cg, gamma: 0.5, n_components: 80, alpha: [0.1, 1.0, 10.0], tol: 1.0e-8, max_iter: 200, validation_fraction: 0.15}"


def test_cg_regression_job_through_the_cli(tmp_path, capsys):
    job = _csv_job(tmp_path, MODEL)
    assert main(["run", "--dry-run", job]) == 0
    assert "estimator: NystroemRidge" in capsys.readouterr().out and not (tmp_path / "out").exists()
    assert main(["-q", "run", job]) == 0
    out = tmp_path / "out"
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    params = resolved["model"]["params"]
    assert resolved["model"]["estimator"] == "NystroemRidge"
    assert (params["solver"], params["tol"], params["max_iter"], params["validation_fraction"]) == (
        "cg",
        1e-8,
        200,
        0.15,
    )
    assert params["alpha"] == [0.1, 1.0, 10.0] and params["standardize"] is True  # a table: standardised
    model = bigkernel.load(str(out / "model.zarr"))
    assert type(model) is NystroemRidge and model.solver == "cg" and model.n_iter_ >= 1  # all rows sampled: 1 pass
    assert model.validation_scores_.shape == (3,) and model.alpha_ in (0.1, 1.0, 10.0)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"]["solver"] == "cg" and metrics["model"]["n_iter"] == model.n_iter_
    assert metrics["scores"]["holdout"]["r2"] > 0.9
    # the job's model is NystroemRidge(solver="cg") fitted on the job's training rows (its holdout split)
    df = pd.read_csv(tmp_path / "train.csv")
    X, y = df[["a", "b", "c"]], df["target"].to_numpy()
    ref = build_estimator(load_config(job)).fit_dataset(as_dataset(X.to_numpy(), y), weights=HoldoutSplit(3, 0.2))
    # the job's chunks differ from as_dataset's, so the sums' order and the CG's rounding do (~1e-8)
    pred, want = model.predict(X.iloc[:50]), ref.predict(X.to_numpy()[:50])
    assert np.abs(pred - want).max() < 1e-6 * np.abs(want).max()
    assert ref.n_iter_ == model.n_iter_ and ref.alpha_ == model.alpha_
    assert "Penalty path" in (out / "report.md").read_text() and (out / "alpha_path.png").exists()


def test_cg_classification_job_through_the_cli(tmp_path):
    job = _csv_job(tmp_path, MODEL, task="classification", plots="false")  # figures: the regression job above
    assert main(["-q", "run", job]) == 0
    out = tmp_path / "out"
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    assert resolved["model"]["estimator"] == "NystroemClassifier" and resolved["model"]["params"]["solver"] == "cg"
    model = bigkernel.load(str(out / "model.zarr"))
    assert type(model) is NystroemClassifier and model.estimator_.solver == "cg"
    assert list(model.classes_) == ["high", "low"] and model.estimator_.tol == 1e-8
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"]["solver"] == "cg" and metrics["scores"]["holdout"]["accuracy"] > 0.9


def test_solver_words_set_the_classes_own_solver(tmp_path):
    """solver nystroem is NystroemRidge(solver="direct"), cg is NystroemRidge(solver="cg"), and
    each resolved config reads back as itself (the explicit form names the same job solver)."""
    for word, own in (("nystroem", "direct"), ("cg", "cg")):
        cfg = load_config(with_model(tmp_path, f"solver: {word}\nalpha: 1.0\n"))
        assert (cfg.model.estimator, cfg.model.params["solver"], cfg.model.solver) == ("NystroemRidge", own, word)
        assert build_estimator(cfg).solver == own
        back = config_from_dict(cfg.to_dict())
        assert back == cfg and back.model.solver == word
    auto = load_config(with_model(tmp_path, "solver: auto\n"))
    assert auto.model.params["solver"] == "auto" and auto.model.solver == "auto"


@pytest.mark.parametrize(
    "lines, fragment",
    [
        (
            "solver: cgg\nalpha: 1.0\n",
            "model.solver: expected one of 'auto', 'exact', 'nystroem', 'cg', 'random_features', found 'cgg'",
        ),
        ("solver: cgg\nalpha: 1.0\n", "did you mean 'cg'?"),
        ("solver: cg\nalpha: 1.0\nmax_itr: 5\n", "model.max_itr: unknown key 'max_itr'; did you mean 'max_iter'"),
        ("solver: cg\nalpha: 1.0\nvalidation_fraction: 1.5\n", "model.validation_fraction: expected"),
        ("solver: cg\n", "found 'gcv' (the default)"),
        ("solver: cg\nalpha: evidence\n", "solver cg chooses alpha on a held-out split"),
        ("solver: cg\nalpha: cv\n", "random_features and exact only"),
        ("solver: cg\nalpha: 1.0\ngamma: [0.1, 1.0]\n", "random_features and exact only"),
    ],
)
def test_cg_config_errors(tmp_path, lines, fragment):
    assert fragment in error_of(with_model(tmp_path, lines))


def test_cg_svm_classification_is_refused_by_the_config(tmp_path):
    path = with_model(tmp_path, "solver: cg\nalpha: 1.0\nloss: hinge\n")
    path.write_text("task: classification\n" + path.read_text())
    assert "loss: hinge (the primal SVM) needs solver random_features or nystroem, got cg" in error_of(path)


def test_example_config_dry_runs(tmp_path, capsys):
    (tmp_path / "configs").mkdir()
    shutil.copy(os.path.join(ROOT, "configs", "nystroem_cg.yaml"), tmp_path / "configs" / "nystroem_cg.yaml")
    assert main(["run", "--dry-run", str(tmp_path / "configs" / "nystroem_cg.yaml")]) == 0
    out = capsys.readouterr().out
    assert "estimator: NystroemRidge" in out and "solver: cg" in out
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()
