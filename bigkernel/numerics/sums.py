"""Sufficient statistics of a ridge problem on a block of rows (layer 1).

For features Φ (rows × D), targets Y (rows × k) and m weight vectors w (m × rows; 0/1 masks for
holdout or folds, multinomial counts for bootstrap replicates), the statistics of set ``i`` are

    n = Σ w,  Σφ = Φᵀw,  Σy = Yᵀw,  Σy² = (Y²)ᵀw,  ΦᵀWΦ,  ΦᵀWY

all float64, the per-feature range (min and max of X over the rows with w > 0) and, for sparse X,
the stored entries ``Σ w·nnz(x)``. They add (the range: min/max) across blocks, so a whole data
set reduces to one small object.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from array_api_compat import array_namespace
from array_api_compat import device as array_device

from bigkernel._sparse import as_csr, column_min_max, is_sparse
from bigkernel.devices import CPU, Device, task_device, to_host
from bigkernel.errors import DeviceError
from bigkernel.numerics.fourier_features import FeatureMap
from bigkernel.numerics.nonfinite import check_finite


@dataclass
class SufficientStats:
    """Summed statistics of ``m`` weighted row sets; every array has leading axis ``m``.

    Attributes
    ----------
    n : ndarray of shape (m,)
    sum_phi : ndarray of shape (m, D)
    sum_y, sum_yy : ndarray of shape (m, k)
    gram : ndarray of shape (m, D, D)
    phi_y : ndarray of shape (m, D, k)
    x_min, x_max : ndarray of shape (m, d) or None
        Per-feature minimum and maximum of X over the set's rows (+inf / -inf for an empty
        set); None when not tracked (e.g. the difference of two sets, :func:`cv.subtract`).
    x_nnz : ndarray of shape (m,) or None
        Stored entries of sparse X over the set's rows, weighted like ``n`` (``x_nnz / n`` is
        the mean per row: the float32 check probes the map with rows like them); None for dense
        X or when not tracked.
    """

    n: np.ndarray
    sum_phi: np.ndarray
    sum_y: np.ndarray
    sum_yy: np.ndarray
    gram: np.ndarray
    phi_y: np.ndarray
    x_min: np.ndarray | None = None
    x_max: np.ndarray | None = None
    x_nnz: np.ndarray | None = None

    @classmethod
    def zeros(
        cls, m: int, n_components: int, n_targets: int, n_features: int | None = None, *, xp=None, device=None
    ) -> SufficientStats:
        """All-zero statistics, the identity of ``+`` (with an empty range when ``n_features``
        is given); float64 arrays of namespace ``xp`` (default numpy) on ``device``."""
        D, k = n_components, n_targets
        if xp is None or isinstance(xp.empty(0), np.ndarray):
            full = lambda shape, value: np.full(shape, value, dtype=np.float64)
        else:
            full = lambda shape, value: xp.full(shape, value, dtype=xp.float64, device=device)
        lo = hi = None
        if n_features is not None:
            lo, hi = full((m, n_features), np.inf), full((m, n_features), -np.inf)
        return cls(
            full((m,), 0.0), full((m, D), 0.0), full((m, k), 0.0), full((m, k), 0.0),
            full((m, D, D), 0.0), full((m, D, k), 0.0), lo, hi,
        )  # fmt: skip

    def to_host(self) -> SufficientStats:
        """The same statistics as numpy arrays (a device→host copy of each array for a GPU)."""
        arrays = [None if a is None else to_host(a) for a in (
            self.n, self.sum_phi, self.sum_y, self.sum_yy, self.gram, self.phi_y, self.x_min, self.x_max,
            self.x_nnz)]  # fmt: skip
        return SufficientStats(*arrays)

    def __add__(self, other: SufficientStats) -> SufficientStats:
        lo, hi = _range_union(self, other)
        return SufficientStats(
            self.n + other.n,
            self.sum_phi + other.sum_phi,
            self.sum_y + other.sum_y,
            self.sum_yy + other.sum_yy,
            self.gram + other.gram,
            self.phi_y + other.phi_y,
            lo,
            hi,
            _nnz_union(self, other),
        )

    def __iadd__(self, other: SufficientStats) -> SufficientStats:
        self.n += other.n
        self.sum_phi += other.sum_phi
        self.sum_y += other.sum_y
        self.sum_yy += other.sum_yy
        self.gram += other.gram
        self.phi_y += other.phi_y
        self.x_min, self.x_max = _range_union(self, other)
        self.x_nnz = _nnz_union(self, other)
        return self

    def select(self, i: int) -> SufficientStats:
        """Statistics of set ``i`` alone (leading axis kept, of length 1)."""
        s = slice(i, i + 1)
        lo, hi = (None, None) if self.x_min is None else (self.x_min[s], self.x_max[s])
        return SufficientStats(
            self.n[s], self.sum_phi[s], self.sum_y[s], self.sum_yy[s], self.gram[s], self.phi_y[s],
            lo, hi, None if self.x_nnz is None else self.x_nnz[s],
        )  # fmt: skip

    def total(self) -> SufficientStats:
        """Statistics of the union of all sets (sum over the leading axis; range: min/max)."""
        lo = hi = None
        if self.x_min is not None:
            lo, hi = self.x_min.min(axis=0, keepdims=True), self.x_max.max(axis=0, keepdims=True)
        return SufficientStats(
            *(a.sum(axis=0, keepdims=True) for a in
              (self.n, self.sum_phi, self.sum_y, self.sum_yy, self.gram, self.phi_y)), lo, hi,
            None if self.x_nnz is None else self.x_nnz.sum(axis=0, keepdims=True),
        )  # fmt: skip


def _range_union(a: SufficientStats, b: SufficientStats) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Range of the union of two sets' rows; unknown (None) if either is unknown."""
    if a.x_min is None or b.x_min is None:
        return None, None
    return np.minimum(a.x_min, b.x_min), np.maximum(a.x_max, b.x_max)


