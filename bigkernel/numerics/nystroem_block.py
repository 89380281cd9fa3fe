"""One row block of a Falkon pass (layer 1: numpy only): kernel panels against the centres,
computed and dropped.

A pass of the CG solver (:mod:`bigkernel.solvers.nystroem_cg`) visits every row block once
and, per block, forms the kernel block ``K_b = k(X_b, C)`` in panels of ``panel_rows`` rows
(never the whole ``b × M`` block, never stored), then

- with directions ``V`` (M × m): ``g += K_bᵀ (w_b ⊙ K_b V)`` over the training rows, and the
  held-out rows' images ``K_v V`` (their predictions move by these times the CG step);
- without ``V`` (the first pass, the moments): ``g = K_bᵀ [w_b, w_b ⊙ Y_b]`` (the weighted
  column sums of ``K_nM``, for the intercept's centring, and the right-hand sides), the sums
  ``[Σw, Σwy]``, the held-out rows' targets and weights, and (``sketch``) a seeded uniform
  sample of the training rows with their weights, from which the client estimates
  ``K_nMᵀWK_nM / n_w`` for the preconditioner (:func:`sketch_panels`), or (``factor``: the
  upper Cholesky factor ``T`` of ``K_MM + jitter·I``) the preconditioner's inner matrix over
  every training row of the block, ``Σ w_i T⁻ᵀk_i k_iᵀT⁻¹`` (uncentred: the client centres it,
  :func:`centred_inner`), in the same panels as the moments: the kernel block is computed once
  for both.

Every sum leaves the block in float64, whatever the kernel panels' dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.linalg import blas

from bigkernel._sparse import column_min_max
from bigkernel.devices import task_device, to_host
from bigkernel.numerics.namespace import device_of

__all__ = ["BlockProducts", "centred_inner", "kernel_block_products", "panel_rows_for", "sketch_panels"]

#: bytes of one kernel panel (rows × M) per task: cache-sized, as every panel is swept by the
#: exp, a cast and two products (diamonds, M = 1,000, one thread: 2,048-row panels 0.36 s a
#: pass, 256-row 0.28 s); at least PANEL_MIN_ROWS rows, so that large M still multiply in
#: panels of useful height (M = 20,000: 16 rows 0.75 s, 256 rows 0.46 s)
PANEL_BYTES = 2 * 2**20
PANEL_MIN_ROWS = 128


def panel_rows_for(n_centres: int, dtype: Any, budget: int = PANEL_BYTES) -> int:
    """Rows of a kernel panel: as many as fit ``budget`` bytes (at least
    :data:`PANEL_MIN_ROWS`, at most 8192).

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
    return int(np.clip(rows, PANEL_MIN_ROWS, 8192))


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
    sketch : dict of int to (rows, weights)
        Per block start: its sampled training rows (first pass with ``sketch`` only).
    inner : ndarray of shape (M, M) or None
        ``Σ w_i T⁻ᵀk_i k_iᵀT⁻¹`` over training rows, upper triangle (first pass with ``factor`` only).
    """

    g: np.ndarray
    sums: np.ndarray
    held: dict[int, np.ndarray] = field(default_factory=dict)
    x_min: np.ndarray | None = None
    x_max: np.ndarray | None = None
    sketch: dict[int, tuple[Any, np.ndarray]] = field(default_factory=dict)
    inner: np.ndarray | None = None

    def __add__(self, other: BlockProducts) -> BlockProducts:
        lo = _fold(np.fmin, self.x_min, other.x_min)
        hi = _fold(np.fmax, self.x_max, other.x_max)
        held, sketch = {**self.held, **other.held}, {**self.sketch, **other.sketch}
        inner = _fold(np.add, self.inner, other.inner)
        return BlockProducts(self.g + other.g, self.sums + other.sums, held, lo, hi, sketch, inner)

    def sketch_rows(self) -> tuple[Any, np.ndarray] | None:
        """The sampled rows and their weights in row order (None when none was sampled)."""
        if not self.sketch:
            return None
        parts = [self.sketch[k] for k in sorted(self.sketch)]
        rows = [r for r, _ in parts]
        X = sp.vstack(rows, format="csr") if sp.issparse(rows[0]) else np.concatenate(rows, axis=0)
        return X, np.concatenate([w for _, w in parts])

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
    device: Any = None,
    sketch: Any = None,
    factor: np.ndarray | None = None,
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
        The block's rows and targets (Y (rows, k)), host arrays.
    start : int
        Global index of the block's first row.
    dtype : {"float64", "float32"}
        The kernel panels' precision (products summed in float64 across panels).
    panel_rows : int
    device : Device, optional
        The fit's device: a GPU computes the panels and products there
        (:func:`~bigkernel.devices.task_device`: a dask worker's own GPU); None or the CPU: numpy.
    sketch : HoldoutSplit or None
        First pass: its group-1 rows of positive training weight are returned (rows and
        weights) for the preconditioner's estimate of ``K_nMᵀWK_nM``.
    factor : ndarray of shape (M, M) or None
        First pass on the host: the upper factor ``T`` of ``K_MM + jitter·I``; the block then
        also returns ``inner`` (:func:`moments_and_inner`, in panels of ``panel_rows``).

    Returns
    -------
    BlockProducts
    """
    stop = start + X.shape[0]
    Y = np.asarray(Y, dtype=np.float64).reshape(X.shape[0], -1)
    w = np.ones(X.shape[0]) if weights is None else np.asarray(weights(start, stop), dtype=np.float64)[0]
    held = np.zeros(X.shape[0], bool) if split is None else np.asarray(split.groups(start, stop)) == 1
    w_train = np.where(held, 0.0, w)
    sums = np.zeros(Y.shape[1] + 2)
    if V is None:
        sums[0] = w_train.sum()
        sums[1:-1] = w_train @ Y
        sums[-1] = np.count_nonzero(w_train)
    rows = _Rows(X, Y, w_train, held)
    dev = None if device is None else task_device(device)
    inner = None
    if V is None and factor is not None:
        g, inner = moments_and_inner(fmap, factor, rows, dtype, panel_rows)
        images = []
    elif dev is not None and dev.is_gpu:
        with dev.activate():
            g, images = block_products_in(dev.xp, fmap, V, rows, dtype, device_panel_rows(fmap, dtype))
    else:
        g, images = block_products_in(None, fmap, V, rows, dtype, panel_rows)
    out = BlockProducts(g, sums, inner=inner)
    if held.any():
        out.held[start] = np.column_stack([Y[held], w[held]]) if V is None else np.concatenate(images, axis=0)
    if V is None and np.any(w_train > 0):
        lo, hi = column_min_max(X[w_train > 0])  # sparse: its unstored zeros count
        out.x_min, out.x_max = np.asarray(lo, float), np.asarray(hi, float)
    if V is None and sketch is not None:
        pick = np.flatnonzero((np.asarray(sketch.groups(start, stop)) == 1) & (w_train > 0))
        if pick.size:
            out.sketch[start] = (X[pick], w_train[pick])
    return out


