"""Open data sources as row-chunked dask arrays: zarr groups (path or fsspec URL), .npy files,
numpy and dask arrays. Only metadata is read here; values are read by the tasks of the pass."""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, replace
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
import zarr

from bigkernel._sparse import as_csr, check_real, is_sparse
from bigkernel.data.frames import is_dask_frame
from bigkernel.data.validate import check_X_metadata, check_y_metadata, default_chunk_rows
from bigkernel.errors import DataError, DataNotFoundError


@dataclass(frozen=True)
class Dataset:
    """A validated data set: X (n, d) and optional y (n,) or (n, k), sharing row chunks.

    ``columns`` names X's columns when they were selected by name from a table or from a zarr
    group's 1-D column arrays (the model's ``feature_names_in_``; after one-hot encoding, the
    encoded names), ``target_names`` y's (saved with the model, so ``bigkernel update`` finds
    the target by name); None for arrays. ``ids``: a row identifier (n,) of any dtype, chunked
    as X, when one was asked for (``row_id``). ``encoder`` is the
    :class:`~bigkernel.data.encode.TableEncoder` that made X from a table's columns
    (categorical or missing values), ``n_dropped`` the rows it dropped.
    """

    X: da.Array
    y: da.Array | None
    source: str
    columns: tuple[str, ...] | None = None
    target_names: tuple[str, ...] | None = None
    ids: da.Array | None = None
    encoder: Any = None
    n_dropped: int = 0


def _is_url(path: str) -> bool:
    return "://" in str(path)


def open_zarr_array(path: str, name: str, storage_options: dict | None = None) -> zarr.Array:
    """Array ``name`` of the zarr group at ``path`` (local or fsspec URL)."""
    path = str(path)
    if not _is_url(path) and not os.path.exists(path):
        raise DataNotFoundError(
            f"data source {path!r} does not exist; check the path (relative paths in a job are resolved against the config file's folder)"
        )
    try:
        group = zarr.open_group(path, mode="r", storage_options=storage_options if _is_url(path) else None)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, zarr.errors.NodeTypeValidationError) as exc:
        raise DataNotFoundError(f"{path!r} is not a zarr group holding arrays X and y: {exc}") from None
    try:
        node = group[name]
    except KeyError:
        members = sorted(group.array_keys())
        raise DataNotFoundError(
            f"zarr group {path!r} has no array {name!r}; arrays found: {members or 'none'}. "
            "Name the array with the source's x:/y: keys"
        ) from None
    if not isinstance(node, zarr.Array):
        raise DataNotFoundError(f"{path}/{name} is a group, not an array")
    return node


def _load_npy_rows(path: str, start: int, stop: int) -> np.ndarray:
    # opened inside the task, so the graph carries a path and not the data
    return np.asarray(np.load(path, mmap_mode="r")[start:stop])


def open_npy(path: str, chunk_rows: int | None = None) -> da.Array:
    """A memory-mapped .npy file as a dask array chunked along rows."""
    path = str(path)
    if not os.path.exists(path):
        raise DataNotFoundError(f"data file {path!r} does not exist")
    try:
        mm = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        raise DataError(
            f"{path!r} is not a plain numeric .npy file (object arrays are refused, no unpickling): {exc}"
        ) from None
    if mm.ndim == 0:
        raise DataError(f"{path!r} holds a scalar, expected an array")
    rows = chunk_rows or default_chunk_rows(int(np.prod(mm.shape[1:], dtype=int)) or 1, mm.dtype.itemsize)
    blocks = [
        da.from_delayed(
            dask.delayed(_load_npy_rows, pure=True)(path, lo, min(lo + rows, mm.shape[0])),
            shape=(min(lo + rows, mm.shape[0]) - lo, *mm.shape[1:]),
            dtype=mm.dtype,
        )
        for lo in range(0, mm.shape[0], rows)
    ]
    if not blocks:
        return da.from_array(np.asarray(mm), chunks=mm.shape or (0,))
    return da.concatenate(blocks, axis=0)


def _npz_member(zf, name: str):
    """(open member file positioned at the data, dtype, shape) of ``name.npy`` in an open zip."""
    f = zf.open(f"{name}.npy")
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    return f, np.dtype(dtype), shape


def _npz_slice(zf, name: str, lo: int, hi: int) -> np.ndarray:
    """Entries ``[lo, hi)`` of the 1-D array ``name`` in an .npz, without reading the rest
    (a seek: direct for stored members, a forward decompression for compressed ones)."""
    f, dtype, _ = _npz_member(zf, name)
    with f:
        f.seek(lo * dtype.itemsize, 1)
        buf = f.read((hi - lo) * dtype.itemsize)
    return np.frombuffer(buf, dtype=dtype).copy()


