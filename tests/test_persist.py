"""Models are zarr + JSON; loading never executes anything and refuses foreign stores."""

import json
import os
import pickle

import numpy as np
import pytest
import zarr

import bigkernel
from bigkernel import RandomFeatureRidge
from bigkernel.errors import DataNotFoundError, ModelFormatError, OutputExistsError
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


def test_refuses_to_overwrite(tmp_path, fitted):
    m, _ = fitted
    m.save(tmp_path / "m.zarr")
    with pytest.raises(OutputExistsError):
        m.save(tmp_path / "m.zarr")
    m.save(tmp_path / "m.zarr", overwrite=True)


class _Boom:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_is_refused_and_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    boom = _Boom()
    boom.marker = marker
    p = tmp_path / "model.pkl"
    p.write_bytes(pickle.dumps(boom))
    with pytest.raises(ModelFormatError, match="never loaded"):
        bigkernel.load(p)
    assert not marker.exists()
    # a pickle inside a folder that looks like a store is not read either
    d = tmp_path / "fake.zarr"
    d.mkdir()
    (d / "model.pkl").write_bytes(pickle.dumps(boom))
    with pytest.raises(ModelFormatError, match="not a bigkernel model"):
        bigkernel.load(d)
    assert not marker.exists()


def test_empty_folder_missing_path_and_foreign_zarr(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFormatError):
        bigkernel.load(tmp_path / "empty")
    with pytest.raises(DataNotFoundError):
        bigkernel.load(tmp_path / "nope")
    zarr.open_group(tmp_path / "other.zarr", mode="w").attrs["hello"] = 1
    with pytest.raises(ModelFormatError, match="expected format"):
        bigkernel.load(tmp_path / "other.zarr")


def test_truncated_store(tmp_path, fitted):
    m, _ = fitted
    path = tmp_path / "m.zarr"
    m.save(path)
    import shutil

    shutil.rmtree(path / "coef")
    with pytest.raises(ModelFormatError, match="damaged or truncated"):
        bigkernel.load(path)


def test_unfinished_and_newer_format(tmp_path, fitted):
    m, _ = fitted
    path = tmp_path / "m.zarr"
    m.save(path)
    g = zarr.open_group(path, mode="r+")
    g.attrs["format_version"] = 99
    with pytest.raises(ModelFormatError, match="upgrade"):
        bigkernel.load(path)
    g.attrs["format_version"] = 1
    g.attrs["complete"] = False
    with pytest.raises(ModelFormatError, match="unfinished"):
        bigkernel.load(path)


def test_predict_to_zarr(tmp_path, fitted):
    import dask.array as da

    m, X = fitted
    out = m.predict_to_zarr(da.from_array(X, chunks=(300, 10)), tmp_path / "pred.zarr")
    g = zarr.open_group(out, mode="r")
    np.testing.assert_allclose(g["y_pred"][:], m.predict(X), rtol=1e-12)
    assert g.attrs["complete"] is True
    assert [p for p in os.listdir(tmp_path) if "partial" in p] == []
