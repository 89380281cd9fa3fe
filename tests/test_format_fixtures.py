"""Saved models and bootstrap stores written by an older commit still load and give its values.

The stores under ``tests/fixtures/format_v1`` were written by the commit named in
``expected.json`` (``tests/fixtures/make_format_fixtures.py``); they are never regenerated to
make this test pass.
"""

import json
import os
import shutil

import numpy as np
import pytest

import bigkernel
from tests._tolerance import assert_within
from tests.fixtures.make_format_fixtures import ROOT, _data

pytestmark = pytest.mark.numerics  # .ci/run reruns these under a second OpenBLAS kernel set

with open(os.path.join(ROOT, "expected.json")) as _f:
    EXPECTED = json.load(_f)


@pytest.mark.parametrize("name", sorted(EXPECTED["models"]))
def test_saved_model_loads_and_predicts_as_when_written(name):
    want = EXPECTED["models"][name]
    model = bigkernel.load(os.path.join(ROOT, f"{name}.zarr"))
    assert type(model).__name__ == want["estimator"]
    X_eval = np.asarray(EXPECTED["X_eval"])
    got = model.predict(X_eval)
    if getattr(model, "dtype", "float64") == "float32":
        # float32 features are computed with float32 GEMMs whose rounding depends on OpenBLAS's
        # kernels (2.4e-7 relative off with Sandybridge's, which have no FMA): hold them to
        # what float32 promises, not to the bits of the machine that wrote the fixture
        assert_within(got, want["predict"], _float32_feature_error(model, X_eval))
    else:
        np.testing.assert_allclose(got, want["predict"], rtol=1e-10, atol=1e-12)


def _float32_feature_error(model, X):
    """Bound on how far float32 random features move a prediction: each argument ``xω + b``
    carries ~ε₃₂(|x||ω| + |b|), its cosine that plus ε₃₂, times the map's scale, summed
    against |coef| (4ε₃₂: the d + 1 roundings of the argument, the weights' and the cosine's)."""
    fmap = model.feature_map_
    arg = np.abs(X) @ np.abs(fmap.weights) + (0.0 if fmap.offsets is None else np.abs(fmap.offsets))
    if fmap.form == "cossin":
        arg = np.hstack([arg, arg])
    eps32 = float(np.finfo(np.float32).eps)
    return 4 * eps32 * fmap.scale * ((1.0 + arg) @ np.abs(model.coef_).T)


@pytest.mark.parametrize("name", sorted(EXPECTED["bands"]))
def test_bootstrap_store_loads_with_its_band(name):
    res = bigkernel.load_bootstrap(os.path.join(ROOT, f"{name}.zarr"))
    np.testing.assert_allclose(res.lower, EXPECTED["bands"][name]["lower"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.upper, EXPECTED["bands"][name]["upper"], rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(res.X_eval, np.asarray(EXPECTED["X_eval"]))


def test_old_random_feature_store_resumes_without_recomputing(tmp_path):
    """Today's bootstrap() accepts the old store as the same job: nothing is recomputed."""
    store = tmp_path / "b.zarr"
    shutil.copytree(os.path.join(ROOT, "bootstrap_random_features.zarr"), store)
    X, y = _data()
    est = bigkernel.RandomFeatureRidge(gamma=0.5, n_components=16, alpha=0.1, random_state=0, dtype="float64")
    res = bigkernel.bootstrap(est, X, y, np.asarray(EXPECTED["X_eval"]), n_bootstraps=6, random_state=3, store=store)
    assert res.n_computed == 0 and res.n_reused == 6
    np.testing.assert_array_equal(res.upper, EXPECTED["bands"]["bootstrap_random_features"]["upper"])


@pytest.mark.parametrize("name", sorted(EXPECTED["models"]))
def test_saved_model_without_input_metadata_has_no_names(name):
    """Stores from before the optional ``input`` field load as models fitted without names."""
    model = bigkernel.load(os.path.join(ROOT, f"{name}.zarr"))
    assert not hasattr(model, "feature_names_in_") and model.n_features_in_ == 3


@pytest.mark.parametrize("name", sorted(EXPECTED["models"]))
def test_old_model_has_no_posterior_and_says_so(name):
    """Stores written before the posterior load (predict works, above) and refuse return_std with a
    clear error: they hold neither σ² nor the eigenvectors."""
    model = bigkernel.load(os.path.join(ROOT, f"{name}.zarr"))
    assert np.all(np.isnan(np.atleast_1d(model.sigma2_)))
    with pytest.raises(bigkernel.DataError, match="refit it to use return_std"):
        model.predict(np.asarray(EXPECTED["X_eval"]), return_std=True)
