"""Jobs through the real CLI: the quickstart end to end, holdout metrics, dry runs, make-data and
the example configs. Bad inputs through the CLI are in tests/test_bad_inputs.py."""

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


def test_job_end_to_end_in_process(tmp_path, data_dir, capsys):
    extra = f"predict:\n  path: {data_dir / 'new.zarr'}\n  output: pred.zarr\n"
    assert main(["-q", "run", str(_job(tmp_path, data_dir, extra))]) == 0
    out = tmp_path / "out"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["scores"]["holdout"]["n_samples"] + metrics["scores"]["train"]["n_samples"] == 20_000
    assert 0.7 < metrics["scores"]["holdout"]["r2"] < 1.0  # D=64 features; noise caps R² near 0.96
    assert 1 < metrics["model"]["df"] <= 65
    model = bigkernel.load(out / "model.zarr")
    Xn = zarr.open_group(data_dir / "new.zarr", mode="r")["X"][:]
    np.testing.assert_allclose(zarr.open_group(out / "pred.zarr", mode="r")["y_pred"][:], model.predict(Xn), rtol=1e-10)
    for name in ("summary.txt", "job.log", "config.resolved.yaml"):
        assert (out / name).stat().st_size > 0
    assert "RMSE" in capsys.readouterr().out


def test_holdout_metrics_match_direct_computation(tmp_path, data_dir):
    """The train/holdout split and RMSE from the job equal a direct numpy computation."""
    from bigkernel.numerics.splits import HoldoutSplit

    assert main(["-q", "run", str(_job(tmp_path, data_dir))]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    g = zarr.open_group(data_dir / "train.zarr", mode="r")
    X, y = g["X"][:], g["y"][:]
    hold = HoldoutSplit(0, 0.25).groups(0, len(y)) == 1
    m = bigkernel.load(tmp_path / "out" / "model.zarr")
    rmse = np.sqrt(np.mean((m.predict(X[hold]) - y[hold]) ** 2))
    assert metrics["scores"]["holdout"]["rmse"] == pytest.approx(rmse, rel=1e-9)
    ref = bigkernel.RandomFeatureRidge(gamma=0.5, n_components=64, alpha=1e-2, random_state=0).fit(X[~hold], y[~hold])
    np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-7)


def test_dry_run_computes_nothing(tmp_path, data_dir, capsys):
    assert main(["run", "--dry-run", str(_job(tmp_path, data_dir))]) == 0
    out = capsys.readouterr().out
    assert "chunk_plan" in out and "n_chunks: 5" in out
    assert not (tmp_path / "out").exists()


def test_real_subprocess_quickstart_style_job(tmp_path, data_dir):
    r = subprocess.run([sys.executable, "-m", "bigkernel.cli", "run", str(_job(tmp_path, data_dir))],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "holdout" in r.stdout and (tmp_path / "out" / "metrics.json").exists()


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


@pytest.mark.parametrize("path", sorted(p for p in os.listdir(os.path.join(os.path.dirname(__file__), "..", "configs"))
                                        if p.endswith(".yaml")))
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
    m = json.loads((tmp_path / "runs" / "quickstart" / "metrics.json").read_text())
    assert m["scores"]["holdout"]["r2"] > 0.9




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
    np.testing.assert_allclose(pred["y_pred"][:], m.predict(Xn), rtol=1e-12)
    assert pred.attrs["complete"] is True
