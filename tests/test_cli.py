"""Jobs through the real CLI: the quickstart end to end, holdout metrics, dry runs, make-data and
the example configs. Bad inputs through the CLI are in tests/test_bad_inputs.py."""

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zarr

import bigkernel
from bigkernel.cli import main
from bigkernel.data.synthetic import SyntheticSpec, make_data

JOB = """\
name: t
output: out
data:
  train: {{path: {data}}}
  holdout_fraction: 0.25
  chunk_rows: 4096
model:
  gamma: 0.5
  n_components: 64
  alpha: {alpha}
cluster:
  local: {{n_workers: 1, threads_per_worker: 1}}
progress: false
plots: false
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    make_data(SyntheticSpec("friedman1", 20_000, 10, 1.0, 0), d / "train.zarr", chunk_rows=4096)
    make_data(SyntheticSpec("friedman1", 3_000, 10, 1.0, 1), d / "new.zarr", chunk_rows=1024)
    return d


def _job(tmp_path, data_dir, extra="", alpha="1.0e-2", data=None):
    text = JOB.format(data=data or data_dir / "train.zarr", alpha=alpha) + textwrap.dedent(extra)
    p = tmp_path / "job.yaml"
    p.write_text(text)
    return p


@pytest.fixture(scope="module")
def end_to_end(tmp_path_factory, data_dir):
    """One in-process job with a predict section: its output folder and what it printed (two
    tests read it: the outputs, and the holdout metrics against a direct computation)."""
    tmp_path = tmp_path_factory.mktemp("end_to_end")
    extra = f"predict:\n  path: {data_dir / 'new.zarr'}\n  output: pred.zarr\n"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["-q", "run", str(_job(tmp_path, data_dir, extra))]) == 0
    return tmp_path / "out", printed.getvalue()


def test_job_end_to_end_in_process(end_to_end, data_dir):
    out, printed = end_to_end
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["scores"]["holdout"]["n_samples"] + metrics["scores"]["train"]["n_samples"] == 20_000
    assert 0.7 < metrics["scores"]["holdout"]["r2"] < 1.0  # D=64 features; noise caps R² near 0.96
    assert 1 < metrics["model"]["df"] <= 65
    model = bigkernel.load(out / "model.zarr")
    Xn = zarr.open_group(data_dir / "new.zarr", mode="r")["X"][:]
    np.testing.assert_allclose(zarr.open_group(out / "pred.zarr", mode="r")["y_pred"][:], model.predict(Xn), rtol=1e-10)
    for name in ("summary.txt", "job.log", "config.resolved.yaml"):
        assert (out / name).stat().st_size > 0
    assert "RMSE" in printed


def test_holdout_metrics_match_direct_computation(end_to_end, data_dir):
    """The train/holdout split and RMSE from the job equal a direct numpy computation."""
    from bigkernel.numerics.splits import HoldoutSplit

    out, _ = end_to_end
    metrics = json.loads((out / "metrics.json").read_text())
    g = zarr.open_group(data_dir / "train.zarr", mode="r")
    X, y = g["X"][:], g["y"][:]
    hold = HoldoutSplit(0, 0.25).groups(0, len(y)) == 1
    m = bigkernel.load(out / "model.zarr")
    rmse = np.sqrt(np.mean((m.predict(X[hold]) - y[hold]) ** 2))
    # rel 1e-6: the job predicts per chunk, float32 features (the default) round per row block
    assert metrics["scores"]["holdout"]["rmse"] == pytest.approx(rmse, rel=1e-6)
    ref = bigkernel.RandomFeatureRidge(gamma=0.5, n_components=64, alpha=1e-2, random_state=0).fit(X[~hold], y[~hold])
    # the default float32 features (checked): the job's chunks cut the float32 block products
    # elsewhere than the in-memory fit, so the models agree to float32 rounding
    assert m.dtype_ == ref.dtype_ == "float32"
    np.testing.assert_allclose(m.predict(X), ref.predict(X), rtol=0, atol=1e-4 * y.std())


def test_dry_run_computes_nothing(tmp_path, data_dir, capsys):
    assert main(["run", "--dry-run", str(_job(tmp_path, data_dir))]) == 0
    out = capsys.readouterr().out
    assert "chunk_plan" in out and "n_chunks: 5" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, quiet, verbose", [
    (["-q", "run", "j.yaml"], True, False),
    (["run", "-q", "j.yaml"], True, False),
    (["run", "j.yaml", "--quiet"], True, False),
    (["-v", "run", "j.yaml"], False, True),
    (["run", "j.yaml", "-v"], False, True),
    (["run", "j.yaml"], False, False),
    (["predict", "m", "d", "-o", "o", "-q"], True, False),
    (["-q", "report", "out"], True, False),
    (["make-data", "sine", "s.zarr", "-v"], False, True),
])  # fmt: skip
def test_verbosity_flags_before_or_after_the_subcommand(argv, quiet, verbose):
    """A flag before the subcommand is not reset by the subcommand's own default."""
    from bigkernel.cli import _parser

    args = _parser().parse_args(argv)
    assert (args.quiet, args.verbose) == (quiet, verbose)


