"""One row block of a Falkon pass (layer 1: numpy only): kernel panels against the centres,
computed and dropped.

A pass of the CG solver (:mod:`bigkernel.solvers.nystroem_cg`) visits every row block once
and, per block, forms the kernel block ``K_b = k(X_b, C)`` in panels of ``panel_rows`` rows
(never the whole ``b × M`` block, never stored), then

- with directions ``V`` (M × m): ``g += K_bᵀ (w_b ⊙ K_b V)`` over the training rows, and the
  held-out rows' images ``K_v V`` (their predictions move by these times the CG step);
- without ``V`` (the first pass, the moments): ``g = K_bᵀ [w_b, w_b ⊙ Y_b]`` (the weighted
  column sums of ``K_nM``, for the intercept's centring, and the right-hand sides), the sums
  ``[Σw, Σwy]`` and the held-out rows' targets and weights.

Every sum leaves the block in float64, whatever the kernel panels' dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bigkernel._sparse import column_min_max

__all__ = ["BlockProducts", "kernel_block_products", "panel_rows_for"]

#: bytes of one kernel panel (rows × M) per task
PANEL_BYTES = 16 * 2**20


def panel_rows_for(n_centres: int, dtype: Any, budget: int = PANEL_BYTES) -> int:
    """Rows of a kernel panel: as many as fit ``budget`` bytes (at least 16, at most 8192).

    Parameters
    ----------
    n_centres : int
    dtype : float32 or float64
    budget : int, default=PANEL_BYTES

    Returns
    -------
    int
    """
    rows = budget // max(1, n_centres * np.dtype(dtype).itemsize)
    return int(np.clip(rows, 16, 8192))


@dataclass
class BlockProducts:
    """What one block (or a sum of blocks) of a Falkon pass returns.

    Attributes
    ----------
    g : ndarray of shape (M, m)
        ``Σ_b K_bᵀ (w_b ⊙ R_b)`` over training rows (R: ``K_b V``, or ``[1, Y]`` in the first pass).
    sums : ndarray of shape (k + 2,)
        ``[Σw, Σwy, rows]`` over training rows of positive weight (first pass; zeros otherwise).
    held : dict of int to ndarray
        Per block start: ``K_v V`` of its held-out rows (n_v × m), or in the first pass
        ``[y_v | w_v]`` (n_v × (k + 1)).
    x_min, x_max : ndarray of shape (d,) or None
        Range of the training rows (first pass only).
    """

    g: np.ndarray
    sums: np.ndarray
    held: dict[int, np.ndarray] = field(default_factory=dict)
    x_min: np.ndarray | None = None
    x_max: np.ndarray | None = None

    def __add__(self, other: BlockProducts) -> BlockProducts:
        lo = _fold(np.fmin, self.x_min, other.x_min)
        hi = _fold(np.fmax, self.x_max, other.x_max)
        return BlockProducts(self.g + other.g, self.sums + other.sums, {**self.held, **other.held}, lo, hi)

    def held_rows(self) -> np.ndarray | None:
        """The held-out rows' arrays stacked in row order (None when there are none)."""
        if not self.held:
            return None
        return np.concatenate([self.held[k] for k in sorted(self.held)], axis=0)


def _fold(op, a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return b if a is None else a if b is None else op(a, b)


def kernel_block_products(
    fmap: Any,
    V: np.ndarray | None,
    split: Any,
    weights: Any,
    X: np.ndarray,
    Y: np.ndarray,
    start: int,
    *,
    dtype: str = "float64",
    panel_rows: int = 1024,
) -> BlockProducts:
    """The products of one row block (see the module docstring).

    Parameters
    ----------
    fmap : NystroemMap
        Raw map ``x ↦ k(x, C)`` (scaling folded in).
    V : ndarray of shape (M, m) or None
        Directions; None for the first pass.
    split : HoldoutSplit or None
        Held-out rows (group 1) take no part in ``g``.
    weights : callable or None
        ``weights(start, stop) -> (1, rows)`` (sample weights, bootstrap counts).
    X, Y : ndarray
        The block's rows and targets (Y (rows, k)).
    start : int
        Global index of the block's first row.
    dtype : {"float64", "float32"}
        The kernel panels' precision (products summed in float64 across panels).
    panel_rows : int

    Returns
    -------
    BlockProducts
    """
    stop = start + X.shape[0]
    Y = np.asarray(Y, dtype=np.float64).reshape(X.shape[0], -1)
    w = np.ones(X.shape[0]) if weights is None else np.asarray(weights(start, stop), dtype=np.float64)[0]
    held = np.zeros(X.shape[0], bool) if split is None else np.asarray(split.groups(start, stop)) == 1
    w_train = np.where(held, 0.0, w)
    M = fmap.n_components
    width = Y.shape[1] + 1 if V is None else V.shape[1]
    g = np.zeros((M, width))
    sums = np.zeros(Y.shape[1] + 2)
    if V is None:
        sums[0] = w_train.sum()
        sums[1:-1] = w_train @ Y
        sums[-1] = np.count_nonzero(w_train)
    Vd = None if V is None else np.asarray(V, dtype=dtype)
    images = []
    keep = np.flatnonzero((w_train > 0) | held)  # rows of weight 0 cost nothing
    for lo in range(0, keep.size, panel_rows):
        rows = keep[lo : lo + panel_rows]
        Kp = fmap.transform_unscaled(X[rows], dtype)
        if Vd is None:
            R = w_train[rows, None] * np.column_stack([np.ones(rows.size), Y[rows]])
        else:
            U = (Kp @ Vd).astype(np.float64)
            images.append(U[held[rows]])
            R = w_train[rows, None] * U
        g += (Kp.T @ R.astype(Kp.dtype)).astype(np.float64)
    out = BlockProducts(g, sums)
    if V is None and np.any(w_train > 0):
        lo, hi = column_min_max(X[w_train > 0])  # sparse: its unstored zeros count
        out.x_min, out.x_max = np.asarray(lo, float), np.asarray(hi, float)
    if held.any():
        out.held[start] = (
            np.column_stack([Y[held], w[held]]) if V is None else np.concatenate(images, axis=0)
        )  # fmt: skip
    return out
