"""Evaluation graphs for any fitted estimator (layer 2): per-chunk residual sums (or a bounded
residual sample), tree-reduced."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed

from bigkernel._sparse import as_array
from bigkernel.graph.stream import _sum, row_blocks, tree_reduce
from bigkernel.numerics.nonfinite import find_nonfinite
from bigkernel.numerics.residuals import residual_summary

__all__ = ["residual_graph", "residual_sample_graph"]


def _residuals_task(
    predict: Callable[[np.ndarray], np.ndarray],
    X: np.ndarray,
    Y: np.ndarray,
    start: int,
    groups: Callable[[int, int], np.ndarray] | None,
    n_groups: int,
) -> np.ndarray:
    """Per-group [count, SSE, Σy, Σy²] for each target, shape (n_groups, 4, k); the block's
    :class:`~bigkernel.numerics.nonfinite.BadRows` instead when it holds NaN/inf."""
    bad = find_nonfinite(X, Y, start)
    if bad is not None:
        return bad
    Y = np.asarray(Y, dtype=np.float64)
    pred = np.asarray(predict(as_array(X)), dtype=np.float64).reshape(Y.shape)
    g = np.zeros(X.shape[0], dtype=np.int64) if groups is None else np.asarray(groups(start, start + X.shape[0]))
    out = np.zeros((n_groups, 4, Y.shape[1]))
    for j in range(n_groups):
        sel = g == j
        r = Y[sel] - pred[sel]
        out[j, 0] = sel.sum()
        out[j, 1] = (r * r).sum(axis=0)
        out[j, 2] = Y[sel].sum(axis=0)
        out[j, 3] = (Y[sel] ** 2).sum(axis=0)
    return out


def residual_graph(
    X: da.Array,
    Y: da.Array,
    predict: Callable[[np.ndarray], np.ndarray],
    *,
    groups: Callable[[int, int], np.ndarray] | None = None,
    n_groups: int = 1,
) -> Delayed:
    """Delayed per-group residual sums of ``predict`` (a numpy predictor, e.g. a fitted
    estimator's ``predict``) over the row chunks of ``X`` (n, d) and ``Y`` (n, k).

    The predictor enters the graph once (one key), so a cluster receives it once per worker.
    """
    model = dask.delayed(predict, name=f"predictor-{uuid.uuid4().hex}")
    parts = [
        dask.delayed(_residuals_task, pure=True)(model, xb, yb, start, groups, n_groups)
        for start, xb, yb in row_blocks(X, Y)
    ]
    return tree_reduce(parts, _sum, name="residual-sum")


def _sample_task(predict, X: np.ndarray, Y: np.ndarray, start: int, seed: int, capacity: int):
    bad = find_nonfinite(X, Y, start)
    if bad is not None:
        return bad
    return residual_summary(predict(as_array(X)), Y, start, seed, capacity)


def residual_sample_graph(X: da.Array, Y: da.Array, predict: Delayed, seed: int, capacity: int) -> Delayed:
    """Delayed :class:`~bigkernel.numerics.residuals.ResidualSummary` of a predictor over the
    row chunks of ``X`` (n, d) and ``Y`` (n, k): residual sums and the ``capacity`` rows of
    smallest ``(seed, row)`` hash — the same rows whatever the chunking.

    ``predict`` is a delayed numpy predictor (e.g. the output of a solve in the same graph).
    """
    parts = [
        dask.delayed(_sample_task, pure=True)(predict, xb, yb, start, seed, capacity)
        for start, xb, yb in row_blocks(X, Y)
    ]
    return tree_reduce(parts, _sum, name="residual-sample")
