"""Predictions written straight to zarr, CSV or Parquet, chunk by chunk, for outputs larger than
memory."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np

from bigkernel.data.columns import checked_columns
from bigkernel.data.sources import as_dask
from bigkernel.diagnostics import extrapolation_summary, log_predict
from bigkernel.errors import DataError
from bigkernel.io.atomic import atomic_folder
from bigkernel.runtime import compute

logger = logging.getLogger(__name__)


def _lazy_predictions(estimator, X) -> tuple[da.Array, tuple[Any, Callable[[Any], None]] | None]:
    """The lazy predictions of ``X`` and, to compute in the same pass (it shares the reads of X),
    the rows-beyond-the-training-range summary with the callable that logs its finding
    (:func:`~bigkernel.diagnostics.log_predict`)."""
    Xd = _as_dask(X, 100_000, estimator)
    summary = extrapolation_summary(estimator, Xd)
    check = None if summary is None else (summary, lambda s: log_predict(estimator, Xd, s))
    return estimator.predict(Xd), check


def _as_dask(X, chunk_rows: int, estimator: Any) -> da.Array:
    """``X`` as a dask array (numpy X: chunks of ``chunk_rows`` rows; a dask DataFrame lazily); a
    DataFrame's columns are checked against the ``estimator``'s (names and order, as its
    ``predict`` does) before its values are taken."""
    if isinstance(X, da.Array):
        return X
    if hasattr(X, "columns"):
        checked_columns(getattr(estimator, "estimator_", estimator), X=X)
    return as_dask(X, chunk_rows)


def _lazy_output(method, X, chunk_rows: int) -> da.Array:
    """``method`` (predict, transform) of ``X`` as a lazy dask array (numpy X: chunks of
    ``chunk_rows`` rows)."""
    return method(_as_dask(X, chunk_rows, method.__self__))


def _write_zarr(
    out: da.Array,
    path: str,
    name: str,
    dtype,
    *,
    overwrite: bool,
    fmt: str,
    what: str,
    label: str,
    ids: tuple[str, da.Array] | None = None,
    also: tuple[Any, Callable[[Any], None]] | None = None,
) -> None:
    """Store the lazy ``out`` as array ``name`` (of ``dtype``) of a new zarr group, atomically;
    ``ids`` (name, 1-D array with ``out``'s rows) as a second array, in the same pass; ``also``
    (collection, callable): computed in that pass too, its value handed to the callable."""
    import zarr

    arrays = [(name, out, dtype)] + ([(ids[0], ids[1], _stored_dtype(ids[1].dtype, keep_floats=True))] if ids else [])
    with atomic_folder(str(path), overwrite=overwrite, what=what) as target:
        group = zarr.open_group(target, mode="w")
        sources, targets = [], []
        for key, a, kind in arrays:
            chunks = (out.chunks[0][0],) + a.shape[1:]
            targets.append(group.create_array(key, shape=a.shape, dtype=kind, chunks=chunks))
            sources.append(a.rechunk(chunks))
        extra = [] if also is None else [also[0]]
        results = compute(da.store(sources, targets, lock=False, compute=False), *extra, label=label)
        group.attrs.update({"format": fmt, "complete": True, **({"id": ids[0]} if ids else {})})
    if also is not None:
        also[1](results[-1])


def predict_to_zarr(
    estimator, X, path: str, *, name: str = "y_pred", overwrite: bool = False, ids: tuple[str, Any] | None = None
) -> str:
    """Write ``estimator.predict(X)`` to array ``name`` of a zarr group at ``path`` (float64, or
    a classifier's labels in their dtype).

    ``ids`` — ``(id_name, values)``, one value per row of X (any dtype: numbers keep theirs,
    strings are zarr strings) — is written beside it as array ``id_name`` (also in the group's
    ``id`` attribute), in the same pass. Local outputs are written to a temporary sibling and
    renamed when complete, so an interrupted prediction leaves no store that looks finished.
    Returns ``path``.
    """
    pred, check = _lazy_predictions(estimator, X)
    ids = _aligned_ids(ids, pred, [name])
    _write_zarr(
        pred, path, name, _stored_dtype(pred.dtype), overwrite=overwrite, fmt="bigkernel-predictions", what="prediction output",
        label="predict", ids=ids, also=check,
    )  # fmt: skip
    logger.info("wrote %s predictions to %s/%s", f"{pred.shape[0]:,}", path, name)
    return path


def _stored_dtype(dtype, keep_floats: bool = False):
    """float64 for a regressor's predictions; a classifier's labels (and row ids) keep their
    dtype (strings as zarr strings)."""
    kind = dtype.kind
    if kind == "f" and not keep_floats:
        return "float64"
    return str if kind in "OUT" else dtype


def _aligned_ids(ids: tuple[str, Any] | None, pred: da.Array, names: list[str]) -> tuple[str, da.Array] | None:
    """``(id_name, values)`` as a 1-D dask array on ``pred``'s row chunks, checked: one value
    per row, a name apart from the prediction columns."""
    if ids is None:
        return None
    id_name, values = str(ids[0]), ids[1]
    if id_name in names:
        raise DataError(f"the id column {id_name!r} has the name of a prediction column {names}; rename it")
    values = values if isinstance(values, da.Array) else da.from_array(np.asarray(values), chunks=-1)
    if values.ndim != 1 or values.shape[0] != pred.shape[0]:
        raise DataError(
            f"id {id_name!r}: expected one value per row ({pred.shape[0]} rows), found shape {values.shape}"
        )
    return id_name, values.rechunk({0: pred.chunks[0]})


#: bytes of one stored chunk of features (rows × D) for numpy input
FEATURE_CHUNK_BYTES = 64 * 2**20


def transform_to_zarr(estimator, X, path: str, *, name: str = "features", overwrite: bool = False) -> str:
    """Write ``estimator.transform(X)`` (features, n × D) to array ``name`` of a zarr group at
    ``path``, chunk by chunk and atomically as :func:`predict_to_zarr`. Numpy X is cut into
    chunks of about 64 MiB of features; dask X keeps its row chunks. Returns ``path``."""
    itemsize = np.dtype(estimator.dtype).itemsize
    rows = max(1, FEATURE_CHUNK_BYTES // (estimator.feature_map_.n_components * itemsize))
    feats = _lazy_output(estimator.transform, X, rows)
    _write_zarr(
        feats, path, name, feats.dtype, overwrite=overwrite, fmt="bigkernel-features", what="feature output",
        label="transform",
    )  # fmt: skip
    logger.info("wrote %s × %d features to %s/%s", f"{feats.shape[0]:,}", feats.shape[1], path, name)
    return path


def prediction_columns(n_targets: int | None, name: str = "y_pred") -> list[str]:
    """Column names of a prediction table: ``y_pred``, or ``y_pred_0, y_pred_1, ...`` for
    several targets (``n_targets`` None means one target, a 1-D prediction)."""
    return [name] if n_targets is None else [f"{name}_{k}" for k in range(n_targets)]


def predict_to_table(
    estimator, X, path: str, *, name: str = "y_pred", overwrite: bool = False, ids: tuple[str, Any] | None = None
) -> str:
    """Write ``estimator.predict(X)`` to a CSV file or a Parquet folder (by ``path``'s suffix),
    chunk by chunk, with the columns of :func:`prediction_columns`, after ``ids``
    (``(id_name, values)``, one value per row, any dtype) as the first column when given;
    atomic as :func:`predict_to_zarr`. Returns ``path``."""
    from bigkernel.data.tables import write_table

    # no extrapolation count here: computed beside the dataframe writers it read X a second time
    # (their graphs do not share the array's keys; measured session 13), so tables go unchecked
    pred = estimator.predict(_as_dask(X, 100_000, estimator))
    columns = prediction_columns(None if pred.ndim == 1 else pred.shape[1], name)
    ids = _aligned_ids(ids, pred, columns)
    write_table(
        pred.reshape(pred.shape[0], -1), columns, path, overwrite=overwrite, what="prediction output", first=ids
    )
    logger.info("wrote %s predictions to %s", f"{pred.shape[0]:,}", path)
    return path


def predict_to_path(estimator, X, path: str, *, overwrite: bool = False, ids: tuple[str, Any] | None = None) -> str:
    """Predictions to ``path`` in the format its suffix names: ``.csv``/``.csv.gz`` and
    ``.parquet``/``.pq`` give a table (:func:`predict_to_table`), anything else — ``.zarr`` or
    a folder name without a suffix — a zarr group with array ``y_pred``; ``ids``
    (``(id_name, values)``) are passed through as the table's first column or an array of the
    group."""
    from bigkernel.data.tables import TABLE_SUFFIXES

    if str(path).endswith(TABLE_SUFFIXES):
        return predict_to_table(estimator, X, path, overwrite=overwrite, ids=ids)
    return predict_to_zarr(estimator, X, path, overwrite=overwrite, ids=ids)
