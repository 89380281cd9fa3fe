"""Models are zarr + JSON: round trips and predictions to zarr. Pickles, foreign, truncated and
unfinished stores (refused, never executed) are in tests/test_bad_inputs.py."""

import json
import os

import numpy as np
import pytest
import zarr

import bigkernel
from bigkernel import RandomFeatureRidge
from tests.conftest import friedman


@pytest.fixture
def fitted():
    X, y = friedman(2000, seed=0)
    return RandomFeatureRidge(
        kernel="matern", nu=2.5, gamma=0.5, n_components=64, alpha="gcv", random_state=0, form="cossin"
    ).fit(X, y), X


def test_round_trip_predictions_identical(tmp_path, fitted):
    m, X = fitted
    path = m.save(tmp_path / "m.zarr")
    back = bigkernel.load(path)
    assert type(back) is RandomFeatureRidge and back.get_params() == m.get_params()
    np.testing.assert_array_equal(back.predict(X[:100]), m.predict(X[:100]))
    for a in ("alpha_", "df_", "n_features_in_", "n_samples_fit_"):
        assert getattr(back, a) == getattr(m, a)
    meta = json.loads((tmp_path / "m.zarr" / "zarr.json").read_text())["attributes"]
    assert meta["format"] == "bigkernel-model" and meta["format_version"] == 1
    assert meta["library_version"] == bigkernel.__version__
    assert meta["state"]["feature_map"]["kernel"] == "matern"


def test_multi_output_round_trip(tmp_path):
    X, y = friedman(500, seed=1)
    m = RandomFeatureRidge(n_components=16, random_state=0).fit(X, np.column_stack([y, y]))
    back = bigkernel.load(m.save(tmp_path / "m"))
    np.testing.assert_array_equal(back.predict(X[:5]), m.predict(X[:5]))


def test_predict_to_zarr(tmp_path, fitted):
    import dask.array as da

    m, X = fitted
    out = m.predict_to_zarr(da.from_array(X, chunks=(300, 10)), tmp_path / "pred.zarr")
    g = zarr.open_group(out, mode="r")
    # the default float32 features: dask chunks featurise in other row blocks than numpy
    # input, and float32 BLAS products round differently per block (float64 sums of them)
    assert m.dtype_ == "float32"
    np.testing.assert_allclose(g["y_pred"][:], m.predict(X), rtol=1e-5, atol=1e-6 * np.abs(m.predict(X)).max())
    assert g.attrs["complete"] is True
    assert [p for p in os.listdir(tmp_path) if "partial" in p] == []


def test_predict_and_transform_to_zarr_take_a_dataframe_by_its_column_names(tmp_path):
    """A pandas DataFrame (it raised AttributeError: no 'dtype') is checked against the fitted
    columns as predict does — reordered columns are refused, not used by position — and
    writes what predict / transform give."""
    import pandas as pd

    from bigkernel.errors import DataError

    X, y = friedman(600, seed=4)
    df = pd.DataFrame(X, columns=[f"c{i}" for i in range(X.shape[1])])
    m = RandomFeatureRidge(n_components=32, random_state=0, dtype="float64").fit(df, y)
    g = zarr.open_group(m.predict_to_zarr(df, str(tmp_path / "p.zarr")), mode="r")
    np.testing.assert_allclose(g["y_pred"][:], m.predict(df), rtol=1e-12)
    f = zarr.open_group(m.transform_to_zarr(df, str(tmp_path / "f.zarr")), mode="r")
    np.testing.assert_allclose(f["features"][:], m.transform(df), rtol=1e-12)
    with pytest.raises(DataError, match="the same columns in another order"):
        m.predict_to_zarr(df[df.columns[::-1]], str(tmp_path / "q.zarr"))
    assert not (tmp_path / "q.zarr").exists()
    # a dask DataFrame likewise, read lazily (it raised AttributeError as well)
    import dask.dataframe as dd

    ddf = dd.from_pandas(df, npartitions=3)
    g = zarr.open_group(m.predict_to_zarr(ddf, str(tmp_path / "d.zarr")), mode="r")
    np.testing.assert_allclose(g["y_pred"][:], m.predict(df), rtol=1e-12)
    with pytest.raises(DataError, match="the same columns in another order"):
        m.predict_to_zarr(ddf[list(df.columns[::-1])], str(tmp_path / "e.zarr"))
    assert not (tmp_path / "e.zarr").exists()
    # fitted on numpy: a DataFrame's values are used (scikit-learn's rule: no names to check)
    plain = RandomFeatureRidge(n_components=32, random_state=0, dtype="float64").fit(X, y)
    g = zarr.open_group(plain.predict_to_zarr(df, str(tmp_path / "r.zarr")), mode="r")
    np.testing.assert_allclose(g["y_pred"][:], plain.predict(X), rtol=1e-12)


