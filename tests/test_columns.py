"""Columns by name everywhere (issue 19): a target-first or reordered table gives the same model,
predictions, update and band as the ordered one (jobs and CLI, CSV and Parquet); a job's
``predict:`` and ``bootstrap.eval`` default to the model's columns; an ``id`` column is passed
through to predictions; zarr groups of named 1-D columns are tables; outputs name features."""

import json
import textwrap

import numpy as np
import pandas as pd
import pytest
import zarr

import bigkernel
from bigkernel import RandomFeatureRidge, bootstrap, eval_grid, open_source
from bigkernel.cli import main
from bigkernel.errors import DataError, DataNotFoundError, ExtrapolationWarning, ParameterError

X_COLS = ["age", "income", "score"]


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """The same rows as an ordered CSV (features, target, id) and as a target-first, reordered
    CSV and Parquet; features on different scales, so a swap of columns changes the model."""
    d = tmp_path_factory.mktemp("columns")
    rng = np.random.default_rng(1)
    n = 3000
    df = pd.DataFrame({"age": rng.uniform(20, 70, n), "income": rng.uniform(1, 5, n), "score": rng.normal(size=n)})
    df["y"] = np.sin(df.age / 10) + 0.5 * df.income + 0.1 * rng.normal(size=n)
    df["cid"] = [f"c{i:05d}" for i in range(n)]
    df.to_csv(d / "ordered.csv", index=False)
    first = df[["y", "cid", "score", "income", "age"]]
    first.to_csv(d / "first.csv", index=False)
    first.to_parquet(d / "first.parquet", row_group_size=700)
    return d, df


def _job(d, name, train, extra=""):
    path = d / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        output: out_{name}
        data:
          train: {{path: {train}, x: {json.dumps(X_COLS)}, y: y}}
        model: {{gamma: 0.5, n_components: 48, alpha: 0.1, standardize: true}}
        plots: false
        progress: false
        cluster:
          local: {{n_workers: 1, threads_per_worker: 2}}
        """)
        + textwrap.dedent(extra)
    )
    assert main(["-q", "run", str(path)]) == 0
    return d / f"out_{name}"


@pytest.fixture(scope="module")
def jobs(tables):
    """The ordered CSV's job and the target-first CSV's and Parquet's, each predicting the
    target-first Parquet (x not given: the model's columns) with the id column."""
    d, df = tables
    predict = "predict: {path: first.parquet, id: cid, output: predictions.csv}\n"
    return {src: _job(d, src.replace(".", "_"), src, predict) for src in ("ordered.csv", "first.csv", "first.parquet")}


def test_target_first_tables_fit_the_same_model_in_a_job(jobs):
    """Issue 19: a target-first CSV trained on the wrong columns (R² 0.947 vs 0.996)."""
    ref = bigkernel.load(jobs["ordered.csv"] / "model.zarr")
    want = json.loads((jobs["ordered.csv"] / "metrics.json").read_text())["scores"]
    assert want["holdout"]["r2"] > 0.95
    for src in ("first.csv", "first.parquet"):
        m = bigkernel.load(jobs[src] / "model.zarr")
        assert list(m.feature_names_in_) == X_COLS
        np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
        got = json.loads((jobs[src] / "metrics.json").read_text())["scores"]
        assert got["holdout"]["r2"] == pytest.approx(want["holdout"]["r2"], rel=1e-9)


def test_job_predict_defaults_to_the_model_columns_and_passes_the_id_through(tables, jobs):
    _, df = tables
    for out in jobs.values():
        pred = pd.read_csv(out / "predictions.csv")
        assert list(pred.columns) == ["cid", "y_pred"]
        assert pred["cid"].tolist() == df["cid"].tolist()  # rows aligned, strings kept
        model = bigkernel.load(out / "model.zarr")
        np.testing.assert_allclose(pred["y_pred"], model.predict(df[X_COLS]), rtol=1e-12)


def test_job_predict_columns_in_another_order_are_refused(tables, caplog):
    d, _ = tables
    path = d / "bad.yaml"
    path.write_text(
        f"output: out_bad\ndata:\n  train: {{path: first.csv, x: {json.dumps(X_COLS)}, y: y}}\n"
        "model: {n_components: 16}\nplots: false\nprogress: false\n"
        f"predict: {{path: first.parquet, x: {json.dumps(X_COLS[::-1])}}}\n"
    )
    assert main(["-q", "run", str(path)]) == 2
    assert "names and order must match the fit" in caplog.text
    assert not (d / "out_bad" / "model.zarr").exists()  # refused before the fit


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".zarr"])
def test_predict_command_passes_an_id_column_through(tables, jobs, tmp_path, suffix, capsys):
    d, df = tables
    model = jobs["ordered.csv"] / "model.zarr"
    out = tmp_path / f"p{suffix}"
    assert main(["-q", "predict", str(model), str(d / "first.csv"), "-o", str(out), "--id", "cid"]) == 0
    want = bigkernel.load(model).predict(df[X_COLS])
    if suffix == ".zarr":
        g = zarr.open_group(out, mode="r")
        assert g.attrs["id"] == "cid" and sorted(g.array_keys()) == ["cid", "y_pred"]
        ids, pred = g["cid"][:].tolist(), g["y_pred"][:]
    else:
        got = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
        assert list(got.columns) == ["cid", "y_pred"]
        ids, pred = got["cid"].tolist(), got["y_pred"].to_numpy()
    assert ids == df["cid"].tolist()
    np.testing.assert_allclose(pred, want, rtol=1e-12)
    # a missing id column is the clear error of a missing column
    assert main(["-q", "predict", str(model), str(d / "first.csv"), "-o", str(tmp_path / "q.csv"), "--id", "nope"]) == 2