def _nnz_union(a: SufficientStats, b: SufficientStats) -> np.ndarray | None:
    """Stored entries of the union of two sets' rows; unknown (None) if either is unknown
    (dense X, or statistics saved without them)."""
    if a.x_nnz is None or b.x_nnz is None:
        return None
    return a.x_nnz + b.x_nnz


def sums_precision(dtype) -> float:
    """Relative precision of the sums for features of ``dtype`` (a conservative bound).

    float32 sub-block products carry ~1e-7 relative error (measured 1.5e-7 in the Frobenius
    norm, tests/test_primal_identities.py); float64 sums ~1e-15. Scores computed from the sums
    (GCV, K-fold CV) use this to refuse points whose value is below their rounding error.
    """
    return 3e-7 if np.dtype(dtype) == np.float32 else 1e-13


def sub_block_edges(start: int, stop: int, block_rows: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` row ranges covering ``[start, stop)``, cut at global multiples of
    ``block_rows`` so that a sub-block does not depend on the chunk that holds it."""
    first = -(-start // block_rows) * block_rows
    edges = sorted({start, stop, *range(first, stop, block_rows)})
    return list(zip(edges[:-1], edges[1:]))


def block_stats(
    fmap: FeatureMap | Sequence[FeatureMap],
    X: Any,
    Y: Any,
    start: int,
    *,
    weights=None,
    dtype: np.dtype | str = np.float64,
    block_rows: int = 8192,
    device: Device = CPU,
) -> SufficientStats | list[SufficientStats]:
    """Statistics of rows ``[start, start + len(X))`` of a data set.

    Parameters
    ----------
    fmap : FeatureMap or sequence of FeatureMap
        Several maps (e.g. one per bandwidth) share one read of the block; one
        :class:`SufficientStats` is returned per map.
    X : array of shape (rows, d)
        numpy, or any array-API namespace (array-api-strict, CuPy): the pass runs in the
        namespace of its inputs; or scipy.sparse (numpy pass, read as CSR and multiplied as
        stored, memory O(nnz)).
    Y : array of shape (rows, k)
    start : int
        Global index of the first row (for weights and error messages).
    weights : callable or partition, optional
        Either ``weights(start, stop) -> ndarray (m, stop - start)`` giving m weight vectors
        (e.g. bootstrap counts), or a *row partition* with ``groups(start, stop) -> int array``,
        ``n_groups`` and ``keep`` (the groups to return, e.g. the training rows of a holdout
        split, or every fold): rows are then sorted by group so each group is a contiguous slice
        and no feature row is copied or computed for a group that is not kept. Default: one set
        of unit weights. Both are evaluated on the host.
    dtype : float32 or float64
        Precision of the features and of the within-sub-block products.
    block_rows : int
        Rows are processed in sub-blocks aligned to global multiples of ``block_rows``, which
        bounds the feature memory to ``block_rows × D`` and makes each sub-block's product the
        same for any chunking whose boundaries are multiples of ``block_rows``.
    device : Device, default=CPU
        The fit's resolved device (:class:`~bigkernel.devices.Device`), taken where this task
        runs by :func:`~bigkernel.devices.task_device` (a dask-cuda worker's own GPU). For a
        GPU, the block is copied to it once, the sub-blocks are sized from its free
        memory (:func:`device_block_rows`, a power-of-two multiple or fraction of
        ``block_rows``), every partial sum is accumulated in float64 on the GPU and the
        statistics come back to the host once, at the end of the task.

    Returns
    -------
    SufficientStats or list of SufficientStats
        Host (numpy) arrays with leading axis m (weight vectors or kept groups).
    """
    single = not isinstance(fmap, (list, tuple))  # any map (random features, Nyström) or a list
    maps = [fmap] if single else list(fmap)
    if is_sparse(X):
        X = as_csr(X, X.dtype)  # row slices and row gathers below
    dev = task_device(device)
    # the weights live on the host: rows are picked there, only the kept rows' indices move
    partition = weights if hasattr(weights, "groups") else None
    W = None if weights is None or partition else np.asarray(weights(start, start + X.shape[0]), dtype=np.float64)
    m = len(partition.keep) if partition else (1 if W is None else W.shape[0])
    if dev.is_gpu:
        with dev.activate():
            Xd, Yd = dev.asarray(X), dev.asarray(Y)  # one host→device copy per task
            width = max(f.n_components for f in maps) + Yd.shape[1] + 1
            rows = device_block_rows(block_rows, width, dtype, len(maps) * m, dev.free_memory())
            accs = [acc.to_host() for acc in _pass(maps, Xd, Yd, start, (partition, W, m), dtype, rows)]
    else:
        accs = [acc.to_host() for acc in _pass(maps, X, Y, start, (partition, W, m), dtype, block_rows)]
    for f, acc in zip(maps, accs):
        # fold the constant feature scale into the small sums rather than the big blocks
        c = f.scale
        acc.sum_phi *= c
        acc.gram *= c * c
        acc.phi_y *= c
    return accs[0] if single else accs


#: fraction of a GPU's free memory one task's sub-blocks may take (other tasks, the
#: allocator's pool and the tree reduction need the rest)
DEVICE_MEMORY_FRACTION = 0.25

#: most rows of one GPU sub-block (beyond this a bigger product gains nothing)
DEVICE_MAX_ROWS = 2**18


def device_block_rows(block_rows: int, width: int, dtype: np.dtype | str, n_sets: int, free_bytes: int) -> int:
    """Rows of a GPU sub-block: ``block_rows`` times a power of two (or divided by one), the most
    that fits :data:`DEVICE_MEMORY_FRACTION` of ``free_bytes``.

    Per row a sub-block holds the product input ``[φ | y | 1]`` (``width`` columns) and up to
    two feature temporaries of the same size; the float64 accumulators (``n_sets`` × width²)
    and the product of one sub-block come first. Sub-block edges stay at global multiples of the
    result, so the statistics do not depend on the chunking.

    Raises
    ------
    DeviceError
        When not even the accumulators and a 256-row sub-block fit.
    """
    item = np.dtype(dtype).itemsize
    fixed = (n_sets + 1) * width * width * 8 + width * width * item
    per_row = 3 * width * item
    budget = int(free_bytes * DEVICE_MEMORY_FRACTION) - fixed
    rows = block_rows
    while rows * 2 <= DEVICE_MAX_ROWS and rows * 2 * per_row <= budget:
        rows *= 2
    while rows > 256 and rows * per_row > budget:
        rows //= 2
    if rows * per_row > budget:
        need = (fixed + rows * per_row) / DEVICE_MEMORY_FRACTION
        raise DeviceError(
            f"the GPU has {free_bytes / 2**30:.2f} GiB free, but the streamed pass needs about "
            f"{need / 2**30:.2f} GiB for {n_sets} set(s) of {width - 1} features; free GPU memory "
            "(other processes, fewer dask threads per GPU), lower n_components, or fit on the CPU"
        )
    return rows


def _pass(maps: list, X: Any, Y: Any, start: int, sets: tuple, dtype, block_rows: int) -> list[SufficientStats]:
    """The sub-block loop of :func:`block_stats`, in the namespace and on the device of ``X``;
    ``sets`` = (row partition or None, host weights (m × rows) or None, m).

    Notes
    -----
    One function on purpose: it is the inner loop of the one pass; keeping the sub-block
    loop, the group sort and the accumulation together keeps the hot path readable and free
    of per-call overhead.
    """
    sparse = is_sparse(X)
    xp = array_namespace(Y) if sparse else array_namespace(X, Y)  # sparse X: a numpy pass
    check_finite(X, Y, start)
    stop = start + X.shape[0]
    partition, W, m = sets
    dev = array_device(Y) if sparse else array_device(X)
    accs = [SufficientStats.zeros(m, f.n_components, Y.shape[1], X.shape[1], xp=xp, device=dev) for f in maps]
    # the range rides along the pass (d columns: no extra read); one array per set, shared by
    # the maps (every map sees the same rows)
    x_lo, x_hi = accs[0].x_min, accs[0].x_max
    x_nnz = np.zeros(m) if sparse else None  # sparse X: its stored entries too
    for acc in accs:
        acc.x_min, acc.x_max, acc.x_nnz = x_lo, x_hi, x_nnz
    buffers = _ProductBuffers(dtype, min(block_rows, X.shape[0]))
    for lo, hi in sub_block_edges(start, stop, block_rows):
        rows = slice(lo - start, hi - start)
        x, y = (X[rows] if sparse else X[rows, ...]), xp.astype(Y[rows, ...], xp.float64)
        if partition is not None:
            g = np.asarray(partition.groups(lo, hi))
            order = np.argsort(g, kind="stable")
            x, y = _take_rows(xp, x, order), _take_rows(xp, y, order)
            bounds = np.searchsorted(g[order], np.arange(partition.n_groups + 1))
            pieces = [(i, slice(int(bounds[j]), int(bounds[j + 1]))) for i, j in enumerate(partition.keep)]
        else:
            pieces = [(0, slice(0, hi - lo))]
        _accumulate_range(xp, x_lo, x_hi, x, pieces, None if W is None else W[:, rows])
        if sparse:
            _accumulate_nnz(x_nnz, x, pieces, None if W is None else W[:, rows])
        for f, acc in zip(maps, accs):
            for i, sl in pieces:
                if sl.stop == sl.start:
                    continue
                P = buffers.products_input(f, x[sl] if sparse else x[sl, ...], y[sl, ...])
                if W is None:
                    _accumulate(xp, acc, i, P, y[sl, ...])
                else:
                    for j in range(m):
                        _accumulate_weighted(xp, acc, j, P, y, W[j, rows])
    return accs


class _ProductBuffers:
    """Builds a sub-block's product input ``P = [φ | y | 1]`` (rows × (D + k + 1)), so one
    symmetric product PᵀP gives ΦᵀΦ, Φᵀy and Σφ = Φᵀ1 at once.

    numpy: the features are written straight into a buffer reused across sub-blocks (one
    allocation per task and width, no copy); other namespaces concatenate.
    """

    def __init__(self, dtype: np.dtype | str, rows: int) -> None:
        self.dtype, self.rows = np.dtype(dtype), max(rows, 1)
        self._buffers: dict[int, np.ndarray] = {}

    def products_input(self, fmap: FeatureMap, x: Any, y: Any) -> Any:
        D, k, r = fmap.n_components, y.shape[1], x.shape[0]
        if isinstance(x, np.ndarray) or is_sparse(x):
            width = D + k + 1
            if width not in self._buffers:
                self._buffers[width] = np.empty((self.rows, width), dtype=self.dtype)
            P = self._buffers[width][:r]
            if _writes_into(fmap):
                fmap.transform_unscaled(x, self.dtype, out=P[:, :D])
            else:  # a map without ``out=`` (e.g. polynomial features): one copy
                P[:, :D] = fmap.transform_unscaled(x, self.dtype)
            P[:, D : D + k] = y
            P[:, D + k] = 1.0
            return P
        xp = array_namespace(x)
        phi = fmap.transform_unscaled(x, self.dtype)
        dt = phi.dtype
        ones = xp.ones((r, 1), dtype=dt, device=array_device(x))
        return xp.concat([phi, xp.astype(y, dt), ones], axis=1)


@functools.cache
def _writes_into_type(cls: type) -> bool:
    return "out" in inspect.signature(cls.transform_unscaled).parameters


def _writes_into(fmap) -> bool:
    """Whether the map's ``transform_unscaled`` takes ``out=`` (fills a buffer in place)."""
    return _writes_into_type(type(fmap))


#: most rows one float32 product sums before its result joins the float64 sums: a GPU sub-block
#: (up to :data:`DEVICE_MAX_ROWS` rows) is multiplied in slices of this many rows, so a float32
#: GEMM never accumulates more rows than the CPU's sub-block does (its float32 rounding grows
#: with the reduction length; measured on an H200: 50k-row products moved float32 predictions
#: by 1e-3 against the CPU's)
FLOAT32_REDUCTION_ROWS = 8192


def _gram(xp, P: Any) -> Any:
    """PᵀP (numpy dispatches AᵀA to BLAS syrk), float64; in another namespace a float32 ``P`` is
    multiplied in slices of :data:`FLOAT32_REDUCTION_ROWS` rows, each slice's product added in
    float64."""
    if isinstance(P, np.ndarray):
        return P.T @ P
    r = P.shape[0]
    step = r if P.dtype == xp.float64 else FLOAT32_REDUCTION_ROWS
    g = None
    for lo in range(0, max(r, 1), step):
        part = P[lo : min(lo + step, r), ...]
        prod = xp.astype(xp.matmul(xp.matrix_transpose(part), part), xp.float64)
        g = prod if g is None else g + prod
    return g


def _add_products(acc: SufficientStats, i: int, g: Any) -> None:
    """Add the blocks of ``g = PᵀP`` (P = [φ | y | 1]) to set ``i``: ΦᵀΦ, Φᵀy, Φᵀ1."""
    D, k = acc.gram.shape[-1], acc.phi_y.shape[-1]
    acc.gram[i, ...] += g[:D, :D]
    acc.phi_y[i, ...] += g[:D, D : D + k]
    acc.sum_phi[i, ...] += g[:D, D + k]


def _accumulate(xp, acc: SufficientStats, i: int, P: Any, y: Any) -> None:
    """Add unit-weight rows to set ``i`` (P: their product input, y: float64 targets)."""
    _add_products(acc, i, _gram(xp, P))
    acc.n[i] += y.shape[0]
    acc.sum_y[i, ...] += xp.sum(y, axis=0)
    acc.sum_yy[i, ...] += xp.sum(y * y, axis=0)


def _accumulate_weighted(xp, acc: SufficientStats, i: int, P: Any, y: Any, w: np.ndarray) -> None:
    """Add rows with host weights ``w`` (e.g. bootstrap counts) to set ``i``; zero-weight rows
    skipped. (W^½P)ᵀ(W^½P) gives ΦᵀWΦ, ΦᵀWy and Φᵀw in one symmetric product."""
    keep = np.flatnonzero(w)
    if keep.size == 0:
        return
    wk = w[keep]
    if keep.size < w.size:
        P, y = _take_rows(xp, P, keep), _take_rows(xp, y, keep)
    host = isinstance(P, np.ndarray)
    wd = wk if host else xp.asarray(wk, device=array_device(P))
    if not np.all(wk == 1.0):
        root = np.sqrt(wk)
        root = root.astype(P.dtype) if host else xp.astype(xp.asarray(root, device=array_device(P)), P.dtype)
        P = P * root[:, None]
    _add_products(acc, i, _gram(xp, P))
    acc.n[i] += float(wk.sum())
    acc.sum_y[i, ...] += xp.matmul(wd, y)
    acc.sum_yy[i, ...] += xp.matmul(wd, y * y)


def _take_rows(xp, a: Any, idx: np.ndarray) -> Any:
    """Rows ``idx`` (host integers) of ``a``: fancy indexing on numpy, ``xp.take`` elsewhere."""
    if isinstance(a, np.ndarray) or is_sparse(a):
        return a[idx]
    return xp.take(a, xp.asarray(idx.astype(np.int64), device=array_device(a)), axis=0)


def _accumulate_range(xp, lo: Any, hi: Any, x: Any, pieces, W: np.ndarray | None) -> None:
    """Fold the rows of a sub-block into each set's range: rows of piece ``i`` (a partition
    group) or, with host weights ``W`` (m × rows), the rows of weight > 0 in set ``j``."""
    if W is None:
        parts = [(i, x[sl] if is_sparse(x) else x[sl, ...]) for i, sl in pieces]
    else:
        parts = [(j, _take_rows(xp, x, np.flatnonzero(W[j] > 0))) for j in range(W.shape[0])]
    for i, xs in parts:
        if xs.shape[0] and (isinstance(xs, np.ndarray) or is_sparse(xs)):
            bmin, bmax = column_min_max(xs)  # sparse: its unstored zeros count
            np.minimum(lo[i], bmin, out=lo[i])
            np.maximum(hi[i], bmax, out=hi[i])
        elif xs.shape[0]:
            lo[i, ...] = xp.minimum(lo[i, ...], xp.astype(xp.min(xs, axis=0), lo.dtype))
            hi[i, ...] = xp.maximum(hi[i, ...], xp.astype(xp.max(xs, axis=0), hi.dtype))


def _accumulate_nnz(nnz: np.ndarray, x: Any, pieces, W: np.ndarray | None) -> None:
    """Add a sparse (CSR) sub-block's stored entries to each set: the rows of piece ``i``, or,
    with host weights ``W`` (m × rows), ``W[j] · nnz(row)`` (weighted like ``n``)."""
    row_nnz = np.diff(x.indptr).astype(np.float64)
    if W is None:
        for i, sl in pieces:
            nnz[i] += row_nnz[sl].sum()
    else:
        nnz += W @ row_nnz
