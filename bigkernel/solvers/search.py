"""``cv_results_`` and the choice of the best point, shared by the (γ, α) searches (layer 3: the
solvers build the table; the estimators expose it as ``cv_results_``)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from scipy.stats import rankdata

logger = logging.getLogger(__name__)


def search_params(gammas: np.ndarray, alphas: np.ndarray, with_gamma: bool = True) -> list[dict[str, float]]:
    """The ``params`` list of ``cv_results_`` (γ omitted when it was not searched)."""
    return [({"gamma": float(g)} if with_gamma else {}) | {"alpha": float(a)} for g, a in zip(gammas, alphas)]


def cv_results(
    gammas: np.ndarray,
    alphas: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    *,
    with_gamma: bool = True,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``cv_results_`` shaped like scikit-learn's: params, param_gamma, param_alpha, mean, std
    and rank of the test score (higher is better), then ``extra`` columns."""
    mean = np.asarray(mean, dtype=np.float64)
    return {
        "params": search_params(gammas, alphas, with_gamma),
        "param_gamma": np.asarray(gammas, dtype=np.float64), "param_alpha": np.asarray(alphas, dtype=np.float64),
        "mean_test_score": mean, "std_test_score": np.asarray(std, dtype=np.float64),
        "rank_test_score": rankdata(-mean, method="min").astype(np.int32),
        **(extra or {}),
    }  # fmt: skip


def best_index(results: dict[str, Any], what: str) -> int:
    """Index of the best finite score; without one, the most regularized point (the safe
    choice when every score is below its rounding error), with a warning."""
    mean, alphas = results["mean_test_score"], results["param_alpha"]
    finite = np.isfinite(mean)
    if finite.any():
        return int(np.argmax(np.where(finite, mean, -np.inf)))
    best = int(np.argmax(alphas))
    logger.warning("no (γ, α) point has a %s score above its rounding error; using %s", what, results["params"][best])
    return best
