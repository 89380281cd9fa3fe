"""Shared pieces of the exact kernels (layer 1: pure numpy): parameter checks, input blocks,
distance and inner-product blocks.

Numerical care
--------------
Squared Euclidean distances use ``‖x‖² + ‖z‖² − 2xᵀz`` (one GEMM, no ``(n, m, d)``
temporary) after shifting both blocks by the same point (distances are translation invariant,
and the shift reduces cancellation for data far from the origin); negative round-off is
clipped to 0 and, for ``k(X)`` with ``Z`` omitted, the diagonal is set to exactly 0.
L1 distances use :func:`scipy.spatial.distance.cdist` (C loop, no ``(n, m, d)`` temporary).
Arithmetic is float64; ``dtype=np.float32`` casts before the final elementwise function so the
output block is float32 (the float32 ``exp`` is ~2× faster) while distances stay float64.

scipy.sparse blocks (CSR) are kept sparse: inner products are sparse products (their dense
result is the block itself), norms come from the stored entries, and distances are not
centred (centring would densify; sparse data sit near the origin anyway).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from bigkernel._sparse import as_csr, is_sparse, row_sq_norms, scale_columns, to_dense
from bigkernel.errors import DataError, ParameterError

_OUTPUT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


# --------------------------------------------------------------------------------------------
# validation helpers


def _positive(kernel: str, name: str, value: Any) -> float:
    """Return ``value`` as a float, or raise ParameterError unless it is finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"{kernel} kernel: {name} must be a float > 0, found {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ParameterError(f"{kernel} kernel: {name} must be a finite float > 0, found {value}")
    return value


