"""Passes over one big chunk are cut into tasks of a few sub-blocks (``split_row_tasks``), so
every dask thread works on a numpy input below the default chunk size; the sums do not change
beyond rounding (the sub-blocks sit at the same global multiples)."""

import dask.array as da
import numpy as np
import pytest

from bigkernel import RandomFeatureClassifier
from bigkernel.graph.stream import SUB_BLOCKS_PER_TASK, split_row_tasks
from bigkernel.graph.svm import svm_block_sums, svm_pass_graph
from bigkernel.numerics.svm import SVMPassState
from bigkernel.runtime import compute


def test_one_chunk_is_cut_at_global_multiples_and_y_follows():
    X = da.zeros((100_000, 3), chunks=(100_000, 3))
    Y = da.zeros((100_000, 2), chunks=(100_000, 2))
    Xs, Ys = split_row_tasks(X, Y, 8192)
    step = SUB_BLOCKS_PER_TASK * 8192
    assert sum(Xs.chunks[0]) == 100_000 and Ys.chunks[0] == Xs.chunks[0]
    assert all(c == step for c in Xs.chunks[0][:-1]) and 0 < Xs.chunks[0][-1] <= step
    # chunks already within the tasks' edges are kept as they are (no rechunk in the graph)
    small = da.zeros((50_000, 3), chunks=(16_384, 3))
    assert split_row_tasks(small, None, 8192)[0] is small
    # an offset chunking is only cut, at global multiples: every edge of either is an edge
    odd = da.zeros((100_000, 3), chunks=((40_000, 60_000), (3,)))
    edges = np.cumsum(split_row_tasks(odd, None, 8192)[0].chunks[0])
    assert {40_000, 100_000, step, 2 * step} <= set(edges.tolist())


@pytest.mark.numerics
def test_svm_pass_over_one_chunk_runs_as_several_tasks_with_the_same_sums():
    rng = np.random.default_rng(0)
    n, block = 3000, 64
    X = rng.standard_normal((n, 4))
    fmap = RandomFeatureClassifier(n_components=16, random_state=0).fit(X[:100], np.arange(100) % 2).feature_map_
    k = 2
    Y = np.where(rng.random((n, k)) < 0.5, 1.0, -1.0)
    state = SVMPassState(
        coef=rng.standard_normal((16, k)), intercept=rng.standard_normal(k),
        direction=rng.standard_normal((16, k)), direction_b=rng.standard_normal(k),
        steps=np.tile([0.0, 0.5, 1.0], (k, 1)), hess_step=np.array([0.5, 1.0]), loss="squared_hinge",
        mu=np.full(k, 0.7),
    )  # fmt: skip
    graph = svm_pass_graph(
        da.from_array(X, chunks=(n, 4)), da.from_array(Y, chunks=(n, k)), fmap, state, dtype="float64", block_rows=block
    )
    tasks = [key for key in graph.__dask_graph__() if "svm_block_sums" in str(key)]
    assert len(tasks) == -(-n // (SUB_BLOCKS_PER_TASK * block))  # 12 tasks, not one
    (split,) = compute(graph)
    whole = svm_block_sums(fmap, state, None, X, Y, 0, dtype="float64", block_rows=block)
    for field in ("loss", "hinge", "lam", "lam2", "v", "hess", "hess_phi", "hess_c", "n_curved"):
        a, b = getattr(split, field), getattr(whole, field)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max(), err_msg=field)
