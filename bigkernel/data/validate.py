"""Checks on data that need only metadata (shape, dtype, chunks): run before any compute.

Value checks (NaN/inf) ride along the data pass instead (see :mod:`bigkernel.numerics.nonfinite`: each
task returns its block's bad rows, the reduction raises once naming them all).
"""

from __future__ import annotations

import dask.array as da
import numpy as np

from bigkernel._sparse import check_real
from bigkernel.errors import DataError

#: rows per chunk aimed at when we choose the chunking (numpy input, .npy files)
DEFAULT_CHUNK_BYTES = 64 * 2**20


#: chunks we choose are multiples of this, the largest feature sub-block (see feature_block_rows)
ROW_ALIGN = 8192


#: rows per chunk at most: the work of a chunk is rows × D², so this keeps tasks short enough to
#: spread over the workers (a 200k-row set gives 2 chunks) whatever the width of X
MAX_CHUNK_ROWS = 131_072


def default_chunk_rows(n_features: int, itemsize: int = 8, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> int:
    """Rows per chunk: a multiple of 8192, at most 131072 rows and about ``chunk_bytes`` of X."""
    rows = min(MAX_CHUNK_ROWS, chunk_bytes // max(1, n_features * itemsize))
    return max(ROW_ALIGN, rows // ROW_ALIGN * ROW_ALIGN)


def check_X_metadata(X: da.Array, name: str = "X") -> None:
    """2-D, numeric, non-empty, chunked along rows only."""
    if X.ndim != 2:
        hint = " (reshape a single feature with X.reshape(-1, 1))" if X.ndim == 1 else ""
        raise DataError(f"{name} must be 2-D (n_samples, n_features); got {X.ndim}-D shape {X.shape}{hint}")
    _check_numeric(X, name)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise DataError(f"{name} is empty: shape {X.shape}; need at least 1 sample and 1 feature")
    if any(np.isnan(c) for c in X.shape):
        raise DataError(f"{name} has unknown chunk sizes {X.shape}; call {name}.compute_chunk_sizes() first")
    if X.numblocks[1] != 1:
        raise DataError(
            f"{name} is chunked along columns ({X.numblocks[1]} column chunks {X.chunks[1]}); "
            f"chunking is only allowed on the first axis. Use {name}.rechunk({{1: {X.shape[1]}}})"
        )


def check_y_metadata(y: da.Array, n_samples: int, labels: bool = False) -> None:
    """1-D or 2-D, numeric (any dtype for class ``labels``), same length as X, one column chunk."""
    if y.ndim not in (1, 2):
        raise DataError(f"y must be 1-D (n_samples,) or 2-D (n_samples, n_targets); got shape {y.shape}")
    if not labels:
        _check_numeric(y, "y")
    if y.shape[0] != n_samples:
        raise DataError(
            f"X and y have different numbers of rows: X has {n_samples}, y has {y.shape[0]}; "
            "they must describe the same samples"
        )
    if y.ndim == 2 and y.shape[1] == 0:
        raise DataError("y has 0 targets; need at least one column")


def _check_numeric(a: da.Array, name: str) -> None:
    check_real(a, name)  # strings, objects, complex: what was found and how to fix it
    kind = np.dtype(a.dtype).kind
    if kind not in "fiub":
        raise DataError(
            f"{name} must have a numeric dtype (float or int); got {a.dtype}. Convert it, e.g. {name}.astype('float64')"
        )
