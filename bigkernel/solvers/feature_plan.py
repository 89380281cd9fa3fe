"""The bootstrap replicate plan of the one-pass primal solvers (random features, Nyström).

A batch of replicates shares one pass over the data — each chunk's features are computed
once and weighted by every replicate's counts — then one small primal solve per replicate.
The feature map (random features, or Nyström landmarks) and the scaling are fixed before any
replicate: the fitted ones for a fitted estimator, else those its ``fit`` would draw (the
estimators' ``replicate_plan`` decides; see :mod:`bigkernel.bands.plans`).

The plan's ``residual_task`` (``interval="prediction"``) fits once with unit weights — the
same map, scaling and α rule as every replicate — with one pass of sums, one primal solve and
one residual pass (:mod:`bigkernel.numerics.residuals`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
from dask.delayed import Delayed

from bigkernel.data.sources import Dataset
from bigkernel.graph.residuals import residual_sample_graph
from bigkernel.io.band_store import BootstrapStore
from bigkernel.kernels.registry import kernel_spec
from bigkernel.numerics.primal import PrimalExpansion, solve_primal
from bigkernel.numerics.resample import BootstrapWeights
from bigkernel.numerics.residuals import ResidualSample, finish_residuals
from bigkernel.numerics.sums import SufficientStats, sums_precision
from bigkernel.solvers.primal import OnePassPrimal, feature_block_rows
from bigkernel.solvers.replicates import class_name, feature_map_digest, fingerprint_params, gated, run_replicate

__all__ = ["BATCH_STATS_BYTES", "FeaturePlan", "feature_fingerprint", "feature_params"]

#: Bytes of reduced statistics one batch may hold per partial sum (m · D² float64 each).
BATCH_STATS_BYTES = 256 * 2**20


def feature_params(est: Any, solver: OnePassPrimal, **override: Any) -> dict[str, Any]:
    """:func:`~bigkernel.solvers.replicates.fingerprint_params` of a one-pass estimator.

    For the random-feature specs (those with a ``sampler``), without the polynomial kernel's
    ``degree`` and ``coef0`` when the kernel does not take them: they change nothing then, and
    stores made before the estimators had them keep their fingerprint (so they resume).
    """
    params = fingerprint_params(est, **override)
    if hasattr(solver.spec, "sampler"):
        taken = kernel_spec(solver.spec.kernel).param_names()
        for name in ("degree", "coef0"):
            if name not in taken:
                params.pop(name, None)
    return params


def feature_fingerprint(est: Any, solver: OnePassPrimal, *, fitted: bool, **override: Any) -> dict[str, Any]:
    """The estimator part of a plan's fingerprint: class, parameters (``override`` added:
    e.g. a search's chosen ``gamma_``, ``alpha_``) and whether it was fitted."""
    return {"class": class_name(est), "params": feature_params(est, solver, **override), "fitted": fitted}


@dataclass(frozen=True)
class FeatureReplicate:
    """Everything a replicate task needs besides the statistics (one graph key, shared)."""

    fmap: Any
    X_eval: np.ndarray
    alpha: Any
    fit_intercept: bool
    dtype: str
    block_rows: int

    def run(self, stats: SufficientStats, index: int, replicate: int, store: BootstrapStore) -> int:
        """Solve replicate ``index`` of the batch's statistics, predict, write it."""
        # the same solve (and GCV rounding guard) as the estimator's fit
        sol = solve_primal(stats.select(index), self.alpha, self.fit_intercept, sums_precision(self.dtype))
        pred = PrimalExpansion(self.fmap, sol.coef, sol.intercept, dtype=self.dtype, block_rows=self.block_rows)(
            self.X_eval
        )
        # coefficient rows 0..D-1 are β, row D the intercept
        store.write_replicate(replicate, pred, np.vstack([sol.coef, sol.intercept[np.newaxis]]))
        return replicate

    def reference(self, stats: SufficientStats) -> Reference:
        """The fit with unit weights (``stats`` of the whole data) and its predictor."""
        sol = solve_primal(stats, self.alpha, self.fit_intercept, sums_precision(self.dtype))
        df = float(sol.df[int(np.argmin(np.abs(sol.alphas - sol.alpha)))])
        predict = PrimalExpansion(self.fmap, sol.coef, sol.intercept, self.dtype, self.block_rows)
        return Reference(predict, predict(self.X_eval), df)


