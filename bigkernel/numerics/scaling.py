"""Column scaling for ``standardize=True``: (weighted) means and standard deviations of X.

Sparse X is scaled without centring (mean 0: centring would make it dense).

One rule for every solver: constant (or non-finite) columns keep scale 1, so standardizing never
divides by zero. Works on numpy arrays (values) and dask arrays (lazy: the caller computes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bigkernel._sparse import column_sums, is_sparse, scale_columns, scale_from_sums, to_dense


def column_moments(X: Any, weights: Any = None) -> tuple[Any, Any]:
    """Column means and standard deviations of ``X`` (n, d), weighted by ``weights`` (n,).

    Lazy for dask input; numpy in, numpy out. Weights are row weights (e.g. bootstrap counts),
    so integer weights equal the moments of the data with rows repeated.
    """
    if weights is None:
        return X.mean(axis=0), X.std(axis=0)
    w = weights[:, None]
    total = weights.sum()
    mean = (X * w).sum(axis=0) / total
    return mean, (((X - mean) ** 2 * w).sum(axis=0) / total) ** 0.5


def safe_scale(std: Any) -> np.ndarray:
    """Standard deviations as float64 divisors: constant or non-finite columns get 1."""
    std = np.asarray(std, dtype=np.float64)
    return np.where(np.isfinite(std) & (std > 0), std, 1.0)


def standardize_moments(X, sample_weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, scale)`` of ``standardize=True`` for in-memory X: column means and standard
    deviations; sparse X gets mean 0 (scaled without centring, so it stays sparse)."""
    if is_sparse(X):
        return np.zeros(X.shape[1]), safe_scale(scale_from_sums(column_sums(X, sample_weight))[1])
    mean, std = column_moments(X, sample_weight)
    return mean, safe_scale(std)


def standardize_rows(X, mean: np.ndarray, scale: np.ndarray):
    """``(X − mean) / scale``; sparse X with mean 0 is scaled as stored (stays sparse)."""
    if is_sparse(X) and not np.any(mean):
        return scale_columns(X, 1.0 / scale)
    return (to_dense(X).astype(np.float64) - mean) / scale
