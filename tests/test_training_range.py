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


# --------------------------------------------------------------------------------------------
# predict: rows far outside the training range are logged (numpy input), once per call
# --------------------------------------------------------------------------------------------
def _extrapolation_records(caplog) -> list[str]:
    import logging

    out = [
        r.getMessage()
        for r in caplog.records
        if r.name == "bigkernel.diagnostics" and r.levelno == logging.WARNING and "[extrapolation]" in r.getMessage()
    ]
    caplog.clear()
    return out


def test_predict_logs_rows_far_outside_the_training_range(caplog):
    """One WARNING per predict call naming how many rows, the farthest column by name and the
    training range; rows inside, or just past an edge (within the margin), log nothing; the
    return_std path too; internal passes (``block_predictor``) and dask input stay quiet."""
    import logging

    import pandas as pd

    from bigkernel.diagnostics import EXTRAPOLATION_MARGIN
    from bigkernel.models._base import block_predictor

    rng = np.random.default_rng(3)
    X = pd.DataFrame(rng.uniform(0, 1, (400, 3)), columns=["a", "b", "c"])
    y = np.sin(3 * X["a"]) + X["b"]
    est = RandomFeatureRidge(gamma=1.0, n_components=64, alpha=1e-3, random_state=0, dtype="float64").fit(X, y)
    lo, hi = est.data_min_, est.data_max_
    inside = X.iloc[:5]
    near = inside.copy()
    near.iloc[0, 0] = hi[0] + 0.5 * EXTRAPOLATION_MARGIN * (hi[0] - lo[0])  # just past the edge
    far = near.copy()
    far.iloc[2, 1] = 6.0  # 'b' five widths beyond
    far.iloc[3, 2] = -0.5  # 'c' half a width below
    with caplog.at_level(logging.WARNING, logger="bigkernel"):
        est.predict(inside)
        est.predict(near)
        assert _extrapolation_records(caplog) == []
        est.predict(far)
        (msg,) = _extrapolation_records(caplog)
        assert "2 of 5 rows" in msg and "'b' = 6" in msg and "widths beyond" in msg
        assert f"[{lo[1]:.4g}, {hi[1]:.4g}]" in msg
        est.predict(far, return_std=True)
        assert len(_extrapolation_records(caplog)) == 1
        block_predictor(est)(far.to_numpy())
        est.predict(da.from_array(far.to_numpy(), chunks=(2, 3))).compute()
        assert _extrapolation_records(caplog) == []


def test_predict_flags_a_value_in_a_column_constant_in_training_and_classifiers_log_once(caplog):
    import logging

    from bigkernel import RandomFeatureClassifier

    rng = np.random.default_rng(4)
    X = np.column_stack([rng.normal(size=300), np.ones(300)])
    y = (X[:, 0] > 0).astype(int)
    clf = RandomFeatureClassifier(gamma=0.5, n_components=32, random_state=0).fit(X, y)
    with caplog.at_level(logging.WARNING, logger="bigkernel"):
        clf.predict(np.array([[0.1, 1.0], [0.2, 2.0]]))
        (msg,) = _extrapolation_records(caplog)
        assert "1 of 2 rows" in msg and "feature 1 = 2" in msg and "constant at 1 in training" in msg


@pytest.mark.parametrize("suffix", [".zarr", ""])
def test_predictions_written_to_a_store_log_far_rows_from_their_own_pass(tmp_path, caplog, suffix):
    """``predict_to_path`` to zarr (the job's predict stage) counts the rows beyond the training
    range in the pass that writes the predictions and logs the finding once, for dask and numpy X."""
    import logging

    from bigkernel.io.predictions import predict_to_path

    X, y = data(n=300)
    est = RandomFeatureRidge(gamma=0.3, n_components=32, random_state=0, dtype="float64").fit(X, y)
    new = X[:40].copy()
    new[[3, 17, 30], 1] = est.data_max_[1] + 3 * (est.data_max_[1] - est.data_min_[1])
    with caplog.at_level(logging.WARNING, logger="bigkernel"):
        predict_to_path(est, da.from_array(new, chunks=(16, 3)), str(tmp_path / f"p{suffix}"))
        (msg,) = _extrapolation_records(caplog)
        assert "3 of 40 rows" in msg and "feature 1" in msg and "3 widths beyond" in msg
        predict_to_path(est, X[:40], str(tmp_path / f"q{suffix}"))
        assert _extrapolation_records(caplog) == []


_BLOCKS_READ: list[int] = []


def _read_block(b):
    _BLOCKS_READ.append(b.shape[0])
    return b


def test_the_store_pass_reads_each_block_once_with_the_check(tmp_path, monkeypatch):
    """The count rides on the prediction pass: X's blocks are read as often as without it."""
    import bigkernel.io.predictions as predictions

    X, y = data(n=300)
    est = RandomFeatureRidge(gamma=0.3, n_components=16, random_state=0, dtype="float64").fit(X, y)

    def reads(path: str) -> int:
        _BLOCKS_READ.clear()
        Xd = da.from_array(X[:100], chunks=(25, 3)).map_blocks(_read_block, dtype=np.float64)
        predictions.predict_to_path(est, Xd, str(tmp_path / path))
        return len(_BLOCKS_READ)

    with_check = reads("a.zarr")
    monkeypatch.setattr(predictions, "extrapolation_summary", lambda est, X: None)
    assert with_check == reads("b.zarr") and with_check >= 4