def sketch_panels(
    fmap: Any, X: Any, w: np.ndarray, mean: np.ndarray, *, panel_rows: int = 1024, dtype: str = "float64"
) -> Callable[[], Iterator[np.ndarray]]:
    """The sampled rows as panels ``Z_p`` (rows ``√(w_i / Σw) · (k(x_i, C) − μ)``, float64), so
    that ``Σ_p Z_pᵀ Z_p`` is an unbiased estimate of the centred ``K_nMᵀWK_nM / n_w`` from a
    uniform sample of rows. Returns a callable that yields them (again at each call): the
    preconditioner forms what it needs panel by panel (``T⁻ᵀZ_pᵀ``, positive semi-definite by
    construction, or the Gram itself) without holding the ``m × M`` block.

    Parameters
    ----------
    fmap : NystroemMap
        The raw map of the centres.
    X : array of shape (m, d)
        The sampled rows (dense or sparse).
    w : ndarray of shape (m,)
        Their weights (> 0).
    mean : ndarray of shape (M,)
        ``μ``, the weighted column means of ``K_nM`` over all training rows.
    panel_rows : int, default=1024
        Rows of a panel.
    dtype : {"float64", "float32"}
        The passes' kernel precision: the panels hold the same kernel values as the passes
        (float32-rounded, then float64), so that a sample of every row gives the exact
        preconditioner of the system CG solves.

    Returns
    -------
    callable
    """
    scale = np.sqrt(np.asarray(w, dtype=np.float64) / float(np.sum(w)))

    def panels() -> Iterator[np.ndarray]:
        for lo in range(0, X.shape[0], panel_rows):
            K = np.asarray(fmap.transform_unscaled(X[lo : lo + panel_rows], dtype), dtype=np.float64) - mean
            yield K * scale[lo : lo + panel_rows, None]

    return panels


