"""A Gram matrix the user computed (``kernel="precomputed"``) as the source of the exact path's
tiles (layer 1: numpy only).

:class:`PrecomputedGram` offers what the Gram operator, the preconditioner and the predictions
read from a :class:`~bigkernel.numerics.gram_tiles.GramTiler` — ``n``, ``tile``,
``recompute_matvec``, ``columns``, ``diag``, ``dense``, ``cross``, ``nbytes`` — with the
entries read from ``K`` instead of computed from points. Tiles are views of ``K`` (already in
memory), so the operator caches none. ``K`` is held through a read-only view: nothing in the
solver can write into the caller's array.

After a fit only the row count is kept (``PrecomputedGram.columns_only``): predictions take the
cross Gram matrix ``K(X*, X_fit)`` as their input, as in scikit-learn.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from bigkernel.errors import DataError
from bigkernel.numerics.gram_tiles import TILE_MAX, tile_matvec

__all__ = ["SYMMETRY_RTOL", "PrecomputedGram", "check_symmetric"]

#: a K with ``max|K − Kᵀ| > SYMMETRY_RTOL · max|K|`` is refused (round-off passes)
SYMMETRY_RTOL = 1e-8


def check_symmetric(K: np.ndarray, tile: int = TILE_MAX) -> None:
    """Raise DataError unless the square ``K`` is symmetric to ``SYMMETRY_RTOL``.

    Tile by tile (no ``n × n`` temporary). The exact solver reads only the upper triangle, so a
    non-symmetric K would silently be replaced by its upper half.
    """
    n = K.shape[0]
    worst, top = 0.0, 0.0
    for i in range(0, n, tile):
        rows = slice(i, min(i + tile, n))
        top = max(top, float(np.abs(K[rows]).max()))
        for j in range(i, n, tile):
            cols = slice(j, min(j + tile, n))
            worst = max(worst, float(np.abs(K[rows, cols] - K[cols, rows].T).max()))
    if worst > SYMMETRY_RTOL * max(top, np.finfo(float).tiny):
        raise DataError(
            f"kernel='precomputed': the Gram matrix K must be symmetric, found max|K - K.T| = {worst:.3g} "
            f"(max|K| = {top:.3g}); pass (K + K.T) / 2 if the asymmetry is round-off, or check how K was built"
        )


class PrecomputedGram:
    """Tiles, columns and the diagonal of a precomputed ``n × n`` Gram matrix ``K``.

    Parameters
    ----------
    K : array-like of shape (n, n) or None
        Float64 (converted once otherwise); held through a read-only view. None: a fitted
        model's predictor, which knows only the number of training columns.
    n_columns : int, optional
        With ``K=None``: the columns the cross Gram matrix of a prediction must have.
    keep : ndarray of int, optional
        The training columns the dual coefficients belong to (rows of weight 0 are dropped
        from the fit, their columns from the predictions); default all.
    """

    #: tiles are views of K: caching copies would only double the memory
    cacheable = False
    kernel = None

    def __init__(self, K: ArrayLike | None, *, n_columns: int | None = None, keep: np.ndarray | None = None) -> None:
        if K is None:
            self.K = None
            self.n_columns = int(n_columns)
        else:
            K = np.asarray(K, dtype=np.float64).view()
            K.flags.writeable = False  # this view only: the caller's array keeps its flags
            if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] == 0:
                raise DataError(
                    f"kernel='precomputed': fit takes the square Gram matrix K(X, X), found shape {K.shape}"
                )
            self.K, self.n_columns = K, K.shape[0]
        self.keep = None if keep is None else np.asarray(keep, dtype=np.int64)
        self.n = self.n_columns if self.keep is None else int(self.keep.size)
        self.d = self.n  # "features" of the input: its columns

    @classmethod
    def columns_only(cls, n_columns: int, keep: np.ndarray | None = None) -> PrecomputedGram:
        """The predictor of a fitted model (no K)."""
        return cls(None, n_columns=n_columns, keep=keep)

    @property
    def X(self) -> np.ndarray | None:
        """The training "points" are K itself (scikit-learn's ``X_fit_``); None after a fit."""
        return self.K

    def _need_k(self) -> np.ndarray:
        if self.K is None:  # pragma: no cover - fitted models only predict
            raise DataError("this precomputed-kernel model holds no Gram matrix (it was fitted): predict only")
        return self.K

    def tile(
        self, rows: slice, cols: slice, dtype: DTypeLike = np.float64, workspace: dict | None = None
    ) -> np.ndarray:
        """``K[rows, cols]`` (a read-only view for float64)."""
        T = self._need_k()[rows, cols]
        return T if np.dtype(dtype) == T.dtype else T.astype(dtype)

    def recompute_matvec(
        self, rows: slice, cols: slice, V: np.ndarray, out: np.ndarray, workspace: dict | None = None
    ) -> None:
        """Add the tile's two products to ``out`` (see :func:`tile_matvec`), read from K."""
        tile_matvec(self._need_k()[rows, cols], V, out, rows, cols)

    def columns(self, idx: ArrayLike) -> np.ndarray:
        """``K[:, idx]`` (a float64 copy)."""
        return np.array(self._need_k()[:, np.asarray(idx, dtype=np.int64)], dtype=np.float64)

    def diag(self) -> np.ndarray:
        """The diagonal of K (a copy)."""
        return np.diagonal(self._need_k()).copy()

    def dense(self, dtype: DTypeLike = np.float64) -> np.ndarray:
        """A writable copy of K (the exact df centres it in place)."""
        return np.array(self._need_k(), dtype=dtype)

    def cross(self, Z: ArrayLike, cols: slice | np.ndarray | None = None, dtype: DTypeLike = np.float64) -> np.ndarray:
        """The given cross Gram block ``K(X*, X_fit)[:, cols]``: prediction's input is the kernel."""
        Z = np.asarray(Z)
        if Z.ndim != 2 or Z.shape[1] != self.n_columns:
            raise DataError(
                f"kernel='precomputed': predict takes K(X*, X_fit) of shape (n_samples, {self.n_columns}) — one "
                f"column per training row — found shape {Z.shape}"
            )
        if self.keep is not None:
            Z = Z[:, self.keep]
        cols = slice(None) if cols is None else cols
        return np.asarray(Z[:, cols], dtype=dtype)

    @property
    def nbytes(self) -> int:
        """Bytes of K (0 after a fit)."""
        return 0 if self.K is None else int(self.K.nbytes)

    def extra_bytes_per_entry(self, dtype: DTypeLike = np.float64) -> int:
        """No workspace: tiles are views."""
        return 0
