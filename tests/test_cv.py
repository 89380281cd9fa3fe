"""K-fold CV from sums equals fitting each fold's complement directly."""

import numpy as np
import pytest

from bigkernel.numerics.cv import cv_path, subtract
from bigkernel.numerics.features import make_feature_map
from bigkernel.numerics.primal import solve_primal
from bigkernel.numerics.splits import FoldSplit, HoldoutSplit
from bigkernel.numerics.sums import block_stats
from tests.conftest import friedman


def test_fold_assignment_is_chunk_invariant_and_balanced():
    f = FoldSplit(seed=3, n_groups=5)
    whole = f.groups(0, 100_000)
    parts = np.concatenate([f.groups(a, min(a + 7919, 100_000)) for a in range(0, 100_000, 7919)])
    np.testing.assert_array_equal(whole, parts)
    np.testing.assert_allclose(np.bincount(whole) / 1e5, 0.2, atol=0.01)
    # independent of the holdout hash with the same seed
    hold = HoldoutSplit(3, 0.2).groups(0, 100_000)
    assert abs(np.mean(whole[hold == 1] == 0) - 0.2) < 0.02


def test_partition_stats_equal_stats_of_selected_rows():
    X, y = friedman(5000, seed=1)
    fmap = make_feature_map("rbf", 10, 32, seed=0, gamma=0.5)
    split = FoldSplit(seed=0, n_groups=4)
    folds = block_stats(fmap, X, y[:, None], 0, weights=split, block_rows=1024)
    g = split.groups(0, 5000)
    for k in range(4):
        direct = block_stats(fmap, X[g == k], y[g == k, None], 0)
        for f in ("n", "sum_phi", "sum_y", "sum_yy", "gram", "phi_y"):
            np.testing.assert_allclose(getattr(folds.select(k), f), getattr(direct, f), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_cv_from_sums_equals_direct_refits(fit_intercept):
    X, y = friedman(3000, seed=2)
    fmap = make_feature_map("rbf", 10, 64, seed=1, gamma=0.5)
    split = FoldSplit(seed=5, n_groups=5)
    folds = block_stats(fmap, X, y[:, None], 0, weights=split, block_rows=512)
    alphas = np.array([1e-2, 1.0, 100.0])
    path = cv_path(folds, alphas, fit_intercept)
    g = split.groups(0, 3000)
    for k in range(5):
        tr, va = g != k, g == k
        # the fold's training system from sums equals fitting the complement directly
        direct_stats = block_stats(fmap, X[tr], y[tr, None], 0)
        np.testing.assert_allclose(subtract(folds.total(), folds.select(k)).gram, direct_stats.gram, rtol=1e-9, atol=1e-8)
        for a_i, a in enumerate(alphas):
            sol = solve_primal(direct_stats, a, fit_intercept)
            pred = fmap.transform(X[va]) @ sol.coef[:, 0] + sol.intercept[0]
            sse = np.sum((y[va] - pred) ** 2)
            assert path.sse[k, a_i, 0] == pytest.approx(sse, rel=1e-6)
    assert path.mse().shape == (5, 3) and np.all(path.r2() < 1)
