"""The bad-input suite: every bad input of issue 5, each through the API and through the CLI.

Each case checks the error type and message, a non-zero exit code from the CLI, and that no
output looks complete (no ``metrics.json``; no zarr store in the job folder that says
``complete``; no partial folders left behind). The CLI runs in-process through
``bigkernel.cli.main`` — the real command's code path — and, for two cases, as real
subprocesses. Jobs that reach the data pass share one LocalCluster through ``cluster.address``.

Cases owned elsewhere (one place per case): a bootstrap store of another job through the API is
``tests/test_bootstrap.py::test_store_of_another_job_is_refused`` and
``tests/test_bootstrap_store.py::test_different_job_is_refused_naming_the_fields``; a task that
keeps killing its workers is ``tests/test_cluster_processes.py``. The loader's finer rules
(wrong types, cross-field rules, YAML syntax) stay in ``tests/test_config.py``.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import yaml
import zarr

import bigkernel
from bigkernel import RandomFeatureRidge, SyntheticSpec, make_data, open_source
from bigkernel.cli import EXIT_USER_ERROR, main
from bigkernel.errors import (
    ClusterError,
    ConfigError,
    DataError,
    DataNotFoundError,
    ModelFormatError,
    NonFiniteError,
    OutputExistsError,
    ParameterError,
    StoreMismatchError,
)
from bigkernel.jobs.config import load_config
from tests._yaml import MINIMAL, error_of, with_model, write
from tests.conftest import friedman

distributed = pytest.importorskip("distributed")


# --------------------------------------------------------------------------------------------
# Fixtures and helpers
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("data")
    make_data(SyntheticSpec("friedman1", 20_000, 10, 1.0, 0), d / "train.zarr", chunk_rows=4096)
    make_data(SyntheticSpec("friedman1", 3_000, 10, 1.0, 1), d / "new.zarr", chunk_rows=1024)
    make_data(SyntheticSpec("friedman1", 3_000, 5, 1.0, 1), d / "new5.zarr", chunk_rows=1024)
    return d


@pytest.fixture(scope="module")
def scheduler() -> str:
    """One LocalCluster (a worker process, one thread) for every job here that computes."""
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def model_path(tmp_path_factory, data_dir) -> Path:
    """A fitted model of 10 features, saved."""
    g = zarr.open_group(data_dir / "train.zarr", mode="r")
    m = RandomFeatureRidge(gamma=0.5, n_components=32, alpha=1e-2, random_state=0)
    return Path(m.fit(g["X"][:2000], g["y"][:2000]).save(tmp_path_factory.mktemp("m") / "m.zarr"))


JOB = """\
name: t
output: out
data:
  train: {{path: {data}}}
  holdout_fraction: 0.25
  chunk_rows: 4096
model:
  gamma: 0.5
  n_components: 32
  alpha: {alpha}