def test_id_rows_stay_aligned_over_many_partitions_on_a_cluster(tmp_path, monkeypatch, caplog):
    """Numeric ids from a CSV read in many partitions, through a job on a LocalCluster."""
    import bigkernel.data.tables as tables

    rng = np.random.default_rng(0)
    n = 20_000
    df = pd.DataFrame({"y": rng.normal(size=n), "b": rng.uniform(size=n), "a": rng.uniform(size=n)})
    df.insert(1, "key", rng.permutation(n) * 7 + 3)
    df.to_csv(tmp_path / "t.csv", index=False)
    monkeypatch.setattr(tables, "CSV_BLOCKSIZE", 100_000)
    assert tables._read(str(tmp_path / "t.csv"), None).npartitions > 4
    (tmp_path / "k.yaml").write_text(
        "output: out\ndata:\n  train: {path: t.csv, x: [a, b], y: y}\nmodel: {n_components: 16, alpha: 1.0}\n"
        "plots: false\nprogress: false\ncluster:\n  local: {n_workers: 1, threads_per_worker: 2}\n"
        "predict: {path: t.csv, id: key, output: p.parquet}\n"
    )
    assert main(["-q", "run", str(tmp_path / "k.yaml")]) == 0
    got = pd.read_parquet(tmp_path / "out" / "p.parquet")
    assert got["key"].dtype.kind == "i" and got["key"].tolist() == df["key"].tolist()
    model = bigkernel.load(tmp_path / "out" / "model.zarr")
    np.testing.assert_allclose(got["y_pred"], model.predict(df[["a", "b"]]), rtol=1e-12)
    assert "run_spec" not in caplog.text


def test_update_reads_new_rows_by_name(tables, tmp_path):
    """`bigkernel update` on a target-first CSV or Parquet adds the same rows as the ordered
    CSV (x and y by the model's names)."""
    d, df = tables
    fitted = RandomFeatureRidge(gamma=0.01, n_components=32, alpha=0.1, random_state=0).fit(
        df[X_COLS][:1000], df.y[:1000]
    )
    model = fitted.save(tmp_path / "m.zarr")
    coefs = []
    for src in ("ordered.csv", "first.csv", "first.parquet"):
        out = tmp_path / f"u_{src}.zarr"
        assert main(["-q", "update", str(model), str(d / src), "-o", str(out)]) == 0
        coefs.append(bigkernel.load(out).coef_)
    want = RandomFeatureRidge(gamma=0.01, n_components=32, alpha=0.1, random_state=0)
    want.partial_fit(df[X_COLS][:1000], df.y[:1000]).partial_fit(df[X_COLS], df.y)
    for c in coefs:
        np.testing.assert_allclose(c, want.coef_, rtol=1e-8, atol=1e-10)


