"""Jobs through the real CLI: the quickstart end to end, and each bad input a clear error with a
non-zero exit code and no output that looks complete."""

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
    # a finished output folder is not silently reused
    cfg = _job(tmp_path, data_dir).read_text().replace("progress: false", "progress: false\noverwrite: false")
    (tmp_path / "job.yaml").write_text(cfg)
    assert main(["-q", "run", str(tmp_path / "job.yaml")]) == 2


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


def _bad_store(tmp_path, where):
    a = bigkernel.data.synthetic.generate_rows(SyntheticSpec("friedman1", 9000, 10, 1.0, 0), 0, 9000)
    a[8500, 3 if where == "X" else 10] = np.nan
    g = zarr.open_group(tmp_path / "bad.zarr", mode="w")
    g.create_array("X", data=a[:, :10], chunks=(2048, 10))
    g.create_array("y", data=a[:, 10], chunks=(2048,))
    return tmp_path / "bad.zarr"


@pytest.mark.parametrize("where", ["X", "y"])
def test_nan_in_late_chunk_through_cli(tmp_path, data_dir, where, caplog):
    job = _job(tmp_path, data_dir, data=_bad_store(tmp_path, where))
    assert main(["-q", "run", str(job)]) == 2
    assert f"NonFiniteError: {where} contains NaN or inf in rows [8192, 9000)" in caplog.text
    assert "first at row 8500" in caplog.text
    assert not (tmp_path / "out" / "metrics.json").exists()
    assert not (tmp_path / "out" / "model.zarr").exists()


CONFIG_ERRORS = [
    ("alpha", "0", "alpha"),
    ("alpha", "-1.0", "alpha"),
    ("alpha", ".nan", "alpha"),
    ("alpha", "1e-3", "1.0e-3"),
    ("alpha", "'big'", "alpha"),
]


@pytest.mark.parametrize("key,value,match", CONFIG_ERRORS)
def test_bad_alpha_through_cli(tmp_path, data_dir, key, value, match, caplog):
    assert main(["run", str(_job(tmp_path, data_dir, alpha=value))]) == 2
    assert "ConfigError" in caplog.text and match in caplog.text and "model.alpha" in caplog.text
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "text,match",
    [
        ("model:\n  n_compnents: 3\n", "did you mean 'n_components'"),
        ("model:\n  gamma: -2.0\n", "model.gamma"),
        ("model:\n  n_components: 0\n", "model.n_components"),
        ("model:\n  kernel: gausian\n", "model.kernel"),
        ("seed: 1\nseed: 2\n", "duplicate"),
        ("bad: !!python/object/apply:os.system ['touch PWNED']\n", "not allowed"),
        ("output: {data}\n", "overwrite"),
    ],
)
def test_config_mistakes_through_cli(tmp_path, data_dir, text, match, caplog):
    base = (f"name: t\noutput: out\ndata:\n  train: {{path: {data_dir / 'train.zarr'}}}\n"
            "cluster:\n  local: {n_workers: 1, threads_per_worker: 1}\n")
    if text.startswith("model:"):
        base = base.replace("cluster:", text + "cluster:")
    elif text.startswith("output:"):
        base = base.replace("output: out\n", text.format(data=data_dir / "train.zarr"))
    else:
        base = text + base.replace("seed: 1\n", "")
    (tmp_path / "job.yaml").write_text(base)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["run", str(tmp_path / "job.yaml")]) == 2
    finally:
        os.chdir(cwd)
    assert match in caplog.text, caplog.text
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_missing_inputs_through_cli(tmp_path, data_dir, caplog):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in caplog.text
    assert main(["-q", "run", str(_job(tmp_path, data_dir, data=tmp_path / "missing.zarr"))]) == 2
    assert "DataNotFoundError" in caplog.text and "missing.zarr" in caplog.text
    zarr.open_group(tmp_path / "nox.zarr", mode="w").create_array("y", shape=(10,), dtype="f8")
    assert main(["-q", "run", str(_job(tmp_path, data_dir, data=tmp_path / "nox.zarr"))]) == 2
    assert "has no array 'X'" in caplog.text
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_make_data_command(tmp_path, capsys):
    assert main(["make-data", "sine", str(tmp_path / "s.zarr"), "--n-samples", "1e4", "--seed", "3"]) == 0
    g = zarr.open_group(tmp_path / "s.zarr", mode="r")
    assert g["X"].shape == (10_000, 1) and g.attrs["complete"] is True
    assert main(["make-data", "friedman1", str(tmp_path / "s.zarr"), "--n-samples", "10"]) == 2


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


def _store(path, X, y, x_chunks=None):
    g = zarr.open_group(path, mode="w")
    g.create_array("X", data=X, chunks=x_chunks or X.shape)
    g.create_array("y", data=y, chunks=y.shape)
    return path


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: (np.ones(100), np.ones(100)), "must be 2-D"),
        (lambda: (np.ones((0, 3)), np.ones(0)), "empty"),
        (lambda: (np.ones((100, 3)), np.ones(99)), "different numbers of rows"),
        (lambda: (np.full((10, 3), "a"), np.ones(10)), "numeric dtype"),
        (lambda: (np.ones((100, 4)), np.ones(100)), "chunked along columns"),
    ],
)
def test_bad_stores_through_cli(tmp_path, data_dir, make, match, caplog):
    X, y = make()
    chunks = (50, 2) if match == "chunked along columns" else None
    if X.dtype.kind == "U":
        g = zarr.open_group(tmp_path / "bad.zarr", mode="w")
        g.create_array("X", shape=X.shape, dtype=str)[...] = X
        g.create_array("y", data=y)
    else:
        _store(tmp_path / "bad.zarr", X, y, chunks)
    assert main(["-q", "run", str(_job(tmp_path, data_dir, data=tmp_path / "bad.zarr"))]) == 2
    assert match in caplog.text, caplog.text
    assert not (tmp_path / "out" / "metrics.json").exists()
    assert not (tmp_path / "out" / "model.zarr").exists()
