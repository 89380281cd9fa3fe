"""Parquet and CSV sources through dask.dataframe, with column selection for X and y; tables
written from dask arrays (synthetic data, predictions)."""

from __future__ import annotations

import glob
import os

import dask
import dask.array as da
import numpy as np

from bigkernel.data.empty_tables import check_has_rows
from bigkernel.errors import DataError, DataNotFoundError
from bigkernel.io.atomic import atomic_folder

TABLE_SUFFIXES = (".parquet", ".pq", ".csv", ".csv.gz")
CSV_SUFFIXES = (".csv", ".csv.gz")
CSV_BLOCKSIZE = "64MB"  # bytes of CSV per partition


def is_table(path: str) -> bool:
    """Whether ``path`` names a Parquet or CSV source (file, glob, or folder of Parquet parts)."""
    p = str(path).rstrip("/")
    return p.endswith(TABLE_SUFFIXES) or (os.path.isdir(p) and bool(glob.glob(os.path.join(p, "*.parquet"))))


def _read(path: str, columns: list[str] | None):
    import dask.dataframe as dd

    p = str(path).rstrip("/")
    if p.endswith(CSV_SUFFIXES):
        return dd.read_csv(p, usecols=columns, blocksize=CSV_BLOCKSIZE)
    return dd.read_parquet(p, columns=columns)


def _columns(path: str) -> list[str]:
    return list(_read(path, None).columns)


def open_table(
    path: str, x: str | list[str], y: str | list[str] | None, *, labels: bool = False
) -> tuple[da.Array, da.Array | None]:
    """X (n, d) and y (n,) or (n, k) as dask arrays from the named columns; with ``labels``,
    y may be a column of class labels of any type (strings included).

    Partition lengths are computed once (``to_dask_array(lengths=True)``): for Parquet from the
    footer metadata, for CSV by reading the file — row offsets are needed for error messages and
    the holdout hash.
    """
    path = str(path)
    if "://" not in path and not glob.glob(path.rstrip("/")):
        raise DataNotFoundError(f"table source {path!r} does not exist")
    check_has_rows(path)  # 0-byte and header-only files: one clear error, not pandas'
    xs = [x] if isinstance(x, str) else list(x)
    ys = [] if y is None else ([y] if isinstance(y, str) else list(y))
    available = _columns(path)
    missing = [c for c in xs + ys if c not in available]
    if missing:
        raise DataNotFoundError(
            f"{path!r} has no column(s) {missing}; columns found: {available}. "
            "Name them with the source's x: [..] and y: keys"
        )
    # dask-expr's "tune" step merges the partitions of a column subset of a multi-file Parquet
    # dataset, by a factor that depends on the columns selected: the len() pass (no columns)
    # and the array (these columns) would disagree on the partitions, and to_dask_array(
    # lengths=True) raises "lengths does not match". Partition sizes are ours to choose anyway
    # (the array is rechunked to chunk_rows), so the conversion runs without it.
    with dask.config.set({"optimization.tune.active": False}):
        # columns by name, in the order asked for: read_csv(usecols=...) keeps the file's order,
        # so a target-first CSV would otherwise hand y to X by position
        df = _read(path, xs + ys)[xs + ys]
        bad = {c: str(t) for c, t in df.dtypes.items() if not _numeric(t) and not (labels and c in ys)}
        if bad:
            raise DataError(
                f"{path!r}: columns must be numeric; non-numeric columns {bad}. Select numeric "
                "columns or convert them before fitting"
            )
        # one conversion of the selected frame, then column slices: converting df[xs] and df[ys]
        # separately lets dask-expr plan their partitions differently from the computed lengths
        arr = df.to_dask_array(lengths=True)
    X = arr[:, : len(xs)]
    if X.dtype == object:  # string labels beside numeric features: one object array, X cast back
        X = X.astype(np.float64)
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


def write_table(arr: da.Array, columns: list[str], path: str, *, overwrite: bool = False, what: str = "table") -> str:
    """Write the columns of a 2-D dask array to a CSV file or a Parquet dataset, by the suffix.

    A ``.csv`` path is one file (the chunks appended in order, ``dask.dataframe.to_csv``'s
    ``single_file``); a ``.parquet`` path is a folder of Parquet parts, one per chunk, which
    pandas, pyarrow and dask read as one table. Chunks are computed by dask and written as they
    come (never the whole table in memory), into a hidden sibling renamed into place when
    complete, so an interrupted write leaves nothing that looks finished.

    Parameters
    ----------
    arr : dask array of shape (n, len(columns))
    columns : list of str
    path : str
        Ends in ``.csv``/``.csv.gz`` or ``.parquet``/``.pq``.
    overwrite : bool, default=False
        Replace an existing ``path``; otherwise it is an :class:`~bigkernel.errors.OutputExistsError`.
    what : str, default="table"
        What is written, for messages ("prediction output", "data set").

    Returns
    -------
    str
        ``path``.
    """
    import dask.dataframe as dd

    from bigkernel.runtime import compute  # the one place that runs graphs

    path = str(path)
    is_csv = path.endswith(CSV_SUFFIXES)
    if not (is_csv or path.endswith((".parquet", ".pq"))):
        raise DataError(f"{what} {path!r}: expected a .csv, .csv.gz or .parquet path")
    frame = dd.from_dask_array(arr, columns=list(columns))
    with atomic_folder(path, overwrite=overwrite, what=what) as target:
        if is_csv:
            graph = frame.to_csv(
                target,
                single_file=True,
                index=False,
                compute=False,
                compression="gzip" if path.endswith(".gz") else None,
            )
        else:
            # zero-padded part names: readers that sort file names as text keep the row order
            graph = frame.to_parquet(target, write_index=False, compute=False, name_function=_part_name)
        compute(graph, label=f"write {what}")
    return path


def _part_name(i: int) -> str:
    return f"part.{i:06d}.parquet"