def test_bootstrap_eval_source_and_grid_by_name(tables, tmp_path):
    """bootstrap.eval from a reordered, target-first table (x not given: the model's columns)
    gives the band at the right points; eval_grid takes a column name; the band CSV, the
    summary and metrics.json name the features."""
    d, df = tables
    df.iloc[:6][["cid", "score", "y", "income", "age"]].to_parquet(d / "eval_first.parquet")
    out = _job(d, "b", "first.csv", "bootstrap: {n_bootstraps: 3, eval: {path: eval_first.parquet}}\n")
    band = pd.read_csv(out / "bootstrap_band.csv")
    assert list(band.columns[:4]) == ["point", *X_COLS]
    np.testing.assert_array_equal(band[X_COLS].to_numpy(), df[X_COLS].to_numpy()[:6])
    model = bigkernel.load(out / "model.zarr")
    np.testing.assert_allclose(band["fitted"], model.predict(df[X_COLS].iloc[:6]), rtol=1e-12)
    assert (band["lower"] <= band["upper"]).all()

    grid = _job(
        d, "g", "first.parquet", "bootstrap: {n_bootstraps: 3, plot: true, eval_grid: {feature: income, n_points: 7}}\n"
    )
    band = pd.read_csv(grid / "bootstrap_band.csv")
    np.testing.assert_allclose(band["income"], np.linspace(df.income.min(), df.income.max(), 7))
    assert band["age"].nunique() == 1 and band["score"].nunique() == 1
    metrics = json.loads((grid / "metrics.json").read_text())
    assert metrics["bootstrap"]["features"] == X_COLS
    assert "(age, income, score)" in (grid / "summary.txt").read_text()


def test_bootstrap_eval_grid_name_errors(tables, tmp_path, caplog):
    d, df = tables
    path = d / "grid_bad.yaml"
    path.write_text(
        f"output: out_grid_bad\ndata:\n  train: {{path: first.csv, x: {json.dumps(X_COLS)}, y: y}}\n"
        "model: {n_components: 16}\nplots: false\nprogress: false\n"
        "bootstrap: {n_bootstraps: 2, eval_grid: {feature: salary}}\n"
    )
    assert main(["-q", "run", str(path)]) == 2
    assert "no column 'salary'; the columns are ['age', 'income', 'score']" in caplog.text
    assert not (d / "out_grid_bad" / "model.zarr").exists()
    # eval columns listed in another order than the fit's: refused (they were read by position)
    df.iloc[:3].to_csv(d / "eval3.csv", index=False)
    path.write_text(
        f"output: out_grid_bad\ndata:\n  train: {{path: first.csv, x: {json.dumps(X_COLS)}, y: y}}\n"
        "model: {n_components: 16}\nplots: false\nprogress: false\n"
        f"bootstrap: {{n_bootstraps: 2, eval: {{path: eval3.csv, x: {json.dumps(X_COLS[::-1])}}}}}\n"
    )
    caplog.clear()
    assert main(["-q", "run", str(path)]) == 2
    assert "bootstrap.eval.x names columns ['score', 'income', 'age']" in caplog.text
    assert not (d / "out_grid_bad" / "model.zarr").exists()