def _finite(kernel: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ParameterError(f"{kernel} kernel: {name} must be a finite float, found {value!r}")
    return float(value)


def _length_scale(kernel: str, value: Any) -> float | tuple[float, ...]:
    """A scalar length scale, or one per feature (ARD); every entry finite and > 0."""
    if np.ndim(value) == 0:
        return _positive(kernel, "length_scale", value)
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ParameterError(
            f"{kernel} kernel: length_scale must be a float or a 1-D sequence of one float per "
            f"feature, found shape {arr.shape}"
        )
    if not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ParameterError(f"{kernel} kernel: every length_scale must be finite and > 0, found {arr.tolist()}")
    return tuple(float(v) for v in arr)


def _as_2d(X: ArrayLike, name: str) -> np.ndarray:
    """Return ``X`` as a 2-D float64 array (no copy when it already is one); scipy.sparse
    input as float64 CSR."""
    if is_sparse(X):
        if X.ndim != 2 or X.dtype.kind not in "fiub":
            raise DataError(f"{name}: expected a 2-D sparse matrix of real numbers, found {X.shape} {X.dtype}")
        return as_csr(X)
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise DataError(
            f"{name}: expected a 2-D array of shape (n_samples, n_features), found shape "
            f"{arr.shape}; reshape a single feature with {name}.reshape(-1, 1)"
        )
    if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise DataError(f"{name}: expected real numbers, found dtype {arr.dtype}")
    return np.asarray(arr, dtype=np.float64)


def _blocks(X: ArrayLike, Z: ArrayLike | None) -> tuple[np.ndarray, np.ndarray | None]:
    Xa = _as_2d(X, "X")
    if Z is None:
        return Xa, None
    Za = _as_2d(Z, "Z")
    if Za.shape[1] != Xa.shape[1]:
        raise DataError(f"X and Z must have the same number of features: X has {Xa.shape[1]}, Z has {Za.shape[1]}")
    return Xa, Za


def _output_dtype(dtype: DTypeLike) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in _OUTPUT_DTYPES:
        raise ParameterError(f"dtype must be float64 or float32, found {dt}")
    return dt


# --------------------------------------------------------------------------------------------
# distance and inner-product blocks (float64, in place where possible)


def _sq_dists(
    X: np.ndarray, Z: np.ndarray | None, transform: Callable[[np.ndarray], np.ndarray] | None = None
) -> np.ndarray:
    """Squared Euclidean distances ``‖T(x) − T(z)‖²``, shape ``(len(X), len(Z))``, float64.

    Both blocks are shifted by the mean of the reference block first: distances do not change
    but ``‖x‖²`` shrinks, and with it the cancellation in ``‖x‖² + ‖z‖² − 2xᵀz``. The linear
    ``transform`` (feature scaling) may work in place on the centred copy, so one copy of each
    input is alive at a time. Round-off below 0 is clipped; with ``Z`` omitted the result is
    exactly symmetric with a zero diagonal.
    """
    ref = X if Z is None else Z
    sparse = is_sparse(X) or is_sparse(Z)
    if sparse:  # no centring: it would make the blocks dense
        centre = 0.0
        X = as_csr(X) if is_sparse(X) else X
        Z = as_csr(Z) if is_sparse(Z) else Z
    else:
        centre = ref.mean(axis=0) if len(ref) else np.zeros(ref.shape[1])
    Xc = X if is_sparse(X) else X - centre  # a dense block is copied: the transform is in place
    if transform is not None:
        Xc = transform(Xc)  # a sparse transform returns a new matrix, a dense one works on the copy
    xx = row_sq_norms(Xc)
    if Z is None:
        out = _gram_self(Xc, symmetrize=False)  # symmetrized below, after the adds
        zz = xx
    else:
        Zc = Z if is_sparse(Z) else Z - centre
        if transform is not None:
            Zc = transform(Zc)
        zz = row_sq_norms(Zc)
        out = to_dense(Xc @ Zc.T)
        del Zc
    del Xc
    out *= -2.0
    out += xx[:, None]
    out += zz[None, :]
    np.maximum(out, 0.0, out=out)
    if Z is None:
        symmetrize_upper(out)
        np.fill_diagonal(out, 0.0)
    return out


def symmetrize_upper(A: np.ndarray, tile: int = 128) -> None:
    """Copy the upper triangle of square ``A`` onto the lower one, in place, tile by tile.

    ``xx_i + xx_j`` and ``xx_j + xx_i`` round differently; CG wants an exactly symmetric
    operator. Tiles bound the temporaries to one ``tile × tile`` array (128 KiB).
    """
    n = A.shape[0]
    for i in range(0, n, tile):
        ie = min(i + tile, n)
        for j in range(0, i, tile):
            A[i:ie, j : j + tile] = A[j : j + tile, i:ie].T
        for r in range(i + 1, ie):  # inside the diagonal tile, row by row
            A[r, i:r] = A[i:r, r]


def _dists(
    X: np.ndarray, Z: np.ndarray | None, transform: Callable[[np.ndarray], np.ndarray] | None = None
) -> np.ndarray:
    out = _sq_dists(X, Z, transform)
    np.sqrt(out, out=out)
    return out


def _inner(X: np.ndarray, Z: np.ndarray | None) -> np.ndarray:
    return _gram_self(X) if Z is None else to_dense(X @ Z.T)


def _gram_self(X: np.ndarray, *, symmetrize: bool = True) -> np.ndarray:
    """``X Xᵀ``, exactly symmetric unless ``symmetrize=False``.

    Through GEMM on a copy: numpy's syrk path for ``X @ X.T`` measured ~7× slower here for
    thin ``X`` (4000×10), and the triangle copy afterwards is cheap.
    """
    out = to_dense(X @ X.T) if is_sparse(X) else X @ X.copy().T
    if symmetrize:
        symmetrize_upper(out)
    return out


def _feature_scaler(length_scale: float | tuple[float, ...], kernel: str) -> Callable[[np.ndarray], np.ndarray]:
    """In-place ``x ↦ x / ℓ`` (one ℓ or one per feature) for a centred copy."""
    inv = 1.0 / np.asarray(length_scale, dtype=np.float64)

    def scale(Xc: np.ndarray) -> np.ndarray:
        if inv.ndim == 1 and inv.size != Xc.shape[1]:
            raise DataError(
                f"{kernel} kernel: length_scale has {inv.size} entries (ARD, one per feature) "
                f"but the data has {Xc.shape[1]} features"
            )
        if is_sparse(Xc):
            return scale_columns(Xc, np.broadcast_to(inv, (Xc.shape[1],)))
        Xc *= inv
        return Xc

    return scale


def _finish(arg: np.ndarray, func, dtype: np.dtype) -> np.ndarray:
    """Apply the elementwise ``func`` in place after casting the float64 ``arg`` to ``dtype``."""
    out = arg if dtype == arg.dtype else arg.astype(dtype)
    func(out, out=out)
    return out


def manhattan(X: np.ndarray, Z: np.ndarray | None) -> np.ndarray:
    """L1 distances ``‖x − z‖₁`` (float64 (len(X), len(Z))), dense or sparse blocks."""
    Z = X if Z is None else Z
    if is_sparse(X) or is_sparse(Z):
        from sklearn.metrics.pairwise import manhattan_distances  # sparse-aware, no densifying

        return manhattan_distances(_int32_csr(X), _int32_csr(Z))
    from scipy.spatial.distance import cdist  # C loop: no (n, m, d) temporary

    return cdist(X, Z, metric="cityblock")


def _int32_csr(X):
    """CSR with int32 indices (scikit-learn's sparse L1 loop takes no others); dense unchanged."""
    if not is_sparse(X):
        return X
    X = as_csr(X)
    if X.indices.dtype != np.int32 and X.nnz < 2**31 - 1:
        X = X.copy()
        X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int32)
    return X


def _ones_diag(X: ArrayLike) -> np.ndarray:
    return np.ones(_as_2d(X, "X").shape[0])


def _positive_int(kernel: str, name: str, value: Any) -> int:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, numbers.Real)
        and math.isfinite(value)
        and float(value) == int(value)
        and int(value) >= 1
    )
    if not ok:
        raise ParameterError(f"{kernel} kernel: {name} must be a positive integer, found {value!r}")
    return int(value)
