"""The job's holdout sample (``holdout_sample.npz``): the holdout rows among the first rows of
the training data, with the model's predictions and their global row indices."""

from __future__ import annotations

import numpy as np

from bigkernel._sparse import as_array
from bigkernel.data.sources import Dataset
from bigkernel.models._base import block_predictor
from bigkernel.numerics.splits import HoldoutSplit

#: holdout_sample.npz holds the holdout rows among this many first rows of the training data
HOLDOUT_SAMPLE_ROWS = 50_000


def holdout_rows(ds: Dataset, split: HoldoutSplit, max_rows: int | None = None) -> tuple:
    """The first ``max_rows`` rows (X, y), lazy, when there is a holdout; else ``()``.

    Default :data:`HOLDOUT_SAMPLE_ROWS`; computed in the evaluation pass's graph.
    """
    if split.fraction <= 0:
        return ()
    m = min(ds.X.shape[0], max_rows or HOLDOUT_SAMPLE_ROWS)
    return ds.X[:m], ds.y[:m]


def holdout_sample(X: np.ndarray, y: np.ndarray, est, split: HoldoutSplit):
    """(y, prediction, global row index) of the holdout rows among the first rows ``X, y``.

    For the predicted-vs-observed figure and ``holdout_sample.npz``; the first target only when
    y has several.
    """
    hold = split.groups(0, X.shape[0]) == 1
    row = np.flatnonzero(hold).astype(np.int64)  # the rows start at row 0: global indices
    y = np.asarray(y)[hold]
    pred = np.asarray(block_predictor(est)(as_array(X)[hold]))
    return (y.ravel(), pred.ravel(), row) if y.ndim == 1 else (y[:, 0], pred[:, 0], row)