def test_zarr_group_of_named_columns_is_a_table(tables, jobs, tmp_path):
    """x: [a, b] on a zarr group of 1-D arrays: stacked by name, lazily, with the names as the
    model's columns; the same model as the table's; predict finds the columns by name."""
    d, df = tables
    g = zarr.open_group(tmp_path / "cols.zarr", mode="w")
    for name, chunk in (("score", 500), ("y", 700), ("age", 1000), ("income", 300)):
        g.create_array(name, shape=(len(df),), chunks=(chunk,), dtype="float64")[:] = df[name].to_numpy()
    g.create_array("cid", shape=(len(df),), chunks=(1000,), dtype=str)[:] = df["cid"].to_numpy()
    ds = open_source(tmp_path / "cols.zarr", x=X_COLS, y="y", chunk_rows=1000)
    assert ds.columns == tuple(X_COLS) and ds.X.numblocks == (3, 1)
    np.testing.assert_array_equal(ds.X.compute(), df[X_COLS].to_numpy())
    out = _job(tmp_path, "z", str(tmp_path / "cols.zarr"))
    m, ref = bigkernel.load(out / "model.zarr"), bigkernel.load(jobs["ordered.csv"] / "model.zarr")
    assert list(m.feature_names_in_) == X_COLS
    np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-9, atol=1e-12)
    # predict a group of named columns: x defaults to the model's names, the id rides along
    assert main(["-q", "predict", str(out / "model.zarr"), str(tmp_path / "cols.zarr"), "-o", str(tmp_path / "p.csv"),
                 "--id", "cid"]) == 0  # fmt: skip
    pred = pd.read_csv(tmp_path / "p.csv")
    assert pred["cid"].tolist() == df["cid"].tolist()
    np.testing.assert_allclose(pred["y_pred"], m.predict(df[X_COLS]), rtol=1e-12)
    # clear errors: a missing name lists the arrays found; lengths must agree
    with pytest.raises(DataNotFoundError, match=r"no array 'salary'; arrays found: \['age', 'cid', 'income'"):
        open_source(tmp_path / "cols.zarr", x=["age", "salary"], y="y")
    g.create_array("short", shape=(10,), dtype="float64")
    with pytest.raises(DataError, match="different lengths"):
        open_source(tmp_path / "cols.zarr", x=["age", "short"], y="y")


