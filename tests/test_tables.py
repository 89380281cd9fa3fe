"""Tables end to end: Parquet and CSV inputs give the same model as zarr; missing / non-numeric
columns are errors; a job fitted on a table knows its columns; ``bigkernel predict`` reads and
writes tables; ``make-data`` writes them; the example table configs run."""

import functools
import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest
import zarr

import bigkernel
from bigkernel import RandomFeatureRidge, SyntheticSpec, make_data, open_source
from bigkernel.cli import main
from bigkernel.errors import DataError, DataNotFoundError, OutputExistsError
from tests._tolerance import assert_forward_close, primal_cond

COLS = [f"x{i}" for i in range(10)]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("tables")
    store = make_data(SyntheticSpec("friedman1", 6000, 10, 1.0, 0), d / "d.zarr", chunk_rows=2048)
    g = zarr.open_group(store, mode="r")
    df = pd.DataFrame(g["X"][:], columns=COLS).assign(target=g["y"][:], name="row")
    df.to_parquet(d / "d.parquet", row_group_size=1500)
    (d / "parts").mkdir()
    for i in range(3):
        df.iloc[i * 2000 : (i + 1) * 2000].to_parquet(d / "parts" / f"part{i}.parquet")
    df.to_csv(d / "d.csv", index=False)
    return d


def test_parquet_csv_and_zarr_give_the_same_model(sources):
    kw = dict(gamma=0.5, n_components=64, alpha=0.1, random_state=0, dtype="float64")
    zs = open_source(sources / "d.zarr")
    ref = RandomFeatureRidge(**kw).fit(zs.X, zs.y)
    cond = primal_cond(ref, zs.X.compute())
    for path in ("d.parquet", "parts", "d.csv"):
        ds = open_source(sources / path, x=COLS, y="target", chunk_rows=1024)
        m = RandomFeatureRidge(**kw).fit(ds.X, ds.y)
        # other chunks sum in another order; the solve amplifies that by its condition number
        # (an rtol=1e-9 on each coefficient measured 0.004-0.02 of itself across OpenBLAS kernels)
        assert_forward_close(m.coef_, ref.coef_, cond)


def test_missing_and_non_numeric_columns(sources):
    with pytest.raises(DataNotFoundError, match=r"no column\(s\) \['nope'\]; columns found"):
        open_source(sources / "d.parquet", x=COLS + ["nope"], y="target")
    with pytest.raises(DataError, match="non-numeric columns .*name"):
        open_source(sources / "d.csv", x=COLS[:3] + ["name"], y="target")
    with pytest.raises(DataNotFoundError):
        open_source(sources / "missing.parquet", x=COLS, y="target")


def test_table_through_a_job(sources, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: t\noutput: out\ndata:\n  train:\n    path: {sources / 'd.parquet'}\n    x: {json.dumps(COLS)}\n"
        "    y: target\nmodel: {gamma: 0.5, n_components: 32, alpha: 0.1, dtype: float64}\nplots: false\n"
        "cluster:\n  local: {n_workers: 1, threads_per_worker: 1}\n"
    )
    assert main(["-q", "run", str(job)]) == 0
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["data"]["n_features"] == 10 and m["data"]["n_samples"] == 6000
    # the model knows its columns, as after a DataFrame fit, and checks them at predict
    model = bigkernel.load(tmp_path / "out" / "model.zarr")
    np.testing.assert_array_equal(model.feature_names_in_, COLS)
    df = pd.read_parquet(sources / "d.parquet")
    pred = model.predict(df[COLS])
    with pytest.raises(ValueError, match="Feature names must be in the same order"):
        model.predict(df[COLS[::-1]])
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        np.testing.assert_array_equal(model.predict(df[COLS].to_numpy()), pred)


