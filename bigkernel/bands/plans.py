"""How each solver turns a batch of bootstrap weights into replicate tasks (layer 3).

:func:`bigkernel.bootstrap` asks :func:`make_plan` for a :class:`ReplicatePlan`; the plan fixes
everything that is not resampled — the feature map (random features), the landmarks
(Nyström), the kernel (exact solver) and the standardization — once, before any replicate, and
builds per batch the delayed tasks that fit, predict at ``X_eval`` and write each replicate.

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
  replicate (:class:`_FeaturePlan`).
* Exact: the training data are held in memory once (the exact solver's premise); a replicate
  is one task: its rows with count > 0 and the weighted dual system
  ``(diag(s) K diag(s) + αI) u = s ⊙ y`` (``s = √counts``, see
  :mod:`bigkernel.numerics.dual`), which equals the fit on the data with each row repeated
  ``count`` times; the Gram tiles are cached in the task within its share of the memory
  budget (:class:`~bigkernel.numerics.gram_tiles.LocalGram`: the values do not depend on it).
* :class:`~bigkernel.KernelRidge`: the plan of the solver it chose (fitted) or would choose.

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
from bigkernel.graph.residuals import residual_sample_graph
from bigkernel.io.band_store import BootstrapStore
from bigkernel.kernels.registry import is_precomputed, kernel_spec
from bigkernel.models.exact import ExactKernelRidge
from bigkernel.models.exact_cv import ExactKernelRidgeCV
from bigkernel.models.kernel_ridge import KernelRidge
from bigkernel.models.nystroem import NystroemRidge
from bigkernel.models.random_features import RandomFeatureRidge, feature_block_rows
from bigkernel.models.random_features_cv import RandomFeatureRidgeCV
from bigkernel.numerics.primal import PrimalExpansion, solve_primal
from bigkernel.numerics.resample import BootstrapWeights
from bigkernel.numerics.residuals import ResidualSample, finish_residuals
from bigkernel.numerics.sums import SufficientStats, sums_precision
from bigkernel.solvers.replicates import (
    ReplicatePlan,
    derived_seed,
    feature_map_digest,
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

#: the estimators whose replicates share one weighted pass of features
FeatureEstimator = RandomFeatureRidge | RandomFeatureRidgeCV | NystroemRidge

#: Bytes of reduced statistics one batch may hold per partial sum (m · D² float64 each).
BATCH_STATS_BYTES = 256 * 2**20

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


def _feature_params(est: Any, **override: Any) -> dict[str, Any]:
    """:func:`_params` of a random-feature estimator, without the polynomial kernel's ``degree``
    and ``coef0`` when its kernel does not take them: they change nothing then, and stores made
    before the estimators had them keep their fingerprint (so they resume)."""
    params = _params(est, **override)
    if isinstance(est, (RandomFeatureRidge, RandomFeatureRidgeCV)):
        taken = kernel_spec(est.kernel).param_names()
        for name in ("degree", "coef0"):
            if name not in taken:
                params.pop(name, None)
    return params


# --------------------------------------------------------------------------------------------
# Random features and Nyström: a batch shares one weighted pass
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _FeatureReplicate:
    """Everything a replicate task needs besides the statistics (one graph key, shared)."""

    fmap: Any
    X_eval: np.ndarray
    alpha: Any
    fit_intercept: bool
    dtype: str
    block_rows: int

    def run(self, stats: SufficientStats, index: int, replicate: int, store: BootstrapStore) -> int:
        # the same solve (and GCV rounding guard) as the estimator's fit
        sol = solve_primal(stats.select(index), self.alpha, self.fit_intercept, sums_precision(self.dtype))
        pred = PrimalExpansion(self.fmap, sol.coef, sol.intercept, dtype=self.dtype, block_rows=self.block_rows)(
            self.X_eval
        )
        # coefficient rows 0..D-1 are β, row D the intercept
        store.write_replicate(replicate, pred, np.vstack([sol.coef, sol.intercept[np.newaxis]]))
        return replicate

    def reference(self, stats: SufficientStats) -> _Reference:
        """The fit with unit weights (``stats`` of the whole data) and its predictor."""
        sol = solve_primal(stats, self.alpha, self.fit_intercept, sums_precision(self.dtype))
        df = float(sol.df[int(np.argmin(np.abs(sol.alphas - sol.alpha)))])
        predict = PrimalExpansion(self.fmap, sol.coef, sol.intercept, self.dtype, self.block_rows)
        return _Reference(predict, predict(self.X_eval), df)


@dataclass(frozen=True)
class _Reference:
    """The original fit: predictor, predictions at the evaluation points, degrees of freedom."""

    predict: Any
    center: np.ndarray
    df: float


def _reference_fit(model: _FeatureReplicate, stats: SufficientStats) -> _Reference:
    return model.reference(stats)


def _predictor(ref: _Reference) -> Any:
    return ref.predict


def _finish_reference(ref: _Reference, summary) -> ResidualSample:
    return finish_residuals(summary, ref.center, ref.df)


class _FeaturePlan:
    """Replicate plan of the streamed primal solvers: weighted one-pass sums, primal solve."""

    def __init__(
        self, est: FeatureEstimator, fmap: Any, alpha: Any, X_eval: np.ndarray, fingerprint: dict[str, Any]
    ) -> None:
        self.estimator, self.fmap = est, fmap
        dtype = str(np.dtype(est.dtype))
        D = fmap.n_components
        rows = feature_block_rows(est.n_components, dtype)
        self.n_coef = D + 1
        self.max_batch_size = max(1, BATCH_STATS_BYTES // (8 * D * D))
        self._model = dask.delayed(
            _FeatureReplicate(fmap, X_eval, alpha, bool(est.fit_intercept), dtype, rows), pure=True
        )
        self.fingerprint = {
            **fingerprint, "feature_map": feature_map_digest(fmap), "feature_dtype": dtype,
            "feature_block_rows": rows, "coef_layout": "rows 0..D-1 coef, row D intercept",
        }  # fmt: skip

    def residual_task(self, ds: Dataset, seed: int, capacity: int) -> Delayed:
        """Delayed :class:`ResidualSample` of the unit-weight fit: one pass of sums, one solve,
        one residual pass."""
        ref = dask.delayed(_reference_fit, pure=True)(self._model, self.estimator.stats_graph(ds, self.fmap))
        Y = ds.y if ds.y.ndim == 2 else ds.y[:, np.newaxis]
        summary = residual_sample_graph(ds.X, Y, dask.delayed(_predictor, pure=True)(ref), seed, capacity)
        return dask.delayed(_finish_reference, pure=True)(ref, summary)

    def batch_tasks(
        self, ds: Dataset, weights: BootstrapWeights, store: BootstrapStore, after: Sequence[Delayed] = ()
    ) -> list[Delayed]:
        stats = self.estimator.stats_graph(ds, self.fmap, weights=_gated(weights, after))
        token = dask.base.tokenize(store.path, stats.key)
        return [
            dask.delayed(_run_replicate, pure=True)(
                self._model, stats, i, r, store, dask_key_name=f"bootstrap-replicate-{r}-{token}"
            )
            for i, r in enumerate(weights.replicates)
        ]


def _feature_plan(est: FeatureEstimator, ds: Dataset, X_eval: np.ndarray, seed_entropy: int) -> _FeaturePlan:
    d = ds.X.shape[1]
    if isinstance(est, RandomFeatureRidgeCV):
        if not _is_fitted(est):
            raise ParameterError(
                "bootstrap() needs a fitted RandomFeatureRidgeCV (its replicates use the chosen "
                "gamma_ and alpha_; the search is not repeated per replicate): call fit first, or "
                "bootstrap a RandomFeatureRidge with the gamma and alpha you want."
            )
        _check_n_features(est, d)
        alpha = float(est.alpha_)
        params = _feature_params(est, gamma_=float(est.gamma_), alpha_=alpha)
        return _FeaturePlan(
            est, est.feature_map_, alpha, X_eval, {"class": _class_name(est), "params": params, "fitted": True}
        )
    if _is_fitted(est):
        _check_n_features(est, d)
        return _FeaturePlan(
            est,
            est.feature_map_,
            est.alpha,
            X_eval,
            {"class": _class_name(est), "params": _feature_params(est), "fitted": True},
        )
    est = _with_seed(est, seed_entropy)
    est._fit_scaler(ds)  # standardize: the scaling is fixed from all rows, like the map
    if isinstance(est, NystroemRidge):
        fmap = est._make_map(ds, None)  # landmarks from the data, once
    else:
        fmap = est._make_feature_map(d)
    return _FeaturePlan(
        est, fmap, est.alpha, X_eval, {"class": _class_name(est), "params": _feature_params(est), "fitted": False}
    )


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
    """The replicate plan of ``estimator`` (fitted or not) for data ``ds``.

    Parameters
    ----------
    estimator : RandomFeatureRidge, RandomFeatureRidgeCV (fitted), NystroemRidge,
        ExactKernelRidge, ExactKernelRidgeCV (fitted), KernelRidge, or any object with
        ``_bootstrap_plan(ds, X_eval, seed_entropy) -> ReplicatePlan``
    ds : Dataset
    X_eval : ndarray of shape (n_eval, n_features)
    seed_entropy : int
        The bootstrap seed (derives the estimator's seed when it has no integer one).
    workers : int, default=1
        Worker threads running replicates at once (splits the exact solver's memory budget).

    Returns
    -------
    ReplicatePlan
    """
    hook = getattr(estimator, "_bootstrap_plan", None)
    if callable(hook):
        plan = hook(ds, X_eval, seed_entropy)
        if not isinstance(plan, ReplicatePlan):
            raise TypeError(
                f"{type(estimator).__name__}._bootstrap_plan returned {type(plan).__name__}, "
                "which does not implement ReplicatePlan (fingerprint, n_coef, max_batch_size, "
                "batch_tasks)."
            )
        return plan
    if isinstance(estimator, KernelRidge):
        # until every solver estimator has replicate_plan (then: estimator.replicate_plan)
        if _is_fitted(estimator):
            inner = estimator.estimator_
        else:
            n, d = ds.X.shape
            solver, _ = estimator.choose_solver(n, d, 1 if ds.y.ndim == 1 else int(ds.y.shape[1]))
            inner = estimator.make_solver_estimator(solver)
        return make_plan(inner, ds, X_eval, seed_entropy, workers)
    if isinstance(estimator, (ExactKernelRidge, ExactKernelRidgeCV)):
        return estimator.replicate_plan(ds, X_eval, seed_entropy=seed_entropy, workers=workers)
    if is_precomputed(getattr(estimator, "kernel", None)):
        # a replicate is a fit on resampled rows: K's rows and columns both, and K(X_eval, rows)
        # for its predictions; the plans resample points, not a given matrix
        raise ParameterError(
            "bootstrap() does not support kernel='precomputed': resampling rows needs the points to rebuild "
            "K; bootstrap the estimator with the kernel that built K (e.g. kernel='rbf') on X"
        )
    if isinstance(estimator, (RandomFeatureRidge, RandomFeatureRidgeCV, NystroemRidge)):
        return _feature_plan(estimator, ds, X_eval, seed_entropy)
    raise NotImplementedError(
        f"bootstrap() does not support {type(estimator).__name__}: it supports RandomFeatureRidge, "
        "RandomFeatureRidgeCV (fitted), NystroemRidge, ExactKernelRidge, ExactKernelRidgeCV "
        "(fitted), KernelRidge and "
        "estimators that define _bootstrap_plan(ds, X_eval, seed_entropy) returning a "
        "bigkernel.bands.plans.ReplicatePlan."
    )