def test_api_bootstrap_refuses_reordered_frames_and_names_features():
    """bootstrap() on a fitted model reuses its feature map: a DataFrame in another order would
    be used by position (it was, silently). Names also reach eval_grid and the warning."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.uniform(size=(400, 3)), columns=["a", "b", "c"])
    y = 3 * df.a + np.sin(5 * df.b)
    m = RandomFeatureRidge(n_components=16, alpha=0.1, random_state=0).fit(df, y)
    E = eval_grid(df, feature="b", n_points=4)
    np.testing.assert_allclose(E[:, 1], np.linspace(df.b.min(), df.b.max(), 4))
    with pytest.raises(ParameterError, match=r"no column 'z'; the columns are \['a', 'b', 'c'\]"):
        eval_grid(df, feature="z")
    with pytest.raises(DataError, match="the same columns in another order"):
        bootstrap(m, df[["c", "b", "a"]], y, E, n_bootstraps=2, random_state=0)
    with pytest.raises(DataError, match="X_eval has columns"):
        bootstrap(m, df, y, pd.DataFrame(E, columns=["b", "a", "c"]), n_bootstraps=2, random_state=0)
    with pytest.warns(ExtrapolationWarning, match=r"feature c: 4 points"):
        bootstrap(m, df, y, E + [0, 0, 5], n_bootstraps=2, random_state=0)
    # an unfitted estimator (the usual call): X_eval is checked against X's columns (it was
    # used by position, silently, when reordered or renamed)
    fresh = RandomFeatureRidge(n_components=16, alpha=0.1, random_state=0)
    for other in (["c", "a", "b"], ["q", "b", "c"]):
        with pytest.raises(DataError, match=r"but X has \['a', 'b', 'c'\]: names and order must match X's"):
            bootstrap(fresh, df, y, pd.DataFrame(E, columns=other), n_bootstraps=2, random_state=0)
    same = bootstrap(fresh, df, y, pd.DataFrame(E, columns=["a", "b", "c"]), n_bootstraps=2, random_state=0)
    np.testing.assert_array_equal(same.mean, bootstrap(fresh, df, y, E, n_bootstraps=2, random_state=0).mean)


def test_band_figure_names_the_feature(tables):
    from bigkernel.jobs.plots import band_figure

    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.uniform(size=(200, 2)), columns=["age", "income"])
    y = df.age + df.income
    m = RandomFeatureRidge(n_components=8, alpha=0.1, random_state=0).fit(df, y)
    E = eval_grid(df, feature="income", n_points=5)
    res = bootstrap(m, df, y, E, n_bootstraps=2, random_state=0)
    fig = band_figure(res, df, y, E, feature="income", feature_names=["age", "income"])
    ax = fig.axes[0]
    assert ax.get_xlabel() == "income" and "along income" in ax.get_title()
    # without names: x0, x1 as before
    assert band_figure(res, df.to_numpy(), y, E, feature=1).axes[0].get_xlabel() == "x1"


def test_config_checks_id_and_grid_names(tmp_path):
    from tests._yaml import error_of, write

    made = "output: out\ndata:\n  make: {path: d.zarr, n_samples: 100}\n"
    assert "predict.id" in error_of(write(tmp_path, made + "predict: {path: new.npy, id: cid}\n"))
    err = error_of(write(tmp_path, made + "bootstrap: {eval_grid: {feature: age}}\n"))
    assert "no column 'age'" in err and "no column names" in err
    table = "output: out\ndata:\n  make: {path: d.csv, n_samples: 100, n_features: 5}\n"
    assert "the columns of data.make are ['x0'" in error_of(
        write(tmp_path, table + "bootstrap: {eval_grid: {feature: age}}\n")
    )
    assert "column index >= 0 or a column name" in error_of(
        write(tmp_path, made + "bootstrap: {eval_grid: {feature: 1.5}}\n")
    )
    from bigkernel.jobs.config import load_config

    cfg = load_config(write(tmp_path, table + "bootstrap: {eval_grid: {feature: x3}}\npredict: {path: d.csv, id: y}\n"))
    assert cfg.bootstrap.eval_grid.feature == "x3" and cfg.predict.x is None and cfg.predict.id == "y"


def test_dask_dataframes_are_read_lazily_by_their_column_names():
    """A dask DataFrame X (and Series y): fit and predict as the pandas ones, lazily (predict
    returns a dask array), names remembered and checked; reordered columns are refused on every
    path (they raised AttributeError before; taken into memory they would have been used by
    position); a text column is refused from the dtypes, without reading the values."""
    import dask.array as da
    import dask.dataframe as dd

    from bigkernel import ExactKernelRidge

    rng = np.random.default_rng(1)
    df = pd.DataFrame(rng.normal(size=(600, 3)), columns=["a", "b", "c"])
    y = np.sin(df.a.to_numpy()) + df.b.to_numpy()
    ddf, ys = dd.from_pandas(df, npartitions=3), dd.from_pandas(pd.Series(y, name="t"), npartitions=3)
    for make in (
        lambda: RandomFeatureRidge(n_components=32, random_state=0, dtype="float64"),
        lambda: ExactKernelRidge(alpha=0.1),
    ):
        ref = make().fit(df, y)
        m = make().fit(ddf, ys)
        assert list(m.feature_names_in_) == ["a", "b", "c"] and m.target_names_in_ == ["t"]
        out = m.predict(ddf)
        assert isinstance(out, da.Array)
        # the exact path: CG to tol 1e-6 over other row blocks
        np.testing.assert_allclose(out.compute(), ref.predict(df), rtol=1e-6, atol=1e-6)
        bad = ddf[["c", "a", "b"]]
        with pytest.raises(DataError, match="the same columns in another order"):
            m.predict(bad)
        with pytest.raises(ValueError, match="same order"):
            m.predict(bad, return_std=True)
    text = dd.from_pandas(df.assign(city=["x", "y", "z"] * 200), npartitions=3)
    with pytest.raises(DataError, match="non-numeric columns"):
        RandomFeatureRidge(n_components=8).fit(text, ys)
