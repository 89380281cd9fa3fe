"""Progress of long passes: log lines every PROGRESS_INTERVAL_S seconds when stderr is not a
terminal (here: pytest's capture), through the API and in a job's stage lines."""

import logging

import dask.array as da
import pytest

import bigkernel
from bigkernel import runtime
from bigkernel.cli import main


def _data():
    X = da.random.RandomState(0).random_sample((20_000, 5), chunks=1_000)
    return X, X.sum(axis=1)


@pytest.fixture(autouse=True)
def _fast_polls(monkeypatch):
    """Local passes polled every 5 ms: these passes take well under the default 0.5 s poll."""
    monkeypatch.setattr(runtime, "PROGRESS_POLL_S", 0.005)


def _lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "bigkernel.runtime"]


def test_progress_lines_in_a_fit_and_none_without(monkeypatch, caplog):
    monkeypatch.setattr(runtime, "PROGRESS_INTERVAL_S", 0.0)  # every update: this fit takes < 1 s
    X, y = _data()
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        bigkernel.RandomFeatureRidge(n_components=64, alpha=1.0).fit(X, y)
        assert _lines(caplog) == []  # off unless asked for
        with bigkernel.progress_bars(rows=20_000):
            bigkernel.RandomFeatureRidge(n_components=64, alpha=1.0).fit(X, y)
    lines = _lines(caplog)
    assert lines and all(line.startswith("fit: ≈ ") and " / 20,000 rows (" in line for line in lines), lines
    assert all(" tasks), " in line and line.endswith(" s") for line in lines)


def test_progress_lines_are_throttled(monkeypatch, caplog):
    monkeypatch.setattr(runtime, "PROGRESS_INTERVAL_S", 3600.0)
    X, y = _data()
    with caplog.at_level(logging.INFO, logger="bigkernel"), bigkernel.progress_bars():
        bigkernel.RandomFeatureRidge(n_components=64, alpha=1.0).fit(X, y)
    assert _lines(caplog) == []


def test_progress_line_format():
    assert runtime.progress_line("fit", 412, 1024, 45.2) == "fit: 412/1,024 tasks (40 %), 45 s"
    line = runtime.progress_line("fit", 614, 1024, 31.0, rows=2_000_000)
    assert line == "fit: ≈ 1,199,219 / 2,000,000 rows (60 %; 614/1,024 tasks), 31 s"


def test_a_job_prints_stage_lines_with_rows(tmp_path, monkeypatch, capfd):
    """On a LocalCluster, stderr not a terminal: the fit's lines on the terminal and in job.log."""
    from bigkernel.data.synthetic import SyntheticSpec, make_data

    monkeypatch.setattr(runtime, "PROGRESS_INTERVAL_S", 0.0)
    make_data(SyntheticSpec("friedman1", 12_000, 5, 1.0, 0), tmp_path / "d.zarr", chunk_rows=1000)
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: t\noutput: out\ndata:\n  train: {{path: {tmp_path / 'd.zarr'}}}\n  chunk_rows: 1000\n"
        "  holdout_fraction: 0.25\nmodel: {gamma: 0.5, n_components: 256, alpha: 0.1}\n"
        "cluster:\n  local: {n_workers: 1, threads_per_worker: 1}\nplots: false\n"
    )
    assert main(["run", str(job)]) == 0
    err = capfd.readouterr().err
    stage = [line for line in err.splitlines() if line.startswith("INFO bigkernel.runtime: fit: ≈ ")]
    assert stage and all(" / 12,000 rows (" in line for line in stage), err
    log = (tmp_path / "out" / "job.log").read_text()
    assert "INFO bigkernel.runtime: fit: ≈ " in log and " / 12,000 rows (" in log
    # -q: no progress at all
    job.write_text(job.read_text() + "overwrite: true\n")
    assert main(["-q", "run", str(job)]) == 0
    assert "bigkernel.runtime" not in capfd.readouterr().err
    assert "bigkernel.runtime: fit" not in (tmp_path / "out" / "job.log").read_text()


@pytest.fixture(autouse=True)
def _no_tty(monkeypatch):
    """Log lines, not bars, whatever runs the tests."""
    monkeypatch.setattr(runtime.sys.stderr, "isatty", lambda: False, raising=False)


@pytest.mark.parametrize(
    "make",
    [
        lambda v: bigkernel.RandomFeatureRidge(n_components=64, alpha=1.0, verbose=v),
        lambda v: bigkernel.RandomFeatureRidgeCV(n_components=64, alphas=[0.1, 1.0], cv=2, verbose=v),
        lambda v: bigkernel.NystroemRidge(n_components=64, alpha=1.0, verbose=v),
    ],
)
def test_verbose_estimators_log_progress_of_fit_and_predict(make, monkeypatch, caplog):
    monkeypatch.setattr(runtime, "PROGRESS_INTERVAL_S", 0.0)
    X, y = _data()
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        quiet = make(0).fit(X, y)
        quiet.predict(X).compute()
        assert _lines(caplog) == []
        model = make(1).fit(X, y)
        fit_lines = _lines(caplog)
        caplog.clear()
        pred = model.predict(X[:4000].compute())  # numpy in, numpy out: no pass, no line
        assert _lines(caplog) == [] and pred.shape == (4000,)
    assert fit_lines and all(" tasks" in line for line in fit_lines), fit_lines


def test_verbose_is_a_parameter_that_clones_and_is_checked(tmp_path):
    from sklearn.base import clone

    from bigkernel.errors import ParameterError

    model = bigkernel.RandomFeatureRidge(n_components=16, verbose=2)
    assert clone(model).get_params()["verbose"] == 2
    X, y = _data()
    with pytest.raises(ParameterError, match="verbose"):
        bigkernel.RandomFeatureRidge(verbose=-1).fit(X, y)
    # a display setting, not part of the saved model: the store is as before, a load gets 0
    model.fit(X[:2000].compute(), y[:2000].compute())
    path = model.save(tmp_path / "m.zarr")
    import zarr

    assert "verbose" not in zarr.open_group(path, mode="r").attrs["params"]
    assert bigkernel.load(path).verbose == 0


def test_progress_bars_cover_a_bootstrap(monkeypatch, caplog):
    monkeypatch.setattr(runtime, "PROGRESS_INTERVAL_S", 0.0)
    X, y = _data()
    model = bigkernel.RandomFeatureRidge(n_components=32, alpha=1.0, random_state=0)
    with caplog.at_level(logging.INFO, logger="bigkernel"), bigkernel.progress_bars(rows=20_000):
        bigkernel.bootstrap(model, X, y, X[:50], n_bootstraps=4, random_state=0)
    lines = _lines(caplog)
    assert any(line.startswith("bootstrap") and " / 20,000 rows (" in line for line in lines), lines


def test_bootstrap_verbose_logs_the_replicates_pass(monkeypatch, caplog):
    monkeypatch.setattr(runtime, "PROGRESS_INTERVAL_S", 0.0)
    X, y = _data()
    model = bigkernel.RandomFeatureRidge(n_components=32, alpha=1.0, random_state=0)
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        bigkernel.bootstrap(model, X, y, X[:50], n_bootstraps=4, random_state=0)
        assert [line for line in _lines(caplog) if line.startswith("bootstrap")] == []
        bigkernel.bootstrap(model, X, y, X[:50], n_bootstraps=4, random_state=1, verbose=1)
    assert any(line.startswith("bootstrap: ") and " tasks" in line for line in _lines(caplog)), _lines(caplog)
