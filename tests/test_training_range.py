"""``data_min_`` / ``data_max_``: the per-feature range of the training rows, from the fit's
own pass (streamed solvers) or the rows in memory (exact solvers), saved with the model."""

import dask.array as da
import numpy as np
import pytest

from bigkernel import (
    ExactKernelRidge,
    ExactKernelRidgeCV,
    KernelRidge,
    NystroemRidge,
    RandomFeatureRidge,
    RandomFeatureRidgeCV,
    load,
)
from bigkernel.data.sources import as_dataset
from bigkernel.numerics.fourier_features import make_feature_map
from bigkernel.numerics.splits import FoldSplit, HoldoutSplit
from bigkernel.numerics.sums import SufficientStats, block_stats


def data(n=230, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * [1.0, 10.0, 0.1][:d] + [0.0, 5.0, -3.0][:d]
    y = np.sin(X[:, 0]) + 0.1 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y


ESTIMATORS = {
    "random_features": lambda: RandomFeatureRidge(gamma=0.3, n_components=32, alpha=0.1, random_state=0),
    "random_features_cv": lambda: RandomFeatureRidgeCV(
        gammas=[0.1, 0.3], alphas=[0.1, 1.0], cv=3, n_components=32, random_state=0
    ),
    "nystroem": lambda: NystroemRidge(gamma=0.3, n_components=20, alpha=0.1, random_state=0),
    "exact": lambda: ExactKernelRidge(gamma=0.3, alpha=0.1, random_state=0),
    "exact_cv": lambda: ExactKernelRidgeCV(gammas=[0.1, 0.3], alphas=[0.1, 1.0]),
    "kernel_ridge": lambda: KernelRidge(gamma=0.3, alpha=0.1, solver="nystroem", n_components=20, random_state=0),
}


def assert_range(est, X):
    np.testing.assert_array_equal(est.data_min_, X.min(axis=0))
    np.testing.assert_array_equal(est.data_max_, X.max(axis=0))
    assert est.data_min_.dtype == np.float64 and est.data_min_.shape == (X.shape[1],)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_range_of_numpy_and_chunked_dask_input(name):
    X, y = data()
    assert_range(ESTIMATORS[name]().fit(X, y), X)
    Xd, yd = da.from_array(X, chunks=(41, 3)), da.from_array(y, chunks=41)  # 6 uneven chunks
    assert_range(ESTIMATORS[name]().fit(Xd, yd), X)


@pytest.mark.parametrize("name", ["random_features", "nystroem", "exact", "kernel_ridge"])
def test_rows_of_weight_zero_are_not_training_rows(name):
    X, y = data(seed=1)
    w = np.ones(X.shape[0])
    w[np.argmin(X, axis=0)] = 0.0  # the minimum of every feature gets weight 0
    w[np.argmax(X[:, 1])] = 0.0
    w[:10] = 3.0
    est = ESTIMATORS[name]().fit(X, y, sample_weight=w)
    assert_range(est, X[w > 0])


@pytest.mark.parametrize("name", ["random_features", "random_features_cv", "nystroem", "exact", "exact_cv"])
def test_holdout_rows_are_not_training_rows(name):
    """fit_dataset with a holdout split (the job runner's path): range of the training rows."""
    X, y = data(n=300, seed=2)
    split = HoldoutSplit(seed=7, fraction=0.3)
    train = split.groups(0, X.shape[0]) == 0
    # the split matters here: it holds out two of the extreme values
    assert np.sum(X[train].min(axis=0) != X.min(axis=0)) + np.sum(X[train].max(axis=0) != X.max(axis=0)) == 2
    est = ESTIMATORS[name]().fit_dataset(as_dataset(X, y, chunk_rows=64), weights=split)
    assert_range(est, X[train])


def test_float32_input_and_block_stats_sets():
    """Per set: partition groups and weight vectors; sums of blocks; the union by total()."""
    X, y = data(n=200, d=2, seed=3)
    X = X.astype(np.float32)
    fmap = make_feature_map("rbf", 2, 8, 0, gamma=0.5)
    folds = FoldSplit(seed=1, n_groups=3)
    g = folds.groups(0, 200)
    parts = [
        block_stats(fmap, X[a:b], y[a:b, None], a, weights=folds, block_rows=32)
        for a, b in ((0, 77), (77, 150), (150, 200))
    ]
    total = parts[0] + parts[1] + parts[2]
    for k in range(3):
        np.testing.assert_array_equal(total.x_min[k], X[g == k].min(axis=0))
        np.testing.assert_array_equal(total.x_max[k], X[g == k].max(axis=0))
    np.testing.assert_array_equal(total.total().x_min[0], X.min(axis=0))
    W = np.random.default_rng(0).poisson(1.0, size=(2, 200)).astype(float)
    st = block_stats(fmap, X, y[:, None], 0, weights=lambda a, b: W[:, a:b], block_rows=64)
    for j in range(2):
        np.testing.assert_array_equal(st.x_max[j], X[W[j] > 0].max(axis=0))
    # a difference of sets (CV's training system) has no range; adding it to one loses it
    empty = SufficientStats.zeros(1, 8, 1)
    assert empty.x_min is None and (total.select(0) + empty).x_min is None
    est = RandomFeatureRidge(gamma=0.5, n_components=8, alpha=1.0, random_state=0).fit(X, y)
    assert_range(est, X.astype(np.float64))


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_range_is_saved_with_the_model(tmp_path, name):
    X, y = data()
    est = ESTIMATORS[name]().fit(X, y)
    back = load(est.save(str(tmp_path / f"{name}.zarr")))
    assert_range(back, X)
