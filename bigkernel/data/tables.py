"""Parquet and CSV sources through dask.dataframe, with column selection for X and y; tables
written from dask arrays (synthetic data, predictions)."""

from __future__ import annotations

import glob
import logging
import os
import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import dask
import dask.array as da
import numpy as np

from bigkernel.data.empty_tables import check_has_rows
from bigkernel.errors import DataError, DataNotFoundError
from bigkernel.io.atomic import atomic_folder

if TYPE_CHECKING:
    from bigkernel.data.encode import TableEncoder

logger = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class Table:
    """A table read as arrays: X (n, d) and y (or None), the :class:`TableEncoder` applied (or
    None), the rows a fit dropped for a missing value and the ``row_id`` column on the rows kept
    (or None)."""

    X: da.Array
    Y: da.Array | None
    encoder: TableEncoder | None = None
    n_dropped: int = 0
    ids: da.Array | None = None


def open_table(
    path: str, x: str | list[str], y: str | list[str] | None, *, labels: bool = False
) -> tuple[da.Array, da.Array | None]:
    """X (n, d) and y (n,) or (n, k) as dask arrays from the named numeric columns; with
    ``labels``, y may be a column of class labels of any type (strings included).
    (:func:`read_table` also encodes categorical columns and handles missing values.)"""
    t = read_table(path, x, y, labels=labels)
    return t.X, t.Y


def read_table(
    path: str,
    x: str | list[str],
    y: str | list[str] | None,
    *,
    labels: bool = False,
    missing: str = "error",
    categorical: list[str] | str | None = None,
    encoder: TableEncoder | None = None,
    row_id: str | None = None,
) -> Table:
    """Read the named columns of a table as dask arrays, encoding and masking per partition.

    Parameters
    ----------
    path : str
    x, y : str or list of str
        Feature and target columns, by name (``y=None``: no targets).
    labels : bool, default=False
        y holds class labels of any dtype.
    missing : {"error", "drop", "impute"}, default="error"
        See :class:`~bigkernel.data.encode.TableEncoder`; "error" leaves NaN to the pass, whose
        error names every bad row. With targets, "drop" drops rows with a missing x or y and
        "impute" rows with a missing y (y is never imputed).
    categorical : list of str, "auto" or None, default=None
        Columns to one-hot encode; "auto": the non-numeric x columns (logged); None: a
        non-numeric x column is an error.
    encoder : TableEncoder, optional
        A fitted encoder (a model's) to apply instead of fitting one; its ``missing`` then
        applies (without targets, rows are never dropped: a missing value is imputed or left
        to the prediction's NaN error).
    row_id : str, optional
        A column of any dtype (strings included) read beside X as ``Table.ids``, cut from the
        same frame so its rows stay aligned with X's.

    Returns
    -------
    Table

    Notes
    -----
    Partition lengths are computed once: for plain numeric columns by
    ``to_dask_array(lengths=True)`` (Parquet: the footer metadata; CSV: reading the file); when
    rows may be dropped or categories are to be found, by one lightweight pass over the selected
    columns that also counts the categories and the sums of the fill values. Row offsets are
    needed for error messages and the holdout hash.
    """
    from bigkernel.data.encode import numeric_dtype  # pandas: the tables extra

    path = str(path)
    if "://" not in path and not glob.glob(path.rstrip("/")):
        raise DataNotFoundError(f"table source {path!r} does not exist")
    check_has_rows(path)  # 0-byte and header-only files: one clear error, not pandas'
    xs = [x] if isinstance(x, str) else list(x)
    ys = [] if y is None else ([y] if isinstance(y, str) else list(y))
    ids = [] if row_id is None or row_id in xs + ys else [row_id]
    available = _columns(path)
    absent = [c for c in xs + ys + ids if c not in available]
    if absent:
        raise DataNotFoundError(
            f"{path!r} has no column(s) {absent}; columns found: {available}. "
            "Give a table with those columns (a saved model reads the columns it was fitted on), or "
            "name the table's own columns: x: [..] and y: in a job config, --x (and --y) in bigkernel predict / update"
        )
    # dask-expr's "tune" step merges the partitions of a column subset of a multi-file Parquet
    # dataset, by a factor that depends on the columns selected: the len() pass (no columns)
    # and the array (these columns) would disagree on the partitions, and to_dask_array(
    # lengths=True) raises "lengths does not match". Partition sizes are ours to choose anyway
    # (the array is rechunked to chunk_rows), so the conversion runs without it.
    with dask.config.set({"optimization.tune.active": False}):
        # columns by name, in the order asked for: read_csv(usecols=...) keeps the file's order,
        # so a target-first CSV would otherwise hand y to X by position
        frame = _read(path, xs + ys + ids)[xs + ys + ids]
        df = frame[xs + ys]
        bad_y = {c: str(df.dtypes[c]) for c in ys if not labels and not numeric_dtype(df.dtypes[c])}
        text = [c for c in xs if not numeric_dtype(df.dtypes[c])]
        if bad_y or (text and categorical is None and encoder is None):
            bad = {c: str(df.dtypes[c]) for c in text} | bad_y
            raise DataError(
                f"{path!r}: columns must be numeric; non-numeric columns {bad}. Select numeric "
                "columns or convert them before fitting"
                + (
                    " (or one-hot encode text features: a job's `categorical:`, open_source(..., categorical='auto'))"
                    if text
                    else ""
                )
            )
        declared = categorical if isinstance(categorical, (list, tuple)) else []
        if encoder is None and missing == "error" and not text and not declared:
            # one conversion of the selected frame, then column slices: converting df[xs] and
            # df[ys] separately lets dask-expr plan their partitions differently from the lengths
            arr = df.to_dask_array(lengths=True)
            ids_ = None if row_id is None else _id_array(frame[row_id], arr.chunks[0])
            return replace(_split(arr, len(xs), y), ids=ids_)
        return _encoded(path, frame, xs, ys, y, missing, categorical, encoder, row_id)


