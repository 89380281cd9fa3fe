"""The primal SVM on random or Nyström features over a row-chunked data set: one dask pass per
Newton iteration (the iteration itself: :mod:`bigkernel.numerics.svm_newton`)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from bigkernel.data.sources import Dataset
from bigkernel.errors import DataError
from bigkernel.graph.svm import svm_pass_graph
from bigkernel.numerics.svm import SVMPassState, SVMPassSums, check_loss
from bigkernel.numerics.svm_newton import SVMSolution, solve_svm
from bigkernel.runtime import compute

logger = logging.getLogger(__name__)


def fit_primal_svm(
    dataset: Dataset,
    feature_map: Any,
    Y_pm1: da.Array,
    *,
    weights: Callable[[int, int], np.ndarray] | None = None,
    alpha: float = 1.0,
    loss: str = "squared_hinge",
    fit_intercept: bool = True,
    tol: float = 1e-4,
    max_iter: int = 50,
    dtype: str = "float64",
    block_rows: int = 8192,
) -> SVMSolution:
    """Minimise ``Σᵢ cᵢ L(yᵢ f(xᵢ)) + α‖β‖²`` per target column, ``f = φ(x)ᵀβ + b``.

    ``L`` is the squared hinge ``max(0, 1 − m)²`` or the hinge ``max(0, 1 − m)``; ``c`` are the
    row weights; the intercept ``b`` is not penalised. This is scikit-learn's
    ``LinearSVC(C=1 / (2α), loss=loss)`` on the explicit features φ(X), except that
    ``LinearSVC`` penalises its intercept (``intercept_scaling``): the two agree for
    ``fit_intercept=False``, or in the limit of a large ``intercept_scaling``.

    Every iteration is one pass over the data: the objective, gradient and duality gap at a
    grid of steps along the Newton direction (the line search) and the Hessian (a weighted syrk
    over the rows with curvature). It stops when the relative duality gap of the exact problem
    is ≤ ``tol``, which bounds ``α‖β − β*‖² ≤ gap · P``; see
    :mod:`bigkernel.numerics.svm_newton` for the iteration and the hinge's smoothing.

    Parameters
    ----------
    dataset : Dataset
        X (n, d), row-chunked (its ``y`` is not used).
    feature_map : FeatureMap or NystroemMap
        Anything with ``transform_unscaled(X, dtype)``, ``scale`` and ``n_components``.
    Y_pm1 : dask array of shape (n, k)
        ±1 targets, one column per binary problem (one-vs-rest), with X's row chunks.
    weights : callable, optional
        ``weights(start, stop) -> (1, rows)`` row weights ≥ 0 (``RowWeights``), e.g. sample
        weights times class weights.
    alpha : float
        Penalty; LinearSVC's ``C = 1 / (2α)``.
    loss : {"squared_hinge", "hinge"}
    fit_intercept : bool
    tol : float
        Relative duality gap at which a column stops.
    max_iter : int
        Most passes over the data.
    dtype : {"float64", "float32"}
        Precision of the features; sums and solves are float64.
    block_rows : int
        Rows featurised at a time.

    Returns
    -------
    SVMSolution
        Coefficients (D, k) of the scaled features, intercepts (k,), passes, convergence,
        objective, gap and the per-pass history.
    """
    check_loss(loss)
    X = dataset.X
    if Y_pm1.ndim != 2 or Y_pm1.shape[0] != X.shape[0] or Y_pm1.chunks[0] != X.chunks[0]:
        raise DataError(
            f"the ±1 targets must be (n, k) with X's row chunks {X.chunks[0]}; got shape "
            f"{Y_pm1.shape} with row chunks {Y_pm1.chunks[0]}"
        )
    fmap_key = dask.delayed(feature_map, pure=True)
    counter = iter(range(1, max_iter + 1))

    def run_pass(state: SVMPassState) -> SVMPassSums:
        graph = svm_pass_graph(
            X, Y_pm1, feature_map, state, weights=weights, dtype=dtype, block_rows=block_rows, fmap_key=fmap_key
        )
        (sums,) = compute(graph, label=f"svm pass {next(counter)}")
        return sums

    sol = solve_svm(
        run_pass, feature_map.n_components, Y_pm1.shape[1], loss=loss, alpha=alpha,
        fit_intercept=fit_intercept, tol=tol, max_iter=max_iter,
    )  # fmt: skip
    logger.info(
        "primal SVM (%s): %d passes, converged=%s, relative gap %s",
        loss, sol.n_passes, bool(sol.converged.all()), np.array2string(sol.gap, precision=2),
    )  # fmt: skip
    if not sol.converged.all():
        warnings.warn(
            f"the primal SVM ({loss}) stopped after {sol.n_passes} passes with relative duality "
            f"gaps {np.array2string(sol.gap, precision=3)} (tol={tol}) for the classes "
            f"{np.flatnonzero(~sol.converged).tolist()}; increase max_iter (or tol)",
            ConvergenceWarning,
            stacklevel=2,
        )
    return sol
