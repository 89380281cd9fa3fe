"""Column scaling for ``standardize=True``: (weighted) means and standard deviations of X.

One rule for every solver: constant (or non-finite) columns keep scale 1, so standardizing never
divides by zero. Works on numpy arrays (values) and dask arrays (lazy: the caller computes).
"""

from __future__ import annotations

from typing import Any

import numpy as np


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