def _table_job(sources, tmp_path, extra=""):
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: t\noutput: out\ndata:\n  train:\n    path: {sources / 'd.csv'}\n    x: {json.dumps(COLS)}\n"
        "    y: target\nmodel: {gamma: 0.5, n_components: 32, alpha: 0.1, dtype: float64}\nprogress: false\nplots: false\n"
        "cluster:\n  local: {n_workers: 1, threads_per_worker: 1}\n" + extra
    )
    return job


@pytest.fixture
def split_csv(tmp_path, monkeypatch):
    """A CSV with a string column, read in several partitions (as a large CSV is)."""
    import bigkernel.data.tables as tables

    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.uniform(size=(40_000, 3)), columns=["a", "b", "c"]).assign(
        y=rng.normal(size=40_000), name="row"
    )
    df.to_csv(tmp_path / "s.csv", index=False)
    monkeypatch.setattr(tables, "CSV_BLOCKSIZE", 200_000)
    n_parts = tables._read(str(tmp_path / "s.csv"), ["a", "b", "c", "y"]).npartitions
    assert n_parts > 5
    return tmp_path / "s.csv", df, n_parts


def test_a_pass_reads_a_csv_once(split_csv, monkeypatch):
    """Found in issue 14: a fit read a CSV twice. X's and y's chunks were turned into delayed
    objects with their graphs optimized apart, and each fused in the read they share."""
    import dask.dataframe.io.csv as dask_csv

    path, df, n_parts = split_csv
    reads, read = [], dask_csv._read_csv

    @functools.wraps(read)  # dask inspects its signature
    def counting(*args, **kwargs):
        reads.append(1)
        return read(*args, **kwargs)

    monkeypatch.setattr(dask_csv, "_read_csv", counting)
    ds = open_source(path, x=["a", "b", "c"], y="y", chunk_rows=8000)
    reads.clear()
    m = RandomFeatureRidge(n_components=16, random_state=0, dtype="float64").fit(ds.X, ds.y)
    assert len(reads) == n_parts
    ref = RandomFeatureRidge(n_components=16, random_state=0, dtype="float64").fit(
        df[["a", "b", "c"]].to_numpy(), df["y"]
    )
    np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-9, atol=1e-11)


