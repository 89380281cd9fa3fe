"""Parquet and CSV sources through dask.dataframe, with column selection for X and y."""

from __future__ import annotations

import glob
import os

import dask.array as da
import numpy as np

from bigkernel.errors import DataError, DataNotFoundError

TABLE_SUFFIXES = (".parquet", ".pq", ".csv", ".csv.gz")


def is_table(path: str) -> bool:
    """Whether ``path`` names a Parquet or CSV source (file, glob, or folder of Parquet parts)."""
    p = str(path).rstrip("/")
    return p.endswith(TABLE_SUFFIXES) or (os.path.isdir(p) and bool(glob.glob(os.path.join(p, "*.parquet"))))


def _read(path: str, columns: list[str] | None):
    import dask.dataframe as dd

    p = str(path).rstrip("/")
    if p.endswith((".csv", ".csv.gz")):
        return dd.read_csv(p, usecols=columns, blocksize="64MB")
    return dd.read_parquet(p, columns=columns)


def _columns(path: str) -> list[str]:
    return list(_read(path, None).columns)


def open_table(path: str, x: str | list[str], y: str | list[str] | None) -> tuple[da.Array, da.Array | None]:
    """X (n, d) and y (n,) or (n, k) as dask arrays from the named columns.

    Partition lengths are computed once (``to_dask_array(lengths=True)``): for Parquet from the
    footer metadata, for CSV by reading the file — row offsets are needed for error messages and
    the holdout hash.
    """
    path = str(path)
    if "://" not in path and not glob.glob(path.rstrip("/")):
        raise DataNotFoundError(f"table source {path!r} does not exist")
    xs = [x] if isinstance(x, str) else list(x)
    ys = [] if y is None else ([y] if isinstance(y, str) else list(y))
    available = _columns(path)
    missing = [c for c in xs + ys if c not in available]
    if missing:
        raise DataNotFoundError(
            f"{path!r} has no column(s) {missing}; columns found: {available}. "
            "Name them with the source's x: [..] and y: keys"
        )
    df = _read(path, xs + ys)
    bad = {c: str(t) for c, t in df.dtypes.items() if not _numeric(t)}
    if bad:
        raise DataError(f"{path!r}: columns must be numeric; non-numeric columns {bad}. Select numeric columns "
                        "or convert them before fitting")
    # one conversion of the selected frame, then column slices: converting df[xs] and df[ys]
    # separately lets dask-expr plan their partitions differently from the computed lengths
    arr = df.to_dask_array(lengths=True)
    X = arr[:, : len(xs)]
    Y = None
    if ys:
        Y = arr[:, len(xs) :]
        Y = Y[:, 0] if isinstance(y, str) else Y
    return X, Y


def _numeric(t) -> bool:
    """numpy numeric dtypes only: pandas string/object/category columns are not features."""
    try:
        return np.dtype(t).kind in "fiub"
    except TypeError:
        return False
