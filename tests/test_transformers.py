"""Features as output: RandomFeatures / NystroemFeatures (scikit-learn transformers) and
``transform`` of the fitted streamed estimators — equal to the estimators' own map, numpy = dask,
zarr = memory, saved and loaded without pickle."""

import os

import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.linear_model import Ridge
from sklearn.metrics.pairwise import laplacian_kernel, rbf_kernel
from sklearn.utils.estimator_checks import parametrize_with_checks

import bigkernel
from bigkernel import (
    DataError,
    NystroemFeatures,
    NystroemRidge,
    OutputExistsError,
    ParameterError,
    RandomFeatureRidge,
    RandomFeatureRidgeCV,
    RandomFeatures,
)
from tests._tolerance import assert_forward_close
from tests.conftest import friedman

pytestmark = pytest.mark.numerics


@parametrize_with_checks(
    [
        RandomFeatures(n_components=32),
        RandomFeatures(kernel="laplacian", n_components=20, dtype="float32", sampler="iid"),
        NystroemFeatures(n_components=20),
        NystroemFeatures(kernel="polynomial", degree=2, n_components=10, landmarks="uniform"),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def _cond(Phi: np.ndarray, alpha: float) -> float:
    """Condition number of the centred ridge system (ΦcᵀΦc + αI)."""
    Pc = Phi - Phi.mean(axis=0)
    s = np.linalg.eigvalsh(Pc.T @ Pc)
    return float((s.max() + alpha) / (max(s.min(), 0.0) + alpha))


@pytest.mark.parametrize(
    ("transformer", "estimator"),
    [
        (RandomFeatures(gamma=0.3, n_components=96, random_state=4),
         RandomFeatureRidge(gamma=0.3, n_components=96, alpha=0.5, random_state=4, dtype="float64")),
        (RandomFeatures("matern", nu=2.5, n_components=64, form="cossin", standardize=True, random_state=1),
         RandomFeatureRidge("matern", nu=2.5, n_components=64, form="cossin", standardize=True, alpha=0.5,
                            random_state=1, dtype="float64")),
        (NystroemFeatures(gamma=0.2, n_components=80, random_state=2),
         NystroemRidge(gamma=0.2, n_components=80, alpha=0.5, random_state=2)),
    ],
)  # fmt: skip
def test_transformer_then_sklearn_ridge_is_the_estimator(transformer, estimator):
    X, y = friedman(1500, seed=3)
    Phi = transformer.fit_transform(X)
    est = estimator.fit(X, y)
    ridge = Ridge(alpha=0.5).fit(Phi, y)  # same objective: Σ(y − φβ − b)² + α‖β‖²
    cond = _cond(Phi, 0.5)
    assert_forward_close(ridge.coef_, est.coef_, cond)
    np.testing.assert_allclose(ridge.intercept_, est.intercept_, rtol=cond * 1e-13)
    np.testing.assert_allclose(ridge.predict(Phi[:200]), est.predict(X[:200]), rtol=1e-9, atol=1e-9)
    # the estimator's own transform is the same map, scaled as in its fit
    np.testing.assert_array_equal(est.transform(X[:50]), transformer.transform(X[:50]))


def test_transform_of_a_fitted_model_feeds_another_model():
    X, y = friedman(1200, seed=5)
    est = RandomFeatureRidgeCV(gammas=[0.05, 0.5], alphas=[0.1, 1.0], n_components=64, cv=3, random_state=0)
    est.fit(X, y)
    ridge = Ridge(alpha=est.alpha_).fit(est.transform(X), y)
    np.testing.assert_allclose(ridge.predict(est.transform(X[:100])), est.predict(X[:100]), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize(("kernel", "exact"), [("rbf", rbf_kernel), ("laplacian", laplacian_kernel)])
def test_feature_inner_products_approach_the_kernel(kernel, exact):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    K = exact(X, gamma=0.4)
    errs = []
    for D in (64, 1024, 16384):
        P = RandomFeatures(kernel, gamma=0.4, n_components=D, random_state=7).fit_transform(X)
        errs.append(np.abs(P @ P.T - K).max())
    # Monte Carlo error ~ 1/√D: 16× fewer between D=64 and D=16384 in expectation; ask for 6×
    assert errs[2] < errs[0] / 6 and errs[1] < errs[0] and errs[2] < 0.05, errs


def test_nystroem_features_with_every_row_a_landmark_give_the_kernel():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(80, 2))
    P = NystroemFeatures(gamma=0.3, n_components=80, landmarks="uniform", random_state=0).fit_transform(X)
    np.testing.assert_allclose(P @ P.T, rbf_kernel(X, gamma=0.3), atol=1e-8)


def test_dask_in_gives_lazy_dask_out_equal_to_numpy():
    X, _ = friedman(2000, seed=2)
    for t in (RandomFeatures(n_components=48, random_state=0), NystroemFeatures(n_components=30, random_state=0)):
        Xd = da.from_array(X, chunks=(300, -1))
        t.fit(Xd)
        lazy = t.transform(Xd)
        assert isinstance(lazy, da.Array)
        assert lazy.chunks == (Xd.chunks[0], (t.feature_map_.n_components,))
        dense = t.transform(X)
        assert isinstance(dense, np.ndarray)
        np.testing.assert_allclose(lazy.compute(), dense, rtol=1e-12, atol=1e-13)
        # fitted on dask or numpy: the same map (the landmarks are the same rows)
        np.testing.assert_array_equal(type(t)(**t.get_params()).fit(X).transform(X[:20]), dense[:20])


def test_nan_in_a_dask_chunk_is_refused_with_its_rows():
    X, _ = friedman(500, seed=2)
    t = RandomFeatures(n_components=16, random_state=0).fit(X)
    X[321, 2] = np.nan
    with pytest.raises(DataError, match="row 321"):
        t.transform(da.from_array(X, chunks=100)).compute()


def test_dtype_float32_output():
    X, _ = friedman(300, seed=2)
    t = RandomFeatures(n_components=40, dtype="float32", random_state=0).fit(X)
    P32 = t.transform(X)
    assert P32.dtype == np.float32 and t.transform(da.from_array(X, chunks=100)).dtype == np.float32
    P64 = RandomFeatures(n_components=40, random_state=0).fit(X).transform(X)
    np.testing.assert_allclose(P32, P64, atol=2e-5)  # float32 argument |Xω + b| ~ 10: ~1e-6


def test_transform_to_zarr_equals_memory_and_is_atomic(tmp_path):
    X, y = friedman(1500, seed=2)
    for est in (NystroemFeatures(n_components=25, random_state=0).fit(X),
                RandomFeatureRidge(n_components=33, random_state=0, dtype="float64").fit(X, y)):  # fmt: skip
        path = str(tmp_path / f"{type(est).__name__}.zarr")
        est.transform_to_zarr(da.from_array(X, chunks=400), path)
        got = zarr.open_group(path, mode="r")
        assert got.attrs["complete"] and got.attrs["format"] == "bigkernel-features"
        np.testing.assert_allclose(got["features"][...], est.transform(X), rtol=1e-12, atol=1e-13)
        with pytest.raises(OutputExistsError):
            est.transform_to_zarr(X, path)
        est.transform_to_zarr(X[:10], path, overwrite=True, name="phi")  # numpy in, replaced
        assert zarr.open_group(path, mode="r")["phi"].shape == (10, est.feature_map_.n_components)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no partial/old folders left


def test_feature_names_and_fewer_nystroem_components():
    X = np.repeat(np.arange(6.0)[:, None], 10, axis=0) * np.ones((1, 2))  # 6 distinct rows
    t = NystroemFeatures(n_components=20, landmarks="uniform", random_state=0).fit(X)
    r = t.feature_map_.n_components
    assert r <= 6  # the duplicate landmarks' directions are dropped
    names = t.get_feature_names_out()
    assert list(names) == [f"nystroemfeatures{i}" for i in range(r)] and t.transform(X).shape == (60, r)
    assert list(RandomFeatures(n_components=3).fit(X).get_feature_names_out()) == [
        "randomfeatures0", "randomfeatures1", "randomfeatures2"]  # fmt: skip


def test_save_and_load_transformers(tmp_path):
    X, _ = friedman(800, seed=4)
    for t in (RandomFeatures("matern", nu=0.5, n_components=30, random_state=3, standardize=True),
              NystroemFeatures(n_components=20, random_state=3, standardize=True)):  # fmt: skip
        t.fit(X)
        path = t.save(str(tmp_path / type(t).__name__))
        back = bigkernel.load(path)
        assert type(back) is type(t) and back.get_params() == t.get_params()
        np.testing.assert_array_equal(back.transform(X[:40]), t.transform(X[:40]))
        assert list(back.get_feature_names_out()) == list(t.get_feature_names_out())


def test_bad_inputs_are_refused():
    X, _ = friedman(200, seed=4)
    t = RandomFeatures(n_components=8, random_state=0).fit(X)
    with pytest.raises(DataError, match="expecting 10 features"):
        t.transform(da.from_array(X[:, :4], chunks=50))
    with pytest.raises(ValueError, match="expecting 10 features"):
        t.transform(X[:, :4])
    with pytest.raises(ParameterError, match="n_components"):
        RandomFeatures(n_components=0).fit(X)
    with pytest.raises(ParameterError, match="random_features"):
        RandomFeatures(kernel="sigmoid").fit(X)  # no feature map: says which path serves it
