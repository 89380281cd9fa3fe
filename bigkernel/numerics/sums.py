"""Sufficient statistics of a ridge problem on a block of rows (layer 1).

For features Φ (rows × D), targets Y (rows × k) and m weight vectors w (m × rows; 0/1 masks for
holdout or folds, multinomial counts for bootstrap replicates), the statistics of set ``i`` are

    n = Σ w,  Σφ = Φᵀw,  Σy = Yᵀw,  Σy² = (Y²)ᵀw,  ΦᵀWΦ,  ΦᵀWY

all float64, and the per-feature range (min and max of X over the rows with w > 0). They add
(the range: min/max) across blocks, so a whole data set reduces to one small object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bigkernel._sparse import as_csr, column_min_max, is_sparse, nonfinite_rows
from bigkernel.errors import NonFiniteError
from bigkernel.numerics.fourier_features import FeatureMap


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
    """

    n: np.ndarray
    sum_phi: np.ndarray
    sum_y: np.ndarray
    sum_yy: np.ndarray
    gram: np.ndarray
    phi_y: np.ndarray
    x_min: np.ndarray | None = None
    x_max: np.ndarray | None = None

    @classmethod
    def zeros(cls, m: int, n_components: int, n_targets: int, n_features: int | None = None) -> SufficientStats:
        """All-zero statistics, the identity of ``+`` (with an empty range when ``n_features``
        is given)."""
        D, k = n_components, n_targets
        lo = hi = None
        if n_features is not None:
            lo, hi = np.full((m, n_features), np.inf), np.full((m, n_features), -np.inf)
        return cls(
            np.zeros(m), np.zeros((m, D)), np.zeros((m, k)), np.zeros((m, k)),
            np.zeros((m, D, D)), np.zeros((m, D, k)), lo, hi,
        )  # fmt: skip

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
        )

    def __iadd__(self, other: SufficientStats) -> SufficientStats:
        self.n += other.n
        self.sum_phi += other.sum_phi
        self.sum_y += other.sum_y
        self.sum_yy += other.sum_yy
        self.gram += other.gram
        self.phi_y += other.phi_y
        self.x_min, self.x_max = _range_union(self, other)
        return self

    def select(self, i: int) -> SufficientStats:
        """Statistics of set ``i`` alone (leading axis kept, of length 1)."""
        s = slice(i, i + 1)
        lo, hi = (None, None) if self.x_min is None else (self.x_min[s], self.x_max[s])
        return SufficientStats(
            self.n[s], self.sum_phi[s], self.sum_y[s], self.sum_yy[s], self.gram[s], self.phi_y[s],
            lo, hi,
        )  # fmt: skip

    def total(self) -> SufficientStats:
        """Statistics of the union of all sets (sum over the leading axis; range: min/max)."""
        lo = hi = None
        if self.x_min is not None:
            lo, hi = self.x_min.min(axis=0, keepdims=True), self.x_max.max(axis=0, keepdims=True)
        return SufficientStats(
            *(a.sum(axis=0, keepdims=True) for a in
              (self.n, self.sum_phi, self.sum_y, self.sum_yy, self.gram, self.phi_y)), lo, hi,
        )  # fmt: skip


def _range_union(a: SufficientStats, b: SufficientStats) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Range of the union of two sets' rows; unknown (None) if either is unknown."""
    if a.x_min is None or b.x_min is None:
        return None, None
    return np.minimum(a.x_min, b.x_min), np.maximum(a.x_max, b.x_max)


def sums_precision(dtype) -> float:
    """Relative precision of the sums for features of ``dtype`` (a conservative bound).

    float32 sub-block products carry ~1e-7 relative error (measured 1.5e-7 in the Frobenius
    norm, tests/test_primal_identities.py); float64 sums ~1e-15. Scores computed from the sums
    (GCV, K-fold CV) use this to refuse points whose value is below their rounding error.
    """
    return 3e-7 if np.dtype(dtype) == np.float32 else 1e-13