def test_quiet_job_logs_warnings_only_on_the_terminal_and_all_to_job_log(tmp_path, data_dir, capsys):
    import logging

    assert main(["run", "-q", str(_job(tmp_path, data_dir))]) == 0
    err = capsys.readouterr().err
    assert "INFO" not in err, err
    assert logging.getLogger("bigkernel").level == logging.WARNING  # the job restored it
    log = (tmp_path / "out" / "job.log").read_text()
    assert "INFO bigkernel.models.random_features: fitted RandomFeatureRidge" in log
    assert "INFO bigkernel.jobs.runner: chunk plan" in log
    # without -q the terminal gets the INFO lines; a job with `log_level: WARNING` keeps them out
    # of its job.log and off the terminal, unless -v asks for them there
    assert main(["run", str(_job(tmp_path, data_dir, "overwrite: true\n"))]) == 0
    assert "INFO bigkernel.models.random_features: fitted RandomFeatureRidge" in capsys.readouterr().err
    (tmp_path / "job.yaml").write_text((tmp_path / "job.yaml").read_text() + "log_level: WARNING\n")
    assert main(["run", str(tmp_path / "job.yaml")]) == 0
    assert "INFO" not in capsys.readouterr().err
    assert " INFO " not in (tmp_path / "out" / "job.log").read_text()
    assert main(["run", "-v", str(tmp_path / "job.yaml")]) == 0
    assert "INFO bigkernel.models.random_features: fitted RandomFeatureRidge" in capsys.readouterr().err
    assert " INFO " not in (tmp_path / "out" / "job.log").read_text()


def test_verbose_flag_after_the_subcommand_sets_debug(tmp_path, data_dir):
    import logging

    assert main(["run", "--dry-run", str(_job(tmp_path, data_dir)), "-v"]) == 0
    assert logging.getLogger("bigkernel").level == logging.DEBUG
    assert main(["run", "--dry-run", str(_job(tmp_path, data_dir))]) == 0
    assert logging.getLogger("bigkernel").level == logging.INFO


def _nan_prediction_data(tmp_path, data_dir):
    """The test's prediction data with a NaN in its last chunk (row 2500 of 3000)."""
    X = zarr.open_group(data_dir / "new.zarr", mode="r")["X"][:]
    X[2500, 4] = np.nan
    g = zarr.open_group(tmp_path / "nan.zarr", mode="w")
    g.create_array("X", data=X, chunks=(1024, 10))
    return tmp_path / "nan.zarr"


def test_a_job_predicting_far_outside_the_training_range_says_so(tmp_path, data_dir):
    """Real CLI (in process): the predict stage's data hold one row far outside the training
    range (x3 = 5, trained on [0, 1]); the job succeeds, and its log carries the extrapolation
    finding counted in the prediction pass, naming the column and the range."""
    X = zarr.open_group(data_dir / "new.zarr", mode="r")["X"][:]
    X[7, 3] = 5.0
    g = zarr.open_group(tmp_path / "far.zarr", mode="w")
    g.create_array("X", data=X, chunks=(1024, 10))
    job = _job(tmp_path, data_dir, f"predict:\n  path: {tmp_path / 'far.zarr'}\n  output: pred.zarr\n")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["-q", "run", str(job)]) == 0
    log = (tmp_path / "out" / "job.log").read_text()
    found = [line for line in log.splitlines() if "[extrapolation]" in line]
    assert len(found) == 1 and " WARNING bigkernel.diagnostics: predict: 1 of 3,000 rows" in found[0], log[-3000:]
    assert "feature 3 = 5" in found[0] and "widths beyond the training range [" in found[0]


