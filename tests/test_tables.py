"""Parquet and CSV inputs give the same model as zarr; missing / non-numeric columns are errors."""

import json

import pandas as pd
import pytest
import zarr

from bigkernel import RandomFeatureRidge, SyntheticSpec, make_data, open_source
from bigkernel.cli import main
from bigkernel.errors import DataError, DataNotFoundError
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
    kw = dict(gamma=0.5, n_components=64, alpha=0.1, random_state=0)
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
        "    y: target\nmodel: {gamma: 0.5, n_components: 32, alpha: 0.1}\n"
        "cluster:\n  local: {n_workers: 1, threads_per_worker: 1}\n"
    )
    assert main(["-q", "run", str(job)]) == 0
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["data"]["n_features"] == 10 and m["data"]["n_samples"] == 6000
