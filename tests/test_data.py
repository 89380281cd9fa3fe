"""Data sources and bad input through the API: clear errors from metadata, NaN/inf in the pass."""

import dask.array as da
import numpy as np
import pytest
import zarr

from bigkernel import RandomFeatureRidge, SyntheticSpec, make_data, open_source
from bigkernel.data.synthetic import generate_rows
from bigkernel.errors import DataError, DataNotFoundError, NonFiniteError, ParameterError
from tests.conftest import friedman


@pytest.fixture
def store(tmp_path):
    return make_data(SyntheticSpec("friedman1", 5000, 10, 1.0, 0), tmp_path / "d.zarr", chunk_rows=1024)


def test_make_data_is_deterministic_and_chunking_free(tmp_path):
    spec = SyntheticSpec("sine", 70_000, 1, 0.3, 5)
    a = zarr.open_group(make_data(spec, tmp_path / "a.zarr", chunk_rows=9999), mode="r")
    b = zarr.open_group(make_data(spec, tmp_path / "b.zarr", chunk_rows=65536), mode="r")
    np.testing.assert_array_equal(a["X"][:], b["X"][:])
    np.testing.assert_array_equal(a["y"][:], b["y"][:])
    assert a.attrs["complete"] is True


def test_zarr_npy_numpy_dask_sources_give_the_same_model(tmp_path, store):
    g = zarr.open_group(store, mode="r")
    X, y = g["X"][:], g["y"][:]
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    kw = dict(gamma=0.5, n_components=64, alpha=0.1, random_state=0)
    ref = RandomFeatureRidge(**kw).fit(X, y)
    for ds in (open_source(store, chunk_rows=2048), open_source(tmp_path / "X.npy", y_path=str(tmp_path / "y.npy"), chunk_rows=1500)):
        m = RandomFeatureRidge(**kw).fit(ds.X, ds.y)
        np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-9)


def test_fsspec_url_source():
    g = zarr.open_group("memory://bk-test.zarr", mode="w")
    a = generate_rows(SyntheticSpec("friedman1", 100, 10, 1.0, 0), 0, 100)
    g.create_array("X", data=a[:, :10], chunks=(50, 10))
    g.create_array("y", data=a[:, 10], chunks=(50,))
    ds = open_source("memory://bk-test.zarr")
    np.testing.assert_array_equal(ds.X.compute(), a[:, :10])


@pytest.mark.parametrize("where", ["X", "y"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_in_late_chunk_names_rows(where, bad):
    X, y = friedman(10_000, seed=1)
    (X if where == "X" else y)[9123, ...] = bad
    with pytest.raises(NonFiniteError, match=rf"{where} contains NaN or inf in rows \[8000, 10000\) — first at row 9123"):
        RandomFeatureRidge(n_components=16).fit(da.from_array(X, chunks=(2000, 10)), da.from_array(y, chunks=2000))
    with pytest.raises(NonFiniteError, match="row 9123"):
        RandomFeatureRidge(n_components=16, chunk_rows=2048).fit(X, y)


def test_metadata_errors_before_compute():
    X, y = friedman(1000)
    cases = [
        (lambda: (da.from_array(X, chunks=(100, 5)), da.from_array(y, chunks=100)), "chunked along columns"),
        (lambda: (da.from_array(X[:, 0], chunks=100), da.from_array(y, chunks=100)), "must be 2-D"),
        (lambda: (da.from_array(X, chunks=(100, 10)), da.from_array(y[:999], chunks=100)), "different numbers of rows"),
        (lambda: (da.from_array(X.astype(str), chunks=(100, 10)), da.from_array(y, chunks=100)), "numeric dtype"),
        (lambda: (da.zeros((0, 10), chunks=(1, 10)), da.zeros(0, chunks=1)), "empty"),
    ]
    for make, match in cases:
        Xd, yd = make()
        with pytest.raises(DataError, match=match):
            RandomFeatureRidge(n_components=8).fit(Xd, yd)


def test_numpy_bad_shapes_are_value_errors():
    X, y = friedman(100)
    with pytest.raises(ValueError):
        RandomFeatureRidge().fit(X[:, 0], y)
    with pytest.raises(ValueError):
        RandomFeatureRidge().fit(np.empty((0, 3)), np.empty(0))
    m = RandomFeatureRidge(n_components=8).fit(X, y)
    with pytest.raises(ValueError, match="expecting 10 features"):
        m.predict(X[:, :3])
    with pytest.raises(DataError, match="expecting 10 features"):
        m.predict(da.from_array(X[:, :3]))


@pytest.mark.parametrize(
    "params,match",
    [({"alpha": 0.0}, "alpha"), ({"alpha": -1}, "alpha"), ({"alpha": float("nan")}, "alpha"),
     ({"alpha": "1e-3"}, "alpha"), ({"gamma": 0.0}, "gamma"), ({"n_components": 0}, "n_components"),
     ({"kernel": "gaussian"}, "kernel"), ({"dtype": "float16"}, "dtype")],
)  # fmt: skip
def test_bad_parameters_raise_parameter_error(params, match):
    X, y = friedman(50)
    with pytest.raises(ParameterError, match=match):
        RandomFeatureRidge(**params).fit(X, y)


def test_missing_sources(tmp_path, store):
    with pytest.raises(DataNotFoundError, match="does not exist"):
        open_source(tmp_path / "nope.zarr")
    with pytest.raises(DataNotFoundError, match="has no array 'Z'"):
        open_source(store, x="Z")
    zarr.open_group(tmp_path / "onlyx.zarr", mode="w").create_array("X", shape=(3, 2), dtype="f8")
    with pytest.raises(DataNotFoundError, match="arrays found: \\['X'\\]"):
        open_source(tmp_path / "onlyx.zarr")
    with pytest.raises(DataNotFoundError):
        open_source(tmp_path / "nope.npy")