KINDS = {
    "RandomFeatureRidge": lambda: bigkernel.RandomFeatureRidge(
        gamma=0.5, n_components=16, random_state=0, dtype="float64"
    ),
    "RandomFeatureRidgeCV": lambda: bigkernel.RandomFeatureRidgeCV(
        gammas=[0.1, 0.5], alphas=[0.1, 1.0], cv=3, n_components=16, random_state=0
    ),
    "NystroemRidge": lambda: bigkernel.NystroemRidge(gamma=0.5, n_components=20, alpha=0.1, random_state=0),
    "ExactKernelRidge": lambda: bigkernel.ExactKernelRidge(gamma=0.5, alpha=0.1, random_state=0),
    "ExactKernelRidgeCV": lambda: bigkernel.ExactKernelRidgeCV(gammas=[0.1, 0.5], alphas=[0.1, 1.0]),
    "KernelRidge": lambda: bigkernel.KernelRidge(gamma=0.5, alpha=0.1, random_state=0),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_saved_model_checks_column_names_as_in_memory(tmp_path, kind):
    """A model fitted on a DataFrame keeps its column names through save/load and checks names and
    order at predict exactly as the in-memory model does (every estimator kind)."""
    import warnings

    import pandas as pd

    X, y = friedman(300, d=5, seed=2)
    cols = ["a", "b", "c", "d", "e"]
    df = pd.DataFrame(X, columns=cols)
    m = KINDS[kind]().fit(df, y)
    back = bigkernel.load(m.save(tmp_path / "m.zarr"))
    assert type(back).__name__ == kind
    np.testing.assert_array_equal(back.feature_names_in_, cols)
    assert back.feature_names_in_.dtype == object and back.n_features_in_ == 5
    np.testing.assert_array_equal(back.predict(df), m.predict(df))  # named input: no warning
    for bad in (df[cols[::-1]], df.rename(columns={"c": "z"})):  # reordered, renamed
        with pytest.raises(ValueError) as mem:
            m.predict(bad)
        with pytest.raises(ValueError) as loaded:
            back.predict(bad)
        assert str(loaded.value) == str(mem.value) and "feature names" in str(mem.value)
    # numpy after a DataFrame fit: scikit-learn's warning, the same predictions
    for est in (m, back):
        with pytest.warns(UserWarning, match="X does not have valid feature names"):
            est.predict(X[:20])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(back.predict(X[:20]), m.predict(X[:20]))
    assert len(w) == 2
    meta = json.loads((tmp_path / "m.zarr" / "zarr.json").read_text())["attributes"]
    assert meta["input"] == {"n_features_in": 5, "X_dtype": "float64", "feature_names_in": cols}


def test_numpy_fit_saves_no_names_and_a_refit_forgets_them(tmp_path):
    import dask.array as da
    import pandas as pd

    X, y = friedman(300, d=5, seed=2)
    m = RandomFeatureRidge(n_components=16, random_state=0).fit(X.astype(np.float32), y)
    back = bigkernel.load(m.save(tmp_path / "np.zarr"))
    assert not hasattr(back, "feature_names_in_")
    meta = json.loads((tmp_path / "np.zarr" / "zarr.json").read_text())["attributes"]
    assert meta["input"] == {"n_features_in": 5, "X_dtype": "float32"}
    with pytest.warns(UserWarning, match="fitted without feature names"):  # as in memory
        back.predict(pd.DataFrame(X, columns=list("abcde")))
    # fitted on a DataFrame, then refitted on a dask array: the old names must not stick
    m = RandomFeatureRidge(n_components=16, random_state=0).fit(pd.DataFrame(X, columns=list("abcde")), y)
    m.fit(da.from_array(X, chunks=(100, 5)), y)
    assert not hasattr(m, "feature_names_in_")
    assert not hasattr(bigkernel.load(m.save(tmp_path / "dask.zarr")), "feature_names_in_")