def test_passes_over_a_table_keep_their_keys_on_a_cluster(split_csv, caplog):
    """Found in issue 14: jobs on a CSV logged distributed's "Detected different `run_spec`
    ... can cause failures and deadlocks". A table's X and y are slices of one read; dask's
    low-level fusion defined their chunks' keys one way in an X-only pass and another in a pass
    over both, and the scheduler still held the previous pass's keys (not the string column:
    any multi-partition table did it). Passes now run unfused on a cluster. Before the fix
    this loop logged ~3 such warnings per round."""
    from distributed import Client, LocalCluster

    from bigkernel.runtime import compute

    path, df, _ = split_csv
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        ds = open_source(path, x=["a", "b", "c"], y="y", chunk_rows=8000)
        for _ in range(5):
            both, x_only, (head, _) = (
                compute(ds.X.sum(axis=0) + ds.y.sum(), client=client)[0],
                compute(ds.X.sum(axis=0), client=client)[0],
                compute(ds.X[:5000], ds.y[:5000], client=client),
            )
    assert "run_spec" not in caplog.text
    np.testing.assert_allclose(x_only, df[["a", "b", "c"]].sum().to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(both, x_only + df["y"].sum(), rtol=1e-12)
    np.testing.assert_array_equal(head, df[["a", "b", "c"]].to_numpy()[:5000])


def test_csv_job_with_a_string_column_warns_nothing(split_csv, capfd, caplog):
    """The job of issue 14's report: a CSV with a string column on a LocalCluster."""
    path, df, _ = split_csv
    job = path.parent / "job.yaml"
    job.write_text(
        "name: t\noutput: out\ndata:\n  train: {path: s.csv, x: [a, b, c], y: y}\n"
        "model: {gamma: 0.5, n_components: 32, alpha: 0.1, standardize: true, dtype: float64}\nprogress: false\n"
        "plots: false\ncluster:\n  local: {n_workers: 1, threads_per_worker: 1}\n"
        "predict: {path: s.csv, x: [a, b, c], output: pred.csv}\n"
    )
    assert main(["-q", "run", str(job)]) == 0
    # distributed logs through the root logger under pytest (caplog), to stderr otherwise
    assert "run_spec" not in caplog.text + capfd.readouterr().err, caplog.text
    pred = pd.read_csv(path.parent / "out" / "pred.csv")
    model = bigkernel.load(path.parent / "out" / "model.zarr")
    np.testing.assert_allclose(pred["y_pred"], model.predict(df[["a", "b", "c"]]), rtol=1e-12)


def test_job_prediction_columns_must_match_the_fit(sources, tmp_path):
    job = _table_job(sources, tmp_path, f"predict: {{path: {sources / 'd.parquet'}, x: {json.dumps(COLS[::-1])}}}\n")
    assert main(["-q", "run", str(job)]) == 2
    assert not (tmp_path / "out" / "model.zarr").exists()  # refused before the fit


@pytest.fixture(scope="module")
def named_model(sources, tmp_path_factory):
    """A model fitted through the API on a DataFrame of the table, saved."""
    df = pd.read_parquet(sources / "d.parquet")
    m = RandomFeatureRidge(gamma=0.5, n_components=32, alpha=0.1, random_state=0, dtype="float64").fit(
        df[COLS], df["target"]
    )
    path = m.save(tmp_path_factory.mktemp("model") / "m.zarr")
    return m, path, df


@pytest.mark.parametrize("data", ["d.csv", "d.parquet", "parts"])
@pytest.mark.parametrize("out", ["pred.csv", "pred.parquet", "pred.zarr", "pred"])
def test_predict_command_on_tables(sources, named_model, tmp_path, capsys, data, out):
    """`bigkernel predict MODEL TABLE -o OUT`: X columns default to the model's, the output
    format follows OUT's suffix, and the values equal the API's predictions."""
    m, model, df = named_model
    argv = ["-q", "predict", str(model), str(sources / data), "-o", str(tmp_path / out), "--chunk-rows", "1000"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(tmp_path / out), "n_samples": 6000}
    want = m.predict(df[COLS])
    if out.endswith(".csv"):
        got = pd.read_csv(tmp_path / out)
    elif out.endswith(".parquet"):
        assert len(os.listdir(tmp_path / out)) == 6  # a folder of parts, one per chunk
        got = pd.read_parquet(tmp_path / out)
    else:
        got = zarr.open_group(tmp_path / out, mode="r")
        assert got.attrs["complete"] is True
    assert list(got.keys() if out.endswith(("pred", ".zarr")) else got.columns) == ["y_pred"]
    np.testing.assert_allclose(np.asarray(got["y_pred"][:]), want, rtol=1e-12)
    assert [p for p in os.listdir(tmp_path) if "partial" in p] == []
    # refuses to overwrite, replaces with --overwrite
    assert main(argv) == 2
    assert main(argv + ["--overwrite"]) == 0


def test_predict_command_x_columns(sources, named_model, tmp_path, caplog):
    m, model, df = named_model
    # --x in the model's order: the same predictions; in another order: refused, as in memory
    out = tmp_path / "p.csv"
    assert main(["-q", "predict", str(model), str(sources / "d.csv"), "-o", str(out), "--x", ",".join(COLS)]) == 0
    np.testing.assert_allclose(pd.read_csv(out)["y_pred"], m.predict(df[COLS]), rtol=1e-12)
    assert (
        main(
            [
                "-q",
                "predict",
                str(model),
                str(sources / "d.csv"),
                "-o",
                str(tmp_path / "q.csv"),
                "--x",
                ",".join(COLS[::-1]),
            ]
        )
        == 2
    )
    assert "names and order must match the fit" in caplog.text and not (tmp_path / "q.csv").exists()
    # a model fitted on arrays has no names: a table needs --x, which then picks the columns
    X, y = df[COLS].to_numpy()[:, :3], df["target"].to_numpy()
    plain = RandomFeatureRidge(n_components=16, random_state=0, dtype="float64").fit(X, y)
    path = plain.save(tmp_path / "plain.zarr")
    caplog.clear()
    assert main(["-q", "predict", str(path), str(sources / "d.parquet"), "-o", str(tmp_path / "r.csv")]) == 2
    assert "fitted without column names" in caplog.text and "--x a,b,c" in caplog.text
    assert (
        main(
            [
                "-q",
                "predict",
                str(path),
                str(sources / "d.parquet"),
                "-o",
                str(tmp_path / "r.parquet"),
                "--x",
                "x0, x1,x2",
            ]
        )
        == 0
    )
    np.testing.assert_allclose(pd.read_parquet(tmp_path / "r.parquet")["y_pred"], plain.predict(X), rtol=1e-12)


def test_predict_to_table_multi_output(sources, tmp_path):
    import dask.array as da

    from bigkernel.io.predictions import predict_to_path

    df = pd.read_parquet(sources / "d.parquet")
    X, Y = df[COLS].to_numpy(), np.column_stack([df["target"], -df["target"]])
    m = RandomFeatureRidge(n_components=16, random_state=0, dtype="float64").fit(X, Y)
    predict_to_path(m, da.from_array(X, chunks=(1000, 10)), tmp_path / "p.csv.gz")
    got = pd.read_csv(tmp_path / "p.csv.gz")
    assert list(got.columns) == ["y_pred_0", "y_pred_1"]
    np.testing.assert_allclose(got.to_numpy(), m.predict(X), rtol=1e-12)
    with pytest.raises(OutputExistsError, match="pass overwrite=True"):
        predict_to_path(m, X, tmp_path / "p.csv.gz")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_make_data_writes_tables(tmp_path, suffix, caplog):
    """`make-data` by the output's suffix: the same rows as the zarr data set, columns x0.., y;
    reused when made with the same parameters, refused (not overwritten) otherwise."""
    ref = zarr.open_group(make_data(SyntheticSpec("friedman1", 3000, 6, 1.0, 4), tmp_path / "d.zarr"), mode="r")
    out = tmp_path / f"d{suffix}"
    argv = [
        "-q",
        "make-data",
        "friedman1",
        str(out),
        "--n-samples",
        "3000",
        "--n-features",
        "6",
        "--seed",
        "4",
        "--chunk-rows",
        "1000",
    ]
    assert main(argv) == 0
    df = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    assert list(df.columns) == [f"x{i}" for i in range(6)] + ["y"]
    np.testing.assert_array_equal(df.iloc[:, :6].to_numpy(), ref["X"][:])  # CSV floats round-trip exactly
    np.testing.assert_array_equal(df["y"].to_numpy(), ref["y"][:])
    mtime = os.path.getmtime(out)
    assert main(argv) == 0 and os.path.getmtime(out) == mtime  # reused
    assert main(argv[:-2]) == 0  # another chunking is the same data set
    assert main(argv[:4] + ["--n-samples", "2000"]) == 2
    assert "not a complete data set made with these parameters" in caplog.text
    assert main(argv[:4] + ["--n-samples", "2000", "--overwrite"]) == 0
    assert len(pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)) == 2000
    # a table without its marker is someone's data: never overwritten without --overwrite
    os.remove(f"{out}.bigkernel.json")
    assert main(argv[:4] + ["--n-samples", "2000"]) == 2


