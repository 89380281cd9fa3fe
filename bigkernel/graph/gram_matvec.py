"""Dask graphs over Gram tiles (layer 2): cache tiles, one matvec ``K V``.

Nothing here computes. Tiles are the upper ``(i, j)`` blocks over row ranges ``edges`` of the
training points (see :mod:`bigkernel.numerics.gram_tiles`). A matvec is a few tasks, each running
through a balanced group of tiles — reading a cached tile or recomputing it — and adding both
``K_ij V_j`` and ``K_ijᵀ V_i`` to a private ``(n, k)`` accumulator; the accumulators are then
tree-summed. Grouping keeps the task count near the thread count whatever the tile count
(a task per tile costs ~0.2 ms of scheduling, more than a cached tile's product).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dask
import numpy as np
from dask.delayed import Delayed

from bigkernel.graph.stream import tree_reduce
from bigkernel.numerics.gram_tiles import GramTiler, tile_matvec

__all__ = ["balanced_groups", "cache_graph", "matvec_graph"]

#: relative cost of recomputing a tile entry vs reading a cached one (measured ~2 vs ~0.3 ns)
RECOMPUTE_COST = 6.0


def balanced_groups(costs: Sequence[float], n_groups: int) -> list[list[int]]:
    """Split item indices into ``<= n_groups`` contiguous runs of near-equal total cost.

    Parameters
    ----------
    costs : sequence of float
        Cost of each item, in order.
    n_groups : int

    Returns
    -------
    list of list of int
        Non-empty runs covering every index once, in order.
    """
    costs = np.asarray(costs, dtype=np.float64)
    if costs.size == 0:
        return []
    n_groups = max(1, min(int(n_groups), costs.size))
    cum = np.cumsum(costs)
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, n_groups) / n_groups, side="right")
    bounds = np.unique(np.concatenate([[0], cuts, [costs.size]]))
    return [list(range(a, b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _tile_task(tiler: GramTiler, rows: slice, cols: slice, dtype: str) -> np.ndarray:
    return tiler.tile(rows, cols, dtype)


def cache_graph(tiler: Any, edges: np.ndarray, tiles: Sequence[tuple[int, int]], dtype: str) -> list[Delayed]:
    """One delayed tile per ``(i, j)`` in ``tiles`` (to be persisted as the Gram cache).

    ``tiler`` is a :class:`GramTiler` or a reference to one (a named ``Delayed`` or a
    distributed ``Future``), so the points travel to the workers once.
    """
    out = []
    for i, j in tiles:
        rows, cols = slice(int(edges[i]), int(edges[i + 1])), slice(int(edges[j]), int(edges[j + 1]))
        name = f"gram-tile-{dask.base.tokenize(tiler, i, j, dtype)}"
        out.append(dask.delayed(_tile_task, pure=True, name=name)(tiler, rows, cols, dtype))
    return out


def _matvec_task(
    tiler: GramTiler, V: np.ndarray, jobs: list[tuple[int, int, int]], edges: np.ndarray, dtype: str, cached: list
) -> np.ndarray:
    """Partial ``K V`` over the tiles in ``jobs`` (``(i, j, slot)``, slot -1: recompute)."""
    out = np.zeros_like(V, dtype=np.float64)
    workspace: dict = {}  # recomputed tiles reuse one buffer (no fresh pages per tile)
    for i, j, slot in jobs:
        rows, cols = slice(int(edges[i]), int(edges[i + 1])), slice(int(edges[j]), int(edges[j + 1]))
        if slot >= 0:
            tile_matvec(cached[slot], V, out, rows, cols)
        else:
            tiler.recompute_matvec(rows, cols, V, out, workspace)
    return out


def _add(*parts: np.ndarray) -> np.ndarray:
    total = parts[0].copy()
    for p in parts[1:]:
        total += p
    return total


def matvec_graph(
    tiler: Any,
    V: Any,
    edges: np.ndarray,
    tiles: Sequence[tuple[int, int]],
    cached: dict[tuple[int, int], Delayed],
    *,
    dtype: str,
    n_tasks: int,
) -> Delayed:
    """Delayed ``K V`` (float64, shape of ``V``) over the upper ``tiles``.

    Parameters
    ----------
    tiler : GramTiler or reference
    V : ndarray of shape (n, k) or reference
        Vectors (float64).
    edges : ndarray
        Tile edges.
    tiles : sequence of (i, j)
        Every upper tile of the matrix.
    cached : dict
        Tiles held in memory (persisted delayed arrays); the others are recomputed.
    dtype : {"float64", "float32"}
        Dtype of recomputed tiles.
    n_tasks : int
        Tasks to spread the tiles over (balanced by cost).
    """
    e = np.asarray(edges)
    sizes = [(e[i + 1] - e[i]) * (e[j + 1] - e[j]) for i, j in tiles]
    costs = [s * (1.0 if t in cached else RECOMPUTE_COST) for s, t in zip(sizes, tiles)]
    parts = []
    for group in balanced_groups(costs, n_tasks):
        slots: list[Delayed] = []
        jobs = []
        for q in group:
            t = tiles[q]
            if t in cached:
                jobs.append((t[0], t[1], len(slots)))
                slots.append(cached[t])
            else:
                jobs.append((t[0], t[1], -1))
        parts.append(dask.delayed(_matvec_task, pure=True)(tiler, V, jobs, e, dtype, slots))
    return tree_reduce(parts, _add, name="gram-matvec-sum", bad_rows=False)  # kernel products, no data checks
