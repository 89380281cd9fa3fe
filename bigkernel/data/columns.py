"""Columns by name: which columns of a source are a model's features, and the names outputs show.

A model fitted on named columns (a table, a zarr group of 1-D column arrays, a DataFrame) keeps
them as ``feature_names_in_``. Whatever reads data for it later — a job's ``predict:`` and
``bootstrap.eval``, ``bigkernel predict`` and ``update``, :func:`bigkernel.bootstrap` — takes
its columns by those names (:func:`default_x`, :func:`check_frame_columns`), never by position,
and outputs label features by them (:func:`feature_labels`, :func:`feature_index`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from bigkernel.errors import DataError, ParameterError

__all__ = [
    "check_frame_columns",
    "checked_columns",
    "default_x",
    "feature_index",
    "feature_labels",
    "model_columns",
    "named_column",
]


def model_columns(est: Any) -> list[str] | None:
    """The column names a model was fitted on (``feature_names_in_``), or None (arrays)."""
    names = getattr(est, "feature_names_in_", None)
    return None if names is None else [str(n) for n in names]


def feature_labels(names: Sequence[str] | None, n_features: int) -> list[str]:
    """Labels of X's columns: the data's names when known, else ``x0 … x{d-1}``."""
    if names is not None and len(names) == n_features:
        return [str(n) for n in names]
    return [f"x{j}" for j in range(n_features)]


def feature_index(feature: int | str, names: Sequence[str] | None, n_features: int, where: str = "feature") -> int:
    """The column index of ``feature``: an index as given, or a column name looked up in ``names``.

    Raises
    ------
    ParameterError
        A name when the data has no column names, a name not among them, or an index out of
        range.
    """
    if isinstance(feature, str):
        if names is None:
            raise ParameterError(
                f"{where}: {feature!r} is a column name, but the data has no column names (arrays); "
                f"give a column index 0 … {n_features - 1}"
            )
        names = [str(n) for n in names]
        if feature not in names:
            raise ParameterError(f"{where}: no column {feature!r}; the columns are {names}")
        return names.index(feature)
    if not 0 <= int(feature) < n_features:
        raise ParameterError(f"{where}: expected a column index < {n_features}, found {feature}")
    return int(feature)


def default_x(path: str, x: str | Sequence[str] | None, names: Sequence[str] | None, where: str) -> Any:
    """The ``x`` to read from ``path`` for a model with columns ``names``: ``x`` when given;
    else the model's columns for a table or a zarr group holding them as 1-D arrays, else the
    array ``"X"``.

    Parameters
    ----------
    path : str
        The data source.
    x : str, list of str or None
        What the user gave (None: not given).
    names : list of str or None
        The model's (or the training data's) column names.
    where : str
        How the user names ``x`` (``"predict.x"``, ``"--x"``), for the message.

    Raises
    ------
    DataError
        A table for a model without column names.
    """
    from bigkernel.data.tables import is_table

    if x is not None:
        return list(x) if isinstance(x, (tuple, list)) else x
    if is_table(path):
        if names is None:
            raise DataError(
                f"{path} is a table, but the model was fitted without column names (on arrays), so it "
                f"cannot tell which columns are its features; name them, in the order of the fit, "
                f"with {where}"
            )
        return list(names)
    if names is not None and _zarr_holds(path, names):
        return list(names)
    return "X"


def _zarr_holds(path: str, names: Sequence[str]) -> bool:
    """Whether ``path`` is a local zarr group with an array of every name and none named X."""
    import zarr

    if "://" in str(path) or not os.path.isdir(path):
        return False
    try:
        members = set(zarr.open_group(path, mode="r").array_keys())
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, zarr.errors.NodeTypeValidationError):
        return False
    return "X" not in members and set(names) <= members


def check_frame_columns(names: Sequence[str] | None, X: Any, what: str, source: str | None = None) -> None:
    """Refuse a DataFrame whose columns are not ``names`` in order (scikit-learn's rule at
    predict), where the array behind it would otherwise be used by position; ``source`` names
    the data ``names`` come from (default: the model's fit).

    Raises
    ------
    DataError
        ``X`` has other columns, or the same ones in another order.
    """
    columns = getattr(X, "columns", None)
    if names is None or columns is None:
        return
    found = [str(c) for c in columns]
    if found != list(names):
        order = " (the same columns in another order)" if sorted(found) == sorted(names) else ""
        where, match = ("the model was fitted on", "the fit") if source is None else (f"{source} has", f"{source}'s")
        raise DataError(
            f"{what} has columns {found}{order}, but {where} {list(names)}: names and order must "
            f"match {match}; select them as {what}[{list(names)}]"
        )


def checked_columns(est: Any, **frames: Any) -> list[str] | None:
    """The column names of the data an estimator is used on: its ``feature_names_in_``, else
    the first DataFrame's columns in ``frames``, else None; every DataFrame in ``frames`` is
    checked against them by :func:`check_frame_columns` (an unfitted estimator's X_eval against
    its X: the arrays behind them are used by position)."""
    names, source = model_columns(est), None
    if names is None:
        for first, X in frames.items():
            if getattr(X, "columns", None) is not None:
                names, source = [str(c) for c in X.columns], first
                break
    for what, X in frames.items():
        check_frame_columns(names, X, what, source)
    return names


def named_column(feature: Any, X: Any, n_features: int) -> Any:
    """``feature`` as a column index when it is a column name of the DataFrame ``X``; anything
    else unchanged (an index, checked by the caller)."""
    if not isinstance(feature, str):
        return feature
    return feature_index(feature, checked_columns(None, X=X), n_features, "feature")
