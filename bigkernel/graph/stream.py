"""One-pass graphs over row-chunked dask arrays: sufficient statistics and predictions.

(Residual sums of any fitted model: :mod:`bigkernel.graph.residuals`.)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed
from distributed import Future

from bigkernel._sparse import column_sums
from bigkernel.devices import CPU, Device
from bigkernel.numerics.fourier_features import FeatureMap
from bigkernel.numerics.nonfinite import BadRows, check_finite, find_nonfinite
from bigkernel.numerics.sums import block_stats

#: partial results combined per reduction task; each is m·D² float64, so keep it small
SPLIT_EVERY = 4

#: on the CPU, a task of the statistics pass covers at most this many feature sub-blocks: a
#: few large chunks would otherwise leave threads idle (4 chunks on 2 threads: one thread does
#: 2, the other 1 and a bit), while each task's fixed cost (its m·D² float64 sums, zeroed,
#: scaled and reduced) stays ~2% of its products
SUB_BLOCKS_PER_TASK = 4


def refine_row_chunks(chunks: Sequence[int], step: int) -> tuple[int, ...]:
    """Row chunks split at the global multiples of ``step`` inside them (the edges of the
    given chunks stay; a chunk is only cut, never merged, so each piece is a slice of one)."""
    out, start = [], 0
    for c in chunks:
        stop = start + c
        edges = sorted({start, stop, *range(-(-start // step) * step, stop, step)})
        out += [b - a for a, b in zip(edges[:-1], edges[1:])]
        start = stop
    return tuple(out)


def row_offsets(chunks: Sequence[int]) -> list[int]:
    """Global index of the first row of each chunk."""
    return np.concatenate([[0], np.cumsum(chunks)[:-1]]).astype(int).tolist()


def row_blocks(X: da.Array, Y: da.Array | None = None) -> list[tuple[int, Any, Any]]:
    """``(start, X_chunk, Y_chunk)`` delayed triples of two arrays with the same row chunks."""
    # unoptimized: optimizing X's graph and Y's graph apart would fuse a read they share (a
    # table's X and y are slices of one read) into each, reading the data twice per pass, and
    # would give the chunks' keys other definitions than in the graphs of other passes
    xs = X.to_delayed(optimize_graph=False).ravel()
    ys = Y.to_delayed(optimize_graph=False).ravel() if Y is not None else [None] * len(xs)
    return list(zip(row_offsets(X.chunks[0]), xs, ys))


def tree_reduce(
    parts: list, combine: Callable, split_every: int = SPLIT_EVERY, name: str = "combine", *, bad_rows: bool = True
) -> Delayed:
    """Combine delayed ``parts`` pairwise-ish in a tree of fan-in ``split_every``.

    A part may be a :class:`~bigkernel.numerics.nonfinite.BadRows` (its block held NaN/inf):
    ``combine`` is then skipped and the summaries are added, so the root holds every bad row of
    the pass and raises one :class:`~bigkernel.errors.NonFiniteError` naming them all (a task
    that raised would stop the pass at whichever bad block failed first). ``bad_rows=False``:
    parts that never are (a matvec's), reduced without that check.
    """
    if not parts:
        raise ValueError("nothing to reduce: the data has no chunks")
    level, checked = 0, (_with_bad_rows(combine) if bad_rows else combine)
    while len(parts) > 1:
        parts = [
            dask.delayed(
                checked, pure=True, name=f"{name}-{level}-{i}-{dask.base.tokenize(*parts[i : i + split_every])}"
            )(*parts[i : i + split_every])
            for i in range(0, len(parts), split_every)
        ]
        level += 1
    if not bad_rows:
        return parts[0]
    return dask.delayed(_raise_bad_rows, pure=True, name=f"{name}-checked-{dask.base.tokenize(parts[0])}")(parts[0])


def _raise_bad_rows(result):
    if isinstance(result, BadRows):
        raise result.error()
    return result


def _with_bad_rows(combine: Callable) -> Callable:
    """``combine`` over parts of which any may be a BadRows: then the BadRows are added."""

    def checked(*parts):
        bad = [p for p in parts if isinstance(p, BadRows)]
        if bad:
            total = bad[0]
            for b in bad[1:]:
                total = total + b
            return total
        return combine(*parts)

    checked.__name__ = getattr(combine, "__name__", "combine")
    return checked


def _sum(*parts):
    """Sum of partial results; lists (one entry per feature map) are summed entry-wise."""
    if isinstance(parts[0], list):
        return [_sum(*items) for items in zip(*parts)]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def stats_graph(
    X: da.Array,
    Y: da.Array,
    fmap: FeatureMap | list[FeatureMap],
    *,
    weights: Callable[[int, int], np.ndarray] | None = None,
    dtype: str = "float64",
    block_rows: int = 8192,
    device: Device = CPU,
) -> Delayed:
    """Delayed :class:`SufficientStats` of the whole data set, tree-reduced.

    With a list of feature maps, a list of statistics (one per map) from the same pass.

    On the CPU, chunks are cut into tasks of at most :data:`SUB_BLOCKS_PER_TASK` sub-blocks
    (at global multiples, so the sub-blocks do not change). ``device``, the fit's resolved
    :class:`~bigkernel.devices.Device`, is where each block's features and sums are computed
    (:func:`~bigkernel.numerics.sums.block_stats`); it enters every task as that object (a
    frozen value: it pickles and tokenizes), and each task takes it with
    :func:`~bigkernel.devices.task_device` (on a dask-cuda worker: the worker's own GPU). Every
    task returns host float64 statistics; the tree reduction runs on the host.

    ``X`` (n, d) and ``Y`` (n, k) must share their row chunks and have one column chunk.
    NaN/inf raise one :class:`~bigkernel.errors.NonFiniteError` at the end of the pass,
    naming every bad row range (each task returns its block's summary instead of raising).
    """
    fmap_d = dask.delayed(fmap, pure=True)
    if weights is not None and not isinstance(weights, Delayed):
        weights = dask.delayed(weights, pure=True)  # one key, not a copy in every task
    if not isinstance(device, Device):  # text here would be resolved in every task, differently
        raise TypeError(f"stats_graph(device=...) takes a bigkernel.devices.Device, got {device!r}")
    if not device.is_gpu:
        X, Y = split_row_tasks(X, Y, block_rows)
    kw = dict(weights=weights, dtype=dtype, block_rows=block_rows, device=device)
    parts = [_checked_task(block_stats, fmap_d, xb, yb, start, **kw) for start, xb, yb in row_blocks(X, Y)]
    return tree_reduce(parts, _sum, name="stats-sum")


def _checked_task(func: Callable, *args: Any, **kwargs: Any) -> Delayed:
    """The delayed :func:`_checked` of one block, keyed by ``func``'s name (as a task of
    ``func`` itself would be: logs, dashboards and tests find the pass's tasks by it)."""
    key = f"{getattr(func, '__name__', 'block')}-{dask.base.tokenize(func, *args, kwargs)}"
    return dask.delayed(_checked, pure=True)(func, *args, dask_key_name=key, **kwargs)


def _checked(func: Callable, *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)`` of a block ``(..., X, Y, start)``, or the block's
    :class:`~bigkernel.numerics.nonfinite.BadRows` when X or Y holds NaN/inf."""
    X, Y, start = args[-3:]
    bad = find_nonfinite(X, Y, start)
    return bad if bad is not None else func(*args, **kwargs)


def split_row_tasks(X: da.Array, Y: da.Array | None, block_rows: int) -> tuple[da.Array, da.Array | None]:
    """``X`` and ``Y`` with their row chunks cut into tasks of at most
    :data:`SUB_BLOCKS_PER_TASK` sub-blocks of ``block_rows`` (at global multiples, so the
    sub-blocks do not change): a numpy input of fewer than 131,072 rows is one chunk, which
    would keep all dask threads but one idle (BLAS is pinned to one thread per dask thread)."""
    rows = refine_row_chunks(X.chunks[0], SUB_BLOCKS_PER_TASK * block_rows)
    if rows == X.chunks[0]:
        return X, Y
    return X.rechunk({0: rows}), (None if Y is None else Y.rechunk({0: rows}))


def block_sums_graph(X: da.Array, Y: da.Array | None, func: Callable, *args: Any, **kwargs: Any) -> Delayed:
    """Delayed sum over the row chunks of ``func(*args, X_chunk, Y_chunk, start, **kwargs)``
    (numpy arrays of one shape), tree-reduced; ``args`` enter the graph once, under one key
    each (e.g. the fold models of a scoring pass), not once per chunk."""
    args_d = [a if isinstance(a, Delayed) else dask.delayed(a, pure=True) for a in args]
    parts = [_checked_task(func, *args_d, xb, yb, start, **kwargs) for start, xb, yb in row_blocks(X, Y)]
    return tree_reduce(parts, _sum, name=f"{getattr(func, '__name__', 'block')}-sum")


def column_sums_graph(X: da.Array, weights: np.ndarray | None = None) -> Delayed:
    """Delayed ``[Σw, Σwx, Σwx²]`` per column of ``X`` (float64 (3, d)), tree-reduced: the
    moments of ``standardize`` for X of sparse chunks, read without densifying a chunk."""
    return block_sums_graph(X, None, _column_sums_block, weights)


def _column_sums_block(weights: np.ndarray | None, X: Any, Y: Any, start: int) -> np.ndarray:
    return column_sums(X, None if weights is None else weights[start : start + X.shape[0]])


def predict_graph(X: da.Array, model: Any, n_outputs: int, dtype: Any = np.float64) -> da.Array:
    """Lazy ``model(X_chunk)`` per row chunk of ``X``: ``(n, n_outputs)`` of ``dtype`` (float64
    predictions; the feature dtype for ``transform``), X's chunks.

    ``model`` is a callable on numpy blocks — :class:`~bigkernel.numerics.primal.PrimalExpansion`
    or :class:`~bigkernel.numerics.gram_tiles.KernelExpansion` — or a delayed/future of one. It
    enters the graph once, under one key, so it is neither hashed nor shipped per chunk. NaN/inf
    in a chunk raise :class:`~bigkernel.errors.NonFiniteError` naming its rows.
    """
    if not isinstance(model, (Delayed, Future)):
        model = dask.delayed(model, name=f"predictor-{uuid.uuid4().hex}")
    blocks = [
        da.from_delayed(
            dask.delayed(_predict_task, pure=True)(model, xb, start),
            shape=(rows, n_outputs), dtype=dtype, meta=np.empty((0, n_outputs), dtype=dtype),
        )
        for (start, xb, _), rows in zip(row_blocks(X), X.chunks[0])
    ]  # fmt: skip
    return da.concatenate(blocks, axis=0)


def _predict_task(model: Any, X: np.ndarray, start: int) -> np.ndarray:
    # NaN/inf in X would silently give NaN predictions: refuse them, naming the rows
    check_finite(X, None, start, action="predicting")
    return model(X)
