"""The graph of one Falkon pass (layer 2): every row block once, tree-summed.

Nothing here computes. The centres' map enters the graph as one reference (a distributed
``Future`` scattered to every worker once per fit, or one named key locally) and the current
directions as one key per pass, so neither is embedded in each task. NaN/inf in a block raise
one :class:`~bigkernel.errors.NonFiniteError` at the end of the pass, as in every pass.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.delayed import Delayed

from bigkernel.graph.stream import block_sums_graph
from bigkernel.numerics.nystroem_block import kernel_block_products

__all__ = ["falkon_pass_graph"]


def falkon_pass_graph(
    X: da.Array,
    Y: da.Array,
    fmap: Any,
    V: np.ndarray | None,
    *,
    split: Any = None,
    weights: Any = None,
    dtype: str = "float64",
    panel_rows: int = 1024,
    device: Any = None,
    sketch: Any = None,
    factor: Any = None,
) -> Delayed:
    """Delayed :class:`~bigkernel.numerics.nystroem_block.BlockProducts` of the whole data set.

    Parameters
    ----------
    X : dask array of shape (n, d)
    Y : dask array of shape (n, k)
        Same row chunks as ``X``.
    fmap : NystroemMap, Delayed or Future
        The raw map of the centres (a reference: it travels once).
    V : ndarray of shape (M, m) or None
        The pass's directions (None: the first pass, moments and right-hand sides).
    split, weights, dtype, panel_rows, device, sketch
        See :func:`~bigkernel.numerics.nystroem_block.kernel_block_products` (``device``: the
        fit's resolved Device, which enters every task as that object).
    factor : ndarray, Delayed or None
        The first pass's ``T`` (see ``kernel_block_products``): a reference, as ``fmap``.

    Returns
    -------
    Delayed
    """
    return block_sums_graph(
        X, Y, _block, fmap, V, split, weights, factor, dtype=dtype, panel_rows=panel_rows, device=device,
        sketch=sketch,
    )  # fmt: skip


def _block(fmap, V, split, weights, factor, X, Y, start, *, dtype, panel_rows, device, sketch):
    # a module-level function: the tasks' key prefix names the pass in logs and dashboards
    return kernel_block_products(
        fmap, V, split, weights, X, Y, start, dtype=dtype, panel_rows=panel_rows, device=device, sketch=sketch,
        factor=factor,
    )  # fmt: skip


_block.__name__ = "falkon-block"
