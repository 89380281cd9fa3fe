"""The primal SVM on random or Nyström features over a row-chunked data set: one dask pass per
Newton iteration (the iteration itself: :mod:`bigkernel.numerics.svm_newton`).

:class:`PrimalSVMSolver` is this path behind the :class:`~bigkernel.solvers.base.Solver`
interface (name ``"primal_svm"``): its frozen :class:`PrimalSVMSpec` comes from a feature
classifier's ``get_params()``; ``prepare`` draws the feature map (through the feature path it is
given: the SVM shares the random-feature and Nyström maps, standardisation included, with the
least-squares path); ``fit`` runs :func:`fit_primal_svm` and returns a
:class:`~bigkernel.solvers.base.Solution` whose ``details`` is the
:class:`~bigkernel.numerics.svm_newton.SVMSolution`. :func:`fit_primal_svm` is the pass loop
itself, for callers that hold a map and ±1 targets.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import dask
import dask.array as da
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from bigkernel.data.sources import Dataset
from bigkernel.devices import Device
from bigkernel.errors import DataError
from bigkernel.graph.svm import svm_kept_graph, svm_pass_graph
from bigkernel.numerics.splits import row_weights_of
from bigkernel.numerics.svm import SVMPassState, SVMPassSums, check_loss
from bigkernel.numerics.svm_dual import kept_hinge_fit, prefers_dual
from bigkernel.numerics.svm_kept import GRAM_ROWS, KeptDirections, KeptFeatures
from bigkernel.numerics.svm_newton import SVMSolution, solve_svm
from bigkernel.numerics.threads import LAPACK_SAMPLE_MIN_N, blas_thread_limit
from bigkernel.runtime import compute
from bigkernel.solvers.base import Solution

logger = logging.getLogger(__name__)

__all__ = ["SVM_LOSSES", "PrimalSVMSolver", "PrimalSVMSpec", "SVMFixed", "fit_primal_svm"]

#: the losses the primal SVM minimises (a feature classifier's ``loss`` beside "squared_error")
SVM_LOSSES = ("squared_hinge", "hinge")
#: memory for features kept across passes (``keep_features=None``): the features, their float64
#: copy and, for n ≤ GRAM_ROWS, the n × n Gram matrix
KEEP_FEATURES_BYTES = 256 * 2**20


def keeps_features(n: int, n_components: int, dtype: str, budget: int = KEEP_FEATURES_BYTES) -> bool:
    """Whether ``n`` rows of ``n_components`` features of ``dtype`` fit the budget of
    :func:`fit_primal_svm`'s in-memory passes (see ``keep_features``)."""
    size = n * n_components * (np.dtype(dtype).itemsize + 8) + (8 * n * n if n <= GRAM_ROWS else 0)
    return size <= budget


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
    keep_features: bool | None = None,
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
    keep_features : bool, optional
        Featurise once and keep the features in memory for every pass; each class's Newton
        step is then solved through its rows with curvature when they are at most D (an
        ``n_a × n_a`` system instead of the (D+1)² one; see
        :mod:`bigkernel.numerics.svm_kept`). None (default): when the features fit
        :data:`KEEP_FEATURES_BYTES` (:func:`keeps_features`); False: a streamed pass over the
        data per iteration, the Hessian summed in the pass (the n ≫ D path). Both give the same
        iterates up to rounding. Kept features and ``loss="hinge"`` with n ≤ GRAM_ROWS and
        n ≤ 10·D: the hinge's dual is solved on the kept Gram matrix instead (SMO, one pass,
        ``max_iter · n`` SMO steps at most; :mod:`bigkernel.numerics.svm_dual`), to the same
        duality-gap certificate.

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
    D = feature_map.n_components
    if keep_features is None:
        keep_features = keeps_features(X.shape[0], D, dtype)
    kept, limit = None, contextlib.nullcontext()
    if keep_features:
        kept, limit = _kept_features(X, Y_pm1, feature_map, weights, dtype, block_rows, fmap_key)
    with limit:
        if kept is not None and loss == "hinge" and prefers_dual(*kept.phi.shape):
            sol = kept_hinge_fit(kept, alpha, fit_intercept, tol, max_iter)
            logger.info("primal SVM: hinge solved in the dual on the kept Gram matrix, %d SMO steps",
                        sol.history[0]["dual_iter"] if sol.history else 0)  # fmt: skip
        else:
            sol = _newton(kept, X, Y_pm1, feature_map, weights, dtype, block_rows, fmap_key, alpha, loss,
                          fit_intercept, tol, max_iter)  # fmt: skip
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


