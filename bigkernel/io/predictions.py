"""Predictions written straight to zarr, chunk by chunk, for outputs larger than memory."""

from __future__ import annotations

import logging

import dask.array as da

from bigkernel.io.atomic import atomic_folder
from bigkernel.runtime import compute

logger = logging.getLogger(__name__)


def predict_to_zarr(estimator, X, path: str, *, name: str = "y_pred", overwrite: bool = False) -> str:
    """Write ``estimator.predict(X)`` to array ``name`` of a zarr group at ``path``.

    Local outputs are written to a temporary sibling and renamed when complete, so an
    interrupted prediction leaves no store that looks finished. Returns ``path``.
    """
    import zarr

    Xd = X if isinstance(X, da.Array) else da.from_array(X, chunks=(max(1, min(len(X), 100_000)), -1))
    pred = estimator.predict(Xd)
    with atomic_folder(str(path), overwrite=overwrite, what="prediction output") as target:
        group = zarr.open_group(target, mode="w")
        chunks = (pred.chunks[0][0],) + pred.shape[1:]
        out = group.create_array(name, shape=pred.shape, dtype="float64", chunks=chunks)
        compute(da.store(pred.rechunk(chunks), out, lock=False, compute=False), label="predict")
        group.attrs.update({"format": "bigkernel-predictions", "complete": True})
    logger.info("wrote %s predictions to %s/%s", f"{pred.shape[0]:,}", path, name)
    return path