def check_finite(X: np.ndarray, y: np.ndarray | None, start: int, action: str = "fitting") -> None:
    """Raise :class:`NonFiniteError` naming the first offending row if X or y has NaN/inf.

    ``y`` may be None (prediction data); ``action`` completes "remove or impute those rows
    before ...". Sparse ``X``: its stored entries are checked (no dense copy).
    """
    for name, a in (("X", X), ("y", y)):
        bad = None if a is None else nonfinite_rows(a)
        if bad is not None:
            first = start + int(np.argmax(bad))
            stop = start + a.shape[0]
            raise NonFiniteError(
                f"{name} contains NaN or inf in rows [{start}, {stop}) — first at row {first} "
                f"({int(bad.sum())} bad rows in that range); remove or impute those rows "
                f"before {action}"
            )


def sub_block_edges(start: int, stop: int, block_rows: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` row ranges covering ``[start, stop)``, cut at global multiples of
    ``block_rows`` so that a sub-block does not depend on the chunk that holds it."""
    first = -(-start // block_rows) * block_rows
    edges = sorted({start, stop, *range(first, stop, block_rows)})
    return list(zip(edges[:-1], edges[1:]))


def block_stats(
    fmap: FeatureMap | Sequence[FeatureMap],
    X: np.ndarray,
    Y: np.ndarray,
    start: int,
    *,
    weights=None,
    dtype: np.dtype | str = np.float64,
    block_rows: int = 8192,
) -> SufficientStats | list[SufficientStats]:
    """Statistics of rows ``[start, start + len(X))`` of a data set.

    Parameters
    ----------
    fmap : FeatureMap or sequence of FeatureMap
        Several maps (e.g. one per bandwidth) share one read of the block; one
        :class:`SufficientStats` is returned per map.
    X : ndarray or scipy.sparse matrix of shape (rows, d)
        Sparse blocks are read as CSR and multiplied as stored (memory O(nnz)).
    Y : ndarray of shape (rows, k)
    start : int
        Global index of the first row (for weights and error messages).
    weights : callable or partition, optional
        Either ``weights(start, stop) -> ndarray (m, stop - start)`` giving m weight vectors
        (e.g. bootstrap counts), or a *row partition* with ``groups(start, stop) -> int array``,
        ``n_groups`` and ``keep`` (the groups to return, e.g. the training rows of a holdout
        split, or every fold): rows are then sorted by group so each group is a contiguous slice
        and no feature row is copied or computed for a group that is not kept. Default: one set
        of unit weights.
    dtype : float32 or float64
        Precision of the features and of the within-sub-block products.
    block_rows : int
        Rows are processed in sub-blocks aligned to global multiples of ``block_rows``, which
        bounds the feature memory to ``block_rows × D`` and makes each sub-block's product the
        same for any chunking whose boundaries are multiples of ``block_rows``.

    Returns
    -------
    SufficientStats or list of SufficientStats
        With leading axis m (weight vectors or kept groups).

    Notes
    -----
    One function on purpose: it is the inner loop of the one pass; keeping the sub-block
    loop, the group sort and the accumulation together keeps the hot path readable and free
    of per-call overhead.
    """
    single = not isinstance(fmap, (list, tuple))  # any map (random features, Nyström) or a list
    maps = [fmap] if single else list(fmap)
    if is_sparse(X):
        X = as_csr(X, X.dtype)  # row slices and row gathers below
    check_finite(X, Y, start)
    stop = start + X.shape[0]
    partition = weights if hasattr(weights, "groups") else None
    W = None if weights is None or partition else np.asarray(weights(start, stop), dtype=np.float64)
    m = len(partition.keep) if partition else (1 if W is None else W.shape[0])
    accs = [SufficientStats.zeros(m, f.n_components, Y.shape[1], X.shape[1]) for f in maps]
    # the range rides along the pass (d columns: no extra read); one array per set, shared by
    # the maps (every map sees the same rows)
    x_lo, x_hi = accs[0].x_min, accs[0].x_max
    for acc in accs[1:]:
        acc.x_min, acc.x_max = x_lo, x_hi
    for lo, hi in sub_block_edges(start, stop, block_rows):
        rows = slice(lo - start, hi - start)
        x, y = X[rows], np.asarray(Y[rows], dtype=np.float64)
        if partition is not None:
            g = np.asarray(partition.groups(lo, hi))
            order = np.argsort(g, kind="stable")
            x, y = x[order], y[order]
            bounds = np.searchsorted(g[order], np.arange(partition.n_groups + 1))
            pieces = [(i, slice(bounds[j], bounds[j + 1])) for i, j in enumerate(partition.keep)]
        else:
            pieces = [(0, slice(None))]
        _accumulate_range(x_lo, x_hi, x, pieces, None if W is None else W[:, rows])
        for f, acc in zip(maps, accs):
            for i, sl in pieces:
                if x[sl].shape[0] == 0:
                    continue
                phi = f.transform_unscaled(x[sl], dtype)
                if W is None:
                    _accumulate(acc, i, phi, y[sl])
                else:
                    for j in range(m):
                        _accumulate_weighted(acc, j, phi, y, W[j, rows])
    for f, acc in zip(maps, accs):
        # fold the constant feature scale into the small sums rather than the big blocks
        c = f.scale
        acc.sum_phi *= c
        acc.gram *= c * c
        acc.phi_y *= c
    return accs[0] if single else accs


def _accumulate_range(lo: np.ndarray, hi: np.ndarray, x: np.ndarray, pieces, W: np.ndarray | None) -> None:
    """Fold the rows of a sub-block into each set's range: rows of piece ``i`` (a partition
    group) or, with weights ``W`` (m × rows), the rows of weight > 0 in set ``j``. Sparse
    sub-blocks count their unstored zeros."""
    if W is None:
        for i, sl in pieces:
            if x[sl].shape[0]:
                bmin, bmax = column_min_max(x[sl])
                np.minimum(lo[i], bmin, out=lo[i])
                np.maximum(hi[i], bmax, out=hi[i])
        return
    for j in range(W.shape[0]):
        keep = np.flatnonzero(W[j] > 0)
        if keep.size:
            bmin, bmax = column_min_max(x[keep])
            np.minimum(lo[j], bmin, out=lo[j])
            np.maximum(hi[j], bmax, out=hi[j])


def _accumulate(acc: SufficientStats, i: int, phi: np.ndarray, y: np.ndarray) -> None:
    """Add unit-weight rows to set ``i``."""
    # one gemm gives Φᵀy and Σφ = Φᵀ1 (cheaper than a float64 column sum of Φ)
    ext = np.empty((y.shape[0], y.shape[1] + 1), dtype=phi.dtype)
    ext[:, :-1], ext[:, -1] = y, 1.0
    prod = phi.T @ ext
    acc.n[i] += phi.shape[0]
    acc.sum_phi[i] += prod[:, -1]
    acc.phi_y[i] += prod[:, :-1]
    acc.sum_y[i] += y.sum(axis=0)
    acc.sum_yy[i] += (y * y).sum(axis=0)
    acc.gram[i] += phi.T @ phi  # numpy dispatches AᵀA to BLAS syrk


def _accumulate_weighted(acc: SufficientStats, i: int, phi: np.ndarray, y: np.ndarray, w: np.ndarray) -> None:
    """Add rows with weights ``w`` (e.g. bootstrap counts) to set ``i``; zero-weight rows skipped."""
    keep = np.flatnonzero(w)
    if keep.size == 0:
        return
    wk = w[keep]
    p, yk = phi[keep], y[keep]
    acc.n[i] += wk.sum()
    acc.sum_phi[i] += wk.astype(p.dtype) @ p
    acc.sum_y[i] += wk @ yk
    acc.sum_yy[i] += wk @ (yk * yk)
    if np.all(wk == 1.0):
        acc.gram[i] += p.T @ p
    else:
        ps = p * np.sqrt(wk).astype(p.dtype)[:, np.newaxis]
        acc.gram[i] += ps.T @ ps  # ΦᵀWΦ = (W^½Φ)ᵀ(W^½Φ): still a syrk
    acc.phi_y[i] += p.T @ (wk[:, np.newaxis] * yk).astype(p.dtype, copy=False)