cluster: {cluster}
progress: false
plots: false
"""


def job_text(data: Path, *, alpha: str = "1.0e-2", address: str | None = None) -> str:
    cluster = f"{{address: '{address}'}}" if address else "{local: {n_workers: 1, threads_per_worker: 1}}"
    return JOB.format(data=data, alpha=alpha, cluster=cluster)


def write_job(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def cli_error(argv: list[str], caplog, error: type[Exception], match: str) -> str:
    """Run the CLI in-process; assert exit code 2 and one logged ``Error: message``."""
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="bigkernel"):
        assert main(argv) == EXIT_USER_ERROR
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors, "the CLI failed without logging an error"
    assert errors[-1].startswith(f"{error.__name__}: "), errors[-1]
    assert re.search(match, errors[-1]), (match, errors[-1])
    return errors[-1]


def assert_nothing_finished(out: Path, allow: tuple[str, ...] = ()) -> None:
    """No ``metrics.json``, no zarr store under ``out`` with ``complete`` set (except the top
    level entries in ``allow``), and no partial folders."""
    assert not (out / "metrics.json").exists()
    if not out.exists():
        return
    for meta in out.rglob("zarr.json"):
        top = meta.relative_to(out).parts[0]
        attrs = json.loads(meta.read_text()).get("attributes", {})
        assert not attrs.get("complete") or top in allow, f"{meta.parent} looks complete"
    assert not [p.name for p in out.rglob("*") if ".partial" in p.name]


def zarr_store(path: Path, X: np.ndarray, y: np.ndarray | None, x_chunks=None) -> Path:
    g = zarr.open_group(path, mode="w")
    g.create_array("X", data=X, chunks=x_chunks or X.shape)
    if y is not None:
        g.create_array("y", data=y, chunks=y.shape)
    return path


# --------------------------------------------------------------------------------------------
# NaN and inf in X and in y, in a late chunk
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["X", "y"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_in_a_late_chunk(where, bad, tmp_path, data_dir, scheduler, caplog):
    X, y = friedman(10_000, seed=1)
    (X if where == "X" else y)[9123, ...] = bad
    # API: dask and numpy input
    # the whole pass's bad rows, reported once (not the range of the chunk that failed first)
    rows = rf"{where} contains NaN or inf \(.*\): 1 bad row, first at row 9123; bad rows \[9123, 9124\)\."
    with pytest.raises(NonFiniteError, match=rows):
        RandomFeatureRidge(n_components=16).fit(da.from_array(X, chunks=(2000, 10)), da.from_array(y, chunks=2000))
    with pytest.raises(NonFiniteError, match="row 9123"):
        RandomFeatureRidge(n_components=16, chunk_rows=2048).fit(X, y)
    # CLI: a zarr store whose last chunk holds the bad value
    store = zarr_store(tmp_path / "bad.zarr", X, y, x_chunks=(2048, 10))
    job = write_job(tmp_path, job_text(store, address=scheduler))
    cli_error(
        ["-q", "run", str(job)],
        caplog,
        NonFiniteError,
        rf"{where} contains NaN or inf \(.*\): 1 bad row, first at row 9123; bad rows \[9123, 9124\)",
    )
    assert_nothing_finished(tmp_path / "out")


# --------------------------------------------------------------------------------------------
# Shapes, dtypes and chunking of the training data (checked from metadata, before any pass)
# --------------------------------------------------------------------------------------------

X0, Y0 = friedman(1000)
SHAPE_CASES = {
    # id: (X, y, zarr chunks of X, API error on dask input, message, numpy error message)
    "empty": (np.ones((0, 10)), np.ones(0), None, "empty: shape \\(0, 10\\)", "0 sample"),
    "1-D X": (X0[:, 0].copy(), Y0, None, "must be 2-D .* got 1-D shape \\(1000,\\).*reshape", "Expected 2D array"),
    "mismatched n": (X0, Y0[:999], None, "X has 1000, y has 999", "inconsistent numbers of samples"),
    # text is refused, even text of numbers (tests/test_sparse.py: strings, objects, complex)
    "non-numeric dtype": (
        np.full((1000, 10), "a"),
        Y0,
        None,
        r"X must hold real numbers \(float or int\); found strings",
        r"X must hold real numbers \(float or int\); found strings",
    ),
    "X chunked along columns": (X0, Y0, (100, 5), "chunked along columns .*rechunk\\(\\{1: 10\\}\\)", None),
}


@pytest.mark.parametrize("case", list(SHAPE_CASES))
def test_bad_shapes_dtypes_and_chunking(case, tmp_path, data_dir, caplog):
    X, y, chunks, match, numpy_match = SHAPE_CASES[case]
    # API, dask input: DataError from metadata
    Xd = da.from_array(X, chunks=chunks or (max(1, min(100, len(X))),) + X.shape[1:])
    yd = da.from_array(y, chunks=max(1, min(100, len(y))))
    with pytest.raises(DataError, match=match):
        RandomFeatureRidge(n_components=8).fit(Xd, yd)
    # API, numpy input: scikit-learn's validation (a ValueError), same contract as its estimators
    if numpy_match is not None:
        with pytest.raises(ValueError, match=numpy_match):
            RandomFeatureRidge(n_components=8).fit(X, y)
    # CLI: the same arrays in a zarr group; fails before any cluster starts
    if X.dtype.kind == "U":
        g = zarr.open_group(tmp_path / "bad.zarr", mode="w")
        g.create_array("X", shape=X.shape, dtype=str)[...] = X
        g.create_array("y", data=y)
    else:
        zarr_store(tmp_path / "bad.zarr", X, y, chunks)
    job = write_job(tmp_path, job_text(tmp_path / "bad.zarr"))
    cli_error(["-q", "run", str(job)], caplog, DataError, match)
    assert_nothing_finished(tmp_path / "out")


# --------------------------------------------------------------------------------------------
# Missing files, zarr groups without X or y
# --------------------------------------------------------------------------------------------


def test_missing_files(tmp_path, data_dir, caplog):
    # API
    with pytest.raises(DataNotFoundError, match="does not exist"):
        open_source(tmp_path / "nope.zarr")
    with pytest.raises(DataNotFoundError, match="does not exist"):
        open_source(tmp_path / "nope.npy")
    with pytest.raises(DataNotFoundError, match="no model at"):
        bigkernel.load(tmp_path / "nope.zarr")
    with pytest.raises(DataNotFoundError) as info:
        load_config(tmp_path / "nope.yaml")
    assert isinstance(info.value, FileNotFoundError)
    assert str(tmp_path / "nope.yaml") in str(info.value) and "bigkernel run configs/" in str(info.value)
    # CLI: the job file, the training data, the prediction data (before the fit), the model
    cli_error(["run", str(tmp_path / "nope.yaml")], caplog, DataNotFoundError, "job config not found: .*nope.yaml")
    job = write_job(tmp_path, job_text(tmp_path / "missing.zarr"))
    cli_error(["-q", "run", str(job)], caplog, DataNotFoundError, "data source .*missing.zarr' does not exist")
    assert_nothing_finished(tmp_path / "out")
    job = write_job(tmp_path, job_text(data_dir / "train.zarr") + f"predict: {{path: {tmp_path / 'gone.zarr'}}}\n")
    cli_error(["-q", "run", str(job)], caplog, DataNotFoundError, "gone.zarr' does not exist")
    assert_nothing_finished(tmp_path / "out")
    cli_error(
        ["predict", str(tmp_path / "nope.zarr"), str(data_dir / "new.zarr"), "-o", str(tmp_path / "p.zarr")],
        caplog,
        DataNotFoundError,
        "no model at",
    )
    assert not (tmp_path / "p.zarr").exists()


@pytest.mark.parametrize("missing", ["X", "y"])
def test_zarr_group_without_x_or_y(missing, tmp_path, caplog):
    X, y = friedman(100)
    zarr_store(tmp_path / "part.zarr", X, y)
    shutil.rmtree(tmp_path / "part.zarr" / missing)
    match = rf"has no array '{missing}'; arrays found: \['{'y' if missing == 'X' else 'X'}'\]"
    with pytest.raises(DataNotFoundError, match=match):
        open_source(tmp_path / "part.zarr")
    job = write_job(tmp_path, job_text(tmp_path / "part.zarr"))
    cli_error(["-q", "run", str(job)], caplog, DataNotFoundError, match)
    assert_nothing_finished(tmp_path / "out")


# --------------------------------------------------------------------------------------------
# Prediction data: wrong feature count, NaN in a late chunk
# --------------------------------------------------------------------------------------------


def test_wrong_feature_count_at_predict(tmp_path, data_dir, model_path, caplog):
    m = bigkernel.load(model_path)
    X5 = zarr.open_group(data_dir / "new5.zarr", mode="r")["X"][:]
    with pytest.raises(ValueError, match="X has 5 features, but RandomFeatureRidge is expecting 10"):
        m.predict(X5)
    with pytest.raises(DataError, match="X has 5 features, but RandomFeatureRidge is expecting 10"):
        m.predict(da.from_array(X5))
    # CLI, a job: caught from metadata before the fit, so no model is written either
    job = write_job(tmp_path, job_text(data_dir / "train.zarr") + f"predict: {{path: {data_dir / 'new5.zarr'}}}\n")
    cli_error(
        ["-q", "run", str(job)],
        caplog,
        DataError,
        "predict.path .*new5.zarr has 5 features, but the training data .*train.zarr has 10",
    )
    assert_nothing_finished(tmp_path / "out")
    # CLI, `bigkernel predict`
    out = tmp_path / "pred.zarr"
    cli_error(
        ["predict", str(model_path), str(data_dir / "new5.zarr"), "-o", str(out)],
        caplog,
        DataError,
        "X has 5 features, but RandomFeatureRidge is expecting 10",
    )
    assert not out.exists() and not list(tmp_path.glob(".pred.zarr.partial*"))


def test_nan_in_a_late_chunk_of_prediction_data(tmp_path, data_dir, model_path, scheduler, caplog):
    """Found while writing this suite: dask prediction input with NaN gave NaN predictions
    silently (numpy input was refused). The prediction tasks now check, naming the rows."""
    X = zarr.open_group(data_dir / "new.zarr", mode="r")["X"][:]
    X[2500, 4] = np.nan
    m = bigkernel.load(model_path)
    rows = r"X contains NaN or inf \(X column 4\): 1 bad row, first at row 2500; bad rows \[2500, 2501\).*before predicting"
    with pytest.raises(NonFiniteError, match=rows):
        m.predict(da.from_array(X, chunks=(1000, 10))).compute()
    with pytest.raises(ValueError, match="Input X contains NaN"):
        m.predict(X)
    store = zarr_store(tmp_path / "nan.zarr", X, None, x_chunks=(1024, 10))
    # CLI, a job: the fit finishes (its model.zarr is that finished fit); predictions never appear
    job = write_job(tmp_path, job_text(data_dir / "train.zarr", address=scheduler) + f"predict: {{path: {store}}}\n")
    cli_error(
        ["-q", "run", str(job)],
        caplog,
        NonFiniteError,
        r"X contains NaN or inf \(X column 4\): 1 bad row, first at row 2500",
    )
    assert_nothing_finished(tmp_path / "out", allow=("model.zarr",))
    assert not (tmp_path / "out" / "predictions.zarr").exists()
    # CLI, `bigkernel predict`
    cli_error(
        ["-q", "predict", str(model_path), str(store), "-o", str(tmp_path / "p.zarr")],
        caplog,
        NonFiniteError,
        "first at row 2500",
    )
    assert not (tmp_path / "p.zarr").exists() and not list(tmp_path.glob(".p.zarr.partial*"))


# --------------------------------------------------------------------------------------------
# Estimator parameters: α <= 0 / NaN / string, γ <= 0, n_components <= 0, unknown kernel
# --------------------------------------------------------------------------------------------

PARAMETER_CASES = [
    # (API parameters, message, YAML model line, job message)
    (
        {"alpha": 0.0},
        "alpha must be a number > 0, .*; found 0.0",
        "alpha: 0",
        "model.alpha: expected a number > 0.* found 0",
    ),
    ({"alpha": -1}, "alpha must be a number > 0, .*; found -1", "alpha: -1.0", "model.alpha: .*found -1.0"),
    (
        {"alpha": float("nan")},
        "alpha must be a number > 0, .*found nan .*NaN is not allowed",
        "alpha: .nan",
        "model.alpha: .*NaN is not allowed",
    ),
    (
        {"alpha": "1e-3"},
        "alpha must be .*found '1e-3' .*that is text",
        "alpha: 1e-3",
        "model.alpha: .*YAML 1.1 reads 1e-3 as text.*write 1.0e-3",
    ),
    ({"alpha": "big"}, "alpha must be .*found 'big'", "alpha: 'big'", "model.alpha: .*found 'big' \\(string\\)"),
    (
        {"gamma": 0.0},
        "gamma must be a number > 0 or None; found 0.0",
        "gamma: 0",
        "model.gamma: expected a number > 0.*found 0",
    ),
    ({"gamma": -0.5}, "gamma must be a number > 0 or None; found -0.5", "gamma: -0.5", "model.gamma: .*found -0.5"),
    (
        {"n_components": 0},
        "n_components must be an integer > 0; found 0 .*n_components=100 \\(the default\\)",
        "n_components: 0",
        "model.n_components: expected an integer > 0, found 0",
    ),
    (
        {"n_components": -5},
        "n_components must be an integer > 0; found -5",
        "n_components: -5",
        "model.n_components: .*found -5",
    ),
    (
        {"kernel": "gausian"},
        "unknown kernel 'gausian'; valid kernels are rbf, laplacian, matern, fourier",
        "kernel: gausian",
        "model.kernel: expected one of 'rbf', 'laplacian', 'matern', 'fourier'",
    ),
    ({"kernel": "laplacain"}, "did you mean 'laplacian'", "kernel: laplacain", "did you mean 'laplacian'\\?"),
]


@pytest.mark.parametrize(
    "params,match,line,job_match", PARAMETER_CASES, ids=[line for _, _, line, _ in PARAMETER_CASES]
)
def test_bad_estimator_parameters(params, match, line, job_match, tmp_path, data_dir, caplog):
    X, y = friedman(50)
    with pytest.raises(ParameterError, match=match):
        RandomFeatureRidge(**params).fit(X, y)
    key = line.split(":")[0]
    text = "".join(
        t for t in job_text(data_dir / "train.zarr").splitlines(keepends=True) if not t.startswith(f"  {key}:")
    )  # the case's line replaces the job's own
    job = write_job(tmp_path, text.replace("model:\n", f"model:\n  {line}\n"))
    cli_error(["run", str(job)], caplog, ConfigError, job_match)
    assert not (tmp_path / "out").exists()  # config errors come before anything is written


@pytest.mark.parametrize(
    ("line", "key", "fragment"),
    [
        ("alpha: 0", "model.alpha", "expected a number > 0"),
        ("alpha: -1.0", "model.alpha", "found -1.0"),
        ("alpha: .nan", "model.alpha", "NaN is not allowed"),
        ("alpha: .inf", "model.alpha", "must be finite"),
        ("alpha: auto", "model.alpha", "'gcv', 'cv' or 'evidence', found 'auto' (string)"),
        ("alpha: []", "model.alpha", "the list is empty"),
        ("alpha: [1.0, -2.0]", "model.alpha", "item 1: expected a number > 0"),
        (
            "gamma: 0",
            "model.gamma",
            "expected a number > 0, a non-empty list of numbers > 0 (searched), or 'cv', found 0",
        ),
        ("gamma: -0.5", "model.gamma", ", or 'cv', found -0.5"),
        ("length_scale: 0.0", "model.length_scale", "found 0.0"),
        ("n_components: 0", "model.n_components", "expected an integer > 0, found 0"),
        ("n_components: -5", "model.n_components", "found -5"),
    ],
)
def test_out_of_range_values(tmp_path: Path, line: str, key: str, fragment: str) -> None:
    message = error_of(with_model(tmp_path, line + "\n"))
    assert f"{key}: " in message and fragment in message


def test_unknown_kernel_suggests_close_match(tmp_path: Path) -> None:
    message = error_of(with_model(tmp_path, "kernel: gausian\n"))
    assert "model.kernel" in message and "'rbf', 'laplacian', 'matern', 'fourier'" in message
    message = error_of(with_model(tmp_path, "kernel: laplacain\n"))
    assert "did you mean 'laplacian'?" in message


def test_unknown_estimator_parameter_through_the_api():
    with pytest.raises(TypeError, match="n_compnents"):
        RandomFeatureRidge(n_compnents=8)
    with pytest.raises(ValueError, match="Invalid parameter 'n_compnents'.*Valid parameters are"):
        RandomFeatureRidge().set_params(n_compnents=8)


# --------------------------------------------------------------------------------------------
# Job YAML: unknown keys, numbers read as text, duplicate keys, Python tags
# --------------------------------------------------------------------------------------------


YAML_CASES = {
    # id: (how to change the job text, error, message)
    "unknown key": (
        lambda t: t.replace("  n_components: 32", "  n_compnents: 32"),
        ConfigError,
        r"job.yaml:9: model.n_compnents: unknown key 'n_compnents'; did you mean 'n_components'\?",
    ),
    "unknown key in wrong section": (lambda t: t + "alpha: 0.1\n", ConfigError, "did you mean 'model.alpha'"),
    "1e-3 read as a string": (
        lambda t: t.replace("alpha: 1.0e-2", "alpha: 1e-3"),
        ConfigError,
        "YAML 1.1 reads 1e-3 as text.*write 1.0e-3",
    ),
    "duplicate keys": (
        lambda t: t.replace("  gamma: 0.5\n", "  gamma: 0.5\n  gamma: 0.7\n"),
        ConfigError,
        r"job.yaml:9: duplicate key 'gamma' \(lines 8 and 9\)",
    ),
    "python object tag": (
        lambda t: "bad: !!python/object/apply:os.system ['touch PWNED']\n" + t,
        ConfigError,
        r"job.yaml:1: the tag !!python/object/apply:os.system is not allowed",
    ),
}


@pytest.mark.parametrize("case", list(YAML_CASES))
def test_bad_job_yaml(case, tmp_path, data_dir, caplog, monkeypatch):
    change, error, match = YAML_CASES[case]
    job = write_job(tmp_path, change(job_text(data_dir / "train.zarr")))
    monkeypatch.chdir(tmp_path)  # where a `touch PWNED` would land
    with pytest.raises(error, match=match):
        load_config(job)
    cli_error(["run", str(job)], caplog, error, match)
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out").exists()


def test_python_tag_through_a_real_subprocess(tmp_path, data_dir):
    job = write_job(
        tmp_path,
        f"output: !!python/object/apply:os.system ['touch {tmp_path / 'PWNED'}']\n"
        + job_text(data_dir / "train.zarr").replace("output: out\n", ""),
    )
    r = subprocess.run(
        [sys.executable, "-m", "bigkernel.cli", "run", str(job)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == EXIT_USER_ERROR
    assert "ConfigError: " in r.stderr and "is not allowed" in r.stderr
    assert not (tmp_path / "PWNED").exists()


def test_unknown_key_names_dotted_key_and_suggests(tmp_path: Path) -> None:
    message = error_of(with_model(tmp_path, "n_compnents: 100\n"))
    assert "model.n_compnents" in message
    assert "did you mean 'n_components'" in message
    assert "valid keys in model:" in message and "alpha" in message
    assert str(tmp_path / "job.yaml") in message
    assert "job.yaml:6:" in message  # the line of the key


def test_unknown_key_in_wrong_section_points_to_right_one(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, MINIMAL + "alpha: 0.1\n"))
    assert "unknown key 'alpha'" in message and "'model.alpha'" in message


def test_unknown_nested_key(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, MINIMAL + "cluster:\n  local:\n    n_worker: 2\n"))
    assert "cluster.local.n_worker" in message and "'n_workers'" in message


@pytest.mark.parametrize(
    ("key", "value", "spelled"),
    [
        ("alpha", "1e-3", "1.0e-3"),
        ("gamma", "1E5", "1.0e+5"),
        ("gamma", "5e+2", "5.0e+2"),
        ("gamma", "1.5e3", "1.5e+3"),
        ("alpha", "'0.5'", "0.5"),
    ],
)
def test_numbers_yaml_reads_as_text_are_errors(tmp_path: Path, key: str, value: str, spelled: str) -> None:
    message = error_of(with_model(tmp_path, f"{key}: {value}\n"))
    assert f"model.{key}" in message and "YAML 1.1 reads" in message
    assert f"write {spelled}" in message
    assert isinstance(yaml.safe_load(spelled), float)  # the advice really is a YAML float


def test_exponent_text_in_integer_field_suggests_integer(tmp_path: Path) -> None:
    text = "output: o\ndata:\n  make: {path: s.zarr, n_samples: 2e5}\n"
    message = error_of(write(tmp_path, text))
    assert "data.make.n_samples" in message and "write 200000" in message


def test_exponent_text_in_alpha_list(tmp_path: Path) -> None:
    message = error_of(with_model(tmp_path, "alpha: [0.1, 1e-3]\n"))
    assert "model.alpha" in message and "item 1" in message and "write 1.0e-3" in message


def test_duplicate_keys_are_errors_with_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "model:\n  alpha: 1.0\n  kernel: rbf\n  alpha: 2.0\n")
    message = error_of(path)
    assert "duplicate key 'alpha'" in message and "lines 6 and 8" in message
    assert f"{path}:8" in message


def test_duplicate_top_level_key(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, MINIMAL + "output: other\n"))
    assert "duplicate key 'output'" in message and "lines 1 and 5" in message


def test_python_object_tag_is_refused_and_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    path = write(
        tmp_path,
        f'output: !!python/object/apply:os.system ["echo pwned > {marker}"]\ndata: {{train: {{path: t.zarr}}}}\n',
    )
    message = error_of(path)
    assert not marker.exists()
    assert "!!python/object/apply:os.system" in message and "not allowed" in message
    assert f"{path}:1" in message


@pytest.mark.parametrize("tag", ["!!python/object:os.system", "!!python/name:os.system", "!custom"])
def test_other_non_standard_tags_are_refused(tmp_path: Path, tag: str) -> None:
    message = error_of(write(tmp_path, MINIMAL + f"name: {tag} x\n"))
    assert "not allowed" in message and "job.yaml:5" in message


# --------------------------------------------------------------------------------------------
# Outputs that would overwrite an input, or finished work
# --------------------------------------------------------------------------------------------


def test_output_that_would_overwrite_an_input(tmp_path, data_dir, model_path, caplog):
    train = data_dir / "train.zarr"
    before = sorted(p.name for p in train.rglob("*"))
    # API: predictions or a model written over the input data are refused
    m = bigkernel.load(model_path)
    with pytest.raises(OutputExistsError, match="prediction output .*train.zarr' exists"):
        m.predict_to_zarr(open_source(train).X, train)
    with pytest.raises(OutputExistsError, match="model .*train.zarr' exists"):
        m.save(train)
    # CLI: the job's output folder, predict.output, and `bigkernel predict --output`
    text = job_text(train)
    job = write_job(tmp_path, text.replace("output: out", f"output: {train}"))
    cli_error(
        ["run", str(job)],
        caplog,
        ConfigError,
        f"output: this output would overwrite an input: output {train} is the same path as data.train.path",
    )
    job = write_job(tmp_path, text + f"predict: {{path: {data_dir / 'new.zarr'}, output: {train}}}\n")
    cli_error(["run", str(job)], caplog, ConfigError, "predict.output .* is the same path as data.train.path")
    assert not (tmp_path / "out").exists()
    cli_error(
        ["predict", str(model_path), str(train), "-o", str(train)],
        caplog,
        OutputExistsError,
        "the predictions would overwrite an input",
    )
    cli_error(
        ["predict", str(model_path), str(train), "-o", str(model_path / "p.zarr")],
        caplog,
        OutputExistsError,
        "is inside the model",
    )
    assert sorted(p.name for p in train.rglob("*")) == before  # the input is untouched


@pytest.mark.parametrize(
    ("output", "train", "relation"),
    [
        ("data/train.zarr", "data/train.zarr", "is the same path as"),
        ("data", "data/train.zarr", "contains"),
        ("./data/../data/train.zarr/run", "data/train.zarr", "is inside"),
    ],
)
def test_output_overlapping_an_input_names_both_paths(tmp_path: Path, output: str, train: str, relation: str) -> None:
    message = error_of(write(tmp_path, f"output: {output}\ndata:\n  train: {{path: {train}}}\n"))
    assert "would overwrite an input" in message and relation in message
    assert str(tmp_path / "data" / "train.zarr") in message  # the input, resolved
    assert f"output {os.path.normpath(tmp_path / output)}" in message  # the output, resolved


def test_output_overlap_sees_through_symlinks(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    message = error_of(write(tmp_path, "output: link/run\ndata:\n  train: {path: real/run}\n"))
    assert "is the same path as" in message


def test_predict_output_must_not_be_an_input(tmp_path: Path) -> None:
    text = MINIMAL + f"predict: {{path: new.zarr, output: {tmp_path / 'data' / 'train.zarr'}}}\n"
    message = error_of(write(tmp_path, text))
    assert "predict.output" in message and "data.train.path" in message


def test_synthetic_data_path_counts_as_input(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, "output: runs\ndata:\n  make: {path: runs/s.zarr}\n"))
    assert "data.make.path" in message and "contains" in message


def test_predict_output_must_not_be_the_output_folder(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, MINIMAL + "predict: {path: new.zarr, output: .}\n"))
    assert "predict.output" in message and "not the folder itself" in message


def test_finished_work_is_not_replaced_without_overwrite(tmp_path, data_dir, model_path, scheduler, caplog):
    # a finished job folder
    job = write_job(tmp_path, job_text(data_dir / "train.zarr", address=scheduler))
    assert main(["-q", "run", str(job)]) == 0
    stamp = (tmp_path / "out" / "metrics.json").stat().st_mtime_ns
    cli_error(["-q", "run", str(job)], caplog, OutputExistsError, "already holds a finished job.*overwrite: true")
    assert (tmp_path / "out" / "metrics.json").stat().st_mtime_ns == stamp
    # an existing predict.output outside the folder: refused before the fit, not after it
    elsewhere = tmp_path / "elsewhere.zarr"
    elsewhere.mkdir()
    text = job_text(data_dir / "train.zarr", address=scheduler).replace("output: out", "output: out2")
    job = write_job(tmp_path, text + f"predict: {{path: {data_dir / 'new.zarr'}, output: {elsewhere}}}\n")
    cli_error(["-q", "run", str(job)], caplog, OutputExistsError, "predict.output .*elsewhere.zarr' already exists")
    assert_nothing_finished(tmp_path / "out2")
    assert not (tmp_path / "out2" / "model.zarr").exists()
    # a model, predictions, synthetic data
    with pytest.raises(OutputExistsError, match="exists; pass overwrite=True"):
        bigkernel.load(model_path).save(model_path)
    cli_error(
        ["predict", str(model_path), str(data_dir / "new.zarr"), "-o", str(elsewhere)],
        caplog,
        OutputExistsError,
        "prediction output .*elsewhere.zarr' exists",
    )
    cli_error(
        ["make-data", "friedman1", str(data_dir / "new.zarr"), "--n-samples", "10"],
        caplog,
        OutputExistsError,
        "new.zarr' exists and is not a complete data set made with these parameters",
    )


def test_failed_overwrite_keeps_the_previous_finished_job(tmp_path, data_dir, scheduler, caplog):
    """With ``overwrite: true`` a rerun that fails leaves the previous *finished* job in place —
    its metrics.json, model and predictions, all of that job (issue 19: overwrite removes old
    results only once the new ones are complete); the failure is recorded in the hidden
    folder the run wrote to. A failed run over an *unfinished* folder still clears it first:
    nothing of an earlier run may look like this one's."""
    job = write_job(
        tmp_path,
        job_text(data_dir / "train.zarr", address=scheduler)
        + "overwrite: true\n"
        + f"predict: {{path: {data_dir / 'new.zarr'}}}\n",
    )
    assert main(["-q", "run", str(job)]) == 0
    assert (tmp_path / "out" / "model.zarr").exists() and (tmp_path / "out" / "predictions.zarr").exists()
    finished = (tmp_path / "out" / "metrics.json").read_bytes()
    job.write_text(job.read_text().replace(str(data_dir / "train.zarr"), str(tmp_path / "gone.zarr")))
    cli_error(["-q", "run", str(job)], caplog, DataNotFoundError, "gone.zarr' does not exist")
    assert (tmp_path / "out" / "metrics.json").read_bytes() == finished
    assert (tmp_path / "out" / "model.zarr").exists() and (tmp_path / "out" / "predictions.zarr").exists()
    assert not (tmp_path / "out" / "status.json").exists()
    status = json.loads((tmp_path / ".overwrite-out" / "status.json").read_text())
    assert status["error"]["type"] == "DataNotFoundError"
    # an unfinished folder (no metrics.json): cleared before the run, so a failure leaves nothing
    (tmp_path / "out" / "metrics.json").unlink()
    cli_error(["-q", "run", str(job)], caplog, DataNotFoundError, "gone.zarr' does not exist")
    assert_nothing_finished(tmp_path / "out")
    assert not (tmp_path / "out" / "model.zarr").exists()
    assert not (tmp_path / "out" / "predictions.zarr").exists()