@dataclass(frozen=True)
class Reference:
    """The original fit: predictor, predictions at the evaluation points, degrees of freedom."""

    predict: Any
    center: np.ndarray
    df: float


def reference_fit(model: FeatureReplicate, stats: SufficientStats) -> Reference:
    """Task body: the unit-weight fit of ``model`` from the whole data's statistics."""
    return model.reference(stats)


def predictor(ref: Reference) -> Any:
    """Task body: the reference fit's predictor (what the residual pass evaluates)."""
    return ref.predict


def finish_reference(ref: Reference, summary: Any) -> ResidualSample:
    """Task body: the residual sample of the reference fit."""
    return finish_residuals(summary, ref.center, ref.df)


class FeaturePlan:
    """Replicate plan of the one-pass primal solvers: weighted one-pass sums, primal solve
    (implements :class:`~bigkernel.solvers.base.ReplicatePlan`).

    Parameters
    ----------
    solver : OnePassPrimal
        The solver (its spec: α rule, intercept, dtype, D; its device runs the passes).
    fmap : FeatureMap, PolynomialFeatureMap or NystroemMap
        The fixed map (scaling folded in).
    alpha : float, list, "gcv" or "evidence"
        The α rule of every replicate.
    X_eval : ndarray of shape (n_eval, n_features)
    fingerprint : dict
        The estimator part (:func:`feature_fingerprint`); the plan adds the map's digest,
        the feature dtype, the block rows and the coefficient layout.
    dtype : {"float32", "float64"}, optional
        The replicates' feature dtype: default the spec's, float64 for ``"auto"`` (a fitted
        estimator passes the dtype its fit checked, ``dtype_``).
    """

    def __init__(
        self,
        solver: OnePassPrimal,
        fmap: Any,
        alpha: Any,
        X_eval: np.ndarray,
        fingerprint: dict[str, Any],
        dtype: str | None = None,
    ) -> None:
        self.solver, self.fmap = solver, fmap
        if dtype is None:
            # no fit checked float32 for these data and α: "auto" replicates run in float64
            auto = isinstance(solver.spec.dtype, str) and solver.spec.dtype == "auto"
            dtype = "float64" if auto else str(np.dtype(solver.spec.dtype))
        self.dtype = dtype = str(np.dtype(dtype))
        D = fmap.n_components
        rows = feature_block_rows(solver.spec.n_components, dtype)
        self.n_coef = D + 1
        self.max_batch_size = max(1, BATCH_STATS_BYTES // (8 * D * D))
        self._model = dask.delayed(
            FeatureReplicate(fmap, X_eval, alpha, bool(solver.spec.fit_intercept), dtype, rows), pure=True
        )
        self.fingerprint = {
            **fingerprint, "feature_map": feature_map_digest(fmap), "feature_dtype": dtype,
            "feature_block_rows": rows, "coef_layout": "rows 0..D-1 coef, row D intercept",
        }  # fmt: skip

    def residual_task(self, ds: Dataset, seed: int, capacity: int) -> Delayed:
        """Delayed :class:`ResidualSample` of the unit-weight fit: one pass of sums, one solve,
        one residual pass."""
        ref = dask.delayed(reference_fit, pure=True)(
            self._model, self.solver.statistics_graph(self.fmap, ds, dtype=self.dtype)
        )
        Y = ds.y if ds.y.ndim == 2 else ds.y[:, np.newaxis]
        summary = residual_sample_graph(ds.X, Y, dask.delayed(predictor, pure=True)(ref), seed, capacity)
        return dask.delayed(finish_reference, pure=True)(ref, summary)

    def batch_tasks(
        self, ds: Dataset, weights: BootstrapWeights, store: BootstrapStore, after: Sequence[Delayed] = ()
    ) -> list[Delayed]:
        """One task per replicate over the batch's one weighted pass (see ReplicatePlan)."""
        stats = self.solver.statistics_graph(self.fmap, ds, weights=gated(weights, after), dtype=self.dtype)
        token = dask.base.tokenize(store.path, stats.key)
        return [
            dask.delayed(run_replicate, pure=True)(
                self._model, stats, i, r, store, dask_key_name=f"bootstrap-replicate-{r}-{token}"
            )
            for i, r in enumerate(weights.replicates)
        ]
