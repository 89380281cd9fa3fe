"""The graph of one pass of the primal SVM: per row chunk, the sums of
:func:`bigkernel.numerics.svm.accumulate_block` at the current state, tree-reduced (never
computed here; :mod:`bigkernel.solvers.primal_svm` computes it through ``runtime.compute``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed

from bigkernel.graph.stream import block_sums_graph, split_row_tasks
from bigkernel.numerics.nonfinite import check_finite
from bigkernel.numerics.sums import sub_block_edges
from bigkernel.numerics.svm import SVMPassState, SVMPassSums, accumulate_block, fold_scale
from bigkernel.numerics.svm_kept import KeptRows


def svm_block_sums(
    fmap: Any,
    state: SVMPassState,
    weights: Callable[[int, int], np.ndarray] | None,
    X: np.ndarray,
    Y: np.ndarray,
    start: int,
    *,
    dtype: str = "float64",
    block_rows: int = 8192,
) -> SVMPassSums:
    """Sums of rows ``[start, start + len(X))`` at ``state``, in feature sub-blocks.

    Sub-blocks sit at global multiples of ``block_rows`` (as in
    :func:`bigkernel.numerics.sums.block_stats`), so the sums do not depend on the chunking
    beyond rounding; rows of weight 0 are never featurised. ``weights(start, stop)`` gives
    ``(1, rows)`` row weights (default: 1).
    """
    acc = SVMPassSums.zeros(fmap.n_components, Y.shape[1], state.steps.shape[1], state.hess_classes.size)
    for x, y, c in _weighted_sub_blocks(weights, X, Y, start, block_rows):
        accumulate_block(acc, fmap.transform_unscaled(x, dtype), y, c, state, fmap.scale)
    return fold_scale(acc, fmap.scale)


def _weighted_sub_blocks(weights, X, Y, start: int, block_rows: int):
    """``(x, y, c)`` of the rows of positive weight of each sub-block (none if it has none)."""
    check_finite(X, Y, start)
    stop = start + X.shape[0]
    c_all = None if weights is None else np.asarray(weights(start, stop), dtype=np.float64)[0]
    for lo, hi in sub_block_edges(start, stop, block_rows):
        rows = slice(lo - start, hi - start)
        x, y = X[rows], np.asarray(Y[rows], dtype=np.float64)
        c = np.ones(hi - lo) if c_all is None else c_all[rows]
        keep = np.flatnonzero(c > 0)
        if keep.size < c.size:
            x, y, c = x[keep], y[keep], c[keep]
        if keep.size:
            yield x, y, c


def svm_kept_block(
    fmap: Any,
    weights: Callable[[int, int], np.ndarray] | None,
    X: np.ndarray,
    Y: np.ndarray,
    start: int,
    *,
    dtype: str = "float64",
    block_rows: int = 8192,
) -> KeptRows:
    """The rows of positive weight of ``[start, start + len(X))``, featurised (unscaled) as
    :func:`svm_block_sums` featurises them."""
    parts = [
        KeptRows(fmap.transform_unscaled(x, dtype), y, c)
        for x, y, c in _weighted_sub_blocks(weights, X, Y, start, block_rows)
    ]
    if not parts:
        return KeptRows(np.zeros((0, fmap.n_components), dtype=dtype), np.zeros((0, Y.shape[1])), np.zeros(0))
    return sum(parts[1:], parts[0])


def svm_kept_graph(
    X: da.Array,
    Y: da.Array,
    fmap: Any,
    *,
    weights: Callable[[int, int], np.ndarray] | None = None,
    dtype: str = "float64",
    block_rows: int = 8192,
    fmap_key: Delayed | None = None,
) -> Delayed:
    """Delayed :class:`~bigkernel.numerics.svm_kept.KeptRows` of the whole data set (the
    features a small data set keeps in memory for all passes; arguments as
    :func:`svm_pass_graph`'s)."""
    fmap_d = fmap_key if fmap_key is not None else dask.delayed(fmap, pure=True)
    X, Y = split_row_tasks(X, Y, block_rows)
    return block_sums_graph(X, Y, svm_kept_block, fmap_d, weights, dtype=dtype, block_rows=block_rows)


def svm_pass_graph(
    X: da.Array,
    Y: da.Array,
    fmap: Any,
    state: SVMPassState,
    *,
    weights: Callable[[int, int], np.ndarray] | None = None,
    dtype: str = "float64",
    block_rows: int = 8192,
    fmap_key: Delayed | None = None,
) -> Delayed:
    """Delayed :class:`~bigkernel.numerics.svm.SVMPassSums` of the whole data set at ``state``.

    ``X`` (n, d) and the ±1 targets ``Y`` (n, k) share their row chunks. ``fmap_key``: the
    feature map already wrapped in ``dask.delayed`` (one key shared by every pass).
    """
    fmap_d = fmap_key if fmap_key is not None else dask.delayed(fmap, pure=True)
    X, Y = split_row_tasks(X, Y, block_rows)
    return block_sums_graph(X, Y, svm_block_sums, fmap_d, state, weights, dtype=dtype, block_rows=block_rows)