def _encoded(
    path: str, frame, xs: list[str], ys: list[str], y, missing: str, categorical, encoder, row_id: str | None
) -> Table:
    """:func:`read_table` with a :class:`TableEncoder`: fitted here (one summary pass) unless
    given, applied per partition, rows dropped per partition (the ``row_id`` column too)."""
    import pandas as pd

    df = frame[xs + ys]
    from bigkernel.data.encode import TableEncoder, summarize_frames

    fitting = encoder is None
    if not fitting and sorted(xs) != sorted(str(c) for c in encoder.feature_names_in_):
        raise DataError(
            f"{path!r}: columns {xs} were given, but the model's table encoder reads the columns "
            f"{list(encoder.feature_names_in_)} (the raw columns it was fitted on); name those"
        )
    enc = TableEncoder(categorical=categorical or [], missing=missing) if fitting else encoder
    mode = enc.missing if ys else "error"  # rows are dropped only where there are targets
    lengths: tuple[int, ...] | bool = True
    dropped = 0
    if fitting or mode != "error":
        key = _scan_key(path, df, ys, enc, fitting)
        summary = _SCANS.get(key) if key is not None else None
        fresh = summary is None  # logged once per scan, not again when a job reopens the table
        if fresh:
            summary = summarize_frames(df, enc, ys, rows_only=not fitting)
            if key is not None:
                _SCANS[key] = summary
                while len(_SCANS) > 8:
                    _SCANS.pop(next(iter(_SCANS)))
        if fitting:
            enc.fit_from_summary(xs, df.dtypes, summary)
            if fresh and categorical == "auto" and enc.categories_:
                logger.info(
                    "non-numeric columns %s one-hot encoded (%s)",
                    list(enc.categories_),
                    ", ".join(f"{c}: {len(v)} categories" for c, v in enc.categories_.items()),
                )
        if len(summary["kept"]) != df.npartitions:  # the summary must describe these partitions
            raise DataError(f"internal: {len(summary['kept'])} partition summaries for {df.npartitions} partitions")
        lengths, dropped = tuple(summary["kept"]), sum(summary["rows"]) - sum(summary["kept"])
        if dropped and fresh:
            what = "a missing x or y value" if mode == "drop" else "a missing y value (y is never imputed)"
            logger.info("missing: %s: dropped %d of %d rows with %s", mode, dropped, sum(summary["rows"]), what)
    names = [f"__x{i}" for i in range(len(enc.get_feature_names_out()))] + [f"__y{j}" for j in range(len(ys))]
    meta = pd.DataFrame({n: pd.Series(dtype="float64") for n in names[: len(names) - len(ys)]})
    for j, c in enumerate(ys):
        meta[f"__y{j}"] = pd.Series(dtype=df.dtypes[c])
    source = frame
    frame = df.map_partitions(_prepare_partition, enc, xs, ys, mode, names, meta=meta)
    t = _split(frame.to_dask_array(lengths=lengths), len(names) - len(ys), y)
    ids = None
    if row_id is not None:  # the same rows kept, on the lengths just computed
        from dask.dataframe.utils import make_meta  # the column's empty pandas form (dtype, index)

        kept = source.map_partitions(_kept_column, xs, ys, mode, row_id, meta=make_meta(source[row_id]))
        ids = _id_array(kept, t.X.chunks[0])
    return Table(t.X, t.Y, enc, dropped, ids)


