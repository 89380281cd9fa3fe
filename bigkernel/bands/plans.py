"""The bootstrap's replicate plans (layer 3): which plan serves an estimator, and what every plan does.

:func:`bigkernel.bootstrap` asks :func:`make_plan` for a
:class:`~bigkernel.solvers.base.ReplicatePlan`, and :func:`make_plan` asks the estimator: its
public ``replicate_plan(ds, X_eval, *, seed_entropy, workers)`` returns the plan its solver
builds (the plans live with their solvers in :mod:`bigkernel.solvers`). This module names no
estimator class and calls nothing private: a new solver gets bootstrap support by implementing
``replicate_plan``. An estimator without it is refused with a ``NotImplementedError`` that says
so. :func:`on_device` sets the ``device`` a run asks for.

A plan fixes everything that is not resampled — the feature map (random features), the
landmarks (Nyström), the kernel (exact solver) and the standardization — once, before any
replicate, and builds per batch the delayed tasks that fit, predict at ``X_eval`` and write
each replicate. What the plans of bigkernel's estimators do:

Fitted or not
-------------
* An **unfitted** estimator: the plan draws what its ``fit`` would draw — the random feature
  map from ``random_state``, the Nyström landmarks from the data, the scaling from the data —
  with the seed derived from the bootstrap seed when ``random_state`` is not an integer.
* A **fitted** estimator: the plan reuses the fitted map, landmarks, kernel and scaling, so the
  band is that of the fitted model. A fitted :class:`~bigkernel.RandomFeatureRidgeCV` is
  bootstrapped at its chosen (γ, α), held fixed (the search is not repeated per replicate);
  an unfitted one is refused; so is :class:`~bigkernel.ExactKernelRidgeCV` (bootstrapped as an
  ``ExactKernelRidge`` with its fitted kernel and ``alpha_``).

In both cases ``alpha`` follows the estimator's parameter: one value is the classic
fixed-smoother band, a list or ``"gcv"`` repeats the GCV choice in every replicate.

Solvers
-------
* Random features and Nyström: a batch shares one pass over the data — each chunk's features
  are computed once and weighted by every replicate's counts — then one small primal solve per
  replicate (:class:`~bigkernel.solvers.feature_plan.FeaturePlan`).
* Exact: the training data are held in memory once (the exact solver's premise); a replicate
  is one task: its rows with count > 0 and the weighted dual system
  ``(diag(s) K diag(s) + αI) u = s ⊙ y`` (``s = √counts``, see
  :mod:`bigkernel.numerics.dual`), which equals the fit on the data with each row repeated
  ``count`` times; the Gram tiles are cached in the task within its share of the memory
  budget (:class:`~bigkernel.numerics.gram_tiles.LocalGram`: the values do not depend on it).
* :class:`~bigkernel.KernelRidge`: the plan of the solver it chose (fitted) or would choose.
* A precomputed kernel is refused: a replicate resamples points, and rebuilding K for them
  needs the points.

The original fit (``interval="prediction"``)
-------------------------------------------
A plan's ``residual_task`` fits once with unit weights — the same plan, so the same map,
landmarks, kernel, scaling and α rule as every replicate: the fit f̂ the replicates scatter
around — and makes one pass over the data for its residuals (sums and a bounded, seeded
sample: :mod:`bigkernel.numerics.residuals`). Random features and Nyström: one pass of sums,
one primal solve, one residual pass; exact: one dual solve on the rows in memory (its df by
Hutchinson probes when it would not be computed otherwise, n > 2000).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
from dask.delayed import Delayed
from sklearn.base import clone

from bigkernel.data.sources import Dataset
from bigkernel.devices import parse_device, resolve_device
from bigkernel.errors import ParameterError
from bigkernel.io.band_store import BootstrapStore, array_digest
from bigkernel.models.exact import (
    DEFAULT_PROBES,
    EXACT_DF_MAX_N,
    ExactKernelRidge,
    device_budget,
    resolve_memory_budget,
)
from bigkernel.models.exact_cv import ExactKernelRidgeCV
from bigkernel.models.nystroem import NystroemRidge
from bigkernel.models.random_features import RandomFeatureRidge
from bigkernel.models.random_features_cv import RandomFeatureRidgeCV
from bigkernel.numerics.device_gram import DeviceGram
from bigkernel.numerics.gram_tiles import KernelExpansion, LocalGram
from bigkernel.numerics.resample import BootstrapWeights
from bigkernel.numerics.residuals import ResidualSample, finish_residuals, residual_summary
from bigkernel.numerics.scaling import column_moments, safe_scale
from bigkernel.solvers.feature_plan import BATCH_STATS_BYTES
from bigkernel.solvers.replicates import (
    ReplicatePlan,
    derived_seed,
    jsonable,
    task_cache_budget,
)
from bigkernel.solvers.replicates import (
    check_n_features as _check_n_features,
)
from bigkernel.solvers.replicates import (
    class_name as _class_name,
)
from bigkernel.solvers.replicates import (
    fingerprint_params as _params,
)
from bigkernel.solvers.replicates import (
    gated as _gated,
)
from bigkernel.solvers.replicates import (
    run_replicate as _run_replicate,
)
from bigkernel.validation import is_integer

__all__ = ["BATCH_STATS_BYTES", "ReplicatePlan", "make_plan", "on_device"]

#: Replicates of the exact solver per batch (a batch shares one weights task only).
EXACT_MAX_BATCH = 64


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _is_fitted(est: Any) -> bool:
    return any(hasattr(est, a) for a in ("coef_", "dual_coef_", "estimator_"))


def _with_seed(est: Any, seed_entropy: int) -> Any:
    """An unfitted clone with an integer ``random_state`` (derived when it is not one)."""
    est = clone(est)
    seed = est.random_state
    if not is_integer(seed):
        # no integer seed: derive it from the bootstrap seed, so the run (and its resume) is
        # reproducible from the bootstrap seed alone
        est.set_params(random_state=derived_seed(seed_entropy))
    est._check_params()
    return est


# --------------------------------------------------------------------------------------------
# Exact: one weighted dual solve per replicate task
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _ExactReplicate:
    """A replicate of the exact solver: rows with count > 0, weighted CG, predictions."""

    estimator: ExactKernelRidge  # unfitted, integer seed, standardize=False (X is scaled)
    kernel: Any
    X_eval: np.ndarray  # scaled like X
    solve_budget: int  # decides rank and exact df, as in a fit with this budget
    cache_budget: int  # Gram tiles cached per task (speed only, never the values)

    def run(
        self, data: tuple[np.ndarray, np.ndarray, np.ndarray], index: int, replicate: int, store: BootstrapStore
    ) -> int:
        X, Y, counts = data
        c = counts[index]
        keep = c > 0
        Xk, Yk, ck = X[keep], Y[keep], c[keep]
        ops: list = []
        operator, where = self._operator(Xk, ops)
        try:
            with where:
                sol, _, _ = self.estimator._solve(
                    self.kernel, Xk, Yk, operator, self.solve_budget, None if np.all(ck == 1.0) else ck
                )
        finally:
            for op in ops:
                op.close()
        pred = KernelExpansion(ops[0].tiler, sol.coef, sol.intercept)(self.X_eval)
        coef = np.zeros((X.shape[0] + 1, Y.shape[1]))
        coef[:-1][keep] = sol.coef  # dual coefficients per training row (0: not drawn)
        coef[-1] = sol.intercept
        store.write_replicate(replicate, pred, coef)
        return replicate

    def _operator(self, X: np.ndarray, ops: list):
        """``(operator(n_rhs, reserve), context)`` of one task: the host :class:`LocalGram`, or
        on a GPU (the estimator's ``device``, resolved where the task runs: a dask-cuda worker's
        own GPU) a :class:`DeviceGram` caching float64 tiles within this task's share of the
        device memory. Bitwise resume holds per device: the CPU's values do not depend on the
        budget; the GPU's agree to rounding across budgets (cached and recomputed tiles are
        GEMMs of other shapes)."""
        device = resolve_device(self.estimator.device)
        if not device.is_gpu:

            def operator(n_rhs: int, reserve: int) -> LocalGram:
                ops.append(LocalGram(self.kernel, X, max(0, self.cache_budget - reserve)))
                return ops[0]

            return operator, contextlib.nullcontext()
        with device.activate():
            share = self.cache_budget / max(self.solve_budget, 1)
            budget = int(device_budget(self.estimator.memory_budget, device) * share)

        def device_operator(n_rhs: int, reserve: int) -> DeviceGram:
            ops.append(DeviceGram(self.kernel, X, xp=device.xp, memory_budget=budget, dtype="float64",
                                  n_rhs=n_rhs, reserve_bytes=reserve))  # fmt: skip
            return ops[0]

        return device_operator, device.activate()

    def reference(self, data: tuple[np.ndarray, np.ndarray], seed: int, capacity: int) -> ResidualSample:
        """The fit on all rows with unit weights, its predictions and residual sample."""
        X, Y = data
        est = self.estimator
        if not est.n_probes:  # df is needed for the residual scale; probes give it above n = 2000
            est = clone(est).set_params(n_probes=DEFAULT_PROBES)
        ops: list = []
        operator, where = self._operator(X, ops)
        try:
            with where:
                sol, _, _ = est._solve(self.kernel, X, Y, operator, self.solve_budget, None)
        finally:
            for op in ops:
                op.close()
        fit = KernelExpansion(ops[0].tiler, sol.coef, sol.intercept)
        df = float(sol.df[int(np.flatnonzero(sol.alphas == sol.alpha)[0])])
        return finish_residuals(residual_summary(fit(X), Y, 0, seed, capacity), fit(self.X_eval), df)


def _exact_reference(model: _ExactReplicate, data: tuple, seed: int, capacity: int) -> ResidualSample:
    return model.reference(data, seed, capacity)


def _with_counts(data: tuple[np.ndarray, np.ndarray], weights: BootstrapWeights) -> tuple:
    X, Y = data
    return X, Y, weights(0, X.shape[0])


def _check_evidence_memory(est: ExactKernelRidge, n: int, budget: int, workers: int) -> None:
    """Refuse ``alpha="evidence"`` above the eigenvalue limit when the replicates running at
    once would each hold the dense K and a Cholesky factor (16·n² bytes) beyond the half of the
    budget that one fit may give them (the fit's own check sees one solve, not ``workers``)."""
    if not (isinstance(est.alpha, str) and est.alpha == "evidence") or n <= EXACT_DF_MAX_N:
        return
    each = 16 * n * n
    if workers > 1 and workers * each > budget // 2:
        raise ParameterError(
            f"bootstrap of ExactKernelRidge(alpha='evidence') at n={n:,}: each replicate chooses alpha by "
            f"one Cholesky factor per alpha, holding the dense n × n matrix and its factor ({each / 1e9:.2f} GB), "
            f"and {workers} run at once: {workers * each / 1e9:.2f} GB is more than half the memory budget "
            f"({budget / 2e9:.2f} of {budget / 1e9:.2f} GB). Fix alpha to the full fit's (est.set_params(alpha=est.alpha_)), run "
            "fewer workers at once, or raise memory_budget"
        )


class _ExactPlan:
    """Replicate plan of :class:`~bigkernel.ExactKernelRidge` (see the module docstring)."""

    def __init__(self, est: ExactKernelRidge, ds: Dataset, X_eval: np.ndarray, seed_entropy: int, workers: int) -> None:
        fitted = _is_fitted(est)
        d = ds.X.shape[1]
        if fitted:
            _check_n_features(est, d)
        work = _with_seed(est, seed_entropy)
        X, Y, _ = work._training_arrays(ds)
        scaler = None
        if est.standardize:
            scaler = (est.scaler_mean_, est.scaler_scale_) if fitted else _scaling(X)
            X = (X - scaler[0]) / scaler[1]
            X_eval = (X_eval - scaler[0]) / scaler[1]
        work.set_params(standardize=False)
        kernel = est.kernel_ if fitted else work._make_kernel(d)
        budget = resolve_memory_budget(work.memory_budget)
        n = X.shape[0]
        _check_evidence_memory(work, n, budget, workers)
        self.n_coef = n + 1
        self.max_batch_size = EXACT_MAX_BATCH
        self.task_per_replicate = True  # a batch runs as m tasks (not one per chunk)
        self._data = dask.delayed((X, Y), pure=True)
        self._model = dask.delayed(
            _ExactReplicate(work, kernel, np.ascontiguousarray(X_eval), budget,
                            task_cache_budget(budget, workers)), pure=True,
        )  # fmt: skip
        self.fingerprint = {
            "class": _class_name(est), "params": _params(est), "fitted": fitted,
            "kernel": jsonable(kernel.to_dict()),
            "scaler": None if scaler is None else array_digest(np.concatenate(scaler)),
            "seed": int(work.random_state),
            "coef_layout": f"rows 0..{n - 1} dual coef per training row, row {n} intercept",
        }  # fmt: skip

    def residual_task(self, ds: Dataset, seed: int, capacity: int) -> Delayed:
        """Delayed :class:`ResidualSample` of the unit-weight fit (one task: data in memory)."""
        return dask.delayed(_exact_reference, pure=True)(self._model, self._data, seed, capacity)

    def batch_tasks(
        self, ds: Dataset, weights: BootstrapWeights, store: BootstrapStore, after: Sequence[Delayed] = ()
    ) -> list[Delayed]:
        data = dask.delayed(_with_counts, pure=True)(self._data, _gated(weights, after))
        token = dask.base.tokenize(store.path, data.key)
        return [
            dask.delayed(_run_replicate, pure=True)(
                self._model, data, i, r, store, dask_key_name=f"bootstrap-replicate-{r}-{token}"
            )
            for i, r in enumerate(weights.replicates)
        ]


def _exact_at_choice(cv: ExactKernelRidgeCV) -> ExactKernelRidge:
    """A fitted ExactKernelRidgeCV as an ExactKernelRidge at its chosen (γ, α): its fitted
    kernel and scaling, which :class:`_ExactPlan` reuses."""
    if not _is_fitted(cv):
        raise ParameterError(
            "bootstrap() needs a fitted ExactKernelRidgeCV (its replicates use the chosen kernel_ "
            "and alpha_; the search is not repeated per replicate): call fit first, or bootstrap "
            "an ExactKernelRidge with the gamma and alpha you want."
        )
    est = ExactKernelRidge(
        cv.kernel_,
        alpha=float(cv.alpha_),
        fit_intercept=cv.fit_intercept,
        memory_budget=cv.memory_budget,
        standardize=cv.standardize,
        random_state=cv.random_state,
    )
    est.kernel_, est.n_features_in_, est.dual_coef_ = cv.kernel_, cv.n_features_in_, cv.dual_coef_
    if cv.standardize:
        est.scaler_mean_, est.scaler_scale_ = cv.scaler_mean_, cv.scaler_scale_
    return est


# --------------------------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------------------------
def on_device(estimator: Any, device: str | None) -> Any:
    """``estimator`` with ``device`` set (a shallow copy: the caller's is never modified),
    its device resolved now so that an unusable GPU fails before any work."""
    if device is not None:
        parse_device(device)
        if "device" not in estimator.get_params(deep=False):
            raise ParameterError(f"bootstrap(device=...) needs an estimator with a device parameter; "
                                 f"{type(estimator).__name__} has none")  # fmt: skip
        estimator = copy.copy(estimator)
        estimator.set_params(device=device)
    resolve_device(getattr(estimator, "device", "cpu"))
    return estimator


def make_plan(estimator: Any, ds: Dataset, X_eval: np.ndarray, seed_entropy: int, workers: int = 1) -> ReplicatePlan:
    """The replicate plan of ``estimator`` (fitted or not) for data ``ds``: what its public
    ``replicate_plan`` returns.

    The estimator (through its solver) builds the plan; this module knows no estimator class.
    Estimators it does not serve say why in their own ``replicate_plan`` (a precomputed kernel,
    an unfitted CV estimator).

    Parameters
    ----------
    estimator : object with ``replicate_plan(ds, X_eval, *, seed_entropy, workers) -> ReplicatePlan``
        RandomFeatureRidge, RandomFeatureRidgeCV (fitted), NystroemRidge, ExactKernelRidge,
        ExactKernelRidgeCV (fitted), KernelRidge, or any estimator implementing it.
    ds : Dataset
    X_eval : ndarray of shape (n_eval, n_features)
    seed_entropy : int
        The bootstrap seed (derives the estimator's seed when it has no integer one).
    workers : int, default=1
        Worker threads running replicates at once (splits the exact solver's memory budget).

    Returns
    -------
    ReplicatePlan

    Raises
    ------
    NotImplementedError
        ``estimator`` has no ``replicate_plan``.
    TypeError
        Its ``replicate_plan`` returned something that is not a :class:`ReplicatePlan`.
    """
    build = getattr(estimator, "replicate_plan", None)
    if not callable(build):
        raise NotImplementedError(
            f"bootstrap() does not support {type(estimator).__name__}: it supports RandomFeatureRidge, "
            "RandomFeatureRidgeCV (fitted), NystroemRidge, ExactKernelRidge, ExactKernelRidgeCV "
            "(fitted), KernelRidge and estimators that define replicate_plan(ds, X_eval, *, "
            "seed_entropy, workers) returning a bigkernel.solvers.base.ReplicatePlan."
        )
    plan = build(ds, X_eval, seed_entropy=seed_entropy, workers=workers)
    if not isinstance(plan, ReplicatePlan):
        raise TypeError(
            f"{type(estimator).__name__}.replicate_plan returned {type(plan).__name__}, which does not "
            "implement bigkernel.solvers.base.ReplicatePlan (fingerprint, n_coef, max_batch_size, batch_tasks)."
        )
    return plan


def _scaling(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = column_moments(X)
    return mean, safe_scale(std)
