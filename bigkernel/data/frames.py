"""Dask DataFrames as estimator input: lazily, or (the in-memory paths) as pandas, never by
position when the model knows its column names."""

from __future__ import annotations

from typing import Any

from sklearn.utils.validation import validate_data as _sklearn_validate_data

__all__ = ["is_dask_frame", "validate_data"]


def is_dask_frame(a: Any) -> bool:
    """Whether ``a`` is a dask DataFrame or Series (lazy, partitioned)."""
    return hasattr(a, "to_dask_array") and hasattr(a, "npartitions")


def validate_data(est: Any, X: Any, **kwargs: Any) -> Any:
    """scikit-learn's ``validate_data`` for the paths that take X into memory; a dask DataFrame
    is computed to pandas first, so its column names are checked against ``feature_names_in_``
    (scikit-learn does not read a dask DataFrame's names: it would use the columns by position)."""
    if is_dask_frame(X):
        X = X.compute()
    return _sklearn_validate_data(est, X, **kwargs)