@pytest.mark.parametrize("name", ["friedman_csv.yaml", "friedman_parquet.yaml"])
def test_example_table_configs_run(tmp_path, name):
    """The example table jobs from a clean clone (copied, smaller n): they make their table,
    fit on its columns, and predict a table."""
    root = os.path.join(os.path.dirname(__file__), "..", "configs")
    (tmp_path / "configs").mkdir()
    text = open(os.path.join(root, name)).read()
    assert "n_samples: 50000" in text
    (tmp_path / "configs" / name).write_text(text.replace("n_samples: 50000", "n_samples: 4000"))
    assert main(["-q", "run", str(tmp_path / "configs" / name)]) == 0
    out = tmp_path / "runs" / name.removesuffix(".yaml")
    m = json.loads((out / "metrics.json").read_text())
    assert m["data"]["n_samples"] == 4000 and m["scores"]["holdout"]["r2"] > 0.6
    model = bigkernel.load(out / "model.zarr")
    np.testing.assert_array_equal(model.feature_names_in_, [f"x{i}" for i in range(10)])
    pred = m["outputs"]["predictions"]
    assert pred.endswith((".csv", ".parquet")) and os.path.exists(pred)
    shutil.rmtree(tmp_path / "runs")


def test_column_subset_of_a_multi_file_parquet_dataset(sources):
    """Found in issue 14: a subset of the columns of several Parquet files (prediction data:
    X without y) raised dask's "lengths does not match the number of partitions"."""
    df = pd.read_parquet(sources / "d.parquet")
    for x, y in ((COLS, None), (COLS[:4], "target"), (COLS[5:], None)):
        ds = open_source(sources / "parts", x=x, y=y, chunk_rows=1500)
        np.testing.assert_array_equal(ds.X.compute(), df[x].to_numpy())
        if y:
            np.testing.assert_array_equal(ds.y.compute(), df[y].to_numpy())


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_columns_are_taken_by_name_not_position(sources, named_model, tmp_path, suffix):
    """A target-first, reordered table gives the same data, model and predictions as the
    ordered one (read_csv(usecols=...) keeps the file's order: issue 19's silent mis-assignment)."""
    m, model, df = named_model
    shuffled = df[["target", "name"] + COLS[::-1]]
    path = tmp_path / f"shuffled{suffix}"
    shuffled.to_csv(path, index=False) if suffix == ".csv" else shuffled.to_parquet(path)
    ds = open_source(path, x=COLS, y="target")
    np.testing.assert_array_equal(ds.X.compute(), df[COLS].to_numpy())
    np.testing.assert_array_equal(ds.y.compute(), df["target"].to_numpy())
    out = tmp_path / "p.csv"
    assert main(["-q", "predict", str(model), str(path), "-o", str(out)]) == 0
    np.testing.assert_allclose(pd.read_csv(out)["y_pred"], m.predict(df[COLS]), rtol=1e-12)


def test_predict_command_names_a_far_column_of_a_users_table(sources, named_model, tmp_path, caplog):
    """A user's CSV as they have it — target first, columns shuffled, a string column — with one
    row far outside the training range: `bigkernel predict … -o out.zarr` writes the same values
    as the API and logs one extrapolation finding naming that column by its name."""
    import logging

    m, model, df = named_model
    far = df.copy()
    far.loc[17, "x3"] = 7.0  # trained on [0, 1]
    rng = np.random.default_rng(0)
    user = far[["target", "name", *rng.permutation(COLS)]]
    user.to_csv(tmp_path / "far.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="bigkernel"):
        assert main(["-q", "predict", str(model), str(tmp_path / "far.csv"), "-o", str(tmp_path / "p.zarr")]) == 0
    found = [r.getMessage() for r in caplog.records if "[extrapolation]" in r.getMessage()]
    assert len(found) == 1 and "1 of 6,000 rows" in found[0] and "'x3' = 7" in found[0], found
    got = zarr.open_group(tmp_path / "p.zarr", mode="r")["y_pred"][:]
    np.testing.assert_allclose(got, m.predict(far[COLS]), rtol=1e-12)