#: summaries of recent scans, by :func:`_scan_key`: a job opens its training data to check it
#: before the cluster starts and again to fit, and must not read the table twice for it
_SCANS: dict[tuple, dict] = {}


def _scan_key(path: str, df, ys: list[str], enc, fitting: bool) -> tuple | None:
    """What a scan's result depends on: the files (name, size, mtime), the columns and the
    encoder's settings (its fitted state when given); None for remote tables (not cached)."""
    import json

    if "://" in path:
        return None
    files = (
        sorted(glob.glob(os.path.join(path, "**", "*"), recursive=True))
        if os.path.isdir(path)
        else sorted(glob.glob(path))
    )
    stats = tuple((f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files if os.path.isfile(f))
    state = json.dumps(enc.get_params()) if fitting else json.dumps(enc.to_dict(), sort_keys=True)
    return (stats, tuple(df.columns), tuple(ys), state, df.npartitions)


def _prepare_partition(frame, enc: TableEncoder, xs: list[str], ys: list[str], mode: str, names: list[str]):
    """One partition: rows kept by ``mode``, X encoded, y as read (internal column names)."""
    import pandas as pd

    from bigkernel.data.encode import kept_rows

    frame = frame[kept_rows(frame, xs, ys, mode)]
    out = pd.DataFrame(enc.encode(frame[xs]), columns=names[: len(names) - len(ys)], index=frame.index)
    for j, c in enumerate(ys):
        out[f"__y{j}"] = frame[c].to_numpy()
    return out


def _kept_column(frame, xs: list[str], ys: list[str], mode: str, column: str):
    """One partition's ``column`` on the rows :func:`_prepare_partition` keeps."""
    from bigkernel.data.encode import kept_rows

    return frame[kept_rows(frame, xs, ys, mode)][column]


def _split(arr: da.Array, d: int, y) -> Table:
    X = arr[:, :d]
    if X.dtype == object:  # string labels beside numeric features: one object array, X cast back
        X = X.astype(np.float64)
    Y = None
    if arr.shape[1] > d:
        Y = arr[:, d:]
        Y = Y[:, 0] if isinstance(y, str) else Y
    return Table(X, Y)


def _id_array(column, lengths: tuple[int, ...]) -> da.Array:
    """A row-id column of the selected frame as a dask array on the lengths already computed
    (no second pass); strings become an object array, as dask says in a warning we expect."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "Dask currently has limited support for converting pandas extension", UserWarning
        )
        return column.to_dask_array(lengths=lengths)


def write_table(
    arr: da.Array,
    columns: list[str],
    path: str,
    *,
    overwrite: bool = False,
    what: str = "table",
    first: tuple[str, da.Array] | None = None,
) -> str:
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
    first : (str, dask array of shape (n,)), optional
        A column of any dtype (a row id) written first, before ``columns``; chunked as ``arr``.

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
    if first is not None:  # same row chunks, so the same divisions: concatenated partition by partition
        frame = dd.concat([dd.from_dask_array(first[1].rechunk({0: arr.chunks[0]}), columns=first[0]), frame], axis=1)
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