def _kept_features(X, Y_pm1, feature_map, weights, dtype, block_rows, fmap_key):
    """The features featurised once: ``(KeptFeatures, thread limit)``. In memory, the passes
    and solves are BLAS calls of this thread, run on the cores other processes leave idle
    (OpenBLAS's busy-waiting threads slow down many-fold on busy cores); small problems on one
    thread, without the 0.1 s sample of the other processes' load."""
    graph = svm_kept_graph(
        X, Y_pm1, feature_map, weights=weights, dtype=dtype, block_rows=block_rows, fmap_key=fmap_key
    )
    (rows,) = compute(graph, label="svm features")
    kept = KeptFeatures(rows.phi, feature_map.scale, rows.Y, rows.c, block_rows)
    threads = 1 if max(kept.phi.shape) < LAPACK_SAMPLE_MIN_N else None
    return kept, blas_thread_limit(threads)


def _newton(kept, X, Y_pm1, feature_map, weights, dtype, block_rows, fmap_key, alpha, loss, fit_intercept, tol,
            max_iter) -> SVMSolution:  # fmt: skip
    """The primal Newton iteration: passes over the kept features (their Newton steps through
    the curved rows) or, ``kept`` None, one streamed dask pass per iteration."""
    if kept is not None:
        run_pass, directions = kept.pass_sums, KeptDirections(kept, alpha, fit_intercept)
    else:
        run_pass = _streamed_passes(X, Y_pm1, feature_map, weights, dtype, block_rows, fmap_key, max_iter)
        directions = None
    sol = solve_svm(
        run_pass, feature_map.n_components, Y_pm1.shape[1], loss=loss, alpha=alpha, fit_intercept=fit_intercept,
        tol=tol, max_iter=max_iter, directions=directions,
    )  # fmt: skip
    if directions is not None:
        logger.info("primal SVM: features kept in memory; Newton systems %s", directions.counts)
    return sol


def _streamed_passes(X, Y_pm1, feature_map, weights, dtype, block_rows, fmap_key, max_iter):
    """``run_pass(state) -> sums``: one dask pass over the data per call."""
    counter = iter(range(1, max_iter + 1))

    def run_pass(state: SVMPassState) -> SVMPassSums:
        graph = svm_pass_graph(
            X, Y_pm1, feature_map, state, weights=weights, dtype=dtype, block_rows=block_rows, fmap_key=fmap_key
        )
        (sums,) = compute(graph, label=f"svm pass {next(counter)}")
        return sums

    return run_pass


# --------------------------------------------------------------------------------------------
# The solver interface
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrimalSVMSpec:
    """Everything the primal SVM's fit depends on besides the data and the feature map.

    Attributes
    ----------
    alpha : float
        Penalty of ``Σ cᵢ L(yᵢ f(xᵢ)) + α‖β‖²`` (LinearSVC's ``C = 1 / (2α)``).
    loss : {"squared_hinge", "hinge"}
    fit_intercept : bool
    tol : float
        Relative duality gap at which a column stops.
    max_iter : int
        Most passes over the data.
    dtype : {"float64", "float32"}
        Precision of the features.
    """

    alpha: float
    loss: str
    fit_intercept: bool
    tol: float
    max_iter: int
    dtype: str

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        """The spec of a feature classifier's (validated) ``get_params()``."""
        check_loss(params["loss"])
        return cls(
            alpha=float(params["alpha"]), loss=str(params["loss"]), fit_intercept=bool(params["fit_intercept"]),
            tol=float(params["tol"]), max_iter=int(params["max_iter"]), dtype=str(np.dtype(params["dtype"])),
        )  # fmt: skip


@dataclass(frozen=True)
class SVMFixed:
    """What the SVM holds fixed: the feature map (standardisation included), the rows
    featurised at a time, and the fit's device (the SVM pass itself runs on the host)."""

    feature_map: Any
    block_rows: int
    device: Device | None = None


