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
    return RandomFeatureRidge(kernel="matern", nu=2.5, gamma=0.5, n_components=64, alpha="gcv",
                              random_state=0, form="cossin").fit(X, y), X


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
    np.testing.assert_allclose(g["y_pred"][:], m.predict(X), rtol=1e-12)
    assert g.attrs["complete"] is True
    assert [p for p in os.listdir(tmp_path) if "partial" in p] == []
