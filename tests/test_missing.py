"""Missing values in real tables: the NaN report of the one pass (true first bad row, every bad
range, counted, columns named) through the API and a job on a real LocalCluster."""

from __future__ import annotations

import logging
import re
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bigkernel import RandomFeatureRidge, open_source
from bigkernel.cli import EXIT_USER_ERROR, main
from bigkernel.errors import NonFiniteError

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def scheduler() -> str:
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as cluster:
        yield cluster.scheduler_address


def _table(n: int = 12_000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    y = np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.standard_normal(n)
    return pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "y": y})


#: NaNs in several chunks of 2048 rows: rows 1349, [5000, 5003) (b), 9000 (y), 11998-11999 (c)
BAD = {"b": [1349, 5000, 5001, 5002], "y": [9000], "c": [11998, 11999]}


def _with_nans(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for col, rows in BAD.items():
        df.loc[rows, col] = np.nan
    return df


def _write(df: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".csv":
        df.to_csv(path, index=False)
    else:  # several files: a multi-part Parquet dataset
        path.mkdir()
        for i, lo in enumerate(range(0, len(df), 4000)):
            df.iloc[lo : lo + 4000].to_parquet(path / f"part.{i}.parquet")
    return path


REPORT = (
    r"X and y contain NaN or inf \(X columns 'b', 'c'; y\): 7 bad rows, first at row 1349; "
    r"bad rows \[1349, 1350\), \[5000, 5003\), \[9000, 9001\), \[11998, 12000\)\."
)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_nan_report_names_every_bad_range_once(suffix, tmp_path, scheduler, caplog):
    path = _write(_with_nans(_table()), tmp_path / f"t{suffix}")
    # API, on the cluster: the summary behind the error holds the whole pass's bad rows
    ds = open_source(str(path), ["a", "b", "c"], "y", chunk_rows=2048)
    with distributed.Client(scheduler):
        with pytest.raises(NonFiniteError) as info:
            RandomFeatureRidge(n_components=16).fit(ds.X, ds.y)
    bad = info.value.bad_rows
    assert (bad.first, bad.n_rows, bad.n_ranges) == (1349, 7, 4)
    assert bad.head == [(1349, 1350), (5000, 5003), (9000, 9001), (11998, 12000)]
    assert str(info.value).startswith("X and y contain NaN or inf (X columns 1, 2; y): 7 bad rows, first at row 1349")
    # a job: the message names the columns and the fix, once
    job = tmp_path / "job.yaml"
    job.write_text(
        textwrap.dedent(f"""\
        name: t
        output: out
        data:
          train: {{path: {path}, x: [a, b, c], y: y}}
          chunk_rows: 2048
        model: {{gamma: 0.5, n_components: 16, alpha: 0.01}}
        cluster: {{address: '{scheduler}'}}
        progress: false
        plots: false
        """)
    )
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="bigkernel"):
        assert main(["-q", "run", str(job)]) == EXIT_USER_ERROR
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert re.search(REPORT, errors[-1]), errors[-1]
    assert "missing: drop" in errors[-1] and "missing: impute" in errors[-1]


def test_many_ranges_are_counted_not_listed():
    from bigkernel.numerics.nonfinite import MAX_RANGES, find_nonfinite

    X = np.zeros((100, 2))
    X[::3, 1] = np.nan  # 34 ranges of one row
    a, b = find_nonfinite(X[:50], None, 0), find_nonfinite(X[50:], None, 50)
    total = b + a  # order-free
    assert (total.n_rows, total.n_ranges, total.first) == (34, 34, 0)
    assert total.head == [(i, i + 1) for i in range(0, 3 * MAX_RANGES, 3)]
    assert "and 24 more ranges" in total.message()
    # a range cut by a block boundary is one range
    X = np.zeros((10, 1))
    X[3:7] = np.inf
    joined = find_nonfinite(X[:5], None, 0) + find_nonfinite(X[5:], None, 5)
    assert (joined.n_ranges, joined.head) == (1, [(3, 7)])
    # class labels (text, integers) hold no NaN: a classifier's evaluation pass checks them too
    assert find_nonfinite(np.zeros((3, 2)), np.array(["a", "b", "a"], dtype=object), 0) is None
    assert find_nonfinite(np.zeros((3, 2)), np.array([1, 2, 3]), 0) is None


# --------------------------------------------------------------------------------------------
# missing: drop / impute and categorical columns in jobs: each gives exactly the model of the
# table a user would have prepared by hand (dropped rows, filled means, one-hot columns)
# --------------------------------------------------------------------------------------------

CITIES = ["Paris", "Rome", "Oslo"]


def _raw(n: int = 6000, seed: int = 3) -> pd.DataFrame:
    """y first (target-first table), a string column between numeric ones, a few gaps."""
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    city = rng.choice(CITIES, n)
    y = np.sin(3 * a) + b + (city == "Rome") - 0.5 * (city == "Oslo") + 0.1 * rng.standard_normal(n)
    df = pd.DataFrame({"y": y, "a": a, "city": city, "b": b})
    df.loc[[10, 2500, 5999], "a"] = np.nan
    df.loc[[11, 4000], "y"] = np.nan
    df.loc[[3000], "b"] = np.nan
    df.loc[[12], "city"] = None
    return df


def _one_hot(df: pd.DataFrame) -> pd.DataFrame:
    """The encoding by hand: city_Oslo, city_Paris, city_Rome in place of city (NaN if missing)."""
    out = df[["y", "a"]].copy()
    for c in sorted(CITIES):
        out[f"city_{c}"] = np.where(df.city.isna(), np.nan, (df.city == c).astype(float))
    out["b"] = df.b
    return out


def _job(tmp_path: Path, name: str, train: str, scheduler: str, predict: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: {name}
        output: {name}
        data:
          train: {train}
          chunk_rows: 2048
        model: {{gamma: 0.5, n_components: 32, alpha: 0.01, random_state: 0}}
        cluster: {{address: '{scheduler}'}}
        progress: false
        plots: false
        """)
        + predict
    )
    return path


def _run(job: Path) -> dict:
    import json

    assert main(["-q", "run", str(job)]) == 0
    return json.loads((job.parent / job.stem / "metrics.json").read_text())


def _coef(path: Path) -> np.ndarray:
    from bigkernel.io.model_store import load_estimator

    return load_estimator(str(path)).coef_


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_drop_and_impute_give_the_model_of_the_prepared_table(suffix, tmp_path, scheduler):
    raw = _raw()
    path = tmp_path / f"raw{suffix}"
    raw.to_csv(path, index=False) if suffix == ".csv" else raw.to_parquet(path, row_group_size=1500)
    x = "x: [a, city, b], y: y"
    # drop: the rows with any missing x or y removed by hand
    dropped = _one_hot(raw).dropna()
    dropped.to_csv(tmp_path / "dropped.csv", index=False)
    hand_x = "x: [a, city_Oslo, city_Paris, city_Rome, b], y: y"
    m = _run(_job(tmp_path, "drop", f"{{path: {path}, {x}, missing: drop}}", scheduler))
    ref = _run(_job(tmp_path, "drop_ref", f"{{path: {tmp_path / 'dropped.csv'}, {hand_x}}}", scheduler))
    assert m["data"]["rows_dropped"] == 7 and m["data"]["n_samples"] == len(dropped) == 6000 - 7
    assert m["data"]["categorical"] == {"city": 3} and m["data"]["missing"] == "drop"
    np.testing.assert_array_equal(_coef(tmp_path / "drop" / "model.zarr"), _coef(tmp_path / "drop_ref" / "model.zarr"))
    assert m["scores"] == ref["scores"]
    # impute: rows with a missing y removed (never imputed), x filled with the training means
    # of those rows (the most frequent city for the missing city)
    kept = raw[raw.y.notna()]
    filled = kept.fillna({"a": kept.a.mean(), "b": kept.b.mean(), "city": kept.city.value_counts().idxmax()})
    _one_hot(filled).to_csv(tmp_path / "filled.csv", index=False)
    m = _run(_job(tmp_path, "impute", f"{{path: {path}, {x}, missing: impute}}", scheduler))
    _run(_job(tmp_path, "impute_ref", f"{{path: {tmp_path / 'filled.csv'}, {hand_x}}}", scheduler))
    assert m["data"]["rows_dropped"] == 2 and m["data"]["n_samples"] == 5998
    np.testing.assert_allclose(
        _coef(tmp_path / "impute" / "model.zarr"), _coef(tmp_path / "impute_ref" / "model.zarr"), rtol=1e-9, atol=1e-12
    )


def test_categories_saved_with_the_model_and_applied_at_predict(tmp_path, scheduler, caplog):
    import bigkernel

    raw = _raw().dropna()
    raw.to_csv(tmp_path / "t.csv", index=False)
    new = pd.DataFrame({"b": [0.2, -0.1, 0.5], "city": ["Rome", "Oslo", "Paris"], "a": [0.1, 0.3, -0.7]})
    new.to_csv(tmp_path / "new.csv", index=False)  # other column order, no y
    predict = f"predict: {{path: {tmp_path / 'new.csv'}, x: [a, city, b], output: p.csv}}\n"
    with caplog.at_level(logging.INFO, logger="bigkernel"):
        _run(_job(tmp_path, "cat", f"{{path: {tmp_path / 't.csv'}, x: [a, city, b], y: y}}", scheduler, predict))
    assert "non-numeric columns ['city'] one-hot encoded (city: 3 categories)" in caplog.text
    model = tmp_path / "cat" / "model.zarr"
    job_pred = pd.read_csv(tmp_path / "cat" / "p.csv").y_pred.to_numpy()
    # the same by hand: the estimator on the one-hot columns
    from bigkernel.io.model_store import load_estimator

    est = load_estimator(str(model))
    assert list(est.feature_names_in_) == ["a", "city_Oslo", "city_Paris", "city_Rome", "b"]
    hand = est.predict(_one_hot(new.assign(y=0.0)).drop(columns="y"))
    np.testing.assert_allclose(job_pred, hand, rtol=1e-12)
    assert np.ptp(hand) > 0.5  # the city matters: a wrong encoding would not give these
    # bigkernel.load: a Pipeline that takes the raw columns (pandas)
    pipe = bigkernel.load(str(model))
    assert list(pipe.named_steps) == ["encode", "model"]
    assert list(pipe.feature_names_in_) == ["a", "city", "b"]
    np.testing.assert_allclose(pipe.predict(new[["a", "city", "b"]]), hand, rtol=1e-12)
    # `bigkernel predict` on the raw table, columns from the model
    assert main(["-q", "predict", str(model), str(tmp_path / "new.csv"), "-o", str(tmp_path / "q.csv")]) == 0
    np.testing.assert_allclose(pd.read_csv(tmp_path / "q.csv").y_pred, hand, rtol=1e-12)
    # an unseen category: a clear error naming the column and the values
    new.assign(city=["Rome", "Lyon", "Berlin"]).to_csv(tmp_path / "unseen.csv", index=False)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="bigkernel"):
        assert (
            main(["-q", "predict", str(model), str(tmp_path / "unseen.csv"), "-o", str(tmp_path / "u.csv")])
            == EXIT_USER_ERROR
        )
    assert (
        "column 'city' has categories ['Berlin', 'Lyon'] not seen at fit (known: ['Oslo', 'Paris', 'Rome'])"
        in caplog.text
    )
    assert not (tmp_path / "u.csv").exists()
    # `bigkernel update` with raw rows: the encoding is applied, the encoder kept in the store
    raw.iloc[:500].to_csv(tmp_path / "more.csv", index=False)
    out = tmp_path / "updated.zarr"
    assert main(["-q", "update", str(model), str(tmp_path / "more.csv"), "--y", "y", "-o", str(out)]) == 0
    assert list(bigkernel.load(str(out)).feature_names_in_) == ["a", "city", "b"]


def test_predict_with_a_missing_value(tmp_path, scheduler, caplog):
    """drop/error models refuse a prediction row with a missing value (as scikit-learn does),
    naming it; impute models fill it with the saved training mean."""
    raw = _raw()
    raw.to_csv(tmp_path / "t.csv", index=False)
    new = pd.DataFrame({"a": [0.1, np.nan], "city": ["Rome", "Oslo"], "b": [0.2, 0.3]})
    new.to_csv(tmp_path / "new.csv", index=False)
    for mode in ("drop", "impute"):
        _run(_job(tmp_path, mode, f"{{path: {tmp_path / 't.csv'}, x: [a, city, b], y: y, missing: {mode}}}", scheduler))
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="bigkernel"):
        argv = [
            "-q",
            "predict",
            str(tmp_path / "drop" / "model.zarr"),
            str(tmp_path / "new.csv"),
            "-o",
            str(tmp_path / "p.csv"),
        ]
        assert main(argv) == EXIT_USER_ERROR
    assert "X contains NaN or inf (X column 'a'): 1 bad row, first at row 1" in caplog.text
    assert "missing: impute" in caplog.text
    assert (
        main(
            [
                "-q",
                "predict",
                str(tmp_path / "impute" / "model.zarr"),
                str(tmp_path / "new.csv"),
                "-o",
                str(tmp_path / "q.csv"),
            ]
        )
        == 0
    )
    import bigkernel

    pipe = bigkernel.load(str(tmp_path / "impute" / "model.zarr"))
    mean_a = raw[raw.y.notna()].a.mean()
    expected = pipe[-1].predict(_one_hot(new.fillna({"a": mean_a}).assign(y=0.0)).drop(columns="y"))
    np.testing.assert_allclose(pd.read_csv(tmp_path / "q.csv").y_pred, expected, rtol=1e-12)
    np.testing.assert_allclose(pipe.predict(new), expected, rtol=1e-12)


def test_table_encoder_api_on_pandas_and_dask():
    import dask.dataframe as dd

    from bigkernel.data.encode import TableEncoder

    df = _raw().iloc[:500].drop(columns="y")
    enc = TableEncoder(missing="impute").fit(df)
    lazy = TableEncoder(missing="impute").fit(dd.from_pandas(df, npartitions=3))
    assert enc.categories_ == lazy.categories_ == {"city": sorted(CITIES)}
    assert enc.fill_values_["a"] == pytest.approx(df.a.mean(), rel=1e-12)
    assert enc.fill_values_["a"] == pytest.approx(lazy.fill_values_["a"], rel=1e-12)
    out = enc.transform(df)
    assert list(out.columns) == list(enc.get_feature_names_out()) == ["a", "city_Oslo", "city_Paris", "city_Rome", "b"]
    assert not out.isna().any().any()
    np.testing.assert_allclose(
        lazy.transform(dd.from_pandas(df, npartitions=3)).compute().to_numpy(), out.to_numpy(), rtol=1e-14
    )
    assert TableEncoder.from_dict(enc.to_dict()).to_dict() == enc.to_dict()
    assert enc.onehot_groups() == [[1, 2, 3]]


def test_eval_grid_holds_a_one_hot_feature_at_its_commonest_category():
    """Medians of 0/1 columns name no category when none holds half the rows: the grid's
    reference takes the most frequent one instead (one 1 in the block)."""
    from bigkernel import eval_grid

    rng = np.random.default_rng(0)
    city = rng.choice(3, size=1000, p=[0.25, 0.4, 0.35])  # the commonest holds 40 %
    X = np.column_stack([rng.uniform(size=1000), np.eye(3)[city], rng.normal(size=1000)])
    plain = eval_grid(X, feature=0, n_points=5)
    assert (plain[:, 1:4] == 0).all()  # what the medians give: no city at all
    grid = eval_grid(X, feature=0, n_points=5, onehot=[[1, 2, 3]])
    np.testing.assert_array_equal(grid[:, 1:4], np.tile([0.0, 1.0, 0.0], (5, 1)))
    np.testing.assert_array_equal(grid[:, [0, 4]], plain[:, [0, 4]])


@pytest.mark.parametrize("missing", ["drop", "impute"])
def test_open_source_encodes_and_drops_per_partition(missing, tmp_path):
    """The API path of a job's table: a multi-file Parquet dataset (partitions of uneven kept
    lengths) gives exactly the arrays of the table prepared with pandas, chunks known."""
    raw = _raw()
    path = tmp_path / "parts"
    path.mkdir()
    for i, lo in enumerate(range(0, len(raw), 1700)):
        raw.iloc[lo : lo + 1700].to_parquet(path / f"part.{i}.parquet")
    ds = open_source(str(path), ["a", "city", "b"], "y", missing=missing, categorical="auto", chunk_rows=1024)
    if missing == "drop":
        ref = _one_hot(raw).dropna()
    else:
        kept = raw[raw.y.notna()]
        ref = _one_hot(kept.fillna({"a": kept.a.mean(), "b": kept.b.mean(), "city": kept.city.value_counts().idxmax()}))
    assert ds.columns == ("a", "city_Oslo", "city_Paris", "city_Rome", "b")
    assert ds.n_dropped == len(raw) - len(ref) and sum(ds.X.chunks[0]) == len(ref)
    np.testing.assert_allclose(ds.X.compute(), ref.drop(columns="y").to_numpy(), rtol=1e-15)
    np.testing.assert_array_equal(ds.y.compute(), ref.y.to_numpy())