def test_a_job_failing_mid_run_records_its_error(tmp_path, data_dir):
    """Real CLI: the job fails at the predict stage, after fit and save. The terminal shows one
    error line; job.log has the run's log and the error (no traceback: a bigkernel error);
    status.json says failed; no metrics.json or summary.txt. A fixed rerun (`bigkernel run JOB
    -q`, -q after the subcommand, a real subprocess too) prints nothing below WARNING while its
    job.log keeps the full INFO log, and clears status.json; a refused rerun (finished folder, no
    overwrite) marks nothing."""
    job = _job(tmp_path, data_dir, f"predict: {{path: {_nan_prediction_data(tmp_path, data_dir)}}}\n")
    r = subprocess.run(
        [sys.executable, "-m", "bigkernel.cli", "run", "-q", str(job)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and errors[0].startswith("ERROR bigkernel: NonFiniteError: X contains NaN"), r.stderr
    out = tmp_path / "out"
    assert not (out / "metrics.json").exists() and not (out / "summary.txt").exists()
    assert (out / "model.zarr").exists()  # the fit finished before the failure
    log = (out / "job.log").read_text()
    assert "INFO bigkernel.models.random_features: fitted RandomFeatureRidge" in log
    failed = [line for line in log.splitlines() if " ERROR bigkernel" in line]
    assert len(failed) == 1 and "job t failed: NonFiniteError: X contains NaN or inf" in failed[0]
    assert "first at row 2500" in failed[0] and "Traceback (most recent call last)" not in log
    # the worker's own report of the failed task is kept there, not on the terminal
    assert "ERROR distributed.worker: Compute Failed" in log and "Compute Failed" not in r.stderr
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "failed" and status["job"] == "t" and status["log"] == "job.log"
    assert status["error"]["type"] == "NonFiniteError" and "first at row 2500" in status["error"]["message"]
    # the same job without the bad prediction data: finished, and no stale failure marker
    r = subprocess.run(
        [sys.executable, "-m", "bigkernel.cli", "run", str(_job(tmp_path, data_dir, "overwrite: true\n")), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "holdout" in r.stdout and (out / "metrics.json").exists() and not (out / "status.json").exists()
    assert not [line for line in r.stderr.splitlines() if line.startswith(("INFO", "DEBUG"))], r.stderr
    log = (out / "job.log").read_text()
    assert " INFO bigkernel.jobs.runner: chunk plan: " in log and "saved RandomFeatureRidge to " in log
    assert " ERROR " not in log
    # a rerun refused because the folder now holds a finished job leaves that job untouched
    assert main(["-q", "run", str(_job(tmp_path, data_dir))]) == 2  # OutputExistsError
    assert not (out / "status.json").exists() and (out / "job.log").read_text() == log


def test_a_job_failing_on_a_bug_logs_the_traceback(tmp_path, data_dir, monkeypatch):
    """An error that is not a BigkernelError (a bug) reaches job.log with its traceback."""
    from bigkernel.jobs import runner

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug in the job")

    monkeypatch.setattr(runner, "check_inputs", broken)  # the job's first step: no cluster to wait for
    with pytest.raises(ZeroDivisionError):
        main(["-q", "run", str(_job(tmp_path, data_dir))])
    out = tmp_path / "out"
    log = (out / "job.log").read_text()
    assert "ERROR bigkernel.jobs.runner: job t failed: ZeroDivisionError: a bug in the job" in log
    assert "Traceback (most recent call last):" in log and "in broken" in log
    assert json.loads((out / "status.json").read_text())["error"] == {
        "type": "ZeroDivisionError",
        "message": "a bug in the job",
    }
    assert not (out / "metrics.json").exists()


def test_a_job_failing_before_its_first_pass_has_the_error_in_job_log(tmp_path, data_dir, capsys):
    """The early failures used to leave an empty job.log (here: prediction data with 1 feature)."""
    g = zarr.open_group(tmp_path / "narrow.zarr", mode="w")
    g.create_array("X", data=np.zeros((10, 1)))
    job = _job(tmp_path, data_dir, f"predict: {{path: {tmp_path / 'narrow.zarr'}}}\n")
    assert main(["-q", "run", str(job)]) == 2
    assert "ERROR bigkernel: DataError: predict.path" in capsys.readouterr().err
    log = (tmp_path / "out" / "job.log").read_text()
    assert "job t failed: DataError: predict.path" in log and "has 1 features" in log
    assert json.loads((tmp_path / "out" / "status.json").read_text())["error"]["type"] == "DataError"


CONFIG_ERRORS = [
    ("alpha", "0", "alpha"),
    ("alpha", "-1.0", "alpha"),
    ("alpha", ".nan", "alpha"),
    ("alpha", "1e-3", "1.0e-3"),
    ("alpha", "'big'", "alpha"),
]


def test_make_data_command(tmp_path, capsys):
    assert main(["make-data", "sine", str(tmp_path / "s.zarr"), "--n-samples", "1e4", "--seed", "3"]) == 0
    g = zarr.open_group(tmp_path / "s.zarr", mode="r")
    assert g["X"].shape == (10_000, 1) and g.attrs["complete"] is True


@pytest.mark.parametrize(
    "path",
    sorted(p for p in os.listdir(os.path.join(os.path.dirname(__file__), "..", "configs")) if p.endswith(".yaml")),
)
def test_example_configs_are_valid(path):
    from bigkernel.jobs.config import load_config

    cfg = load_config(os.path.join(os.path.dirname(__file__), "..", "configs", path))
    assert cfg.name and cfg.output


def test_quickstart_config_runs(tmp_path):
    """The README's first command: the quickstart job (copied so its outputs land in tmp_path)."""
    import shutil

    root = os.path.join(os.path.dirname(__file__), "..")
    (tmp_path / "configs").mkdir()
    shutil.copy(os.path.join(root, "configs", "quickstart.yaml"), tmp_path / "configs" / "quickstart.yaml")
    assert main(["-q", "run", str(tmp_path / "configs" / "quickstart.yaml")]) == 0
    out = tmp_path / "runs" / "quickstart"
    m = json.loads((out / "metrics.json").read_text())
    assert m["scores"]["holdout"]["r2"] > 0.9
    # plain `pip install -e .` gives the figures: matplotlib is a core dependency
    for name in ("alpha_path.png", "predicted_vs_observed.png", "report.md", "holdout_sample.npz"):
        assert (out / name).stat().st_size > 0, name
    assert {os.path.basename(m["outputs"][k]) for k in ("Penalty path", "Predicted vs observed", "report")} == {
        "alpha_path.png",
        "predicted_vs_observed.png",
        "report.md",
    }


def test_matplotlib_is_a_core_dependency_and_the_plot_extra_still_exists():
    """`pip install -e .` installs matplotlib; `pip install "bigkernel[plot]"` still resolves."""
    import tomllib

    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert any(dep.split(">")[0].strip() == "matplotlib" for dep in project["dependencies"])
    assert project["optional-dependencies"]["plot"] == []


def test_predict_command(tmp_path, data_dir, capsys):
    """`bigkernel predict MODEL DATA -o OUT`: a saved model's predictions, chunk by chunk, in zarr."""
    g = zarr.open_group(data_dir / "train.zarr", mode="r")
    m = bigkernel.RandomFeatureRidge(gamma=0.5, n_components=32, alpha=1e-2, random_state=0)
    model = m.fit(g["X"][:2000], g["y"][:2000]).save(tmp_path / "m.zarr")
    out = tmp_path / "pred.zarr"
    assert main(["-q", "predict", str(model), str(data_dir / "new.zarr"), "-o", str(out), "--chunk-rows", "1024"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(out), "n_samples": 3000}
    pred = zarr.open_group(out, mode="r")
    Xn = zarr.open_group(data_dir / "new.zarr", mode="r")["X"][:]
    # float32 features (the default): other row blocks than in memory, float32 rounding apart
    np.testing.assert_allclose(pred["y_pred"][:], m.predict(Xn), rtol=1e-5, atol=1e-6 * np.abs(m.predict(Xn)).max())
    assert pred.attrs["complete"] is True