# --------------------------------------------------------------------------------------------
# Model stores: a pickle where a model should be, truncated, unfinished, foreign
# --------------------------------------------------------------------------------------------


class _Boom:
    """Pickled, runs ``touch marker`` when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _pickle_file(tmp_path: Path, model_path: Path) -> Path:
    p = tmp_path / "model.pkl"
    p.write_bytes(pickle.dumps(_Boom(tmp_path / "PWNED")))
    return p


def _pickle_in_folder(tmp_path: Path, model_path: Path) -> Path:
    d = tmp_path / "fake.zarr"
    d.mkdir()
    (d / "model.pkl").write_bytes(pickle.dumps(_Boom(tmp_path / "PWNED")))
    return d


def _copy(tmp_path: Path, model_path: Path) -> Path:
    return Path(shutil.copytree(model_path, tmp_path / "m.zarr"))


def _truncated(tmp_path: Path, model_path: Path) -> Path:
    path = _copy(tmp_path, model_path)
    shutil.rmtree(path / "coef")
    return path


def _attrs(**changes):
    def make(tmp_path: Path, model_path: Path) -> Path:
        path = _copy(tmp_path, model_path)
        zarr.open_group(path, mode="r+").attrs.update(changes)
        return path

    return make


def _foreign(tmp_path: Path, model_path: Path) -> Path:
    zarr.open_group(tmp_path / "other.zarr", mode="w").attrs["hello"] = 1
    return tmp_path / "other.zarr"


def _empty(tmp_path: Path, model_path: Path) -> Path:
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


MODEL_CASES = {
    "pickle file": (_pickle_file, "is a file, not a bigkernel model.*pickles and other files are never loaded"),
    "pickle in a folder": (_pickle_in_folder, "is not a bigkernel model"),
    "truncated store": (_truncated, "damaged or truncated bigkernel model"),
    "unfinished store": (_attrs(complete=False), "unfinished model store"),
    "newer format": (_attrs(format_version=99), "model format 99 .* upgrade bigkernel"),
    "foreign zarr group": (_foreign, "expected format 'bigkernel-model', found None"),
    "empty folder": (_empty, "not a bigkernel model"),
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_bad_model_stores(case, tmp_path, data_dir, model_path, caplog):
    make, match = MODEL_CASES[case]
    path = make(tmp_path, model_path)
    with pytest.raises(ModelFormatError, match=match):
        bigkernel.load(path)
    out = tmp_path / "pred.zarr"
    cli_error(["predict", str(path), str(data_dir / "new.zarr"), "-o", str(out)], caplog, ModelFormatError, match)
    assert not out.exists() and not (tmp_path / "PWNED").exists()


def test_pickle_through_a_real_subprocess(tmp_path, data_dir, model_path):
    path = _pickle_file(tmp_path, model_path)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bigkernel.cli",
            "predict",
            str(path),
            str(data_dir / "new.zarr"),
            "-o",
            str(tmp_path / "pred.zarr"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == EXIT_USER_ERROR
    assert "ModelFormatError: " in r.stderr and "never loaded" in r.stderr
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "pred.zarr").exists()


# --------------------------------------------------------------------------------------------
# Cluster: an address where no scheduler answers
# --------------------------------------------------------------------------------------------


def test_unreachable_scheduler(tmp_path, data_dir, model_path, caplog):
    import dask

    from bigkernel.jobs.cluster import client_from_config
    from bigkernel.jobs.config import ClusterConfig

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    match = f"could not connect to the Dask scheduler at {address} within 1s"
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        with pytest.raises(ClusterError, match=match):
            with client_from_config(ClusterConfig(address=address, local=None)):
                pass
        job = write_job(tmp_path, job_text(data_dir / "train.zarr", address=address))
        cli_error(["-q", "run", str(job)], caplog, ClusterError, match)
    assert_nothing_finished(tmp_path / "out")
    cli_error(
        [
            "predict",
            str(model_path),
            str(data_dir / "new.zarr"),
            "-o",
            str(tmp_path / "p.zarr"),
            "--address",
            "http://10.0.0.5:8786",
        ],
        caplog,
        ClusterError,
        "'http://10.0.0.5:8786' is not a Dask scheduler address: unknown address scheme 'http'",
    )
    assert not (tmp_path / "p.zarr").exists()


def test_a_client_that_never_connected_is_not_used(caplog):
    """Found while writing this suite: distributed keeps a ``Client`` whose address it could not
    parse registered as the default client, and a compute on it waits forever. The job's own
    connection no longer registers one (previous test), and the API ignores such a client."""
    from bigkernel.runtime import active_client

    assert active_client() is None  # the bad --address above left no default client behind
    with pytest.raises(ValueError, match="unknown address scheme"):
        distributed.Client("http://10.0.0.5:8786")  # a user's mistake, outside bigkernel
    zombie = distributed.default_client()
    try:
        assert zombie.status != "running"
        with caplog.at_level(logging.WARNING, logger="bigkernel"):
            assert active_client() is None
            X, y = friedman(200)
            RandomFeatureRidge(n_components=8).fit(da.from_array(X, chunks=(100, 10)), da.from_array(y, chunks=100))
        assert "ignoring the default Dask client" in caplog.text
    finally:
        zombie.close()


# --------------------------------------------------------------------------------------------
# Bootstrap: a store written by another job
# --------------------------------------------------------------------------------------------


def test_bootstrap_store_of_another_job(tmp_path, data_dir, scheduler, caplog):
    boot = "bootstrap: {{n_bootstraps: 2, eval_grid: {{n_points: 5}}, store: {store}}}\n"
    store = tmp_path / "a" / "bootstrap.zarr"
    job_a = write_job(
        tmp_path,
        job_text(data_dir / "train.zarr", address=scheduler).replace("output: out", "output: a")
        + boot.format(store=store),
    )
    assert main(["-q", "run", str(job_a)]) == 0
    done = zarr.open_array(str(store), path="done", mode="r")[:].copy()
    # job b: another seed (so other resamples), pointed at job a's store
    job_b = write_job(
        tmp_path, job_text(data_dir / "train.zarr", address=scheduler) + "seed: 1\n" + boot.format(store=store)
    )
    cli_error(["-q", "run", str(job_b)], caplog, StoreMismatchError, "seed: expected")
    # refused before the fit: no model, nothing that looks done
    assert_nothing_finished(tmp_path / "out")
    assert not (tmp_path / "out" / "model.zarr").exists()
    assert not (tmp_path / "out" / "bootstrap_band.zarr").exists()
    np.testing.assert_array_equal(zarr.open_array(str(store), path="done", mode="r")[:], done)
