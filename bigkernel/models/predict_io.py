"""Predictions written straight to zarr, chunk by chunk, for outputs larger than memory."""

from __future__ import annotations

import logging
import os
import shutil
import uuid

import dask.array as da

from bigkernel.errors import OutputExistsError
from bigkernel.models._compute import compute

logger = logging.getLogger(__name__)


def predict_to_zarr(estimator, X, path: str, *, name: str = "y_pred", overwrite: bool = False) -> str:
    """Write ``estimator.predict(X)`` to array ``name`` of a zarr group at ``path``.

    Local outputs are written to a temporary sibling and renamed when complete, so an
    interrupted prediction leaves no store that looks finished. Returns ``path``.
    """
    import zarr

    path = str(path)
    local = "://" not in path
    if local and os.path.exists(path) and not overwrite:
        raise OutputExistsError(f"prediction output {path!r} exists; pass overwrite=True to replace it")
    Xd = X if isinstance(X, da.Array) else da.from_array(X, chunks=(max(1, min(len(X), 100_000)), -1))
    pred = estimator.predict(Xd)
    target = path
    if local:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        target = os.path.join(parent, f".{os.path.basename(path)}.partial-{uuid.uuid4().hex[:8]}")
    group = zarr.open_group(target, mode="w")
    chunks = (pred.chunks[0][0],) + pred.shape[1:]
    out = group.create_array(name, shape=pred.shape, dtype="float64", chunks=chunks)
    try:
        compute(da.store(pred.rechunk(chunks), out, lock=False, compute=False), label="predict")
    except BaseException:
        if local:  # a failed pass (NaN in a late chunk, a lost cluster) leaves no partial store
            shutil.rmtree(target, ignore_errors=True)
        raise
    group.attrs.update({"format": "bigkernel-predictions", "complete": True})
    if local:
        if os.path.exists(path):
            shutil.rmtree(path)
        os.replace(target, path)
    logger.info("wrote %s predictions to %s/%s", f"{pred.shape[0]:,}", path, name)
    return path