def moments_and_inner(
    fmap: Any, T: np.ndarray, rows: _Rows, dtype: str, panel_rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first pass's ``g = K_bᵀ[w, w ⊙ Y]`` and the uncentred inner matrix
    ``Σ w_i T⁻ᵀk_i k_iᵀT⁻¹`` (upper triangle, F-ordered) over the block's training rows, from the
    same host panels (``2·M²`` flops a row: a triangular solve and a rank-k update, as the
    client's :func:`sketch_panels` build; the kernel values are the passes', float64 products).

    Parameters
    ----------
    fmap : NystroemMap
    T : ndarray of shape (M, M)
        Upper factor of ``K_MM + jitter·I``.
    rows : _Rows
    dtype : {"float64", "float32"}
        The kernel panels' precision.
    panel_rows : int

    Returns
    -------
    g : ndarray of shape (M, k + 1)
    inner : ndarray of shape (M, M)
    """
    M = fmap.n_components
    L = np.asarray(T, dtype=np.float64).T  # lower, F-ordered: L⁻¹ = T⁻ᵀ
    g = np.zeros((M, rows.Y.shape[1] + 1))
    inner = np.zeros((M, M), order="F")
    keep = np.flatnonzero(rows.w_train > 0)
    for lo in range(0, keep.size, panel_rows):
        idx = keep[lo : lo + panel_rows]
        K = np.asarray(fmap.transform_unscaled(rows.X[idx], dtype), dtype=np.float64)
        w = rows.w_train[idx]
        g += K.T @ (w[:, None] * np.column_stack([np.ones(idx.size), rows.Y[idx]]))
        K *= np.sqrt(w)[:, None]  # a fresh array: scaled and solved in place (its .T is F-ordered)
        Yp = blas.dtrsm(1.0, L, K.T, side=0, lower=1, trans_a=0, overwrite_b=1)
        inner = blas.dsyrk(1.0, Yp, beta=1.0, c=inner, trans=0, lower=0, overwrite_c=1)
    return g, inner


def centred_inner(T: np.ndarray, inner: np.ndarray, g_w: np.ndarray, n_w: float) -> np.ndarray:
    """``T⁻ᵀ K̃ᵀWK̃ T⁻¹ / n_w`` (symmetric, C-ordered) from the summed uncentred ``inner`` (upper
    triangle) of :func:`moments_and_inner` and ``g_w = K_nMᵀw``: with ``u = T⁻ᵀ g_w`` it is
    ``(inner − u uᵀ / n_w) / n_w``, the centring done after the triangular solve (every
    ``T⁻ᵀk_i`` has norm at most ``√k(x_i, x_i)``, so the rank-one correction costs no more
    accuracy than the rank-k update itself; centred before it, through ``T⁻¹`` on both sides, it
    would lose ``cond(K_MM)``).

    Parameters
    ----------
    T : ndarray of shape (M, M)
    inner : ndarray of shape (M, M)
        Upper triangle read.
    g_w : ndarray of shape (M,)
    n_w : float

    Returns
    -------
    ndarray of shape (M, M)
    """
    u = blas.dtrsm(1.0, np.asarray(T, dtype=np.float64).T, np.array(g_w, dtype=np.float64, order="F")[:, None],
                   side=0, lower=1, trans_a=0)[:, 0]  # fmt: skip
    P = np.triu(inner)
    P = P + np.triu(P, 1).T
    v = u / np.sqrt(n_w)
    P -= np.outer(v, v)  # exactly symmetric
    P /= n_w
    return np.ascontiguousarray(P)


@dataclass(frozen=True)
class _Rows:
    """A block's host rows: inputs, targets, training weights (0: held out or weight 0), held-out mask."""

    X: Any
    Y: np.ndarray
    w_train: np.ndarray
    held: np.ndarray


def device_panel_rows(fmap: Any, dtype: str) -> int:
    """Rows of a kernel panel on a device: :data:`DEVICE_PANEL_BYTES` of float64 panel (a
    float32 panel is multiplied in float64, :func:`block_products_in`)."""
    return panel_rows_for(fmap.n_components, np.float64, DEVICE_PANEL_BYTES)


#: bytes of one kernel panel on a device
DEVICE_PANEL_BYTES = 512 * 2**20


def block_products_in(
    xp: Any, fmap: Any, V: np.ndarray | None, rows: _Rows, dtype: str, panel_rows: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    """``g`` (host float64) and the held-out images of one block, computed in namespace ``xp``
    (None: numpy on the host; the panels are the map's host features).

    Notes
    -----
    One function on purpose: it is the inner loop of every CG iteration; the panel loop, the
    weighting and the accumulation stay together so no panel is kept beyond its two products.
    """
    host = xp is None
    ns = np if host else xp
    panels = KernelPanels(fmap, xp, dtype)
    M = fmap.n_components
    width = rows.Y.shape[1] + 1 if V is None else V.shape[1]
    Vd = None if V is None or host else ns.asarray(V, dtype=ns.float64, device=panels.device)
    g = np.zeros((M, width)) if host else ns.zeros((M, width), dtype=ns.float64, device=panels.device)
    images = []
    keep = np.flatnonzero((rows.w_train > 0) | rows.held)  # rows of weight 0 cost nothing
    for lo in range(0, keep.size, panel_rows):
        idx = keep[lo : lo + panel_rows]
        # float32 panels are float32 kernel values (the exp at float32 speed), multiplied in
        # float64: float32 products of the preconditioned directions lose what small α need
        # (diamonds, α/n = 2e-10: CG broke down with pᵀAp = −4e14)
        Kp = panels(rows.X[idx])
        Kp = Kp.astype(np.float64) if host else ns.astype(Kp, ns.float64)
        wt = rows.w_train[idx, None]
        if V is None:
            R = wt * np.column_stack([np.ones(idx.size), rows.Y[idx]])
        elif host:
            U = Kp @ V
            images.append(U[rows.held[idx]])
            R = U * wt
        else:
            U = Kp @ Vd
            hold = np.flatnonzero(rows.held[idx])
            images.append(np.asarray(to_host(ns.take(U, ns.asarray(hold), axis=0)), float))
            R = U * ns.asarray(wt, dtype=U.dtype, device=panels.device)
        if host:
            g += Kp.T @ R
        else:
            R = R if not isinstance(R, np.ndarray) else ns.asarray(R, device=panels.device)
            g = g + ns.matmul(ns.matrix_transpose(Kp), R)
    return (g if host else np.asarray(to_host(g), dtype=np.float64)), images


class KernelPanels:
    """``x ↦ k(x, C)`` panels in a namespace: numpy → the map's host features; another
    namespace (a GPU's) → for the rbf family the augmented GEMM and ``exp`` on the device
    (centres copied once per block task), for other kernels host panels copied in.

    Parameters
    ----------
    fmap : NystroemMap
        A raw map.
    xp : namespace or None
    dtype : {"float64", "float32"}
    """

    def __init__(self, fmap: Any, xp: Any, dtype: str) -> None:
        self.fmap, self.xp, self.dtype = fmap, xp, np.dtype(dtype)
        tiler = fmap.tiler
        self.on_device_rbf = xp is not None and tiler.fast and not tiler.sparse
        self.device = None
        if xp is not None:
            probe = xp.asarray(np.zeros(1))
            self.device = device_of(probe)
        if self.on_device_rbf:
            _, B, self.scale = tiler.augmented_points()
            self.B = xp.asarray(np.ascontiguousarray(B, dtype=self.dtype), device=self.device)

    def __call__(self, X: Any) -> Any:
        fmap, xp = self.fmap, self.xp
        if xp is None:
            return fmap.transform_unscaled(X, self.dtype)
        if not self.on_device_rbf:
            return xp.asarray(fmap.transform_unscaled(X, self.dtype), device=self.device)
        A = fmap.tiler.augment(fmap.kernel_inputs(X))
        A = xp.asarray(np.ascontiguousarray(A, dtype=self.dtype), device=self.device)
        K = xp.exp(xp.minimum(A @ xp.matrix_transpose(self.B), 0.0))
        return K * self.scale if self.scale != 1.0 else K