class PrimalSVMSolver:
    """The primal SVM behind the :class:`~bigkernel.solvers.base.Solver` interface.

    Parameters
    ----------
    spec : PrimalSVMSpec or None
        None serves :meth:`state` / :meth:`from_state` only (the saved layout needs no spec;
        the solution's ``alpha`` is then NaN).
    make_map : callable, optional
        ``make_map(data, weights) -> feature map``: the feature path's fixed part (the
        random-feature or Nyström map, after the standardisation pre-pass). Needed by
        :meth:`prepare` only.
    block_rows : callable, optional
        ``block_rows(n_components, dtype) -> int``: rows featurised at a time (the feature
        path's rule, so the SVM pass reads the data as the least-squares pass does). Default
        8192.
    device : Device, optional
        The estimator's resolved device, carried unchanged into the fixed parts.

    Notes
    -----
    The saved state of an SVM classifier is its feature path's (map, coefficients, the
    training facts: the regressor's layout) plus the SVM's own part, which :meth:`state` /
    :meth:`from_state` write and read: ``attrs["svm"] = {"n_iter": passes}`` and the arrays
    ``svm_converged`` (int8) and ``svm_gap`` (format v1, unchanged).
    """

    name: ClassVar[str] = "primal_svm"

    def __init__(
        self,
        spec: PrimalSVMSpec | None,
        *,
        make_map: Callable[[Dataset, Any], Any] | None = None,
        block_rows: Callable[[int, str], int] | None = None,
        device: Device | None = None,
    ) -> None:
        self.spec, self.make_map, self.block_rows, self.device = spec, make_map, block_rows, device

    @classmethod
    def from_params(cls, params: Mapping[str, Any], **parts: Any) -> Self:
        """The solver for a feature classifier's ``get_params()``; ``parts`` are the keywords
        ``make_map``, ``block_rows`` and ``device`` of the constructor."""
        return cls(PrimalSVMSpec.from_params(params), **parts)

    def prepare(self, data: Dataset, weights: Any = None) -> SVMFixed:
        """Draw the feature map of ``data`` under ``weights`` (through ``make_map``)."""
        if self.make_map is None:
            raise TypeError("PrimalSVMSolver.prepare needs make_map (the feature path's map)")
        return self.fixed(self.make_map(data, weights))

    def fixed(self, feature_map: Any) -> SVMFixed:
        """The fixed parts around a feature map drawn elsewhere."""
        D = int(feature_map.n_components)
        rows = 8192 if self.block_rows is None else int(self.block_rows(D, self._spec().dtype))
        return SVMFixed(feature_map, rows, self.device)

    def fit(self, fixed: SVMFixed, data: Dataset, weights: Any = None) -> Solution:
        """Minimise the SVM objective on ``data`` (its ``y`` the ±1 targets, (n,) or (n, k))
        with the map of ``fixed``; ``weights`` a row partition or ``weights(start, stop)``."""
        sp = self._spec()
        Y = data.y if data.y.ndim == 2 else data.y[:, np.newaxis]
        sol = fit_primal_svm(
            data, fixed.feature_map, Y, weights=row_weights_of(weights), alpha=sp.alpha, loss=sp.loss,
            fit_intercept=sp.fit_intercept, tol=sp.tol, max_iter=sp.max_iter, dtype=sp.dtype,
            block_rows=fixed.block_rows,
        )  # fmt: skip
        return self.solution(sol)

    def solution(self, sol: SVMSolution) -> Solution:
        """The :class:`~bigkernel.solvers.base.Solution` of an :class:`SVMSolution`."""
        alpha = float("nan") if self.spec is None else self.spec.alpha
        diagnostics = {
            "loss": None if self.spec is None else self.spec.loss, "passes": int(sol.n_passes), "converged": np.asarray(sol.converged).tolist(),
            "gap": np.asarray(sol.gap, dtype=np.float64).tolist(),
        }  # fmt: skip
        return Solution(sol.coef, sol.intercept, alpha, np.array([alpha]), diagnostics, sol)

    def _spec(self) -> PrimalSVMSpec:
        if self.spec is None:
            raise TypeError("this PrimalSVMSolver reads and writes states only (no spec): build it with from_params")
        return self.spec

    def state(self, fixed: SVMFixed | None, solution: Solution) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The SVM's part of the saved state (see the class notes): passes, and per ±1
        column whether it converged and its relative duality gap."""
        sol: SVMSolution = solution.details
        attrs = {"svm": {"n_iter": int(sol.n_passes)}}
        arrays = {
            "svm_converged": np.asarray(sol.converged, dtype=bool).astype(np.int8),
            "svm_gap": np.asarray(sol.gap, dtype=np.float64),
        }
        return attrs, arrays

    def from_state(
        self, attrs: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
    ) -> tuple[SVMFixed | None, Solution]:
        """Inverse of :meth:`state`. The map is the feature path's to read, so the fixed
        parts are None; the coefficients come from the regressor layout's ``coef`` (k, D)
        and ``intercept`` (k,) when present. ``KeyError`` when the SVM's part is missing."""
        n_iter = int(attrs["svm"]["n_iter"])
        converged = np.asarray(arrays["svm_converged"], dtype=bool)
        gap = np.asarray(arrays["svm_gap"], dtype=np.float64)
        k = converged.shape[0]
        coef = np.asarray(arrays["coef"], dtype=np.float64).T if "coef" in arrays else np.zeros((0, k))
        intercept = np.asarray(arrays["intercept"], dtype=np.float64) if "intercept" in arrays else np.zeros(k)
        sol = SVMSolution(coef, intercept, n_iter, converged, np.full(k, np.nan), gap)
        return None, self.solution(sol)