def _load_npz_rows(path: str, start: int, stop: int, n_cols: int):
    """Rows ``[start, stop)`` of a CSR .npz (scipy.sparse.save_npz) as a CSR matrix: reads the
    rows' slice of indptr, indices and data only (memory O(nnz of the rows))."""
    with zipfile.ZipFile(path) as zf:
        indptr = _npz_slice(zf, "indptr", start, stop + 1).astype(np.int64)
        lo, hi = int(indptr[0]), int(indptr[-1])
        indices = _npz_slice(zf, "indices", lo, hi)
        data = _npz_slice(zf, "data", lo, hi)
    return sp.csr_matrix((data, indices, indptr - lo), shape=(stop - start, n_cols))


def open_npz(path: str, chunk_rows: int | None = None) -> da.Array:
    """A CSR matrix saved with ``scipy.sparse.save_npz`` as a dask array of CSR row blocks.

    Only the metadata (format, shape, dtype) is read here; each task reads its rows' part of
    the file, so X is never densified nor loaded whole.
    """
    path = str(path)
    if not os.path.exists(path):
        raise DataNotFoundError(f"data file {path!r} does not exist")
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if not {"format.npy", "shape.npy", "data.npy", "indices.npy", "indptr.npy"} <= names:
                raise DataError(
                    f"{path!r} is not a scipy.sparse .npz file (members found: {sorted(names)}); save X with "
                    "scipy.sparse.save_npz(path, X.tocsr()), or use a .npy file for dense X"
                )
            with zf.open("format.npy") as f:
                fmt = np.lib.format.read_array(f, allow_pickle=False).item()
            with zf.open("shape.npy") as f:
                shape = tuple(int(v) for v in np.lib.format.read_array(f, allow_pickle=False))
            f, dtype, _ = _npz_member(zf, "data")
            f.close()
    except DataError:
        raise
    except (zipfile.BadZipFile, ValueError) as exc:
        raise DataError(f"{path!r} is not a readable .npz file: {exc}") from None
    fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
    if fmt != "csr":
        raise DataError(
            f"{path!r} holds a {fmt.upper()} matrix; row blocks are read from CSR only. Save it as "
            "scipy.sparse.save_npz(path, X.tocsr())"
        )
    if len(shape) != 2:
        raise DataError(f"{path!r} holds a sparse array of shape {shape}; X must be 2-D")
    n, d = shape
    rows = chunk_rows or default_chunk_rows(d, dtype.itemsize)
    meta = sp.csr_matrix((0, d), dtype=dtype)
    blocks = [
        da.from_delayed(
            dask.delayed(_load_npz_rows, pure=True)(path, lo, min(lo + rows, n), d),
            shape=(min(lo + rows, n) - lo, d),
            dtype=dtype,
            meta=meta,
        )
        for lo in range(0, n, rows)
    ]
    if not blocks:
        raise DataError(f"{path!r} holds no rows: shape {shape}")
    return da.concatenate(blocks, axis=0)


