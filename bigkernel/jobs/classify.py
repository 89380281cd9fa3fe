"""``task: classification`` jobs: the evaluation pass
(confusion matrices of the training and holdout rows), metrics, figures and report text.

The classifier itself is chosen and built like a regressor: the config picks the class
(:mod:`bigkernel.jobs.config.estimators`) and :func:`bigkernel.jobs.runner.build_estimator`
builds it.

Log-loss is not reported: least squares on ±1 targets gives decision values, not probabilities,
and no calibration is fitted (a calibrated probability would need held-out rows of its own);
``metrics.json`` says so beside ``"log_loss": null``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from bigkernel._sparse import as_array
from bigkernel.data.sources import Dataset
from bigkernel.graph.stream import block_sums_graph
from bigkernel.jobs.holdout import holdout_rows
from bigkernel.models._base import block_predictor
from bigkernel.numerics.splits import HoldoutSplit
from bigkernel.runtime import compute

logger = logging.getLogger(__name__)

LOG_LOSS_NOTE = (
    "not defined: least squares on ±1 targets gives decision values, not probabilities, and no calibration is fitted"
)


# --------------------------------------------------------------------------------------------
# The evaluation pass
# --------------------------------------------------------------------------------------------
def _confusion_block(predict, classes: np.ndarray, groups, X: np.ndarray, y: np.ndarray, start: int) -> np.ndarray:
    """Confusion counts (2, k, k) of a chunk: [train, holdout][true class, predicted class]."""
    k = classes.size
    true = np.searchsorted(classes, _plain_labels(np.asarray(y)))
    pred = np.searchsorted(classes, _plain_labels(np.asarray(predict(X))))
    g = np.asarray(groups(start, start + X.shape[0]))
    return np.bincount(g * k * k + true * k + pred, minlength=2 * k * k).reshape(2, k, k).astype(np.float64)


def _plain_labels(a: np.ndarray) -> np.ndarray:
    return a.astype(object) if a.dtype.kind == "T" else a


def scores_from_confusion(conf: np.ndarray, classes: np.ndarray) -> dict[str, dict[str, Any]]:
    """Accuracy, balanced accuracy (mean recall of the classes present) and the confusion
    matrix (rows: true class, columns: predicted) per set with rows."""
    out = {}
    for name, c in zip(("train", "holdout"), conf):
        n = c.sum()
        if n == 0:
            continue
        support = c.sum(axis=1)
        recall = np.diag(c)[support > 0] / support[support > 0]
        out[name] = {
            "n_samples": int(n),
            "accuracy": float(np.trace(c) / n),
            "balanced_accuracy": float(recall.mean()),
            "confusion_matrix": c.astype(np.int64).tolist(),
            "log_loss": None,
        }
    return out


def evaluate_classifier(ds: Dataset, est, split: HoldoutSplit, client) -> tuple[dict, tuple | None]:
    """One pass: confusion matrices of the training and holdout rows; with a holdout, the
    holdout rows among the first rows with their decision values (for the ROC and the file)."""
    classes = est.classes_
    graph = block_sums_graph(ds.X, ds.y, _confusion_block, block_predictor(est), classes, split.groups)
    head = holdout_rows(ds, split)
    conf, *head = compute(graph, *head, client=client, label="evaluate")
    scores = scores_from_confusion(conf, classes)
    for s in scores.values():
        s["log_loss_note"] = LOG_LOSS_NOTE
    sample = None
    if head:
        X, y = head
        hold = split.groups(0, X.shape[0]) == 1
        Xh = as_array(X)[hold]  # a sparse block (a .npz source) stays sparse
        dec = _decision(est, Xh) if Xh.shape[0] else np.empty((0,))
        sample = (_plain_labels(np.asarray(y)[hold]), dec, np.flatnonzero(hold).astype(np.int64))
    return scores, sample


def _decision(est, X: np.ndarray) -> np.ndarray:
    names = getattr(est, "feature_names_in_", None)
    if names is not None:
        import pandas as pd

        X = pd.DataFrame(X, columns=names, copy=False)
    return np.asarray(est.decision_function(X))


def save_sample(output: str, sample: tuple, classes: np.ndarray) -> str:
    """``holdout_sample.npz``: labels, decision values, row indices and the classes."""
    path = os.path.join(output, "holdout_sample.npz")
    y, dec, row = sample
    np.savez(path, y=np.asarray(y).astype(str), decision=dec, row=row, classes=np.asarray(classes).astype(str))
    return path


# --------------------------------------------------------------------------------------------
# Predictions, text and figures
# --------------------------------------------------------------------------------------------
def score_lines(scores: dict[str, dict[str, Any]]) -> list[str]:
    """summary.txt's lines: accuracy and balanced accuracy per set."""
    return [
        f"{name:8s} n={s['n_samples']:,}  accuracy={s['accuracy']:.4f}  balanced accuracy={s['balanced_accuracy']:.4f}"
        for name, s in scores.items()
    ]