def from_zarr(array: zarr.Array, chunk_rows: int | None = None) -> da.Array:
    """A zarr array as dask, row chunks a multiple of the storage chunks near ``chunk_rows``."""
    x = da.from_zarr(array)
    if x.ndim == 0:
        raise DataError(f"zarr array {array.path!r} is a scalar, expected an array")
    if x.shape[0] == 0:
        return x  # empty: the metadata check reports it
    store_rows = max(1, array.chunks[0])
    width = int(np.prod(array.shape[1:], dtype=int)) or 1
    target = chunk_rows or default_chunk_rows(width, array.dtype.itemsize)
    rows = max(store_rows, (target // store_rows) * store_rows)
    return x.rechunk({0: rows})


def open_source(
    path: str,
    x: str | list[str] = "X",
    y: str | list[str] | None = "y",
    *,
    y_path: str | None = None,
    chunk_rows: int | None = None,
    storage_options: dict | None = None,
    labels: bool = False,
    row_id: str | None = None,
    missing: str = "error",
    categorical: list[str] | str | None = None,
    encoder: Any = None,
) -> Dataset:
    """Open a data source and validate its metadata.

    Parameters
    ----------
    path : str
        A zarr group (local path or fsspec URL) holding arrays ``x`` and ``y`` (or, with ``x``
        a list, one 1-D array per column, stacked by name); a ``.npy`` file
        with X, or a ``.npz`` file of sparse CSR X (``scipy.sparse.save_npz``; read in row
        blocks, never densified) — then ``y_path`` names y's ``.npy`` file, if any; or a Parquet / CSV file, glob or
        folder of Parquet parts (then ``x`` is a list of columns and ``y`` a column name or list).
    x, y : str or list of str
        Array names inside the zarr group (a list: 1-D column arrays, whose names become the
        data set's ``columns``), or column names of a table; ``y=None`` for prediction-only
        sources.
    y_path : str, optional
        For a ``.npy`` X: the ``.npy`` file of y.
    chunk_rows : int, optional
        Rows per dask chunk (default: about 64 MiB of X).
    storage_options : dict, optional
        fsspec options for a zarr URL.
    labels : bool, default=False
        y holds class labels, of any dtype (strings included), for a classifier.
    row_id : str, optional
        A column of the table, or a 1-D array of the zarr group, of any dtype, read beside X
        (rows aligned, chunked as X) as the data set's ``ids``: passed through to predictions.
    missing : {"error", "drop", "impute"}, default="error"
        Tables only: what a missing value does (:func:`~bigkernel.data.tables.read_table`).
    categorical : list of str, "auto" or None, default=None
        Tables only: columns to one-hot encode ("auto": the non-numeric ones).
    encoder : TableEncoder, optional
        Tables only: a fitted encoder (a loaded model's) to apply, e.g. to prediction data.

    Returns
    -------
    Dataset
        Lazy dask arrays ``X`` of shape (n, d) and ``y`` of shape (n,) or (n, k) (None without
        y), chunked along rows, ``source``, ``columns`` and ``ids``.
    """
    path = str(path)
    from bigkernel.data.tables import is_table

    if row_id is not None and not is_table(path) and path.endswith((".npy", ".npz")):
        raise DataError(
            f"{path} is a file of X alone: a row id ({row_id!r}) is a column of a table or a 1-D array of a zarr group"
        )
    if is_table(path):
        return _open_table(path, x, y, chunk_rows, labels, row_id, missing, categorical, encoder)
    return _open_arrays(path, x, y, y_path, chunk_rows, storage_options, labels, row_id)


def _open_table(
    path: str, x, y, chunk_rows: int | None, labels: bool, row_id: str | None, missing: str, categorical, encoder
) -> Dataset:
    """:func:`open_source` of a Parquet / CSV table: its columns read (and encoded) by
    :func:`~bigkernel.data.tables.read_table`, X rechunked to ``chunk_rows``."""
    from bigkernel.data.tables import read_table

    t = read_table(path, x, y, labels=labels, missing=missing, categorical=categorical, encoder=encoder, row_id=row_id)
    rows = chunk_rows or default_chunk_rows(t.X.shape[1], t.X.dtype.itemsize)
    X = t.X.rechunk({0: rows})
    if t.encoder is not None:
        columns = tuple(str(c) for c in t.encoder.get_feature_names_out())
    else:
        columns = (x,) if isinstance(x, str) else tuple(x)
    target_names = None if y is None else ((y,) if isinstance(y, str) else tuple(y))
    ds = as_dataset(X, t.Y, source=path, columns=columns, labels=labels, target_names=target_names)
    return _with_ids(replace(ds, encoder=t.encoder, n_dropped=t.n_dropped), t.ids, path, row_id)


def _open_arrays(
    path: str, x, y, y_path: str | None, chunk_rows: int | None, storage_options, labels: bool, row_id: str | None
) -> Dataset:
    """:func:`open_source` of arrays: a ``.npy`` / sparse ``.npz`` file of X (y from
    ``y_path``), or a zarr group (one 2-D X array, or 1-D column arrays taken by name)."""
    columns = target_names = ids = None
    if path.endswith(".npy"):
        X = open_npy(path, chunk_rows)
        Y = open_npy(y_path, X.chunks[0][0]) if y_path else None
    elif path.endswith(".npz"):
        X = open_npz(path, chunk_rows)
        Y = open_npy(y_path, X.chunks[0][0]) if y_path else None
    elif isinstance(x, (list, tuple)):  # a zarr group of 1-D column arrays, taken by name
        X = open_zarr_columns(path, x, storage_options, chunk_rows)
        columns = tuple(x)
        Y = _open_zarr_y(path, y, storage_options, X.chunks[0])
        target_names = None if not y else ((y,) if isinstance(y, str) else tuple(y))
    else:
        X = from_zarr(open_zarr_array(path, x, storage_options), chunk_rows)
        Y = _open_zarr_y(path, y, storage_options, X.chunks[0])
    if row_id is not None:
        node = open_zarr_array(path, row_id, storage_options)
        if node.ndim != 1:
            raise DataError(f"zarr group {path!r}: the id array {row_id!r} has shape {node.shape}; expected 1-D")
        ids = from_zarr(node, X.chunks[0][0])
    ds = as_dataset(X, Y, source=path, columns=columns, labels=labels, target_names=target_names)
    return _with_ids(ds, ids, path, row_id)


def _with_ids(ds: Dataset, ids: da.Array | None, path: str, row_id: str | None) -> Dataset:
    """``ds`` with its row ids, chunked as its X (checked to have X's rows)."""
    if ids is None:
        return ds
    if ids.shape[0] != ds.X.shape[0]:
        raise DataError(f"{path}: id {row_id!r} has {ids.shape[0]} rows, X has {ds.X.shape[0]}")
    return replace(ds, ids=ids.rechunk({0: ds.X.chunks[0]}))


def _open_zarr_y(path: str, y, storage_options, rows: tuple[int, ...]) -> da.Array | None:
    """y of a zarr group: one array, or a list of 1-D arrays stacked as target columns."""
    if not y:
        return None
    if isinstance(y, (list, tuple)):
        return open_zarr_columns(path, y, storage_options, rows[0], what="y")
    return from_zarr(open_zarr_array(path, y, storage_options), rows[0])


def open_zarr_columns(
    path: str, names, storage_options: dict | None = None, chunk_rows: int | None = None, *, what: str = "x"
) -> da.Array:
    """The 1-D arrays ``names`` of a zarr group stacked as the columns of a (n, len(names))
    dask array, in the order named, chunked along rows only (read lazily, chunk by chunk).

    Raises
    ------
    DataNotFoundError
        A name that is no array of the group (the message lists the arrays found).
    DataError
        An array that is not 1-D, or arrays of different lengths.
    """
    arrays = [open_zarr_array(path, name, storage_options) for name in names]
    shapes = {name: a.shape for name, a in zip(names, arrays)}
    not_1d = {name: s for name, s in shapes.items() if len(s) != 1}
    if not_1d:
        raise DataError(
            f"zarr group {path!r}: {what}: [...] names 1-D arrays, one per column, but found shapes "
            f"{not_1d}; name a 2-D array as {what}: NAME (a string) instead"
        )
    if len({s[0] for s in shapes.values()}) > 1:
        raise DataError(
            f"zarr group {path!r}: the column arrays of {what} have different lengths "
            f"{ {name: s[0] for name, s in shapes.items()} }; every column needs one value per row"
        )
    itemsize = max(np.dtype(a.dtype).itemsize for a in arrays) if arrays else 8
    rows = chunk_rows or default_chunk_rows(len(arrays), itemsize)
    cols = [from_zarr(a, rows) for a in arrays]
    cols = [c.rechunk({0: cols[0].chunks[0]}) for c in cols]  # storage chunks may differ per array
    return da.stack(cols, axis=1).rechunk({1: -1})


def as_dask(a, chunk_rows: int | None = None, name: str = "X") -> da.Array:
    """numpy / array-like / scipy.sparse / dask input (arrays, DataFrames, Series) as a dask array
    chunked along rows only.

    scipy.sparse input (CSR, CSC, … ; sparray or spmatrix) becomes a dask array of CSR chunks
    (row slices of one CSR copy, so memory stays O(nnz)); strings, objects and complex numbers
    are refused (:func:`~bigkernel._sparse.check_real`).
    """
    if isinstance(a, da.Array):
        return a
    check_real(a, name)
    if is_dask_frame(a):
        # lengths=True: one light pass counting each partition's rows (row chunks must be known)
        arr = a.to_dask_array(lengths=True)
        return arr if arr.ndim == 1 else arr.rechunk({1: -1})
    if is_sparse(a):
        if a.ndim != 2:
            raise DataError(f"{name} must be 2-D (n_samples, n_features); got a sparse array of shape {a.shape}")
        csr = as_csr(a, a.dtype)
        rows = chunk_rows or default_chunk_rows(csr.shape[1], max(csr.dtype.itemsize, 1))
        return da.from_array(csr, chunks=(max(1, min(rows, csr.shape[0] or 1)), csr.shape[1]), asarray=False)
    arr = np.asarray(a)
    if arr.ndim == 0:
        raise DataError(f"{name} must be an array, got a scalar {a!r}")
    width = int(np.prod(arr.shape[1:], dtype=int)) or 1
    rows = chunk_rows or default_chunk_rows(width, max(arr.dtype.itemsize, 1))
    return da.from_array(arr, chunks=(max(1, min(rows, arr.shape[0] or 1)), *arr.shape[1:]))


def as_dataset(
    X,
    y=None,
    source: str = "<array>",
    chunk_rows: int | None = None,
    columns: tuple[str, ...] | None = None,
    labels: bool = False,
    target_names: tuple[str, ...] | None = None,
) -> Dataset:
    """Validate ``X`` (and ``y``) from metadata and align y's chunks to X's rows; ``columns``
    names X's columns (a table's selection), ``target_names`` y's; ``labels``: y holds class
    labels of any dtype."""
    X = as_dask(X, chunk_rows, "X")
    check_X_metadata(X)
    Y = None
    if y is not None:
        Y = as_dask(y, X.chunks[0][0], "y")
        check_y_metadata(Y, X.shape[0], labels=labels)
        Y = Y.rechunk((X.chunks[0],) + ((Y.shape[1],) if Y.ndim == 2 else ()))
    return Dataset(X, Y, source, columns, target_names if Y is not None else None)
